/* tests/e2e/gateway/test_gw_embed.c - what a prefill gives back for every
 * prompt position, end to end on stories260K (issue 29): /v1/embeddings
 * (each vector equals the mean of the final normed hidden states computed
 * here by the reference engine, L2-normalised; batches, token ids, base64,
 * errors naming their field, the npm openai client) and echo with logprobs
 * on /v1/completions (each prompt position's logprob equals the one a
 * prefill of the prompt up to it gives here; the generated part as without
 * echo; streamed as whole). */
#include "moonlet/kv_cache.h"
#include "moonlet/model.h"

#include "gw_curl.h"
#include "gw_local.h"
#include "moon_test.h"
#include "moon_test_greedy.h"

#include <CUnit/CUnit.h>
#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MOON_TEST_MODEL
#error "MOON_TEST_MODEL must name the stories260K GGUF"
#endif
#ifndef MOON_TEST_NPM_SCRIPT
#error "MOON_TEST_NPM_SCRIPT must name embeddings_client.mjs"
#endif

#define PROMPT "Once upon a time, there was a little girl named Lily."

static unsigned             g_port;
static moon_serve_client_t *g_client; /* the cluster's thread client (gw_local) */
static moon_model_t        *g_model;
static moon_engine_t       *g_ref; /* the reference backend: the cluster runs the CPU one */
static moon_kv_cache_t     *g_kv;
static moon_model_config_t  g_cfg;

static cJSON *post(const char *path, const char *body, int want)
{
    return gw_post_json(g_port, path, body, want);
}

/* The prompt's ids as the gateway makes them (BOS first). n ids into ids. */
static uint32_t prompt_ids(const char *text, int32_t *ids, uint32_t cap)
{
    char         body[512];
    cJSON       *o, *t;
    uint32_t     n = 0;
    const cJSON *e;

    snprintf(body, sizeof(body), "{\"prompt\": \"%s\"}", text);
    o = post("/tokenize", body, 200);
    t = cJSON_GetObjectItem(o, "tokens");
    cJSON_ArrayForEach(e, t)
    {
        if (n < cap) {
            ids[n++] = (int32_t)e->valuedouble;
        }
    }
    cJSON_Delete(o);
    return n;
}

/* A fresh sequence prefilled with ids[0..n) by the reference engine: its
 * last row's logits (vocab) and/or every row's hidden state (n, dim). */
static void ref_prefill(const int32_t *ids, uint32_t n, float *logits, float *hidden)
{
    uint32_t seq;

    CU_ASSERT_EQUAL_FATAL(moon_kv_seq_create(g_kv, &seq), MOON_OK);
    if (hidden != NULL) {
        CU_ASSERT_EQUAL(moon_engine_prefill_rows(g_ref, g_kv, seq, ids, n, NULL, hidden, NULL),
                        MOON_OK);
    } else {
        CU_ASSERT_EQUAL(moon_engine_prefill(g_ref, g_kv, seq, ids, n, logits, NULL), MOON_OK);
    }
    moon_kv_seq_destroy(g_kv, seq);
}

/* The embedding of ids computed here: mean of the rows, L2-normalised. */
static void ref_embedding(const int32_t *ids, uint32_t n, float *out)
{
    float  *h   = malloc((size_t)n * g_cfg.dim * sizeof(float));
    double *sum = calloc(g_cfg.dim, sizeof(double)), norm = 0.0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    ref_prefill(ids, n, NULL, h);
    for (uint32_t j = 0; j < n; j++) {
        for (uint32_t i = 0; i < g_cfg.dim; i++) {
            sum[i] += h[(size_t)j * g_cfg.dim + i] / n;
        }
    }
    for (uint32_t i = 0; i < g_cfg.dim; i++) {
        norm += sum[i] * sum[i];
    }
    for (uint32_t i = 0; i < g_cfg.dim; i++) {
        out[i] = (float)(sum[i] / sqrt(norm));
    }
    free(h);
    free(sum);
}

