/* tests/unit/gateway/test_gateway.c - the gateway end to end: a real
 * in-process cluster (conductor, store, prefill, decode on stories260K) and
 * gateways on free ports, driven with curl: every route and error code,
 * streamed completions checked byte for byte against the format, the same
 * tokens streamed or not, cancel on disconnect with no leaked KV blocks, 64
 * concurrent streaming clients, and the official `openai` clients, npm and
 * Python (each skipped when its tool or registry cannot be reached). A fake conductor answers 429s
 * and goes away for the 503s. In one process, and under mpirun -np 4 (the
 * store, prefill and decode on ranks of their own: tokens cross ranks). */
#include "gateway.h"
#include "gw_curl.h"
#include "gw_format.h"
#include "moon_test.h"
#include "moonlet/alloc.h"
#include "moonlet/dist.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#ifndef MOON_TEST_MODEL
#error "MOON_TEST_MODEL must name stories260K.gguf"
#endif
#ifndef MOON_TEST_PY_SCRIPT
#error "MOON_TEST_PY_SCRIPT must name the python client script"
#endif
#ifndef MOON_TEST_NPM_SCRIPT
#error "MOON_TEST_NPM_SCRIPT must name the npm client script"
#endif

#define WAIT_NS 60000000000ull

static moon_dist_t          *g_dist;
static moon_runtime_t       *g_rt;
static moon_serve_cluster_t *g_cluster;
static moon_serve_client_t  *g_client;
static moon_addr_t           g_fake;
static atomic_int            g_fake_decode_up = 1; /* what the fake conductor reports */
static unsigned              g_port, g_port_key, g_port_fake;
static uint64_t              g_job_start;      /* g_port's job start (moon_now) */
static _Atomic uint64_t      g_first_token_ns; /* g_port's first token served */

/* ---- a fake conductor: rejects everything, reports every role up ---------- */
static moon_status_t fake_on_submit(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    const moon_serve_submit_t *s = (const moon_serve_submit_t *)msg;
    moon_serve_done_t         *d = moon_msg_new(MOON_MSG_SERVE_DONE, 64);

    if (d == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    d->request_id = s->request_id;
    d->finish     = s->max_tokens == 7 ? MOON_FINISH_ERROR : MOON_FINISH_REJECTED;
    d->status     = s->max_tokens == 7 ? MOON_ERR_NO_RESOURCE : MOON_OK;
    moon_msg_set_str(d, &d->text, "");
    moon_msg_set_str(d, &d->message, "predicted ttft over the slo");
    return moon_tell(self, s->reply_to, &d->hdr);
}

static moon_status_t fake_on_stats(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    moon_serve_stats_reply_t *r = moon_msg_new(MOON_MSG_SERVE_STATS_REPLY, 64);

    if (r == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    r->req          = ((const moon_serve_stats_req_t *)msg)->req;
    r->n_prefill_up = 1;
    r->n_decode_up  = (uint32_t)atomic_load(&g_fake_decode_up);
    return moon_tell(self, msg->src, &r->hdr);
}

static const moon_actor_ops_t fake_ops = {
    .name   = "fake_conductor",
    .on_msg = {[MOON_MSG_SERVE_SUBMIT] = fake_on_submit, [MOON_MSG_SERVE_STATS] = fake_on_stats},
};

/* ---- helpers ---------------------------------------------------------------- */

static void nap_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static moon_status_t spawn_gateway(moon_addr_t conductor, const char *key, uint64_t body_limit,
                                   unsigned *port_p)
{
    moon_gateway_args_t args;
    uint16_t            port = 0;
    moon_addr_t         addr;
    moon_status_t       status;

    memset(&args, 0, sizeof(args));
    moon_gateway_config_default(&args.config);
    args.config.port              = 0;
    args.config.api_key           = key;
    args.config.body_limit_bytes  = body_limit;
    args.config.stats_interval_ms = 50;
    args.conductor                = conductor;
    args.dist                     = moon_dist_size(g_dist) > 1 ? g_dist : NULL;
    args.model_path               = MOON_TEST_MODEL;
    args.port_p                   = &port;
    if (key == NULL) { /* g_port's: a job's start-up figure */
        g_job_start           = moon_now(g_rt);
        args.job_start_ns     = g_job_start;
        args.first_token_ns_p = &g_first_token_ns;
    }
    status  = moon_spawn(g_rt, &moon_gateway_ops, &args, NULL, &addr);
    *port_p = port;
    return status;
}

static cJSON *json_of(const gw_http_t *r)
{
    cJSON *j = cJSON_ParseWithLength(r->body, r->len);

    if (j == NULL) {
        fprintf(stderr, "not JSON: %s\n", r->body);
    }
    return j;
}

/* An error answer: status code, and the OpenAI error object's fields. */
static void expect_error(const gw_http_t *r, int code, const char *type)
{
    cJSON *j = json_of(r);
    cJSON *e = cJSON_GetObjectItem(j, "error");

    if (r->code != code) {
        fprintf(stderr, "want %d, got %d: %s\n", code, r->code, r->body);
    }
    CU_ASSERT_EQUAL(r->code, code);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_TRUE(cJSON_IsString(cJSON_GetObjectItem(e, "message")));
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(e, "type")), type);
    CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItem(e, "param"));
    CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItem(e, "code"));
    cJSON_Delete(j);
}

