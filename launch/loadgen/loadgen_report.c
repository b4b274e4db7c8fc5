/* launch/loadgen/loadgen_report.c - the summary table and the JSON result of
 * `moonlet bench` (loadgen_report.h). */
#include "loadgen_report.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <string.h>
#include <time.h>

static const char *workload_name(const moon_loadgen_opts_t *opts)
{
    static const char *const names[] = {"random", "shared-prefix", "trace"};

    return names[opts->workload];
}

static void rule(FILE *f, const char *title, char c)
{
    size_t len = strlen(title), left = (50 - len) / 2, right = 50 - len - left;

    for (size_t i = 0; i < left; i++) {
        fputc(c, f);
    }
    fputs(title, f);
    for (size_t i = 0; i < right; i++) {
        fputc(c, f);
    }
    fputc('\n', f);
}

static void row_u(FILE *f, const char *name, unsigned long long v)
{
    fprintf(f, "%-40s %-10llu\n", name, v);
}

static void row_f(FILE *f, const char *name, double v)
{
    fprintf(f, "%-40s %-10.2f\n", name, v);
}

static void dist_rows(FILE *f, const char *title, const char *abbr, const moon_loadgen_dist_t *d)
{
    static const char *const kinds[] = {"Mean", "Median", "P90", "P99", "Std"};
    double                   v[]     = {d->mean, d->median, d->p90, d->p99, d->std};
    char                     name[64];

    rule(f, title, '-');
    for (size_t i = 0; i < 5; i++) {
        snprintf(name, sizeof(name), "%s %s (ms):", kinds[i], abbr);
        row_f(f, name, v[i]);
    }
}

void moon_loadgen_report_print(FILE *f, const moon_loadgen_opts_t *opts, const char *model,
                               const moon_loadgen_stats_t *s)
{
    rule(f, " Serving Benchmark Result ", '=');
    fprintf(f, "%-40s %s\n", "Model:", model);
    fprintf(f, "%-40s %s\n", "Workload:", workload_name(opts));
    row_u(f, "Successful requests:", s->completed);
    row_u(f, "Failed requests:", s->failed);
    if (opts->max_concurrency > 0) {
        row_u(f, "Maximum request concurrency:", opts->max_concurrency);
    }
    row_f(f, "Benchmark duration (s):", s->duration_s);
    row_u(f, "Total input tokens:", (unsigned long long)s->total_input);
    row_u(f, "Total generated tokens:", (unsigned long long)s->total_output);
    if (s->total_cached > 0) {
        row_u(f, "Cached prompt tokens (server usage):", (unsigned long long)s->total_cached);
    }
    row_f(f, "Request throughput (req/s):", s->request_throughput);
    if (s->has_slo) {
        row_f(f, "Request goodput (req/s):", s->request_goodput);
        row_f(f, "SLO attainment (%):", s->slo_attainment * 100.0);
    }
    row_f(f, "Output token throughput (tok/s):", s->output_throughput);
    row_f(f, "Peak output token throughput (tok/s):", s->peak_output_throughput);
    row_u(f, "Peak concurrent requests:", s->peak_concurrency);
    row_f(f, "Total Token throughput (tok/s):", s->total_token_throughput);
    dist_rows(f, "Time to First Token", "TTFT", &s->ttft);
    dist_rows(f, "Time per Output Token (excl. 1st token)", "TPOT", &s->tpot);
    dist_rows(f, "Inter-token Latency", "ITL", &s->itl);
    dist_rows(f, "End-to-end Latency", "E2EL", &s->e2el);
    rule(f, "", '=');
}

static int add_num(cJSON *o, const char *k, double v)
{
    return cJSON_AddNumberToObject(o, k, v) != NULL;
}

static int add_dist(cJSON *o, const char *abbr, const moon_loadgen_dist_t *d)
{
    static const char *const kinds[] = {"mean", "median", "std", "p90", "p99", "min", "max"};
    double                   v[]     = {d->mean, d->median, d->std, d->p90, d->p99, d->min, d->max};
    char                     key[48];
    int                      ok = 1;

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        snprintf(key, sizeof(key), "%s_%s_ms", kinds[i], abbr);
        ok = ok && add_num(o, key, v[i]);
    }
    return ok;
}

static int add_str_or_null(cJSON *o, const char *k, const char *v)
{
    return v != NULL ? cJSON_AddStringToObject(o, k, v) != NULL
                     : cJSON_AddNullToObject(o, k) != NULL;
}

/* Per-request arrays, vLLM's (seconds) plus ours. */
static int add_requests(cJSON *o, const moon_loadgen_result_t *r, uint32_t n)
{
    cJSON *in    = cJSON_AddArrayToObject(o, "input_lens");
    cJSON *out   = cJSON_AddArrayToObject(o, "output_lens");
    cJSON *ttfts = cJSON_AddArrayToObject(o, "ttfts");
    cJSON *itls  = cJSON_AddArrayToObject(o, "itls");
    cJSON *e2els = cJSON_AddArrayToObject(o, "e2els");
    cJSON *sends = cJSON_AddArrayToObject(o, "send_times");
    cJSON *errs  = cJSON_AddArrayToObject(o, "errors");
    int    ok    = in && out && ttfts && itls && e2els && sends && errs;

    for (uint32_t i = 0; ok && i < n; i++) {
        cJSON *gaps = cJSON_CreateArray();
        ok          = gaps != NULL && cJSON_AddItemToArray(itls, gaps);
        for (uint32_t j = 0; ok && j < r[i].n_itl; j++) {
            ok = cJSON_AddItemToArray(gaps, cJSON_CreateNumber(r[i].itl_s[j]));
        }
        ok = ok && cJSON_AddItemToArray(in, cJSON_CreateNumber(r[i].n_in)) &&
             cJSON_AddItemToArray(out, cJSON_CreateNumber(r[i].ok ? r[i].n_out : 0)) &&
             cJSON_AddItemToArray(ttfts, cJSON_CreateNumber(r[i].ok ? r[i].ttft_s : 0)) &&
             cJSON_AddItemToArray(e2els, cJSON_CreateNumber(r[i].e2el_s)) &&
             cJSON_AddItemToArray(sends, cJSON_CreateNumber(r[i].send_s)) &&
             cJSON_AddItemToArray(errs, cJSON_CreateString(r[i].error));
    }
    return ok;
}