/* data[i].embedding of an answer as floats (float or base64 encoding). */
static uint32_t vector_of(const cJSON *o, int i, float *out, uint32_t cap)
{
    const cJSON *d = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "data"), i);
    const cJSON *e = cJSON_GetObjectItem(d, "embedding"), *x;
    uint32_t     n = 0;

    CU_ASSERT_EQUAL(cJSON_GetObjectItem(d, "index")->valueint, i);
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(d, "object")), "embedding");
    if (cJSON_IsString(e)) { /* base64 of little-endian float32s */
        static const char abc[] =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const char   *s = e->valuestring;
        unsigned char bytes[4 * 4096];
        size_t        nb = 0, len = strlen(s);
        for (size_t k = 0; k + 3 < len + 0 && nb + 3 <= sizeof(bytes); k += 4) {
            uint32_t v   = 0;
            int      pad = 0;
            for (int j = 0; j < 4; j++) {
                const char *p = s[k + j] == '=' ? NULL : strchr(abc, s[k + j]);
                pad += p == NULL;
                v = v << 6 | (p != NULL ? (uint32_t)(p - abc) : 0);
            }
            bytes[nb++] = (unsigned char)(v >> 16);
            if (pad < 2) {
                bytes[nb++] = (unsigned char)(v >> 8);
            }
            if (pad < 1) {
                bytes[nb++] = (unsigned char)v;
            }
        }
        CU_ASSERT_EQUAL(nb % 4, 0);
        n = (uint32_t)MOON_MIN(nb / 4, cap);
        memcpy(out, bytes, (size_t)n * 4);
        return n;
    }
    cJSON_ArrayForEach(x, e)
    {
        if (n < cap) {
            out[n++] = (float)x->valuedouble;
        }
    }
    return n;
}

static double max_diff(const float *a, const float *b, uint32_t n)
{
    double worst = 0.0;

    for (uint32_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
    }
    return worst;
}

static void test_embedding_is_the_engines(void)
{
    int32_t  ids[256];
    uint32_t n = prompt_ids(PROMPT, ids, 256), dim;
    float    got[1024], again[1024], want[1024];
    double   norm = 0.0;
    cJSON   *o =
        post("/v1/embeddings", "{\"input\": \"" PROMPT "\", \"model\": \"stories260K\"}", 200);

    CU_ASSERT_FATAL(n > 2);
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(o, "object")), "list");
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(o, "model")), "stories260K");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "prompt_tokens")->valueint,
                    (int)n);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "total_tokens")->valueint,
                    (int)n);
    dim = vector_of(o, 0, got, 1024);
    cJSON_Delete(o);
    CU_ASSERT_EQUAL_FATAL(dim, g_cfg.dim);
    for (uint32_t i = 0; i < dim; i++) {
        norm += (double)got[i] * got[i];
    }
    CU_ASSERT(fabs(sqrt(norm) - 1.0) <= 1e-5);
    ref_embedding(ids, n, want);
    printf("\n  embedding vs the reference engine: max diff %.2e ", max_diff(got, want, dim));
    CU_ASSERT(max_diff(got, want, dim) <= 1e-4);
    /* the same input again: the same vector */
    o = post("/v1/embeddings", "{\"input\": \"" PROMPT "\"}", 200);
    CU_ASSERT_EQUAL(vector_of(o, 0, again, 1024), dim);
    CU_ASSERT(memcmp(got, again, dim * sizeof(float)) == 0);
    cJSON_Delete(o);
}

/* The C API's thread client: an embedding request gets one EMBEDDING event
 * (the reference engine's vector), then DONE with no completion token. */
static void test_embedding_thread_client(void)
{
    int32_t             ids[256];
    uint32_t            n = prompt_ids(PROMPT, ids, 256), n_emb = 0, n_done = 0;
    float               got[1024], want[1024];
    moon_serve_params_t p;
    moon_serve_event_t  ev;
    uint64_t            id = 0;

    CU_ASSERT_FATAL(n > 2 && g_cfg.dim <= 1024);
    moon_serve_params_default(&p);
    p.tokens     = ids; /* BOS included: no flag adds another */
    p.n_tokens   = n;
    p.max_tokens = 1;
    p.flags      = MOON_SERVE_F_EMBED;
    CU_ASSERT_EQUAL_FATAL(moon_serve_client_submit(g_client, &p, &id), MOON_OK);
    while (n_done == 0 && moon_serve_client_next(g_client, 30000000000ull, &ev) == MOON_OK) {
        if (ev.request_id == id && ev.kind == MOON_SERVE_EV_EMBEDDING) {
            CU_ASSERT_EQUAL(moon_serve_event_embedding(&ev, got, 1024), g_cfg.dim);
            CU_ASSERT_EQUAL(ev.n_prompt, n);
            n_emb++;
        } else if (ev.request_id == id && ev.kind == MOON_SERVE_EV_DONE) {
            CU_ASSERT_EQUAL(ev.status, MOON_OK);
            CU_ASSERT_EQUAL(ev.n_completion, 0);
            CU_ASSERT_EQUAL(moon_serve_event_embedding(&ev, got, 1024), 0); /* not one */
            n_done++;
        } else {
            CU_ASSERT_NOT_EQUAL(ev.kind, MOON_SERVE_EV_TOKEN); /* no token is generated */
        }
        moon_serve_event_fini(&ev);
    }
    CU_ASSERT_EQUAL_FATAL(n_done, 1);
    CU_ASSERT_EQUAL_FATAL(n_emb, 1);
    ref_embedding(ids, n, want);
    printf("\n  thread client's embedding vs the reference engine: max diff %.2e ",
           max_diff(got, want, g_cfg.dim));
    CU_ASSERT(max_diff(got, want, g_cfg.dim) <= 1e-4);
}