static void post_expect(unsigned port, const char *path, const char *json, int code,
                        const char *type)
{
    gw_http_t r;

    gw_post(&r, port, path, json, NULL);
    expect_error(&r, code, type);
    gw_http_fini(&r);
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_routes(void)
{
    gw_http_t r;
    cJSON    *j;

    CU_ASSERT_EQUAL(gw_curl(&r, g_port, "/health", NULL), 200);
    gw_http_fini(&r);
    CU_ASSERT_EQUAL(gw_curl(&r, g_port, "/v1/models", NULL), 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.headers, "application/json"));
    j = json_of(&r);
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(j, "object")), "list");
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(
                               cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0), "id")),
                           "stories260K");
    cJSON_Delete(j);
    gw_http_fini(&r);
    CU_ASSERT_EQUAL(gw_curl(&r, g_port, "/v1/models/stories260K", NULL), 200);
    gw_http_fini(&r);
    gw_curl(&r, g_port, "/v1/models/llama", NULL);
    expect_error(&r, 404, "invalid_request_error");
    gw_http_fini(&r);
    gw_curl(&r, g_port, "/v2/nothing", NULL);
    expect_error(&r, 404, "invalid_request_error");
    gw_http_fini(&r);
    gw_curl(&r, g_port, "/v1/completions", NULL); /* GET */
    expect_error(&r, 405, "invalid_request_error");
    CU_ASSERT_PTR_NOT_NULL(strstr(r.headers, "Allow: POST"));
    gw_http_fini(&r);
    CU_ASSERT_EQUAL(gw_curl(&r, g_port, "/metrics", NULL), 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.headers, "text/plain; version=0.0.4"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "# TYPE moonlet:time_to_first_token_seconds histogram"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(r.body, "moonlet:instances_alive{model_name=\"stories260K\",role=\"decode\"} 1"));
    gw_http_fini(&r);
    /* the store shard's DRAM tier becomes known (16 MiB of blocks; polled every 50 ms) */
    for (int i = 0; i < 200; i++) {
        int zero;
        gw_curl(&r, g_port, "/metrics", NULL);
        zero = strstr(r.body, "moonlet:kv_blocks_capacity{model_name=\"stories260K\","
                              "tier=\"store_dram\"} 0\n") != NULL;
        gw_http_fini(&r);
        if (!zero) {
            break;
        }
        nap_ms(50);
    }
    gw_curl(&r, g_port, "/metrics", NULL);
    CU_ASSERT_PTR_NULL(strstr(r.body, "moonlet:kv_blocks_capacity{model_name=\"stories260K\","
                                      "tier=\"store_dram\"} 0\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "moonlet:store_operations_total{model_name="
                                          "\"stories260K\",op=\"put\"}"));
    gw_http_fini(&r);
}

static void test_errors(void)
{
    char     *big;
    char      args[600];
    gw_http_t r;

    post_expect(g_port, "/v1/completions", "{\"prompt\": \"x\"", 400, "invalid_request_error");
    post_expect(g_port, "/v1/completions", "{\"max_tokens\": 3}", 400, "invalid_request_error");
    post_expect(g_port, "/v1/completions", "{\"prompt\": 3}", 400, "invalid_request_error");
    post_expect(g_port, "/v1/completions", "{\"prompt\": \"x\", \"n\": 17}", 400,
                "invalid_request_error");
    post_expect(g_port, "/v1/completions", "{\"prompt\": \"x\", \"model\": \"gpt-4\"}", 404,
                "invalid_request_error");
    post_expect(g_port, "/v1/chat/completions", "{\"messages\": []}", 400, "invalid_request_error");
    /* a prompt over the 512-token context */
    big = malloc(1 << 20);
    strcpy(big, "{\"prompt\": \"");
    for (int i = 0; i < 400; i++) {
        strcat(big, "Once upon ");
    }
    strcat(big, "\"}");
    post_expect(g_port, "/v1/completions", big, 400, "invalid_request_error");
    /* over the body limit (64 KiB here): declared, and sent chunked */
    memset(big, ' ', 100000);
    memcpy(big, "{\"prompt\": \"x\"", 14);
    big[100000 - 1] = '}';
    big[100000]     = '\0';
    post_expect(g_port, "/v1/completions", big, 413, "invalid_request_error");
    snprintf(args, sizeof(args),
             "-X POST -H 'Transfer-Encoding: chunked' -H 'Content-Type: application/json' "
             "--data-binary '@%s'",
             gw_tmp_file("big.json", big, strlen(big)));
    gw_curl(&r, g_port, "/v1/completions", args);
    expect_error(&r, 413, "invalid_request_error");
    gw_http_fini(&r);
    free(big);
}

