/* benchmarks/bench_structured.c - what constrained decoding costs (issue
 * 29). One process holds a serving cluster (stories260K) and a client API
 * client; rounds alternate the anchor and the measurement:
 *   decode:  `depth` concurrent requests with a JSON schema (a long string
 *            field, so every request runs its max_tokens) vs the same
 *            requests unconstrained (ignore_eos): completion tokens/s over
 *            the batch; ratio: the median of the rounds' constrained /
 *            unconstrained (each pair back to back), with min and max.
 *            Target >= 0.9.
 *   compile: a fresh 20-property schema compiled to an automaton over the
 *            model's vocabulary with its start mask (what an instance does
 *            on a schema it has not seen), p50 in ms; anchor: the same
 *            schema found in the cache. Target <= 5 ms.
 *   mask:    a fresh state's mask over a synthetic 32,000-token vocabulary
 *            (letters, words with a leading space, digits, punctuation), for
 *            every prefix of a JSON document: p50 and max ms; anchor: the
 *            cached lookup. What a Llama-sized vocabulary costs per new state.
 *   ttft:    time to first token of one request with a fresh 20-property
 *            schema (compiled by the prefill and the decode instance) vs one
 *            unconstrained, interleaved; ratio: the difference of p50s, ms.
 * One JSON line per configuration. */
#include "bench_util.h"
#include "moonlet/grammar.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "moonlet/tokenizer.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_NS 60000000000ull

static moon_serve_client_t *g_client;
static int                  g_max_tokens;

/* decode schemas: a free string (its states recur: masks come from the
 * cache), and a bounded one (maxLength: every length is a state of its own,
 * so most steps compute a new mask) */
static const char *const g_decode_specs[2] = {
    "json_schema\n{\"type\":\"object\",\"properties\":{\"story\":{\"type\":\"string\"},"
    "\"n\":{\"type\":\"integer\"}},\"required\":[\"story\",\"n\"]}",
    "json_schema\n{\"type\":\"object\",\"properties\":{\"story\":{\"type\":\"string\","
    "\"maxLength\":2000},\"n\":{\"type\":\"integer\"}},\"required\":[\"story\",\"n\"]}",
};

/* A 20-property schema whose names carry salt (so it is new to every cache). */
static void schema20(char *out, size_t cap, unsigned salt)
{
    static const char *const types[] = {
        "\"type\":\"string\",\"maxLength\":16", "\"type\":\"integer\"", "\"type\":\"number\"",
        "\"type\":\"boolean\"", "\"enum\":[\"red\",\"green\",\"blue\"]"};
    size_t n = (size_t)snprintf(out, cap, "json_schema\n{\"type\":\"object\",\"properties\":{");

    for (int i = 0; i < 20 && n < cap; i++) {
        n += (size_t)snprintf(out + n, cap - n, "%s\"p%d_%u\":{%s}", i ? "," : "", i, salt,
                              types[i % 5]);
    }
    if (n < cap) {
        n += (size_t)snprintf(out + n, cap - n,
                              "},\"required\":[\"p0_%u\",\"p1_%u\"],"
                              "\"additionalProperties\":false}",
                              salt, salt);
    }
}

/* depth requests at once (grammar spec or NULL): completion tokens/s. */
static double decode_tps(int depth, const char *spec, unsigned round)
{
    moon_serve_params_t p;
    moon_serve_event_t  ev;
    uint64_t            id, t0 = moon_bench_now_ns(), tokens = 0;
    int                 done = 0;
    char                prompt[64];

    for (int i = 0; i < depth; i++) {
        moon_serve_params_default(&p);
        snprintf(prompt, sizeof(prompt), "Once upon a time %u %d", round, i);
        p.prompt      = prompt;
        p.max_tokens  = (uint32_t)g_max_tokens;
        p.temperature = 0.8f;
        p.seed        = (uint64_t)i + 1;
        if (spec != NULL) {
            p.grammar     = spec;
            p.grammar_len = (uint32_t)strlen(spec);
        } else {
            p.flags |= MOON_SERVE_F_IGNORE_EOS;
        }
        if (moon_serve_client_submit(g_client, &p, &id) != MOON_OK) {
            return 0;
        }
    }
    while (done < depth && moon_serve_client_next(g_client, WAIT_NS, &ev) == MOON_OK) {
        tokens += ev.kind == MOON_SERVE_EV_TOKEN;
        done += ev.kind == MOON_SERVE_EV_DONE;
        moon_serve_event_fini(&ev);
    }
    return tokens * 1e9 / (double)(moon_bench_now_ns() - t0);
}