static void test_embedding_batch_ids_base64(void)
{
    static const char *texts[3] = {"Lily", "a big red dog", PROMPT};
    float              one[3][1024], v[1024];
    int32_t            ids[256];
    uint32_t           n = prompt_ids(texts[1], ids, 256);
    char               body[2048];
    size_t             off;
    cJSON             *o;

    for (int i = 0; i < 3; i++) {
        snprintf(body, sizeof(body), "{\"input\": [\"%s\"]}", texts[i]);
        o = post("/v1/embeddings", body, 200);
        CU_ASSERT_EQUAL(vector_of(o, 0, one[i], 1024), g_cfg.dim);
        cJSON_Delete(o);
    }
    CU_ASSERT(max_diff(one[0], one[1], g_cfg.dim) > 1e-3); /* inputs differ: vectors too */
    /* a batch answers in order, each as alone */
    snprintf(body, sizeof(body), "{\"input\": [\"%s\", \"%s\", \"%s\"]}", texts[0], texts[1],
             texts[2]);
    o = post("/v1/embeddings", body, 200);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(o, "data")), 3);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(vector_of(o, i, v, 1024), g_cfg.dim);
        CU_ASSERT(max_diff(v, one[i], g_cfg.dim) <= 1e-5);
    }
    cJSON_Delete(o);
    /* token ids (one array, and an array of arrays) equal the text */
    off = (size_t)snprintf(body, sizeof(body), "{\"input\": [");
    for (uint32_t i = 0; i < n; i++) {
        off += (size_t)snprintf(body + off, sizeof(body) - off, "%s%d", i ? "," : "", ids[i]);
    }
    snprintf(body + off, sizeof(body) - off, "]}");
    o = post("/v1/embeddings", body, 200);
    CU_ASSERT_EQUAL(vector_of(o, 0, v, 1024), g_cfg.dim);
    CU_ASSERT(max_diff(v, one[1], g_cfg.dim) <= 1e-5);
    cJSON_Delete(o);
    /* base64 decodes to the same floats */
    snprintf(body, sizeof(body), "{\"input\": \"%s\", \"encoding_format\": \"base64\"}", texts[2]);
    o = post("/v1/embeddings", body, 200);
    CU_ASSERT_EQUAL(vector_of(o, 0, v, 1024), g_cfg.dim);
    CU_ASSERT(memcmp(v, one[2], g_cfg.dim * sizeof(float)) == 0);
    cJSON_Delete(o);
    /* dimensions equal to the model's is accepted */
    snprintf(body, sizeof(body), "{\"input\": \"Lily\", \"dimensions\": %u}", g_cfg.dim);
    cJSON_Delete(post("/v1/embeddings", body, 200));
}

/* 400 naming param (and code, when given). */
static void refused(const char *body, const char *param, const char *code)
{
    cJSON       *o   = post("/v1/embeddings", body, 400);
    const cJSON *err = cJSON_GetObjectItem(o, "error");

    CU_ASSERT_PTR_NOT_NULL(err);
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(err, "param")), param);
    if (code != NULL) {
        CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(err, "code")), code);
    }
    cJSON_Delete(o);
}

static void test_embedding_errors(void)
{
    size_t cap = (size_t)g_cfg.seq_len * 4 + 64, off;
    char  *big = malloc(cap);

    refused("{\"input\": \"\"}", "input", NULL);
    refused("{\"input\": []}", "input", NULL);
    refused("{\"input\": [\"a\", \"\"]}", "input", NULL);
    refused("{\"model\": \"stories260K\"}", "input", NULL);
    refused("{\"input\": 3}", "input", NULL);
    refused("{\"input\": [1, -2]}", "input", NULL);
    refused("{\"input\": \"a\", \"dimensions\": 3}", "dimensions", NULL);
    refused("{\"input\": \"a\", \"encoding_format\": \"int8\"}", "encoding_format", NULL);
    refused("{\"input\": \"a\", \"temperature\": 1}", "temperature", NULL);
    /* as many ids as the context: over it */
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    off = (size_t)snprintf(big, cap, "{\"input\": [");
    for (uint32_t i = 0; i < g_cfg.seq_len; i++) {
        off += (size_t)snprintf(big + off, cap - off, "%s5", i ? "," : "");
    }
    snprintf(big + off, cap - off, "]}");
    refused(big, "input", "context_length_exceeded");
    free(big);
    cJSON_Delete(post("/v1/embeddings", "{\"input\": \"a\", \"model\": \"gpt-4\"}", 404));
}