static void test_api_key(void)
{
    gw_http_t r;
    cJSON    *j;

    gw_curl(&r, g_port_key, "/v1/models", NULL);
    expect_error(&r, 401, "invalid_request_error");
    j = json_of(&r);
    CU_ASSERT_STRING_EQUAL(
        cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "code")),
        "invalid_api_key");
    cJSON_Delete(j);
    gw_http_fini(&r);
    gw_curl(&r, g_port_key, "/v1/models", "-H 'Authorization: Bearer wrong'");
    expect_error(&r, 401, "invalid_request_error");
    gw_http_fini(&r);
    CU_ASSERT_EQUAL(gw_curl(&r, g_port_key, "/v1/models", "-H 'Authorization: Bearer sekret'"),
                    200);
    gw_http_fini(&r);
    /* health and metrics stay open (probes and scrapers carry no key) */
    CU_ASSERT_EQUAL(gw_curl(&r, g_port_key, "/health", NULL), 200);
    gw_http_fini(&r);
    gw_post(&r, g_port_key, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2}",
            "-H 'Authorization: Bearer sekret'");
    CU_ASSERT_EQUAL(r.code, 200);
    gw_http_fini(&r);
}

/* Splits an SSE body into its events' JSON, checks each event byte for byte
 * against the formatter (OpenAI's format, see test_gw_format) with the id and
 * created of the first, and returns the concatenated text. */
static char *check_stream(const char *body, int chat, int include_usage, const char *finish,
                          uint32_t *n_completion_p)
{
    moon_gw_resp_meta_t meta = {
        .model = "stories260K", .chat = chat, .include_usage = include_usage};
    static char id[64], fp[64];
    const char *p    = body;
    char       *text = calloc(1, 65536);
    int         n = 0, saw_done = 0, saw_finish = 0, saw_usage = 0;
    size_t      len = 0;

    while (*p) {
        const char *end = strstr(p, "\n\n");
        cJSON      *j, *c, *d;
        char       *want  = NULL;
        const char *piece = NULL, *fin = NULL;

        CU_ASSERT_PTR_NOT_NULL_FATAL(end);
        CU_ASSERT_EQUAL_FATAL(strncmp(p, "data: ", 6), 0);
        if (strncmp(p, "data: [DONE]\n\n", 14) == 0) {
            CU_ASSERT_EQUAL(p[14], '\0'); /* the last event */
            saw_done = 1;
            break;
        }
        j = cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6));
        CU_ASSERT_PTR_NOT_NULL_FATAL(j);
        if (n++ == 0) {
            snprintf(id, sizeof(id), "%s", cJSON_GetStringValue(cJSON_GetObjectItem(j, "id")));
            snprintf(fp, sizeof(fp), "%s",
                     cJSON_GetStringValue(cJSON_GetObjectItem(j, "system_fingerprint")));
            meta.id          = id;
            meta.fingerprint = fp;
            meta.created     = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "created"));
            CU_ASSERT_EQUAL(strncmp(id, chat ? "chatcmpl-" : "cmpl-", chat ? 9 : 5), 0);
        }
        c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        if (c == NULL) {              /* the usage chunk */
            moon_gw_usage_t u  = {0}; /* no moonlet_details: not asked for */
            cJSON          *us = cJSON_GetObjectItem(j, "usage");
            u.prompt_tokens =
                (uint32_t)cJSON_GetNumberValue(cJSON_GetObjectItem(us, "prompt_tokens"));
            u.completion_tokens =
                (uint32_t)cJSON_GetNumberValue(cJSON_GetObjectItem(us, "completion_tokens"));
            u.cached_tokens  = (uint32_t)cJSON_GetNumberValue(cJSON_GetObjectItem(
                 cJSON_GetObjectItem(us, "prompt_tokens_details"), "cached_tokens"));
            u.weight_version = (uint64_t)cJSON_GetNumberValue(
                cJSON_GetObjectItem(cJSON_GetObjectItem(us, "moonlet"), "weight_version"));
            *n_completion_p = u.completion_tokens;
            want            = moon_gw_format_usage_chunk(&meta, &u, &len);
            saw_usage       = 1;
        } else {
            fin = cJSON_GetStringValue(cJSON_GetObjectItem(c, "finish_reason"));
            if (chat) {
                d     = cJSON_GetObjectItem(c, "delta");
                piece = cJSON_GetStringValue(cJSON_GetObjectItem(d, "content"));
                if (cJSON_GetObjectItem(d, "role") != NULL) {
                    CU_ASSERT_EQUAL(n, 1); /* the role comes first, once */
                    want  = moon_gw_format_chunk(&meta, 1, NULL, NULL, &len);
                    piece = NULL;
                } else {
                    want = moon_gw_format_chunk(&meta, 0, piece, fin, &len);
                }
            } else {
                piece = cJSON_GetStringValue(cJSON_GetObjectItem(c, "text"));
                want  = moon_gw_format_chunk(&meta, 0, piece, fin, &len);
            }
            if (piece != NULL) {
                strcat(text, piece);
            }
            if (fin != NULL) {
                CU_ASSERT_STRING_EQUAL(fin, finish);
                saw_finish = 1;
            }
        }
        CU_ASSERT_PTR_NOT_NULL_FATAL(want);
        if (strncmp(want, p, len) != 0 || p + len != end + 2) {
            fprintf(stderr, "event differs:\n got  %.*s\n want %s", (int)(end + 2 - p), p, want);
            CU_FAIL("an SSE event is not in OpenAI's format");
        }
        moon_free(want);
        cJSON_Delete(j);
        p = end + 2;
    }
    CU_ASSERT_TRUE(saw_done);
    CU_ASSERT_TRUE(saw_finish);
    CU_ASSERT_EQUAL(saw_usage, include_usage);
    return text;
}

