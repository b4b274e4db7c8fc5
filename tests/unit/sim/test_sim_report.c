/* tests/unit/sim/test_sim_report.c - replay outputs from hand-made records:
 * the CSV's bytes, summary values computed by hand, the plot series, the
 * PNGs (when gnuplot is installed) and the progress bar. */
#include "moon_test.h"
#include "progress.h"
#include "sim_plot.h"
#include "sim_report.h"

#include "moonlet/log.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S 1000000000ull /* ns */
#define MS 1000000ull

/* Four requests:
 * 0: arrives 0, on (0, 1), 512 of 1024 tokens hit, prefill at 0.5 s, tokens
 *    at 1.0 1.1 1.2 1.5 s: TTFT 1.0, gaps 0.1 0.1 0.3, TBT = the slowest
 *    ceil(3 / 10) = 1 gap = 0.3 s;
 * 1: arrives 0.25 s on (1, 0), no hit, one token at 2.25: TTFT 2.0, TBT 0;
 * 2: arrives 1.0 s, rejected at once;
 * 3: arrives 2.0 s on (0, 0), 1000 of 4000 hit, prefill at 2.5, 21 tokens
 *    from 3.0 s: 18 gaps of 10 ms and two of 50 ms: TBT = mean of the 2
 *    slowest = 50 ms; ends 3.28 s. */
static void fill(moon_sim_records_t *r)
{
    static const uint64_t t0[] = {1000 * MS, 1100 * MS, 1200 * MS, 1500 * MS};
    uint64_t              t;

    CU_ASSERT_EQUAL_FATAL(moon_sim_records_init(r, 4), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_records_arrive(r, 0, 0, 1024), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_records_place(r, 0, 0, 1, 512), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_records_prefill_start(r, 0, 500 * MS), MOON_OK);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(moon_sim_records_token(r, 0, t0[i]), MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_sim_records_finish(r, 0, 1500 * MS, MOON_SIM_REQ_OK), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_records_arrive(r, 1, 250 * MS, 2048), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_records_place(r, 1, 1, 0, 0), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_records_prefill_start(r, 1, 250 * MS), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_records_token(r, 1, 2250 * MS), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_records_finish(r, 1, 2250 * MS, MOON_SIM_REQ_OK), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_records_arrive(r, 2, 1 * S, 3000), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_records_finish(r, 2, 1 * S, MOON_SIM_REQ_REJECTED), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_records_arrive(r, 3, 2 * S, 4000), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_records_place(r, 3, 0, 0, 1000), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_records_prefill_start(r, 3, 2500 * MS), MOON_OK);
    t = 3 * S;
    CU_ASSERT_EQUAL(moon_sim_records_token(r, 3, t), MOON_OK);
    for (int i = 0; i < 20; i++) {
        t += (i == 5 || i == 10) ? 50 * MS : 10 * MS;
        CU_ASSERT_EQUAL(moon_sim_records_token(r, 3, t), MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_sim_records_finish(r, 3, t, MOON_SIM_REQ_OK), MOON_OK);
}

static char *to_text(moon_status_t (*fn)(const moon_sim_records_t *, FILE *),
                     const moon_sim_records_t *r)
{
    static char buf[4096];
    FILE       *f = fmemopen(buf, sizeof(buf), "w");

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fn(r, f), MOON_OK);
    fclose(f);
    return buf;
}

static void test_csv_bytes(void)
{
    moon_sim_records_t r;

    fill(&r);
    CU_ASSERT_STRING_EQUAL(
        to_text(moon_sim_records_write_csv, &r),
        "id,arrival_s,prefill,decode,input_tokens,output_tokens,prefix_hit_tokens,queue_s,"
        "ttft_s,tbt_s,finish_s,status\n"
        "0,0.000000000,0,1,1024,4,512,0.500000000,1.000000000,0.300000000,1.500000000,ok\n"
        "1,0.250000000,1,0,2048,1,0,0.000000000,2.000000000,0.000000000,2.250000000,ok\n"
        "2,1.000000000,-1,-1,3000,0,0,,,,1.000000000,rejected\n"
        "3,2.000000000,0,0,4000,21,1000,0.500000000,1.000000000,0.050000000,3.280000000,ok\n");
    moon_sim_records_fini(&r);
}