static void test_embedding_npm(void)
{
    gw_run_npm_openai(MOON_TEST_NPM_SCRIPT, "embeddings.mjs", g_port);
}

/* ---- echo with logprobs --------------------------------------------------------- */

static double num(const cJSON *a, int i)
{
    return cJSON_GetArrayItem(a, i)->valuedouble;
}

static void test_echo_prompt_logprobs(void)
{
    int32_t      ids[256];
    uint32_t     n     = prompt_ids(PROMPT, ids, 256);
    float       *lg    = malloc(g_cfg.vocab_size * sizeof(float));
    cJSON       *o     = post("/v1/completions",
                              "{\"prompt\": \"" PROMPT "\", \"max_tokens\": 6, \"temperature\": 0, "
                                        "\"echo\": true, \"logprobs\": 3}",
                              200);
    cJSON       *plain = post("/v1/completions",
                              "{\"prompt\": \"" PROMPT "\", \"max_tokens\": 6, \"temperature\": 0, "
                                    "\"logprobs\": 3}",
                              200);
    const cJSON *ch    = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    const cJSON *pch   = cJSON_GetArrayItem(cJSON_GetObjectItem(plain, "choices"), 0);
    const cJSON *lp    = cJSON_GetObjectItem(ch, "logprobs");
    const cJSON *plp   = cJSON_GetObjectItem(pch, "logprobs");
    const cJSON *tl    = cJSON_GetObjectItem(lp, "token_logprobs");
    const cJSON *ptl   = cJSON_GetObjectItem(plp, "token_logprobs");
    const cJSON *top   = cJSON_GetObjectItem(lp, "top_logprobs");
    const char  *text  = cJSON_GetStringValue(cJSON_GetObjectItem(ch, "text"));
    int          n_gen = cJSON_GetArraySize(ptl);
    double       worst = 0.0, sum = 0.0;

    CU_ASSERT_FATAL(n > 2 && lg != NULL && text != NULL && n_gen > 0);
    /* the text: the prompt, then what the request without echo generated */
    CU_ASSERT(strncmp(text, PROMPT, strlen(PROMPT)) == 0);
    CU_ASSERT_STRING_EQUAL(text + strlen(PROMPT),
                           cJSON_GetStringValue(cJSON_GetObjectItem(pch, "text")));
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(tl), (int)n + n_gen);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "tokens")), (int)n + n_gen);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "text_offset")), (int)n + n_gen);
    /* the first prompt token has none (null, as OpenAI's) */
    CU_ASSERT(cJSON_IsNull(cJSON_GetArrayItem(tl, 0)));
    CU_ASSERT(cJSON_IsNull(cJSON_GetArrayItem(top, 0)));
    /* each prompt position's: the engine's logits after the prompt up to it */
    for (uint32_t i = 1; i < n; i++) {
        float   want, top_lp[1];
        int32_t top_id[1];
        ref_prefill(ids, i, lg, NULL);
        moon_logprobs(lg, g_cfg.vocab_size, ids[i], 1, &want, top_id, top_lp);
        worst = fmax(worst, fabs(num(tl, (int)i) - want));
        CU_ASSERT(num(tl, (int)i) <= 0.0);
        CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetArrayItem(top, (int)i)), 3);
        sum += num(tl, (int)i);
    }
    printf("\n  %u prompt logprobs vs the reference engine: max diff %.2e, sum %.3f ", n - 1, worst,
           sum);
    CU_ASSERT(worst <= 1e-4);
    CU_ASSERT(sum <= 0.0);
    /* the generated part as without echo */
    for (int i = 0; i < n_gen; i++) {
        CU_ASSERT(fabs(num(tl, (int)n + i) - num(ptl, i)) <= 1e-4);
    }
    cJSON_Delete(o);
    cJSON_Delete(plain);
    free(lg);
}