static void test_completion_stream_and_not(void)
{
    const char *req = "{\"model\":\"stories260K\",\"prompt\":\"Once upon a time\","
                      "\"max_tokens\":24,\"temperature\":0%s}";
    char        body[512];
    gw_http_t   r;
    cJSON      *j, *c, *u;
    char       *plain, *streamed;
    uint32_t    n_stream = 0;

    snprintf(body, sizeof(body), req, "");
    CU_ASSERT_EQUAL_FATAL(gw_post(&r, g_port, "/v1/completions", body, NULL), 200);
    j = json_of(&r);
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(j, "object")),
                           "text_completion");
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    u = cJSON_GetObjectItem(j, "usage");
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(c, "finish_reason")), "length");
    CU_ASSERT_EQUAL(cJSON_GetNumberValue(cJSON_GetObjectItem(u, "completion_tokens")), 24);
    CU_ASSERT(cJSON_GetNumberValue(cJSON_GetObjectItem(u, "prompt_tokens")) >= 5);
    plain = strdup(cJSON_GetStringValue(cJSON_GetObjectItem(c, "text")));
    CU_ASSERT(strlen(plain) > 10);
    cJSON_Delete(j);
    gw_http_fini(&r);

    snprintf(body, sizeof(body), req,
             ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    CU_ASSERT_EQUAL_FATAL(gw_post(&r, g_port, "/v1/completions", body, "-N"), 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.headers, "text/event-stream"));
    streamed = check_stream(r.body, 0, 1, "length", &n_stream);
    CU_ASSERT_STRING_EQUAL(streamed, plain); /* greedy: the same tokens */
    CU_ASSERT_EQUAL(n_stream, 24);
    free(streamed);
    gw_http_fini(&r);
    free(plain);
}

/* What a prefill gives back for every prompt position (under mpirun the
 * prefill and the decode are ranks of their own): an embedding, alone and in
 * a batch, and echo with logprobs, whole and streamed (the prompt's
 * logprobs pass through the decode, ahead of the first token). */
static void test_prompt_rows(void)
{
    const char  *prompt = "Once upon a time";
    char         body[512];
    gw_http_t    r;
    cJSON       *j, *c, *lp, *tl, *d;
    double       norm = 0.0;
    const cJSON *x;
    int          n;

    CU_ASSERT_EQUAL_FATAL(
        gw_post(&r, g_port, "/v1/embeddings", "{\"input\":[\"Once upon a time\",\"Lily\"]}", NULL),
        200);
    j = json_of(&r);
    d = cJSON_GetObjectItem(j, "data");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(d), 2);
    cJSON_ArrayForEach(x, cJSON_GetObjectItem(cJSON_GetArrayItem(d, 0), "embedding"))
    {
        norm += x->valuedouble * x->valuedouble;
    }
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(d, 0), "embedding")),
                    64);
    CU_ASSERT(fabs(norm - 1.0) < 1e-5);
    cJSON_Delete(j);
    gw_http_fini(&r);

    snprintf(body, sizeof(body),
             "{\"prompt\":\"%s\",\"max_tokens\":4,\"temperature\":0,\"echo\":true,"
             "\"logprobs\":1}",
             prompt);
    CU_ASSERT_EQUAL_FATAL(gw_post(&r, g_port, "/v1/completions", body, NULL), 200);
    j  = json_of(&r);
    c  = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    lp = cJSON_GetObjectItem(c, "logprobs");
    tl = cJSON_GetObjectItem(lp, "token_logprobs");
    n  = (int)cJSON_GetNumberValue(
         cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens"));
    CU_ASSERT(
        strncmp(cJSON_GetStringValue(cJSON_GetObjectItem(c, "text")), prompt, strlen(prompt)) == 0);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(tl), n + 4);
    CU_ASSERT(cJSON_IsNull(cJSON_GetArrayItem(tl, 0)));
    for (int i = 1; i < n + 4; i++) {
        CU_ASSERT(cJSON_GetArrayItem(tl, i)->valuedouble <= 0.0);
    }
    cJSON_Delete(j);
    gw_http_fini(&r);

    snprintf(body, sizeof(body),
             "{\"prompt\":\"%s\",\"max_tokens\":4,\"temperature\":0,\"echo\":true,"
             "\"logprobs\":1,\"stream\":true}",
             prompt);
    CU_ASSERT_EQUAL_FATAL(gw_post(&r, g_port, "/v1/completions", body, "-N"), 200);
    /* the first chunk: the prompt with its logprobs, the first one null */
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "\"text\":\"Once upon a time\",\"logprobs\":{"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "\"token_logprobs\":[null,"));
    gw_http_fini(&r);
}