/* Time to the first token of one request, ms (spec NULL: unconstrained). */
static double ttft_ms(const char *spec)
{
    moon_serve_params_t p;
    moon_serve_event_t  ev;
    uint64_t            id, t0 = moon_bench_now_ns(), ttft = 0;

    moon_serve_params_default(&p);
    p.prompt     = "Once upon a time";
    p.max_tokens = 4;
    if (spec != NULL) {
        p.grammar     = spec;
        p.grammar_len = (uint32_t)strlen(spec);
    }
    if (moon_serve_client_submit(g_client, &p, &id) != MOON_OK) {
        return -1;
    }
    while (moon_serve_client_next(g_client, WAIT_NS, &ev) == MOON_OK) {
        int end = ev.kind == MOON_SERVE_EV_DONE;
        if (ev.kind == MOON_SERVE_EV_TOKEN && ttft == 0) {
            ttft = moon_bench_now_ns() - t0;
        }
        moon_serve_event_fini(&ev);
        if (end) {
            break;
        }
    }
    return (double)ttft * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void line(const char *bench, const char *metric, double v, const char *anchor_name,
                 double anchor, double ratio, int n, int depth)
{
    moon_bench_json_t j;

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

/* The model's vocabulary as the instances see it (bytes after an ordinary token). */
static moon_grammar_vocab_t *vocab_of(const char *model)
{
    moon_gguf_t          *gguf = NULL;
    moon_tokenizer_t     *tok  = NULL;
    moon_grammar_vocab_t *v    = NULL;

    if (moon_gguf_open(model, &gguf) == MOON_OK && moon_tokenizer_create(gguf, &tok) == MOON_OK) {
        uint32_t     n      = moon_tokenizer_n_vocab(tok);
        const char **pieces = calloc(n, sizeof(*pieces));
        uint32_t    *lens   = calloc(n, sizeof(*lens));
        for (uint32_t i = 0; i < n; i++) {
            size_t len = 0;
            pieces[i]  = moon_tokenizer_piece(tok, -1, (int32_t)i, &len);
            lens[i]    = (uint32_t)len;
        }
        moon_grammar_vocab_create(n, pieces, lens, moon_tokenizer_eos(tok), &v);
        free(pieces);
        free(lens);
    }
    moon_tokenizer_destroy(tok);
    moon_gguf_close(gguf);
    return v;
}

/* A synthetic Llama-sized vocabulary: bytes, then seeded pieces. */
static moon_grammar_vocab_t *vocab32k(void)
{
    enum { N = 32000 };
    static const char alpha[]    = "etaoinshrdlucmfwypvbgkjqxz";
    static const char punct[]    = ".,:;\"{}[]-_0123456789 ";
    char(*buf)[12]               = calloc(N, sizeof(*buf));
    const char          **pieces = calloc(N, sizeof(*pieces));
    uint32_t             *lens   = calloc(N, sizeof(*lens));
    uint64_t              x      = 0x9e3779b97f4a7c15ull;
    moon_grammar_vocab_t *v      = NULL;

    for (uint32_t i = 0; i < N; i++) {
        uint32_t len;
        if (i < 256) {
            buf[i][0] = (char)i;
            len       = i == 0 ? 0 : 1;
        } else {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            len = 1 + (uint32_t)(x % 8);
            for (uint32_t k = 0; k < len; k++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                buf[i][k] =
                    (x % 10) < 8 ? alpha[(x >> 8) % 26] : punct[(x >> 8) % (sizeof(punct) - 1)];
            }
            if (x % 3 == 0) {
                buf[i][0] = ' ';
            }
        }
        pieces[i] = buf[i];
        lens[i]   = len;
    }
    moon_grammar_vocab_create(N, pieces, lens, 0, &v);
    free(buf);
    free(pieces);
    free(lens);
    return v;
}

static void bench_mask32k(void)
{
    static const char *doc =
        "{\"name\":\"Once upon a time there was a girl\",\"n\":-12.5e3,\"tags\":[\"a\",true,null,"
        "{\"k\":[1,2]}],\"s\":\"\\u00e9\"}";
    moon_grammar_vocab_t *v = vocab32k();
    moon_grammar_t       *g = NULL;
    moon_grammar_fsm_t   *f = NULL;
    size_t                n = strlen(doc), m = 0;
    double   *fresh = calloc(n + 1, sizeof(double)), *hit = calloc(n + 1, sizeof(double));
    uint32_t *ids = calloc(n + 1, sizeof(uint32_t));
    char      err[MOON_GRAMMAR_ERR_MAX];

    if (v == NULL || moon_grammar_from_spec("json_object", 11, &g, err, sizeof(err)) != MOON_OK ||
        moon_grammar_fsm_create(g, v, &f) != MOON_OK) {
        fprintf(stderr, "bench_structured: 32k vocabulary setup failed\n");
        return;
    }
    for (size_t k = 0; k <= n; k++) {
        uint32_t        st;
        const uint32_t *mask;
        uint64_t        t0;
        int             seen = 0;
        if (!moon_grammar_fsm_match(f, 0, doc, k, &st)) {
            continue;
        }
        for (size_t i = 0; i < m && !seen; i++) {
            seen = ids[i] == st; /* its mask is cached already */
        }
        if (seen) {
            continue;
        }
        ids[m] = st;
        t0     = moon_bench_now_ns();
        moon_grammar_fsm_mask(f, st, &mask);
        fresh[m] = (double)(moon_bench_now_ns() - t0) * 1e-6;
        t0       = moon_bench_now_ns();
        moon_grammar_fsm_mask(f, st, &mask);
        hit[m++] = (double)(moon_bench_now_ns() - t0) * 1e-6;
    }
    if (m > 0) {
        double f50  = moon_bench_percentile(fresh, m, 50),
               f100 = moon_bench_percentile(fresh, m, 100);
        line("structured_mask", "mask_ms_p50_vocab32000", f50, "anchor_cached_ms",
             moon_bench_percentile(hit, m, 50), f50, (int)m, 1);
        line("structured_mask", "mask_ms_max_vocab32000", f100, "anchor_cached_ms",
             moon_bench_percentile(hit, m, 100), f100, (int)m, 1);
    }
    free(fresh);
    free(hit);
    free(ids);
    moon_grammar_fsm_destroy(f);
    moon_grammar_vocab_destroy(v);
}

int main(int argc, char **argv)
{
    const char                *model  = moon_bench_arg_str(argc, argv, "model", NULL);
    int                        depth  = (int)moon_bench_arg_int(argc, argv, "depth", 32);
    int                        rounds = (int)moon_bench_arg_int(argc, argv, "rounds", 5);
    int                        n_ttft = (int)moon_bench_arg_int(argc, argv, "n", 50);
    moon_runtime_config_t      rcfg;
    moon_serve_config_t        scfg;
    moon_serve_cluster_t      *cluster = NULL;
    moon_runtime_t            *rt      = NULL;
    moon_serve_client_config_t ccfg    = {0};
    moon_grammar_vocab_t      *vocab;
    moon_grammar_cache_t      *cache = NULL;
    double                    *ratios, *c_ms, *h_ms, *t_s, *t_a, s_tps = 0, a_tps = 0;
    char                       spec[4096], err[MOON_GRAMMAR_ERR_MAX];

    g_max_tokens = (int)moon_bench_arg_int(argc, argv, "max-tokens", 64);
    if (model == NULL || depth < 1 || rounds < 1 || n_ttft < 1) {
        fprintf(stderr, "usage: bench_structured --model=M.gguf [--depth=32] [--rounds=5] "
                        "[--n=50] [--max-tokens=64]\n");
        return 2;
    }
    /* compile: fresh vs cached, in this thread as an instance would */
    vocab = vocab_of(model);
    if (vocab == NULL || moon_grammar_cache_create(vocab, 4, &cache) != MOON_OK) {
        fprintf(stderr, "bench_structured: no vocabulary from %s\n", model);
        return 1;
    }
    c_ms = calloc((size_t)n_ttft, sizeof(double));
    h_ms = calloc((size_t)n_ttft, sizeof(double));
    for (int i = 0; i < n_ttft; i++) {
        moon_grammar_fsm_t *f = NULL, *f2 = NULL;
        const uint32_t     *mask;
        uint64_t            t0;
        schema20(spec, sizeof(spec), 1000u + (unsigned)i);
        t0 = moon_bench_now_ns();
        if (moon_grammar_cache_get(cache, spec, strlen(spec), &f, err, sizeof(err)) != MOON_OK ||
            moon_grammar_fsm_mask(f, 0, &mask) != MOON_OK) {
            fprintf(stderr, "bench_structured: compile failed: %s\n", err);
            return 1;
        }
        c_ms[i] = (double)(moon_bench_now_ns() - t0) * 1e-6;
        t0      = moon_bench_now_ns();
        moon_grammar_cache_get(cache, spec, strlen(spec), &f2, err, sizeof(err));
        moon_grammar_fsm_mask(f2, 0, &mask);
        h_ms[i] = (double)(moon_bench_now_ns() - t0) * 1e-6;
        moon_grammar_cache_put(cache, f);
        moon_grammar_cache_put(cache, f2);
    }
    {
        double c50 = moon_bench_percentile(c_ms, (size_t)n_ttft, 50);
        double h50 = moon_bench_percentile(h_ms, (size_t)n_ttft, 50);
        line("structured_compile", "schema20_compile_ms_p50", c50, "anchor_cached_ms", h50, c50,
             n_ttft, 1);
    }
    moon_grammar_cache_destroy(cache);
    moon_grammar_vocab_destroy(vocab);
    bench_mask32k();

    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 2;
    moon_serve_config_default(&scfg);
    scfg.model_path     = model;
    scfg.store_dram_mib = 64;
    if (moon_runtime_create(&rcfg, &rt) != MOON_OK || moon_runtime_start(rt) != MOON_OK ||
        moon_serve_cluster_start(&scfg, rt, NULL, &cluster) != MOON_OK) {
        fprintf(stderr, "bench_structured: the cluster did not start\n");
        return 1;
    }
    ccfg.conductor = moon_serve_cluster_conductor(cluster);
    if (moon_serve_client_create(rt, &ccfg, &g_client) != MOON_OK ||
        moon_serve_client_wait_ready(g_client, 1, 1, WAIT_NS) != MOON_OK) {
        fprintf(stderr, "bench_structured: the client did not start\n");
        return 1;
    }
    ratios = calloc((size_t)rounds, sizeof(double));
    for (int k = 0; k < 2; k++) {
        const char *spec_k = g_decode_specs[k];
        char        metric[64];
        s_tps = a_tps = 0;
        /* warm-up: both kinds */
        decode_tps(depth, NULL, 0);
        decode_tps(depth, spec_k, 0);
        for (int r = 0; r < rounds; r++) {
            double a = decode_tps(depth, NULL, (unsigned)r + 1);
            double s = decode_tps(depth, spec_k, (unsigned)r + 1);
            a_tps += a / rounds;
            s_tps += s / rounds;
            ratios[r] = a > 0 ? s / a : 0;
        }
        qsort(ratios, (size_t)rounds, sizeof(double), cmp_double);
        snprintf(metric, sizeof(metric), "tokens_per_s_%s", k ? "bounded_string" : "free_string");
        line("structured_decode", metric, s_tps, "anchor_unconstrained", a_tps, ratios[rounds / 2],
             rounds, depth);
        snprintf(metric, sizeof(metric), "round_ratio_min_%s",
                 k ? "bounded_string" : "free_string");
        line("structured_decode", metric, ratios[0], "anchor_unconstrained", 1, ratios[0], rounds,
             depth);
        snprintf(metric, sizeof(metric), "round_ratio_max_%s",
                 k ? "bounded_string" : "free_string");
        line("structured_decode", metric, ratios[rounds - 1], "anchor_unconstrained", 1,
             ratios[rounds - 1], rounds, depth);
    }
    t_s = calloc((size_t)n_ttft, sizeof(double));
    t_a = calloc((size_t)n_ttft, sizeof(double));
    for (int i = 0; i < n_ttft; i++) {
        schema20(spec, sizeof(spec), 5000u + (unsigned)i);
        t_a[i] = ttft_ms(NULL);
        t_s[i] = ttft_ms(spec);
    }
    {
        double s50 = moon_bench_percentile(t_s, (size_t)n_ttft, 50);
        double a50 = moon_bench_percentile(t_a, (size_t)n_ttft, 50);
        line("structured_ttft", "ttft_p50_ms_fresh_schema20", s50, "anchor_unconstrained_ms", a50,
             s50 - a50, n_ttft, 1);
    }
    free(ratios);
    free(c_ms);
    free(h_ms);
    free(t_s);
    free(t_a);
    moon_serve_client_destroy(g_client);
    moon_serve_cluster_stop(cluster);
    moon_runtime_shutdown(rt, 0);
    moon_runtime_wait(rt);
    moon_runtime_destroy(rt);
    return 0;
}
