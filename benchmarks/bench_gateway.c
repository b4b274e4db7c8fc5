/* benchmarks/bench_gateway.c - what HTTP costs: one process holds a serving
 * cluster (stories260K: conductor, store, prefill, decode), the gateway on a
 * free port and a client API client. Alternating rounds measure
 *   ttft:       one request at a time, streamed: time to the first body byte
 *               through HTTP (libcurl) vs time to the first TOKEN through the
 *               client API (the anchor), p50 and mean;
 *   throughput: `depth` requests in flight, non-streamed over HTTP (one
 *               client thread: a libcurl multi handle, a kept-alive
 *               connection per request in flight) vs the client API keeping
 *               as many in flight; requests/s, the mean over rounds; ratio:
 *               the median of the rounds' HTTP / API ratios (each pair ran
 *               back to back), and the lowest one.
 * ratio: the difference in ms for latencies (HTTP - anchor), HTTP / anchor
 * for throughput and CPU per request (all threads of the process: the HTTP
 * line includes libcurl's client work, on the same 2 cores).
 * One JSON line per configuration, each with its anchor's figure. Targets
 * (issue 15): ttft_p50 <= anchor + 1 ms; throughput >= 0.9 x anchor.
 *   n = 8:      one request of n = 8 choices vs 8 separate requests of the
 *               same length in flight (the anchor), each round on a prompt
 *               of its own (no cache hit from an earlier round): decode
 *               tokens/s, ratio the median round's; and the prompt tokens
 *               the prefill instance computed for each (its counters; the
 *               8 separate requests share through the prefix cache too,
 *               the prefill instance taking one prompt at a time).
 *               Target (issue 29): the prompt computed once (96 tokens:
 *               one SUBMIT of 8 choices, the KV forked on the decode
 *               instance), decode >= 0.9 x anchor.
 *   embeddings: /v1/embeddings of one input, `depth` in flight, requests/s
 *               vs the engine's own prefill of the same input's rows (one
 *               engine thread, as the prefill instance has: 1 / its time),
 *               alternating in rounds; ratio the median round's (`--only=
 *               embeddings`: this line alone; `--only=n`: the n = 8 one).
 * (`moonlet bench` beside /metrics: benchmarks/suites/gateway.sh.) */
#include "bench_util.h"
#include "gateway.h"
#include "moonlet/kv_cache.h"
#include "moonlet/log.h"
#include "moonlet/model.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"

#include <curl/curl.h>

#include <stdint.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_NS 60000000000ull

static moon_serve_client_t *g_client;
static unsigned             g_port;
static int                  g_max_tokens;
static int g_variant; /* api requests: 0 plain, 1 with sampling controls, 2 with logprobs 5 */
static const char *g_prompt = "Once upon a time, there was a little girl";
static char        g_body[1024], g_body_stream[1024]; /* the request, not streamed / streamed */
static const char *g_path = "/v1/completions";        /* the route http_setup POSTs to */

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

static struct curl_slist *g_headers;

/* Sets easy up for one POST of g_path (stream or not) into s. */
static void http_setup(CURL *easy, int stream, sink_t *s)
{
    char url[96];

    snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", g_port, g_path);
    memset(s, 0, sizeof(*s));
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, g_headers);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, stream ? g_body_stream : g_body);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
}

/* One request on easy (reused: keep-alive); 0 on HTTP 200. */
static int http_request(CURL *easy, int stream, sink_t *s)
{
    long     code = 0;
    CURLcode rc;

    http_setup(easy, stream, s);
    rc = curl_easy_perform(easy);
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
    return rc == CURLE_OK && code == 200 ? 0 : -1;
}