static void test_chat(void)
{
    const char *req = "{\"messages\":[{\"role\":\"system\",\"content\":\"Tell a story.\"},"
                      "{\"role\":\"user\",\"content\":\"Lily\"}],\"max_completion_tokens\":12,"
                      "\"temperature\":0,\"seed\":1%s}";
    char        body[512];
    gw_http_t   r;
    cJSON      *j, *m;
    char       *plain, *streamed;
    uint32_t    n = 0;

    snprintf(body, sizeof(body), req, "");
    CU_ASSERT_EQUAL_FATAL(gw_post(&r, g_port, "/v1/chat/completions", body, NULL), 200);
    j = json_of(&r);
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(j, "object")),
                           "chat.completion");
    m = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "message");
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(m, "role")), "assistant");
    plain = strdup(cJSON_GetStringValue(cJSON_GetObjectItem(m, "content")));
    cJSON_Delete(j);
    gw_http_fini(&r);
    snprintf(body, sizeof(body), req, ",\"stream\":true");
    CU_ASSERT_EQUAL_FATAL(gw_post(&r, g_port, "/v1/chat/completions", body, "-N"), 200);
    streamed = check_stream(r.body, 1, 0, "length", &n);
    CU_ASSERT_STRING_EQUAL(streamed, plain);
    free(streamed);
    free(plain);
    gw_http_fini(&r);
}

/* The cluster holds no request and no KV block (load reports may lag, and
 * a cancel crosses the conductor to both instances: under a sanitizer
 * that can take a while). */
static void expect_cluster_idle(void)
{
    moon_serve_stats_t s;
    double             deadline = moon_test_now_s() + 120;

    memset(&s, 0, sizeof(s));
    while (moon_test_now_s() < deadline) {
        CU_ASSERT_EQUAL_FATAL(moon_serve_client_stats(g_client, WAIT_NS, &s), MOON_OK);
        if (s.in_flight == 0 && s.blocks_used_prefill == 0 && s.blocks_used_decode == 0) {
            break;
        }
        nap_ms(20);
    }
    CU_ASSERT_EQUAL(s.in_flight, 0);
    CU_ASSERT_EQUAL(s.blocks_used_prefill, 0);
    CU_ASSERT_EQUAL(s.blocks_used_decode, 0);
}

static uint64_t n_cancelled(void)
{
    moon_serve_stats_t s;

    CU_ASSERT_EQUAL_FATAL(moon_serve_client_stats(g_client, WAIT_NS, &s), MOON_OK);
    return s.n_finished[MOON_FINISH_CANCELLED];
}

/* Runs n clients at once (the shell line client, %u the port) that hang
 * up early; their requests are cancelled (some may finish first) and the
 * cluster holds no block afterwards. */
static void cancel_clients(const char *client, int n, const char *what)
{
    uint64_t before = n_cancelled();
    char     line[1024], cmd[2048];
    int      ret;

    snprintf(line, sizeof(line), client, g_port);
    snprintf(cmd, sizeof(cmd), "for i in $(seq %d); do %s & done; wait", n, line);
    ret = system(cmd);
    CU_ASSERT_EQUAL(ret, 0);
    expect_cluster_idle();
    CU_ASSERT(n_cancelled() > before);
    fprintf(stderr, "cancelled on disconnect (%s): %llu of %d\n", what,
            (unsigned long long)(n_cancelled() - before), n);
}

/* 24 long streams at once (the decode batch keeps them all running); each
 * client leaves after ~300 bytes (head exits, curl dies of SIGPIPE). */
static void test_cancel_on_disconnect(void)
{
    cancel_clients("(curl -sN -X POST -H 'Content-Type: application/json' "
                   "-d '{\"prompt\":\"Once upon a time\",\"max_tokens\":480,\"ignore_eos\":true,"
                   "\"stream\":true}' http://127.0.0.1:%u/v1/completions | head -c 300 >/dev/null)",
                   24, "streamed");
}

/* Clients waiting for a whole (non-streamed) answer give up after 50 ms,
 * long before 32 answers of 500 tokens are computed (the hang-up watcher
 * resumes the parked connection, which then closes). Some curls do not even
 * connect in 50 ms: not all cancel. */
static void test_cancel_on_disconnect_not_streamed(void)
{
    cancel_clients("curl -s --max-time 0.05 -X POST -H 'Content-Type: application/json' "
                   "-d '{\"prompt\":\"Once upon a time\",\"max_tokens\":500,\"ignore_eos\":true}' "
                   "-o /dev/null http://127.0.0.1:%u/v1/completions",
                   32, "not streamed");
}