static void test_events_after_finish_refused(void)
{
    moon_sim_records_t r;

    fill(&r);
    CU_ASSERT_EQUAL(moon_sim_records_token(&r, 0, 2 * S), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sim_records_finish(&r, 2, 2 * S, MOON_SIM_REQ_OK), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sim_records_arrive(&r, 4, 0, 1), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(r.recs[0].output_tokens, 4);
    moon_sim_records_fini(&r);
    /* TBT by itself: 25 gaps -> the 3 slowest */
    {
        uint64_t g[25];
        for (int i = 0; i < 25; i++) {
            g[i] = (uint64_t)(i + 1);
        }
        CU_ASSERT_EQUAL(moon_sim_tbt_ns(g, 25), 24); /* (25 + 24 + 23) / 3 */
        CU_ASSERT_EQUAL(moon_sim_tbt_ns(g, 0), 0);
    }
}

static void test_summary_by_hand(void)
{
    moon_sim_records_t r;
    moon_sim_summary_t s;
    char               buf[2048];
    FILE              *f;

    fill(&r);
    /* TTFT <= 1.5 s and TBT <= 100 ms: only request 3 */
    CU_ASSERT_EQUAL_FATAL(moon_sim_summarize(&r, 1.5, 0.1, &s), MOON_OK);
    CU_ASSERT_EQUAL(s.requests, 4);
    CU_ASSERT_EQUAL(s.completed, 3);
    CU_ASSERT_EQUAL(s.rejected, 1);
    CU_ASSERT_EQUAL(s.met, 1);
    CU_ASSERT_DOUBLE_EQUAL(s.slo_attainment, 0.25, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.makespan_s, 3.28, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.goodput_rps, 1 / 3.28, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.cache_hit_ratio, 1512.0 / 7072.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.ttft_mean_s, 4.0 / 3.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.ttft_p50_s, 1.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.ttft_p90_s, 2.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.ttft_p99_s, 2.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.tbt_mean_s, 0.35 / 3.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.tbt_p50_s, 0.05, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(s.tbt_p90_s, 0.3, 1e-12);
    /* the thresholds are inclusive: TBT <= 300 ms lets request 0 in too */
    CU_ASSERT_EQUAL_FATAL(moon_sim_summarize(&r, 2.0, 0.3, &s), MOON_OK);
    CU_ASSERT_EQUAL(s.met, 3);
    f = fmemopen(buf, sizeof(buf), "w");
    CU_ASSERT_EQUAL(moon_sim_summary_write_json(&s, "mooncake", f), MOON_OK);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "\"label\": \"mooncake\",\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "\"requests\": 4,\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "\"rejected\": 1,\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "\"slo_attainment\": 0.750000,\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "\"goodput_rps\": 0.914634,\n")); /* 3 / 3.28 */
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "\"cache_hit_ratio\": 0.213801,\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "\"ttft_p99_s\": 2.000000,\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "\"tbt_p99_s\": 0.300000\n}\n"));
    moon_sim_records_fini(&r);
}

static moon_status_t ttft_cdf(const moon_sim_records_t *r, FILE *f)
{
    return moon_sim_write_cdf(r, MOON_SIM_SERIES_TTFT, f);
}

static moon_status_t slo_curve(const moon_sim_records_t *r, FILE *f)
{
    return moon_sim_write_slo_curve(r, 1.5, 0.05, 0.3, 0.05, f);
}

static moon_status_t hit_series(const moon_sim_records_t *r, FILE *f)
{
    return moon_sim_write_hit_series(r, 1.0, f);
}

static void test_series(void)
{
    moon_sim_records_t r;

    fill(&r);
    CU_ASSERT_STRING_EQUAL(to_text(ttft_cdf, &r),
                           "1.000000 0.333333\n1.000000 0.666667\n2.000000 1.000000\n");
    /* TTFT <= 1.5 keeps requests 0 (TBT 300 ms) and 3 (50 ms) of 4 */
    CU_ASSERT_STRING_EQUAL(to_text(slo_curve, &r), "50.000 0.250000\n100.000 0.250000\n"
                                                   "150.000 0.250000\n200.000 0.250000\n"
                                                   "250.000 0.250000\n300.000 0.500000\n");
    /* window [0, 1): 512 / 3072; [1, 2): nothing placed; [2, 3): 1000 / 4000 */
    CU_ASSERT_STRING_EQUAL(to_text(hit_series, &r), "1.000 0.166667\n3.000 0.250000\n");
    moon_sim_records_fini(&r);
}