/* The stream's chunks put together: the whole answer's text and logprobs. */
static void test_echo_stream_equals_whole(void)
{
    static const char req[] = "{\"prompt\": \"" PROMPT "\", \"max_tokens\": 6, \"temperature\": 0, "
                              "\"echo\": true, \"logprobs\": 2%s}";
    char              body[512], text[2048] = "";
    gw_http_t         r;
    cJSON            *whole, *first = NULL;
    cJSON            *tl = cJSON_CreateArray(), *tk = cJSON_CreateArray();
    const char       *p;
    int               chunks = 0;

    snprintf(body, sizeof(body), req, "");
    whole = post("/v1/completions", body, 200);
    snprintf(body, sizeof(body), req, ", \"stream\": true");
    CU_ASSERT_EQUAL_FATAL(gw_post(&r, g_port, "/v1/completions", body, NULL), 200);
    for (p = strstr(r.body, "data: {"); p != NULL; p = strstr(p + 1, "data: {")) {
        const char  *end = strstr(p, "\n\n");
        char        *one = strndup(p + 6, end ? (size_t)(end - p - 6) : strlen(p + 6));
        cJSON       *c   = cJSON_Parse(one);
        const cJSON *ch  = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "choices"), 0);
        const cJSON *lp  = cJSON_GetObjectItem(ch, "logprobs"), *e;

        strncat(text, cJSON_GetStringValue(cJSON_GetObjectItem(ch, "text")),
                sizeof(text) - strlen(text) - 1);
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(lp, "token_logprobs"))
        {
            cJSON_AddItemToArray(tl, cJSON_Duplicate(e, 0));
        }
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(lp, "tokens"))
        {
            cJSON_AddItemToArray(tk, cJSON_Duplicate(e, 0));
        }
        if (chunks++ == 0) {
            first = cJSON_Duplicate(ch, 1);
        }
        cJSON_Delete(c);
        free(one);
    }
    gw_http_fini(&r);
    {
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(whole, "choices"), 0);
        const cJSON *lp = cJSON_GetObjectItem(ch, "logprobs");
        char        *a  = cJSON_PrintUnformatted(cJSON_GetObjectItem(lp, "token_logprobs"));
        char        *b  = cJSON_PrintUnformatted(tl);
        char        *c  = cJSON_PrintUnformatted(cJSON_GetObjectItem(lp, "tokens"));
        char        *d  = cJSON_PrintUnformatted(tk);

        CU_ASSERT_STRING_EQUAL(text, cJSON_GetStringValue(cJSON_GetObjectItem(ch, "text")));
        CU_ASSERT_STRING_EQUAL(a, b);
        CU_ASSERT_STRING_EQUAL(c, d);
        free(a);
        free(b);
        free(c);
        free(d);
    }
    /* the first chunk is the prompt, with its logprobs (vLLM's) */
    CU_ASSERT_PTR_NOT_NULL_FATAL(first);
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(first, "text")), PROMPT);
    CU_ASSERT(cJSON_IsNull(cJSON_GetArrayItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(first, "logprobs"), "token_logprobs"), 0)));
    cJSON_Delete(first);
    cJSON_Delete(whole);
    cJSON_Delete(tl);
    cJSON_Delete(tk);
}

static int setup(void)
{
    moon_engine_config_t ecfg = {.kind = MOON_BACKEND_REF, .max_chunk = 2048};
    moon_kv_config_t     kcfg;

    if (moon_model_load(MOON_TEST_MODEL, &g_model) != MOON_OK) {
        return 1;
    }
    g_cfg          = *moon_model_config(g_model);
    kcfg           = moon_model_kv_config(&g_cfg, 16, (g_cfg.seq_len + 15) / 16 + 1, 1);
    kcfg.elem_type = moon_test_cluster_kv_type(); /* the served logits' cache */
    if (moon_engine_create(g_model, &ecfg, &g_ref) != MOON_OK ||
        moon_kv_cache_create(&kcfg, &g_kv) != MOON_OK) {
        return 1;
    }
    return 0;
}

int main(void)
{
    gw_local_t l;
    int        rc = 1;

    gw_tmp_name("gw_embed");
    if (setup() != 0) {
        fprintf(stderr, "test_gw_embed: cannot load %s\n", MOON_TEST_MODEL);
        return 1;
    }
    if (gw_local_start(&l, "test_gw_embed", MOON_TEST_MODEL)) {
        g_port   = l.port;
        g_client = l.client;
        rc       = MOON_TEST_RUN("gw_embed", NULL, NULL, test_embedding_is_the_engines,
                                 test_embedding_thread_client, test_embedding_batch_ids_base64,
                                 test_embedding_errors, test_embedding_npm, test_echo_prompt_logprobs,
                                 test_echo_stream_equals_whole);
    }
    gw_local_stop(&l);
    moon_kv_cache_destroy(g_kv);
    moon_engine_destroy(g_ref);
    moon_model_destroy(g_model);
    return rc;
}