/* The value of the first /metrics line of g_port that starts with prefix (0 if none). */
static double metric(const char *prefix)
{
    gw_http_t   r;
    double      v = 0;
    const char *p;

    CU_ASSERT_EQUAL(gw_curl(&r, g_port, "/metrics", NULL), 200);
    p = r.body != NULL ? strstr(r.body, prefix) : NULL;
    if (p != NULL && (p = strchr(p, ' ')) != NULL) {
        v = strtod(p, NULL);
    }
    gw_http_fini(&r);
    return v;
}

#define JOB_FIRST_TOKEN "moonlet:job_start_to_first_token_seconds{"

/* A gateway given a job's start reports the first token it served, once:
 * the gauge is the time from the start to that token (the moment it hands
 * its caller); one without a start has no such gauge. Runs after g_port
 * served completions, and g_port_key served none. */
static void test_job_first_token(void)
{
    uint64_t  first = atomic_load(&g_first_token_ns);
    double    v     = metric(JOB_FIRST_TOKEN);
    gw_http_t r;

    CU_ASSERT_TRUE_FATAL(first > g_job_start);
    CU_ASSERT_DOUBLE_EQUAL(v, (double)(first - g_job_start) * 1e-9, 1e-6);
    CU_ASSERT_EQUAL_FATAL(
        gw_post(&r, g_port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2}", NULL),
        200);
    gw_http_fini(&r);
    CU_ASSERT_EQUAL(atomic_load(&g_first_token_ns), first); /* the first only */
    CU_ASSERT_DOUBLE_EQUAL(metric(JOB_FIRST_TOKEN), v, 1e-9);
    CU_ASSERT_EQUAL(gw_curl(&r, g_port_key, "/metrics", NULL), 200);
    CU_ASSERT_PTR_NULL(r.body != NULL ? strstr(r.body, "job_start_to_first_token") : "no body");
    gw_http_fini(&r);
}

#define CANCELLED_LINE                                                                             \
    "moonlet:request_success_total{model_name=\"stories260K\",finished_reason=\"cancelled\"}"

/* Clients that hang up while their requests still wait in the cluster's
 * queues (the cluster saturated by long requests of the client API): both
 * requests (streamed and not) end cancelled without a single token made,
 * which only a hang-up noticed before the first token gives, and the
 * cluster holds no block afterwards. */
static void test_cancel_while_queued(void)
{
    enum { N_LONG = 32 };
    char                prompt[2048] = "", own[N_LONG][2100];
    moon_serve_params_t p;
    moon_serve_stats_t  s;
    uint64_t            ids[N_LONG];
    double              k0 = metric(CANCELLED_LINE), g0, end;
    char                cmd[2048];
    int                 ret, n_sub = 0;

    g0 = metric("moonlet:generation_tokens_total{");
    while (strlen(prompt) < 300) {
        strcat(prompt, "Once upon a time there was a girl. ");
    }
    moon_serve_params_default(&p);
    p.prompt     = prompt;
    p.max_tokens = 300;
    p.flags |= MOON_SERVE_F_IGNORE_EOS;
    for (int i = 0; i < N_LONG; i++) {
        /* each its own first block: none reuses another's from a prefix cache */
        snprintf(own[i], sizeof(own[i]), "%d %s", i, prompt);
        p.prompt = own[i];
        n_sub += moon_serve_client_submit(g_client, &p, &ids[i]) == MOON_OK;
    }
    CU_ASSERT_EQUAL_FATAL(n_sub, N_LONG);
    /* queued work: requests waiting behind the running ones */
    memset(&s, 0, sizeof(s));
    for (end = moon_test_now_s() + 60; s.waiting == 0 && moon_test_now_s() < end;) {
        nap_ms(5);
        CU_ASSERT_EQUAL_FATAL(moon_serve_client_stats(g_client, WAIT_NS, &s), MOON_OK);
    }
    fprintf(stderr, "saturated: %llu running, %llu waiting; ", (unsigned long long)s.running,
            (unsigned long long)s.waiting);
    CU_ASSERT_FATAL(s.waiting > 0);
    /* both clients give up after 0.2 s: curl's 28 (timed out), no answer came */
    snprintf(cmd, sizeof(cmd),
             "c() { curl -sN --max-time 0.2 -X POST -H 'Content-Type: application/json' "
             "-d '{\"prompt\":\"Once upon a time\",\"max_tokens\":8'\"$1\"'}' -o /dev/null "
             "http://127.0.0.1:%u/v1/completions; }; c '' & a=$!; c ',\"stream\":true' & b=$!; "
             "wait $a; ra=$?; wait $b; rb=$?; [ $ra = 28 ] && [ $rb = 28 ]",
             g_port);
    ret = system(cmd);
    CU_ASSERT_EQUAL(ret, 0);
    for (end = moon_test_now_s() + 120;
         metric(CANCELLED_LINE) < k0 + 2 && moon_test_now_s() < end;) {
        nap_ms(5);
    }
    CU_ASSERT_EQUAL(metric(CANCELLED_LINE), k0 + 2);
    CU_ASSERT_EQUAL(metric("moonlet:generation_tokens_total{"), g0); /* not one token */
    fprintf(stderr, "cancelled while queued: %.0f of 2\n", metric(CANCELLED_LINE) - k0);
    for (int i = 0; i < N_LONG; i++) {
        moon_serve_client_cancel(g_client, ids[i]);
    }
    for (int done = 0; done < N_LONG;) {
        moon_serve_event_t ev;
        if (moon_serve_client_next(g_client, WAIT_NS, &ev) != MOON_OK) {
            break;
        }
        done += ev.kind == MOON_SERVE_EV_DONE;
        moon_serve_event_fini(&ev);
    }
    expect_cluster_idle();
}