static int is_png(const char *dir, const char *name)
{
    char          path[512];
    unsigned char sig[8] = {0};
    FILE         *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "rb");
    if (f == NULL) {
        return 0;
    }
    if (fread(sig, 1, 8, f) != 8) {
        sig[0] = 0;
    }
    fclose(f);
    return memcmp(sig, "\x89PNG\r\n\x1a\n", 8) == 0;
}

static void test_plots(void)
{
    moon_sim_records_t  r;
    char                dir[] = "/tmp/moon_plots_XXXXXX";
    moon_sim_plot_run_t runs[2];
    moon_status_t       status;
    char                cmd[128];

    fill(&r);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    runs[0] = (moon_sim_plot_run_t){"mooncake", &r};
    runs[1] = (moon_sim_plot_run_t){"random+reject", &r};
    moon_log_set_level(0);
    CU_ASSERT_EQUAL(moon_sim_plot(dir, runs, 0, 30, 0.1, NULL), MOON_ERR_INVALID_PARAM);
    runs[1].label = "bad label";
    CU_ASSERT_EQUAL(moon_sim_plot(dir, runs, 2, 30, 0.1, NULL), MOON_ERR_INVALID_PARAM);
    runs[1].label = "random+reject";
    CU_ASSERT_EQUAL(moon_sim_plot(dir, runs, 2, 30, 0.1, "no-such-gnuplot-here"),
                    MOON_ERR_UNSUPPORTED);
    moon_log_set_level(MOON_LOG_WARN);
    {
        char path[256];
        snprintf(path, sizeof(path), "%s/random+reject.slo.dat", dir);
        CU_ASSERT_EQUAL(access(path, R_OK), 0); /* the data is there anyway */
    }
    status = moon_sim_plot(dir, runs, 2, 30, 0.1, NULL);
    if (status == MOON_ERR_UNSUPPORTED && access("/usr/bin/gnuplot", X_OK) != 0) {
        moon_test_skip("gnuplot is not installed");
    } else {
        CU_ASSERT_EQUAL(status, MOON_OK);
        CU_ASSERT_TRUE(is_png(dir, "ttft_cdf.png"));
        CU_ASSERT_TRUE(is_png(dir, "tbt_cdf.png"));
        CU_ASSERT_TRUE(is_png(dir, "slo_attainment.png"));
        CU_ASSERT_TRUE(is_png(dir, "cache_hit.png"));
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
    moon_sim_records_fini(&r);
}

static void test_progress(void)
{
    char            buf[160];
    int             fds[2];
    moon_progress_t p;
    ssize_t         n;

    moon_progress_format(buf, sizeof(buf), 2, 4, 12.34);
    CU_ASSERT_STRING_EQUAL(buf, "\r[###############...............]  50.0% 2/4 requests, t 12.3 s");
    CU_ASSERT_EQUAL_FATAL(pipe(fds), 0);
    moon_progress_init(&p, fds[1], 4, 0); /* a pipe is no terminal: nothing drawn */
    moon_progress_update(&p, 1, 1.0);
    moon_progress_finish(&p);
    moon_progress_init(&p, fds[1], 4, 1);
    moon_progress_update(&p, 4, 2.0);
    moon_progress_update(&p, 4, 2.5); /* same thousandth: not redrawn */
    moon_progress_finish(&p);
    close(fds[1]);
    n = read(fds[0], buf, sizeof(buf) - 1);
    CU_ASSERT_FATAL(n > 0);
    buf[n] = '\0';
    CU_ASSERT_STRING_EQUAL(buf,
                           "\r[##############################] 100.0% 4/4 requests, t 2.0 s\n");
    close(fds[0]);
}

MOON_TEST_MAIN("sim_report", NULL, NULL, test_csv_bytes, test_events_after_finish_refused,
               test_summary_by_hand, test_series, test_plots, test_progress)
