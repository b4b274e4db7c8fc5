/* benchmarks/bench_gateway.c - what HTTP costs: one process holds a serving
 * cluster (stories260K: conductor, store, prefill, decode), the gateway on a
 * free port and a client API client. Alternating rounds measure
 *   ttft:       one request at a time, streamed: time to the first body byte
 *               through HTTP (libcurl) vs time to the first TOKEN through the
 *               client API (the anchor), p50 and mean;
 *   throughput: `depth` requests in flight, non-streamed over HTTP (one
 *               thread and connection each) vs the client API keeping as many
 *               in flight; requests/s.
 *   metrics:    the mean TTFT and end-to-end latency of the streamed HTTP
 *               requests as this client saw them beside the gateway's own
 *               /metrics histograms over the same requests (sum / count deltas).
 * ratio: the difference in ms for latencies (HTTP - anchor), HTTP / anchor
 * for throughput and CPU per request (all threads of the process: the HTTP
 * line includes libcurl's client work, on the same 2 cores).
 * One JSON line per configuration, each with its anchor's figure. Targets
 * (issue 15): ttft_p50 <= anchor + 1 ms; throughput >= 0.9 x anchor; the
 * means within 5 % or 0.5 ms of /metrics. */
#include "bench_util.h"
#include "gateway.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "serve_client.h"
#include "serve_cluster.h"

#include <curl/curl.h>

#include <pthread.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_NS 60000000000ull

static moon_serve_client_t *g_client;
static unsigned             g_port;
static int                  g_max_tokens;
static const char          *g_prompt = "Once upon a time, there was a little girl";

/* ---- HTTP (libcurl) ---------------------------------------------------------------- */
typedef struct {
    uint64_t t_first_ns; /* first body byte */
    uint64_t t_last_ns;  /* last body byte */
    size_t   n_bytes;
} sink_t;

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    sink_t *s = arg;

    (void)p;
    s->t_last_ns = moon_bench_now_ns();
    if (s->n_bytes == 0) {
        s->t_first_ns = s->t_last_ns;
    }
    s->n_bytes += size * n;
    return size * n;
}

/* One request on easy (reused: keep-alive); 0 on HTTP 200. */
static int http_request(CURL *easy, int stream, sink_t *s)
{
    char               url[64], body[512];
    struct curl_slist *h    = curl_slist_append(NULL, "Content-Type: application/json");
    long               code = 0;
    CURLcode           rc;

    snprintf(url, sizeof(url), "http://127.0.0.1:%u/v1/completions", g_port);
    snprintf(body, sizeof(body),
             "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,"
             "\"stream\":%s}",
             g_prompt, g_max_tokens, stream ? "true" : "false");
    memset(s, 0, sizeof(*s));
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(easy, CURLOPT_POST, 1L);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
    rc = curl_easy_perform(easy);
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    return rc == CURLE_OK && code == 200 ? 0 : -1;
}

/* sum and count of a histogram in the gateway's /metrics (0 when missing). */
static void scrape(CURL *easy, const char *name, double *sum_p, double *count_p)
{
    char   url[64], key[160], *p;
    char  *text = NULL;
    size_t len  = 0;
    FILE  *f    = open_memstream(&text, &len);

    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metrics", g_port);
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, NULL);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, f);
    curl_easy_perform(easy);
    fclose(f);
    *sum_p = *count_p = 0;
    snprintf(key, sizeof(key), "%s_sum{", name);
    if (text != NULL && (p = strstr(text, key)) != NULL && (p = strchr(p, ' ')) != NULL) {
        *sum_p = strtod(p, NULL);
    }
    snprintf(key, sizeof(key), "%s_count{", name);
    if (text != NULL && (p = strstr(text, key)) != NULL && (p = strchr(p, ' ')) != NULL) {
        *count_p = strtod(p, NULL);
    }
    free(text);
}

/* ---- client API -------------------------------------------------------------------- */
static void api_params(moon_serve_params_t *p)
{
    moon_serve_params_default(p);
    p->prompt     = g_prompt;
    p->max_tokens = (uint32_t)g_max_tokens;
    p->flags |= MOON_SERVE_F_IGNORE_EOS;
}

/* Time to the first token of one request, ns (0 on failure). */
static uint64_t api_ttft(void)
{
    moon_serve_params_t p;
    moon_serve_event_t  ev;
    uint64_t            id, t0 = moon_bench_now_ns(), ttft = 0;

    api_params(&p);
    if (moon_serve_client_submit(g_client, &p, &id) != MOON_OK) {
        return 0;
    }
    while (moon_serve_client_next(g_client, WAIT_NS, &ev) == MOON_OK) {
        int done = ev.kind == MOON_SERVE_EV_DONE;
        if (ev.kind == MOON_SERVE_EV_TOKEN && ttft == 0) {
            ttft = moon_bench_now_ns() - t0;
        }
        moon_serve_event_fini(&ev);
        if (done) {
            break;
        }
    }
    return ttft;
}