/* 64 streaming clients at once: every stream whole and well-formed; greedy
 * ones with the same prompt give the same text. */
static void test_concurrent_streams(void)
{
    char        cmd[2048];
    const char *dir   = gw_tmp_dir();
    char       *first = NULL;
    int         ret;

    snprintf(cmd, sizeof(cmd),
             "for i in $(seq 64); do curl -sN -X POST -H 'Content-Type: application/json' "
             "-d '{\"prompt\":\"The cat\",\"max_tokens\":32,\"temperature\":0,\"stream\":true}' "
             "-o '%s/s.'$i http://127.0.0.1:%u/v1/completions & done; wait",
             dir, g_port);
    ret = system(cmd);
    CU_ASSERT_EQUAL(ret, 0);
    for (int i = 1; i <= 64; i++) {
        char     path[512];
        char    *body, *text;
        uint32_t n = 0;

        snprintf(path, sizeof(path), "%s/s.%d", dir, i);
        body = gw_read_file(path, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(body);
        text = check_stream(body, 0, 0, "length", &n);
        if (first == NULL) {
            first = text;
        } else {
            CU_ASSERT_STRING_EQUAL(text, first);
            free(text);
        }
        free(body);
    }
    free(first);
    expect_cluster_idle();
}

static void test_rejected_then_conductor_down(void)
{
    gw_http_t r;

    CU_ASSERT_FATAL(gw_wait_health(g_port_fake, 200));
    gw_post(&r, g_port_fake, "/v1/completions", "{\"prompt\":\"x\",\"stream\":true}", NULL);
    expect_error(&r, 429, "rate_limit_error");
    CU_ASSERT_PTR_NOT_NULL(strstr(r.headers, "Retry-After: 1"));
    gw_http_fini(&r);
    gw_post(&r, g_port_fake, "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":7}", NULL);
    expect_error(&r, 503, "server_error");
    gw_http_fini(&r);
    gw_curl(&r, g_port_fake, "/metrics", NULL);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(r.body, "moonlet:early_rejections_total{model_name=\"stories260K\"} 1"));
    gw_http_fini(&r);
    /* no decode instance up: 503 on /health and to requests, until one is back */
    atomic_store(&g_fake_decode_up, 0);
    CU_ASSERT_FATAL(gw_wait_health(g_port_fake, 503));
    gw_curl(&r, g_port_fake, "/health", NULL);
    expect_error(&r, 503, "server_error");
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "no decode instance"));
    gw_http_fini(&r);
    post_expect(g_port_fake, "/v1/completions", "{\"prompt\":\"x\"}", 503, "server_error");
    atomic_store(&g_fake_decode_up, 1);
    CU_ASSERT_FATAL(gw_wait_health(g_port_fake, 200));
    /* the conductor goes: health and requests answer 503 */
    CU_ASSERT_EQUAL(moon_stop(g_rt, g_fake, MOON_OK), MOON_OK);
    CU_ASSERT(gw_wait_health(g_port_fake, 503));
    gw_post(&r, g_port_fake, "/v1/chat/completions",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", NULL);
    expect_error(&r, 503, "server_error");
    gw_http_fini(&r);
}

/* A half-sent request is closed after the idle timeout (1 s on this gateway). */
static void test_half_sent_request_times_out(void)
{
    char        script[1024], cmd[1200];
    const char *path;
    int         ret;

    snprintf(script, sizeof(script),
             "exec 3<>/dev/tcp/127.0.0.1/%u || exit 2\n"
             "printf 'POST /v1/completions HTTP/1.1\\r\\nHost: x\\r\\n"
             "Content-Length: 100\\r\\n\\r\\n{\"prompt\"' >&3\n"
             "timeout 20 cat <&3 >/dev/null\n",
             g_port_fake);
    path = gw_tmp_file("half.sh", script, strlen(script));
    snprintf(cmd, sizeof(cmd), "bash '%s'", path);
    ret = system(cmd);
    /* cat ends (the server closed the socket) well before timeout's 20 s: 0, not 124 */
    CU_ASSERT_EQUAL(WEXITSTATUS(ret), 0);
}

/* Runs an official client's script; cmd exits 77 when its tool or its
 * registry cannot be reached (then the test is skipped, saying unreachable). */
static void run_client(const char *cmd, const char *unreachable)
{
    int ret = system(cmd);

    if (WEXITSTATUS(ret) == 77) {
        moon_test_skip(unreachable);
        return;
    }
    CU_ASSERT_EQUAL(WEXITSTATUS(ret), 0);
}

