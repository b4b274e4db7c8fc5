/* tests/unit/launch/test_bench_gateway.c - `moonlet bench` against the real
 * Moonlet gateway: an in-process cluster (conductor, store, prefill, decode
 * on stories260K) behind a gateway on a free loopback port, driven by the
 * bench client (options, workload, libcurl multi, SSE, metrics) with a few
 * requests of each workload, streamed, over completions and chat. */
#include "loadgen_http.h"
#include "loadgen_opts.h"
#include "loadgen_report.h"
#include "loadgen_stats.h"
#include "loadgen_workload.h"
#include "gateway.h"
#include "moon_test.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_cluster.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef MOON_TEST_MODEL
#error "MOON_TEST_MODEL must name stories260K.gguf"
#endif
#ifndef MOON_TEST_MOONLET
#error "MOON_TEST_MOONLET must name the moonlet executable"
#endif

static moon_runtime_t       *g_rt;
static moon_serve_cluster_t *g_cluster;
static char                  g_url[64];

static size_t discard(char *p, size_t s, size_t n, void *a)
{
    (void)p;
    (void)a;
    return s * n;
}

static long http_get(const char *path)
{
    char  url[128];
    long  code = 0;
    CURL *e    = curl_easy_init();

    if (e == NULL) {
        return 0;
    }
    snprintf(url, sizeof(url), "%s%s", g_url, path);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 5000L);
    if (curl_easy_perform(e) == CURLE_OK) {
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    }
    curl_easy_cleanup(e);
    return code;
}

/* Runs one bench over argv (after "bench"); fills *s and returns the results'
 * count, the results themselves freed. */
static uint32_t bench(char **args, int n_args, moon_loadgen_stats_t *s, uint32_t *n_exact_p)
{
    char                    *argv[24] = {"bench"};
    char                     base[96], err[256];
    moon_loadgen_opts_t      o;
    moon_loadgen_workload_t *wl = NULL;
    moon_loadgen_result_t   *res;
    moon_loadgen_slo_t       slo;
    double                   duration = 0;
    uint32_t                 n;

    snprintf(base, sizeof(base), "--base-url=%s", g_url);
    argv[1] = base;
    argv[2] = "--no-progress";
    for (int i = 0; i < n_args && i < 20; i++) {
        argv[3 + i] = args[i];
    }
    CU_ASSERT_EQUAL_FATAL(moon_loadgen_opts_parse(3 + n_args, argv, &o, err, sizeof(err)), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_loadgen_workload_create(&o, &wl), MOON_OK);
    n   = wl->n_reqs;
    res = calloc(n, sizeof(*res));
    CU_ASSERT_PTR_NOT_NULL_FATAL(res);
    CU_ASSERT_EQUAL_FATAL(moon_loadgen_http_run(&o, "stories260K", wl, res, &duration), MOON_OK);
    slo = (moon_loadgen_slo_t){o.slo_ttft_ms, o.slo_tpot_ms, o.slo_e2el_ms};
    CU_ASSERT_EQUAL(moon_loadgen_stats_compute(res, n, duration, &slo, s), MOON_OK);
    moon_loadgen_report_print(stdout, &o, "stories260K", s);
    *n_exact_p = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!res[i].ok) {
            fprintf(stderr, "request %u failed: %s\n", i, res[i].error);
        }
        /* ignore_eos: every answer has exactly the tokens asked for */
        *n_exact_p += res[i].ok && res[i].n_out == wl->reqs[i].max_tokens;
        CU_ASSERT(!res[i].ok || res[i].n_chunks >= 1);
        CU_ASSERT(!res[i].ok || res[i].n_itl + 1 == res[i].n_chunks);
    }
    moon_loadgen_results_fini(res, n);
    free(res);
    moon_loadgen_workload_destroy(wl);
    return n;
}

static void test_random_completions(void)
{
    char *args[] = {"random",          "--num-prompts=8",   "--max-concurrency=4", "--input-len=32",
                    "--output-len=16", "--range-ratio=0.5", "--max-context=500"};
    moon_loadgen_stats_t s;
    uint32_t             exact;

    CU_ASSERT_EQUAL(bench(args, 7, &s, &exact), 8);
    CU_ASSERT_EQUAL(s.completed, 8);
    CU_ASSERT_EQUAL(s.failed, 0);
    CU_ASSERT_EQUAL(exact, 8);
    CU_ASSERT(s.ttft.mean > 0 && s.tpot.mean > 0 && s.itl.n > 0 && s.e2el.p99 >= s.e2el.median);
    CU_ASSERT(s.total_input >= 8 * 16); /* the server's usage */
    CU_ASSERT(s.peak_concurrency <= 4);
    CU_ASSERT(s.output_throughput > 0 && s.request_throughput > 0);
}