/* n requests with depth in flight: requests/s. */
static double api_throughput(int n, int depth)
{
    moon_serve_params_t p;
    moon_serve_event_t  ev;
    uint64_t            id, t0 = moon_bench_now_ns();
    int                 sent = 0, done = 0;

    api_params(&p);
    while (sent < depth && sent < n && moon_serve_client_submit(g_client, &p, &id) == MOON_OK) {
        sent++;
    }
    while (done < n && moon_serve_client_next(g_client, WAIT_NS, &ev) == MOON_OK) {
        if (ev.kind == MOON_SERVE_EV_DONE) {
            done++;
            if (sent < n && moon_serve_client_submit(g_client, &p, &id) == MOON_OK) {
                sent++;
            }
        }
        moon_serve_event_fini(&ev);
    }
    return done * 1e9 / (double)(moon_bench_now_ns() - t0);
}

typedef struct {
    atomic_int *left;
    int         failed;
} http_worker_t;

static void *http_worker(void *arg)
{
    http_worker_t *w    = arg;
    CURL          *easy = curl_easy_init();
    sink_t         s;

    while (atomic_fetch_sub(w->left, 1) > 0) {
        w->failed |= http_request(easy, 0, &s) != 0;
    }
    curl_easy_cleanup(easy);
    return NULL;
}

static double http_throughput(int n, int depth)
{
    pthread_t     th[256];
    http_worker_t w[256];
    atomic_int    left   = n;
    uint64_t      t0     = moon_bench_now_ns();
    int           failed = 0;

    for (int i = 0; i < depth; i++) {
        w[i].left   = &left;
        w[i].failed = 0;
        pthread_create(&th[i], NULL, http_worker, &w[i]);
    }
    for (int i = 0; i < depth; i++) {
        pthread_join(th[i], NULL);
        failed |= w[i].failed;
    }
    return failed ? 0 : n * 1e9 / (double)(moon_bench_now_ns() - t0);
}