static void test_openai_npm(void)
{
    gw_run_npm_openai(MOON_TEST_NPM_SCRIPT, "client.mjs", g_port);
}

static void test_openai_python(void)
{
    char cmd[2048];

    snprintf(cmd, sizeof(cmd),
             "command -v python3 >/dev/null || exit 77; d='%s/py'; "
             "\"$d/bin/python\" -c 'import openai' 2>/dev/null || "
             "{ python3 -m venv \"$d\" && timeout 120 \"$d/bin/pip\" install -q openai; } "
             ">\"%s/pip.log\" 2>&1; \"$d/bin/python\" -c 'import openai' 2>/dev/null || exit 77; "
             "MOON_GW_URL=http://127.0.0.1:%u/v1 timeout 120 \"$d/bin/python\" '%s'",
             gw_tmp_dir(), gw_tmp_dir(), g_port, MOON_TEST_PY_SCRIPT);
    run_client(cmd, "python3 or PyPI is unreachable: the openai python client test did not run");
}

/* Rank 0 (or the only process) holds the conductor, the gateways and the
 * tests; under mpirun the store, prefill and decode run on ranks 1.. and the
 * other ranks only host them until the barrier. */
static int run_rank0(void)
{
    moon_serve_client_config_t ccfg = {0};
    moon_gateway_args_t        fargs;
    uint16_t                   port = 0;
    moon_addr_t                addr;
    int                        rc;

    ccfg.conductor = moon_serve_cluster_conductor(g_cluster);
    if (moon_serve_client_create(g_rt, &ccfg, &g_client) != MOON_OK ||
        moon_serve_client_wait_ready(g_client, 1, 1, WAIT_NS) != MOON_OK ||
        spawn_gateway(ccfg.conductor, NULL, 64 << 10, &g_port) != MOON_OK ||
        spawn_gateway(ccfg.conductor, "sekret", 1 << 20, &g_port_key) != MOON_OK ||
        moon_spawn(g_rt, &fake_ops, NULL, NULL, &g_fake) != MOON_OK) {
        fprintf(stderr, "test_gateway: a gateway did not start\n");
        return 1;
    }
    memset(&fargs, 0, sizeof(fargs));
    moon_gateway_config_default(&fargs.config);
    fargs.config.port              = 0;
    fargs.config.idle_timeout_s    = 1;
    fargs.config.stats_interval_ms = 20;
    fargs.conductor                = g_fake;
    fargs.model_path               = MOON_TEST_MODEL;
    fargs.port_p                   = &port;
    if (moon_spawn(g_rt, &moon_gateway_ops, &fargs, NULL, &addr) != MOON_OK) {
        return 1;
    }
    g_port_fake = port;
    if (!gw_wait_health(g_port, 200) || !gw_wait_health(g_port_key, 200)) {
        fprintf(stderr, "test_gateway: /health never said 200\n");
        return 1;
    }
    rc = MOON_TEST_RUN("gateway", NULL, NULL, test_routes, test_errors, test_api_key,
                       test_completion_stream_and_not, test_prompt_rows, test_job_first_token,
                       test_chat, test_cancel_on_disconnect, test_cancel_on_disconnect_not_streamed,
                       test_cancel_while_queued, test_concurrent_streams,
                       test_rejected_then_conductor_down, test_half_sent_request_times_out,
                       test_openai_npm, test_openai_python);
    moon_serve_client_destroy(g_client);
    return rc;
}

int main(int argc, char **argv)
{
    moon_runtime_config_t rcfg;
    moon_serve_config_t   scfg;
    int                   rc = 0, multi;

    if (moon_dist_init(&argc, &argv, NULL, &g_dist) != MOON_OK) {
        return 1;
    }
    multi = moon_dist_size(g_dist) > 1;
    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 2;
    rcfg.rank      = moon_dist_rank(g_dist);
    if (moon_runtime_create(&rcfg, &g_rt) != MOON_OK ||
        (multi && moon_dist_start(g_dist, g_rt) != MOON_OK) ||
        moon_runtime_start(g_rt) != MOON_OK) {
        return 1;
    }
    moon_serve_config_default(&scfg);
    scfg.model_path     = MOON_TEST_MODEL;
    scfg.store_dram_mib = 16;
    if (moon_serve_cluster_start(&scfg, g_rt, multi ? g_dist : NULL, &g_cluster) != MOON_OK) {
        fprintf(stderr, "test_gateway: the cluster did not start\n");
        return 1;
    }
    if (moon_dist_rank(g_dist) == 0) {
        gw_tmp_name(multi ? "gw_e2e_np" : "gw_e2e"); /* ctest -j runs both at once */
        rc = run_rank0();
    }
    if (multi) {
        moon_dist_barrier(g_dist);
    }
    moon_serve_cluster_stop(g_cluster);
    moon_runtime_shutdown(g_rt, 0);
    moon_runtime_wait(g_rt);
    moon_dist_stop(g_dist);
    moon_runtime_destroy(g_rt);
    moon_dist_finalize(g_dist);
    return rc;
}