moon_status_t moon_loadgen_report_json(const moon_loadgen_opts_t *opts, const char *model,
                                       const moon_loadgen_stats_t  *s,
                                       const moon_loadgen_result_t *results, uint32_t n,
                                       char **json_p)
{
    cJSON    *o = cJSON_CreateObject();
    char      date[32];
    time_t    now = time(NULL);
    struct tm tm;
    char     *printed, *copy;
    int       ok = o != NULL;

    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%Y%m%d-%H%M%S", &tm);
    ok = ok && cJSON_AddStringToObject(o, "date", date) != NULL;
    ok = ok && cJSON_AddStringToObject(o, "backend", "openai") != NULL;
    ok = ok && cJSON_AddStringToObject(o, "model_id", model) != NULL;
    ok = ok && cJSON_AddStringToObject(o, "workload", workload_name(opts)) != NULL;
    ok = ok && add_str_or_null(o, "trace", opts->trace_path);
    ok = ok && cJSON_AddStringToObject(o, "base_url", opts->base_url) != NULL;
    ok = ok && cJSON_AddStringToObject(o, "endpoint", opts->endpoint) != NULL;
    ok = ok && add_str_or_null(o, "label", opts->label);
    ok = ok && add_num(o, "num_prompts", n);
    if (opts->rate > 0) {
        ok = ok && add_num(o, "request_rate", opts->rate);
    } else {
        ok = ok && cJSON_AddStringToObject(o, "request_rate", "inf") != NULL;
    }
    ok = ok && add_num(o, "burstiness", opts->burstiness);
    if (opts->max_concurrency > 0) {
        ok = ok && add_num(o, "max_concurrency", opts->max_concurrency);
    } else {
        ok = ok && cJSON_AddNullToObject(o, "max_concurrency") != NULL;
    }
    ok = ok && add_num(o, "seed", (double)opts->seed);
    ok = ok && add_num(o, "duration", s->duration_s);
    ok = ok && add_num(o, "completed", s->completed);
    ok = ok && add_num(o, "failed", s->failed);
    ok = ok && add_num(o, "total_input_tokens", (double)s->total_input);
    ok = ok && add_num(o, "total_output_tokens", (double)s->total_output);
    ok = ok && add_num(o, "total_cached_tokens", (double)s->total_cached);
    ok = ok && add_num(o, "request_throughput", s->request_throughput);
    if (s->has_slo) {
        ok = ok && add_num(o, "request_goodput", s->request_goodput);
        ok = ok && add_num(o, "good_completed", s->good);
        ok = ok && add_num(o, "slo_attainment", s->slo_attainment);
    } else {
        ok = ok && cJSON_AddNullToObject(o, "request_goodput") != NULL;
        ok = ok && cJSON_AddNullToObject(o, "good_completed") != NULL;
        ok = ok && cJSON_AddNullToObject(o, "slo_attainment") != NULL;
    }
    ok = ok && add_num(o, "slo_ttft_ms", opts->slo_ttft_ms);
    ok = ok && add_num(o, "slo_tpot_ms", opts->slo_tpot_ms);
    ok = ok && add_num(o, "slo_e2el_ms", opts->slo_e2el_ms);
    ok = ok && add_num(o, "output_throughput", s->output_throughput);
    ok = ok && add_num(o, "total_token_throughput", s->total_token_throughput);
    ok = ok && add_num(o, "max_output_tokens_per_s", s->peak_output_throughput);
    ok = ok && add_num(o, "max_concurrent_requests", s->peak_concurrency);
    ok = ok && add_dist(o, "ttft", &s->ttft) && add_dist(o, "tpot", &s->tpot) &&
         add_dist(o, "itl", &s->itl) && add_dist(o, "e2el", &s->e2el);
    ok      = ok && add_requests(o, results, n);
    printed = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (printed == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    copy = moon_strdup(printed);
    cJSON_free(printed);
    if (copy == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    *json_p = copy;
    return MOON_OK;
}

moon_status_t moon_loadgen_report_write(const char *path, const moon_loadgen_opts_t *opts,
                                        const char *model, const moon_loadgen_stats_t *stats,
                                        const moon_loadgen_result_t *results, uint32_t n)
{
    char         *json = NULL;
    FILE         *f;
    int           bad;
    moon_status_t status = moon_loadgen_report_json(opts, model, stats, results, n, &json);

    if (status != MOON_OK) {
        return status;
    }
    f = fopen(path, "w");
    if (f == NULL) {
        MOON_ERROR("bench: cannot write %s: %s", path, strerror(errno));
        moon_free(json);
        return MOON_ERR_IO;
    }
    bad = fputs(json, f) < 0 || fputc('\n', f) == EOF;
    bad = fclose(f) != 0 || bad;
    if (bad) {
        MOON_ERROR("bench: writing %s failed: %s", path, strerror(errno));
        moon_free(json);
        return MOON_ERR_IO;
    }
    moon_free(json);
    return MOON_OK;
}