/* CPU seconds this process used so far (every thread: server and clients). */
static double cpu_s(void)
{
    struct rusage u;

    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
           ((double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_usec) * 1e-6;
}

static void line(const char *bench, const char *metric, double v, double anchor, double ratio,
                 int n, int depth)
{
    moon_bench_json_t j;
    const char       *anchor_name =
        strcmp(bench, "gateway_metrics") == 0 ? "anchor_metrics_endpoint" : "anchor_client_api";

    moon_bench_json_begin(&j);
    moon_bench_json_str(&j, "bench", bench);
    moon_bench_json_str(&j, "model", "stories260K");
    moon_bench_json_int(&j, "max_tokens", g_max_tokens);
    moon_bench_json_int(&j, "n", n);
    moon_bench_json_int(&j, "depth", depth);
    moon_bench_json_str(&j, "metric", metric);
    moon_bench_json_num(&j, "value", v);
    moon_bench_json_num(&j, anchor_name, anchor);
    moon_bench_json_num(&j, "ratio", ratio);
    moon_bench_json_end(&j);
}

int main(int argc, char **argv)
{
    const char                *model  = moon_bench_arg_str(argc, argv, "model", NULL);
    int                        n      = (int)moon_bench_arg_int(argc, argv, "n", 200);
    int                        depth  = (int)moon_bench_arg_int(argc, argv, "depth", 16);
    int                        rounds = (int)moon_bench_arg_int(argc, argv, "rounds", 3);
    moon_runtime_config_t      rcfg;
    moon_serve_config_t        scfg;
    moon_serve_cluster_t      *cluster = NULL;
    moon_runtime_t            *rt      = NULL;
    moon_serve_client_config_t ccfg    = {0};
    moon_gateway_args_t        ga;
    moon_addr_t                gw;
    uint16_t                   port = 0;
    double                    *h_ttft, *a_ttft;
    double                     h_tput = 0, a_tput = 0;
    double ttft_sum0, ttft_n0, e2e_sum0, e2e_n0, ttft_sum1, ttft_n1, e2e_sum1, e2e_n1;
    double c_ttft = 0, c_e2e = 0, c0, c1, h_cpu = 0, a_cpu = 0;
    CURL  *easy;

    g_max_tokens = (int)moon_bench_arg_int(argc, argv, "max-tokens", 16);
    if (model == NULL || depth < 1 || depth > 256 || n < 1) {
        fprintf(stderr, "usage: bench_gateway --model=M.gguf [--n=200] [--depth=16] "
                        "[--rounds=3] [--max-tokens=16]\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 2;
    moon_serve_config_default(&scfg);
    scfg.model_path     = model;
    scfg.store_dram_mib = 64;
    memset(&ga, 0, sizeof(ga));
    moon_gateway_config_default(&ga.config);
    ga.config.port         = 0;
    ga.config.http_threads = (uint32_t)moon_bench_arg_int(argc, argv, "http-threads", 2);
    ga.model_path          = model;
    ga.port_p              = &port;
    if (moon_runtime_create(&rcfg, &rt) != MOON_OK || moon_runtime_start(rt) != MOON_OK ||
        moon_serve_cluster_start(&scfg, rt, NULL, &cluster) != MOON_OK) {
        fprintf(stderr, "bench_gateway: the cluster did not start\n");
        return 1;
    }
    ccfg.conductor = ga.conductor = moon_serve_cluster_conductor(cluster);
    if (moon_serve_client_create(rt, &ccfg, &g_client) != MOON_OK ||
        moon_serve_client_wait_ready(g_client, 1, 1, WAIT_NS) != MOON_OK ||
        moon_spawn(rt, &moon_gateway_ops, &ga, NULL, &gw) != MOON_OK) {
        fprintf(stderr, "bench_gateway: the gateway did not start\n");
        return 1;
    }
    g_port = port;
    easy   = curl_easy_init();
    h_ttft = calloc((size_t)n * rounds, sizeof(double));
    a_ttft = calloc((size_t)n * rounds, sizeof(double));
    /* warm-up: both paths, the store filled with the prompt's blocks */
    for (int i = 0; i < 20; i++) {
        sink_t s;
        api_ttft();
        http_request(easy, 1, &s);
    }
    for (int r = 0; r < rounds; r++) {
        scrape(easy, "moonlet:time_to_first_token_seconds", &ttft_sum0, &ttft_n0);
        scrape(easy, "moonlet:e2e_request_latency_seconds", &e2e_sum0, &e2e_n0);
        c_ttft = c_e2e = 0;
        for (int i = 0; i < n; i++) { /* alternate: one HTTP, one API */
            sink_t   s;
            uint64_t t0 = moon_bench_now_ns();
            if (http_request(easy, 1, &s) != 0 || s.n_bytes == 0) {
                fprintf(stderr, "bench_gateway: an HTTP request failed\n");
                return 1;
            }
            h_ttft[r * n + i] = (double)(s.t_first_ns - t0) * 1e-6;
            c_ttft += (double)(s.t_first_ns - t0) * 1e-6;
            c_e2e += (double)(s.t_last_ns - t0) * 1e-6;
            a_ttft[r * n + i] = (double)api_ttft() * 1e-6;
        }
        /* the client API's requests do not pass the gateway: /metrics counts the n above */
        scrape(easy, "moonlet:time_to_first_token_seconds", &ttft_sum1, &ttft_n1);
        scrape(easy, "moonlet:e2e_request_latency_seconds", &e2e_sum1, &e2e_n1);
        /* saturation, alternating too; the best round of each, and CPU per request */
        c0     = cpu_s();
        h_tput = MOON_MAX(h_tput, http_throughput(n, depth));
        c1     = cpu_s();
        a_tput = MOON_MAX(a_tput, api_throughput(n, depth));
        h_cpu += (c1 - c0) * 1e6 / n / rounds;
        a_cpu += (cpu_s() - c1) * 1e6 / n / rounds;
    }
    {
        size_t m   = (size_t)n * rounds;
        double h50 = moon_bench_percentile(h_ttft, m, 50);
        double a50 = moon_bench_percentile(a_ttft, m, 50);
        double h99 = moon_bench_percentile(h_ttft, m, 99);
        double a99 = moon_bench_percentile(a_ttft, m, 99);

        line("gateway_ttft", "ttft_p50_ms", h50, a50, h50 - a50, (int)m, 1);
        line("gateway_ttft", "ttft_p99_ms", h99, a99, h99 - a99, (int)m, 1);
        line("gateway_throughput", "requests_per_s", h_tput, a_tput,
             a_tput > 0 ? h_tput / a_tput : 0, n, depth);
        /* what each request costs the machine (HTTP: libcurl's side included) */
        line("gateway_throughput", "cpu_us_per_request", h_cpu, a_cpu,
             a_cpu > 0 ? h_cpu / a_cpu : 0, n, depth);
        /* the last round's means: this client beside the server's histograms */
        {
            double mt = (ttft_sum1 - ttft_sum0) * 1e3 / MOON_MAX(ttft_n1 - ttft_n0, 1);
            double me = (e2e_sum1 - e2e_sum0) * 1e3 / MOON_MAX(e2e_n1 - e2e_n0, 1);
            double ct = c_ttft / n, ce = c_e2e / n;

            line("gateway_metrics", "ttft_mean_ms", ct, mt, ct - mt, (int)(ttft_n1 - ttft_n0), 1);
            line("gateway_metrics", "e2el_mean_ms", ce, me, ce - me, (int)(e2e_n1 - e2e_n0), 1);
        }
    }
    curl_easy_cleanup(easy);
    free(h_ttft);
    free(a_ttft);
    moon_stop(rt, gw, MOON_OK);
    moon_serve_client_destroy(g_client);
    moon_serve_cluster_stop(cluster);
    moon_runtime_shutdown(rt, 0);
    moon_runtime_wait(rt);
    moon_runtime_destroy(rt);
    curl_global_cleanup();
    return 0;
}