static void test_shared_prefix_chat_with_slos(void)
{
    char                *args[] = {"shared-prefix",       "--endpoint=chat",    "--num-prompts=8",
                                   "--turns=2",           "--num-prefixes=2",   "--prefix-len=64",
                                   "--question-len=8",    "--output-len=8",     "--rate=20",
                                   "--slo-ttft-ms=60000", "--slo-tpot-ms=60000"};
    moon_loadgen_stats_t s;
    uint32_t             exact;

    CU_ASSERT_EQUAL(bench(args, 11, &s, &exact), 8);
    CU_ASSERT_EQUAL(s.completed, 8);
    CU_ASSERT_TRUE(s.has_slo);
    CU_ASSERT_EQUAL(s.good, 8);
    CU_ASSERT_DOUBLE_EQUAL(s.slo_attainment, 1.0, 1e-12);
    CU_ASSERT(s.request_goodput > 0);
}

static char trace_path[64];

static void test_trace_replay(void)
{
    char                *args[] = {"trace", trace_path, "--block-scale=16", "--max-context=500",
                                   "--time-scale=0.5"};
    moon_loadgen_stats_t s;
    uint32_t             exact;
    FILE                *f;
    int                  fd;

    snprintf(trace_path, sizeof(trace_path), "/tmp/moon_loadgen_gw_XXXXXX");
    fd = mkstemp(trace_path);
    CU_ASSERT_FATAL(fd >= 0);
    f = fdopen(fd, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs("{\"timestamp\": 0, \"input_length\": 2048, \"output_length\": 256, "
          "\"hash_ids\": [1, 2, 3, 4]}\n"
          "{\"timestamp\": 100, \"input_length\": 2048, \"output_length\": 128, "
          "\"hash_ids\": [1, 2, 3, 5]}\n"
          "{\"timestamp\": 200, \"input_length\": 1024, \"output_length\": 64, "
          "\"hash_ids\": [6, 7]}\n",
          f);
    fclose(f);
    CU_ASSERT_EQUAL(bench(args, 5, &s, &exact), 3);
    unlink(trace_path);
    CU_ASSERT_EQUAL(s.completed, 3);
    CU_ASSERT_EQUAL(exact, 3);
    CU_ASSERT_EQUAL(s.total_output, 8 + 4 + 2);
    CU_ASSERT(s.total_cached <= s.total_input);
}

static size_t collect(char *p, size_t s, size_t n, void *a)
{
    fwrite(p, s, n, a);
    return s * n;
}

/* _sum and _count of a histogram of the gateway's /metrics. */
static void histogram(const char *name, double *sum_p, double *count_p)
{
    char   url[128], key[128], *text = NULL, *p;
    size_t len = 0;
    FILE  *f   = open_memstream(&text, &len);
    CURL  *e   = curl_easy_init();

    CU_ASSERT_FATAL(f != NULL && e != NULL);
    snprintf(url, sizeof(url), "%s/metrics", g_url);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, f);
    CU_ASSERT_EQUAL(curl_easy_perform(e), CURLE_OK);
    curl_easy_cleanup(e);
    fclose(f);
    *sum_p = *count_p = -1;
    snprintf(key, sizeof(key), "\n%s_sum{", name);
    if ((p = strstr(text, key)) != NULL && (p = strchr(p + 1, ' ')) != NULL) {
        *sum_p = strtod(p, NULL);
    }
    snprintf(key, sizeof(key), "\n%s_count{", name);
    if ((p = strstr(text, key)) != NULL && (p = strchr(p + 1, ' ')) != NULL) {
        *count_p = strtod(p, NULL);
    }
    free(text);
}

/* The gateway's TTFT and end-to-end histograms use the bench's definitions
 * (arrival -> first / last text out, beside send -> first / last text in):
 * each request is counted once in each, and each server interval lies
 * inside the client's, so the server's sums are at most the bench's. Under
 * the actor's marks (TOKEN, DONE) the E2E one would not: DONE comes after
 * the last text. (How close they are is benchmarks/suites/gateway.sh's.) */