/* ---- client API -------------------------------------------------------------------- */
static void api_params(moon_serve_params_t *p)
{
    moon_serve_params_default(p);
    p->prompt     = g_prompt;
    p->max_tokens = (uint32_t)g_max_tokens;
    p->flags |= MOON_SERVE_F_IGNORE_EOS;
    if (g_variant == 1) {
        static const int32_t ids[]  = {300, 301};
        static const float   bias[] = {-5.0f, 2.0f};
        p->presence_penalty         = 0.5f;
        p->frequency_penalty        = 0.5f;
        p->repetition_penalty       = 1.2f;
        p->min_p                    = 0.05f;
        p->bias_ids                 = ids;
        p->bias                     = bias;
        p->n_bias                   = 2;
    } else if (g_variant == 2) {
        p->logprobs = 6;
    }
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

/* n requests with depth in flight over HTTP, non-streamed: requests/s. One
 * thread drives them all through one libcurl multi handle (as `moonlet
 * bench` does), each of the depth easy handles keeping its connection
 * alive from one request to the next: the client costs the 2 shared cores
 * one thread, as the client API's side does. */
static double http_throughput(int n, int depth)
{
    CURLM   *multi = curl_multi_init();
    CURL    *easy[256];
    sink_t   s[256];
    uint64_t t0;
    int      sent = 0, done = 0, failed = 0, running;

    for (int i = 0; i < depth; i++) {
        easy[i] = curl_easy_init();
    }
    t0 = moon_bench_now_ns();
    for (int i = 0; i < depth && sent < n; i++, sent++) {
        http_setup(easy[i], 0, &s[i]);
        curl_easy_setopt(easy[i], CURLOPT_PRIVATE, (char *)(intptr_t)i);
        curl_multi_add_handle(multi, easy[i]);
    }
    while (done < n && !failed) {
        CURLMsg *msg;
        int      left;

        curl_multi_perform(multi, &running);
        while ((msg = curl_multi_info_read(multi, &left)) != NULL) {
            char *priv = NULL;
            long  code = 0;
            int   i;

            if (msg->msg != CURLMSG_DONE) {
                continue;
            }
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
            i = (int)(intptr_t)priv;
            failed |= msg->data.result != CURLE_OK || code != 200;
            done++;
            curl_multi_remove_handle(multi, easy[i]);
            if (sent < n) { /* the same handle again: its connection is kept */
                http_setup(easy[i], 0, &s[i]);
                curl_multi_add_handle(multi, easy[i]);
                sent++;
            }
        }
        if (done < n) {
            curl_multi_poll(multi, NULL, 0, 100, NULL);
        }
    }
    for (int i = 0; i < depth; i++) {
        curl_multi_remove_handle(multi, easy[i]);
        curl_easy_cleanup(easy[i]);
    }
    curl_multi_cleanup(multi);
    return failed ? 0 : n * 1e9 / (double)(moon_bench_now_ns() - t0);
}

/* The prefill instances' computed prompt tokens, once their load reports
 * have settled (two reads 200 ms apart agree, at most 3 s). */
static uint64_t computed_tokens(void)
{
    moon_serve_stats_t st;
    uint64_t           last = UINT64_MAX;

    for (int i = 0; i < 15; i++) {
        if (moon_serve_client_stats(g_client, WAIT_NS, &st) != MOON_OK) {
            return 0;
        }
        if (st.computed_tokens == last) {
            break;
        }
        last = st.computed_tokens;
        nanosleep(&(struct timespec){0, 200000000L}, NULL);
    }
    return last;
}

/* A completion body of n choices on a 96-token prompt of its own (salt). */
static void n_body(int n, int salt)
{
    size_t len = 0;

    len += (size_t)snprintf(g_body + len, sizeof(g_body) - len, "{\"prompt\":[1");
    for (int i = 1; i < 96; i++) {
        len += (size_t)snprintf(g_body + len, sizeof(g_body) - len, ",%d",
                                260 + (i * 31 + salt * 7) % 240);
    }
    snprintf(g_body + len, sizeof(g_body) - len,
             "],\"max_tokens\":%d,\"n\":%d,\"seed\":%d,\"ignore_eos\":true}", g_max_tokens, n,
             salt);
}

/* n = 8 against 8 separate requests, alternating in rounds. */
static void n8_line(int rounds)
{
    moon_bench_rounds_t rr = {0};
    moon_bench_json_t   j;
    char                saved[sizeof(g_body)];
    uint64_t            c_n8 = 0, c_sep = 0;

    memcpy(saved, g_body, sizeof(saved));
    rounds = rounds * 4 > MOON_BENCH_MAX_ROUNDS ? MOON_BENCH_MAX_ROUNDS : rounds * 4; /* short */
    for (int r = 0; r < rounds; r++) {
        uint64_t c0, c1;
        double   x, y;

        n_body(1, 2 * r + 1);
        c0 = computed_tokens();
        x  = http_throughput(8, 8) * g_max_tokens; /* 8 requests of 1 choice */
        c1 = computed_tokens();
        c_sep += c1 - c0;
        n_body(8, 2 * r + 2);
        y  = http_throughput(1, 1) * 8 * g_max_tokens; /* 1 request of 8 choices */
        c0 = computed_tokens();
        c_n8 += c0 - c1;
        moon_bench_rounds_add(&rr, y, x);
    }
    memcpy(g_body, saved, sizeof(saved));
    moon_bench_json_begin(&j);
    moon_bench_json_str(&j, "bench", "gateway_n");
    moon_bench_json_str(&j, "model", "stories260K");
    moon_bench_json_int(&j, "max_tokens", g_max_tokens);
    moon_bench_json_int(&j, "n", 8);
    moon_bench_json_int(&j, "prompt_tokens", 96);
    moon_bench_json_str(&j, "metric", "decode_tokens_per_s");
    moon_bench_json_num(&j, "value", moon_bench_rounds_mean(&rr));
    moon_bench_json_num(&j, "anchor_8_requests", moon_bench_rounds_anchor_mean(&rr));
    moon_bench_json_num(&j, "prefill_computed_tokens", (double)c_n8 / rounds);
    moon_bench_json_num(&j, "anchor_prefill_computed_tokens", (double)c_sep / rounds);
    moon_bench_json_num(&j, "unshared_prefill_tokens", 8 * 96);
    moon_bench_rounds_json(&rr, &j);
    moon_bench_json_end(&j);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* CPU seconds this process used so far (every thread: server and clients). */
static double cpu_s(void)
{
    struct rusage u;

    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
           ((double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_usec) * 1e-6;
}

/* Decode tokens/s of requests of a variant against plain ones (the anchor),
 * alternating in rounds: one line each, ratio = the median round's. */
static void variant_line(const char *name, int variant, int n, int depth, int rounds)
{
    moon_bench_rounds_t rr = {0};
    moon_bench_json_t   j;

    for (int r = 0; r < rounds; r++) {
        double x, y;
        g_variant = 0;
        x         = api_throughput(n, depth) * g_max_tokens;
        g_variant = variant;
        y         = api_throughput(n, depth) * g_max_tokens;
        g_variant = 0;
        moon_bench_rounds_add(&rr, y, x);
    }
    moon_bench_json_begin(&j);
    moon_bench_json_str(&j, "bench", "gateway_sampling");
    moon_bench_json_str(&j, "model", "stories260K");
    moon_bench_json_str(&j, "variant", name);
    moon_bench_json_int(&j, "max_tokens", g_max_tokens);
    moon_bench_json_int(&j, "n", n);
    moon_bench_json_int(&j, "depth", depth);
    moon_bench_json_str(&j, "metric", "decode_tokens_per_s");
    moon_bench_json_num(&j, "value", moon_bench_rounds_mean(&rr));
    moon_bench_json_num(&j, "anchor_plain_requests", moon_bench_rounds_anchor_mean(&rr));
    moon_bench_rounds_json(&rr, &j);
    moon_bench_json_end(&j);
}

/* The engine's own prefill of ids (its rows' hidden states, what an
 * embedding costs the prefill instance) n times: requests/s. */
static double engine_embeddings(moon_engine_t *e, moon_kv_cache_t *kv, const int32_t *ids,
                                uint32_t n_ids, float *hidden, int n)
{
    uint64_t t0 = moon_bench_now_ns();

    for (int i = 0; i < n; i++) {
        uint32_t seq;
        if (moon_kv_seq_create(kv, &seq) != MOON_OK ||
            moon_engine_prefill_rows(e, kv, seq, ids, n_ids, NULL, hidden, NULL) != MOON_OK) {
            return 0;
        }
        moon_kv_seq_destroy(kv, seq);
    }
    return n * 1e9 / (double)(moon_bench_now_ns() - t0);
}

/* /v1/embeddings requests/s against the engine's own prefill of the input. */
static void embed_line(const char *model, int n, int depth, int rounds)
{
    moon_engine_config_t ecfg = {.kind = MOON_BACKEND_CPU, .n_threads = 1, .max_chunk = 128};
    moon_bench_rounds_t  rr   = {0};
    moon_model_t        *m    = NULL;
    moon_engine_t       *e    = NULL;
    moon_kv_cache_t     *kv   = NULL;
    moon_kv_config_t     kcfg;
    moon_bench_json_t    j;
    int32_t              ids[128];
    size_t               n_ids = 0;
    float               *hidden;
    char                 saved[sizeof(g_body)];

    if (moon_model_load(model, &m) != MOON_OK || moon_engine_create(m, &ecfg, &e) != MOON_OK ||
        moon_tokenizer_encode(moon_model_tokenizer(m), g_prompt, strlen(g_prompt), true, ids, 128,
                              &n_ids) != MOON_OK) {
        fprintf(stderr, "bench_gateway: no engine for the embeddings anchor\n");
        moon_engine_destroy(e);
        moon_model_destroy(m);
        return;
    }
    kcfg   = moon_model_kv_config(moon_model_config(m), 16, 16, 1);
    hidden = malloc(n_ids * moon_model_config(m)->dim * sizeof(float));
    if (hidden == NULL || moon_kv_cache_create(&kcfg, &kv) != MOON_OK) {
        fprintf(stderr, "bench_gateway: no memory for the embeddings anchor\n");
        free(hidden);
        moon_engine_destroy(e);
        moon_model_destroy(m);
        return;
    }
    memcpy(saved, g_body, sizeof(g_body));
    snprintf(g_body, sizeof(g_body), "{\"input\":\"%s\"}", g_prompt);
    for (int r = 0; r < rounds; r++) {
        double x, y;
        g_path = "/v1/embeddings";
        x      = http_throughput(n, depth);
        g_path = "/v1/completions";
        y      = engine_embeddings(e, kv, ids, (uint32_t)n_ids, hidden, n);
        moon_bench_rounds_add(&rr, x, y);
    }
    memcpy(g_body, saved, sizeof(g_body));
    moon_bench_json_begin(&j);
    moon_bench_json_str(&j, "bench", "gateway_embeddings");
    moon_bench_json_str(&j, "model", "stories260K");
    moon_bench_json_int(&j, "input_tokens", (int)n_ids);
    moon_bench_json_int(&j, "n", n);
    moon_bench_json_int(&j, "depth", depth);
    moon_bench_json_str(&j, "metric", "requests_per_s");
    moon_bench_json_num(&j, "value", moon_bench_rounds_mean(&rr));
    moon_bench_json_num(&j, "anchor_engine_prefill", moon_bench_rounds_anchor_mean(&rr));
    moon_bench_rounds_json(&rr, &j);
    moon_bench_json_end(&j);
    moon_kv_cache_destroy(kv);
    free(hidden);
    moon_engine_destroy(e);
    moon_model_destroy(m);
}

static void line(const char *bench, const char *metric, double v, double anchor, double ratio,
                 int n, int depth)
{
    moon_bench_json_t j;
    const char       *anchor_name = "anchor_client_api";

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
    const char                *model           = moon_bench_arg_str(argc, argv, "model", NULL);
    int                        n               = (int)moon_bench_arg_int(argc, argv, "n", 200);
    int                        depth           = (int)moon_bench_arg_int(argc, argv, "depth", 16);
    int                        rounds          = (int)moon_bench_arg_int(argc, argv, "rounds", 3);
    const char                *only            = moon_bench_arg_str(argc, argv, "only", "");
    int                        embeddings_only = strcmp(only, "embeddings") == 0;
    int                        n_only          = strcmp(only, "n") == 0;
    moon_runtime_config_t      rcfg;
    moon_serve_config_t        scfg;
    moon_serve_cluster_t      *cluster = NULL;
    moon_runtime_t            *rt      = NULL;
    moon_serve_client_config_t ccfg    = {0};
    moon_gateway_args_t        ga;
    moon_addr_t                gw;
    uint16_t                   port = 0;
    double                    *h_ttft, *a_ttft, *ratios;
    double                     h_tput = 0, a_tput = 0, c0, c1, h_cpu = 0, a_cpu = 0;
    CURL                      *easy;

    g_max_tokens = (int)moon_bench_arg_int(argc, argv, "max-tokens", 16);
    if (model == NULL || depth < 1 || depth > 256 || n < 1 || rounds < 1) {
        fprintf(stderr, "usage: bench_gateway --model=M.gguf [--n=200] [--depth=16] "
                        "[--rounds=3] [--max-tokens=16] [--only=embeddings|n]\n");
        return 2;
    }
    for (int stream = 0; stream < 2; stream++) {
        snprintf(stream ? g_body_stream : g_body, sizeof(g_body),
                 "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,"
                 "\"stream\":%s}",
                 g_prompt, g_max_tokens, stream ? "true" : "false");
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    g_headers = curl_slist_append(NULL, "Content-Type: application/json");
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
    if (n_only) {
        n8_line(rounds);
    } else if (!embeddings_only) {
        ratios = calloc((size_t)rounds, sizeof(double));
        for (int r = 0; r < rounds; r++) {
            for (int i = 0; i < n; i++) { /* alternate: one HTTP, one API */
                sink_t   s;
                uint64_t t0 = moon_bench_now_ns();
                if (http_request(easy, 1, &s) != 0 || s.n_bytes == 0) {
                    fprintf(stderr, "bench_gateway: an HTTP request failed\n");
                    return 1;
                }
                h_ttft[r * n + i] = (double)(s.t_first_ns - t0) * 1e-6;
                a_ttft[r * n + i] = (double)api_ttft() * 1e-6;
            }
            /* saturation, alternating too; each round's ratio, and CPU per request */
            {
                double h, a;
                c0 = cpu_s();
                h  = http_throughput(n, depth);
                c1 = cpu_s();
                a  = api_throughput(n, depth);
                h_cpu += (c1 - c0) * 1e6 / n / rounds;
                a_cpu += (cpu_s() - c1) * 1e6 / n / rounds;
                h_tput += h / rounds;
                a_tput += a / rounds;
                ratios[r] = a > 0 ? h / a : 0;
            }
        }
        {
            size_t m   = (size_t)n * rounds;
            double h50 = moon_bench_percentile(h_ttft, m, 50);
            double a50 = moon_bench_percentile(a_ttft, m, 50);
            double h99 = moon_bench_percentile(h_ttft, m, 99);
            double a99 = moon_bench_percentile(a_ttft, m, 99);

            line("gateway_ttft", "ttft_p50_ms", h50, a50, h50 - a50, (int)m, 1);
            line("gateway_ttft", "ttft_p99_ms", h99, a99, h99 - a99, (int)m, 1);
            /* the mean over rounds of each; ratio: the median of the rounds' ratios
             * (each round's pair ran back to back: the load they shared cancels) */
            qsort(ratios, (size_t)rounds, sizeof(double), cmp_double);
            line("gateway_throughput", "requests_per_s", h_tput, a_tput, ratios[rounds / 2], n,
                 depth);
            line("gateway_throughput", "requests_per_s_round_ratio_min", ratios[0], 1, ratios[0], n,
                 depth);
            /* what each request costs the machine (HTTP: libcurl's side included) */
            line("gateway_throughput", "cpu_us_per_request", h_cpu, a_cpu,
                 a_cpu > 0 ? h_cpu / a_cpu : 0, n, depth);
        }
        free(ratios);
        /* per-request sampling controls and logprobs inside the batched step */
        variant_line("penalties_bias_min_p", 1, n, depth, rounds);
        variant_line("logprobs_5", 2, n, depth, rounds);
        n8_line(rounds);
    }
    if (!n_only) {
        embed_line(model, n, depth, rounds);
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
    curl_slist_free_all(g_headers);
    curl_global_cleanup();
    return 0;
}