static void test_metrics_use_the_bench_definitions(void)
{
    char *args[] = {"random",          "--num-prompts=12", "--max-concurrency=3", "--input-len=16",
                    "--output-len=12", "--ignore-eos",     "--max-context=500"};
    moon_loadgen_stats_t s;
    uint32_t             exact;
    double               t0, tn0, e0, en0, t1, tn1, e1, en1;

    histogram("moonlet:time_to_first_token_seconds", &t0, &tn0);
    histogram("moonlet:e2e_request_latency_seconds", &e0, &en0);
    CU_ASSERT_FATAL(tn0 >= 0 && en0 >= 0);
    CU_ASSERT_EQUAL(bench(args, 7, &s, &exact), 12);
    histogram("moonlet:time_to_first_token_seconds", &t1, &tn1);
    histogram("moonlet:e2e_request_latency_seconds", &e1, &en1);
    CU_ASSERT_EQUAL(s.completed, 12);
    CU_ASSERT_DOUBLE_EQUAL(tn1 - tn0, 12, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(en1 - en0, 12, 1e-9);
    CU_ASSERT((t1 - t0) * 1e3 > 0 && (t1 - t0) * 1e3 <= s.ttft.mean * 12);
    CU_ASSERT((e1 - e0) * 1e3 > (t1 - t0) * 1e3 && (e1 - e0) * 1e3 <= s.e2el.mean * 12);
    fprintf(stderr, "means: ttft %.3f ms (metrics %.3f), e2el %.3f ms (metrics %.3f)\n",
            s.ttft.mean, (t1 - t0) * 1e3 / 12, s.e2el.mean, (e1 - e0) * 1e3 / 12);
}

/* The command itself: model from /v1/models, summary, result file, plots. */
static void test_command_line(void)
{
    char   dir[] = "/tmp/moon_loadgen_cli_XXXXXX";
    char   cmd[1024], path[128], *text;
    FILE  *f;
    long   len;
    cJSON *r;

    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "'%s' bench random --base-url %s --num-prompts 4 --input-len 16 --output-len 8 "
             "--result-file %s/r.json --plot-dir %s/plots > %s/out.txt 2>&1",
             MOON_TEST_MOONLET, g_url, dir, dir, dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
    snprintf(path, sizeof(path), "%s/r.json", dir);
    f = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    rewind(f);
    text = calloc(1, (size_t)len + 1);
    CU_ASSERT_FATAL(text != NULL && fread(text, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    r = cJSON_Parse(text);
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(r, "model_id")->valuestring, "stories260K");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(r, "completed")->valueint, 4);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(r, "total_output_tokens")->valueint, 32);
    CU_ASSERT(cJSON_GetObjectItem(r, "mean_ttft_ms")->valuedouble > 0);
    cJSON_Delete(r);
    snprintf(cmd, sizeof(cmd), "grep -q 'Serving Benchmark Result' %s/out.txt", dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
    snprintf(cmd, sizeof(cmd),
             "command -v gnuplot > /dev/null || exit 0; test -s %s/plots/ttft_cdf.png && "
             "test -s %s/plots/tpot_cdf.png && test -s %s/plots/throughput.png",
             dir, dir, dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

int main(void)
{
    moon_runtime_config_t rcfg;
    moon_serve_config_t   scfg;
    moon_gateway_args_t   args;
    uint16_t              port = 0;
    moon_addr_t           addr;
    int                   rc = 1, up = 0;

    curl_global_init(CURL_GLOBAL_DEFAULT);
    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 2;
    if (moon_runtime_create(&rcfg, &g_rt) != MOON_OK || moon_runtime_start(g_rt) != MOON_OK) {
        return 1;
    }
    moon_serve_config_default(&scfg);
    scfg.model_path     = MOON_TEST_MODEL;
    scfg.store_dram_mib = 16;
    if (moon_serve_cluster_start(&scfg, g_rt, NULL, &g_cluster) != MOON_OK) {
        fprintf(stderr, "test_bench_gateway: the cluster did not start\n");
        goto out;
    }
    memset(&args, 0, sizeof(args));
    moon_gateway_config_default(&args.config);
    args.config.port       = 0;
    args.config.model_name = "stories260K";
    args.conductor         = moon_serve_cluster_conductor(g_cluster);
    args.model_path        = MOON_TEST_MODEL;
    args.port_p            = &port;
    if (moon_spawn(g_rt, &moon_gateway_ops, &args, NULL, &addr) != MOON_OK || port == 0) {
        fprintf(stderr, "test_bench_gateway: the gateway did not start\n");
        goto out;
    }
    snprintf(g_url, sizeof(g_url), "http://127.0.0.1:%u", (unsigned)port);
    for (int i = 0; i < 600 && !up; i++) {
        up = http_get("/health") == 200;
        if (!up) {
            nanosleep(&(struct timespec){0, 100000000}, NULL);
        }
    }
    if (!up) {
        fprintf(stderr, "test_bench_gateway: /health never said 200\n");
        goto out;
    }
    rc = MOON_TEST_RUN("bench_gateway", NULL, NULL, test_random_completions,
                       test_shared_prefix_chat_with_slos, test_trace_replay, test_command_line,
                       test_metrics_use_the_bench_definitions);
out:
    moon_serve_cluster_stop(g_cluster);
    moon_runtime_shutdown(g_rt, 0);
    moon_runtime_wait(g_rt);
    moon_runtime_destroy(g_rt);
    curl_global_cleanup();
    return rc;
}
