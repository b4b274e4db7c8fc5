/* tests/e2e/gateway/test_gw_api.c - the OpenAI surface beyond plain
 * generation, end to end on an in-process cluster (stories260K) with curl:
 * every field the server does not implement is a 400 naming it; penalties,
 * logit_bias, min_tokens and include_stop_str_in_output take effect;
 * logprobs (completions, chat, streamed) sum <= 0 and match a recomputation;
 * /tokenize, /detokenize and /version; CORS preflights allowed and denied
 * (with --api-key still enforced); /metrics through promtool (skipped
 * without it); the official `openai` npm client (skipped without npm). */
#include "gateway.h"
#include "gw_curl.h"
#include "gw_fields.h"
#include "moon_test.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#ifndef MOON_TEST_MODEL
#error "MOON_TEST_MODEL must name stories260K.gguf"
#endif
#ifndef MOON_TEST_CORS_PAGE
#error "MOON_TEST_CORS_PAGE must name cors_page.html"
#endif
#ifndef MOON_TEST_NPM_SCRIPT
#error "MOON_TEST_NPM_SCRIPT must name openai_fields.mjs"
#endif

#define WAIT_NS 60000000000ull
#define ORIGIN_OK "http://ok.example"
#define ORIGINS ORIGIN_OK ", http://two.example"

static moon_runtime_t       *g_rt;
static moon_serve_cluster_t *g_cluster;
static moon_serve_client_t  *g_client;
static unsigned              g_port, g_port_key;

static void nap_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static moon_status_t spawn_gateway(moon_addr_t conductor, const char *key, const char *origins,
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
    args.config.allowed_origins   = origins;
    args.config.stats_interval_ms = 50;
    args.conductor                = conductor;
    args.model_path               = MOON_TEST_MODEL;
    args.port_p                   = &port;
    status                        = moon_spawn(g_rt, &moon_gateway_ops, &args, NULL, &addr);
    *port_p                       = port;
    return status;
}

/* POSTs json to path; returns the parsed answer (NULL if not JSON), code in *code_p. */
static cJSON *post(unsigned port, const char *path, const char *json, int *code_p)
{
    gw_http_t r;
    cJSON    *j;

    *code_p = gw_post(&r, port, path, json, NULL);
    j       = cJSON_ParseWithLength(r.body, r.len);
    if (j == NULL) {
        fprintf(stderr, "not JSON from %s: %s\n", path, r.body);
    }
    gw_http_fini(&r);
    return j;
}

/* The text of a completion's first choice (malloc'd; NULL on error). */
static char *complete(const char *json, char *finish, size_t finish_cap, int *n_tokens)
{
    int    code;
    cJSON *j = post(g_port, "/v1/completions", json, &code);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    char  *text;

    if (code != 200 || c == NULL) {
        char *s = j != NULL ? cJSON_PrintUnformatted(j) : NULL;
        fprintf(stderr, "completion %s: %d %s\n", json, code, s != NULL ? s : "");
        free(s);
        cJSON_Delete(j);
        return NULL;
    }
    text = strdup(cJSON_GetStringValue(cJSON_GetObjectItem(c, "text")));
    if (finish != NULL) {
        snprintf(finish, finish_cap, "%s",
                 cJSON_GetStringValue(cJSON_GetObjectItem(c, "finish_reason")));
    }
    if (n_tokens != NULL) {
        *n_tokens = (int)cJSON_GetNumberValue(
            cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens"));
    }
    cJSON_Delete(j);
    return text;
}

/* The greedy first token after "Once upon a time", read from the cluster's
 * own events (text does not round-trip to ids: SentencePiece's leading
 * space). -1 on error. */
static int greedy_first_id(void)
{
    static const int32_t prompt[] = {1, 403, 407, 261, 378}; /* BOS "Once upon a time" */
    moon_serve_params_t  p;
    moon_serve_event_t   ev;
    uint64_t             id;
    int                  tok = -1;

    moon_serve_params_default(&p);
    p.tokens     = prompt;
    p.n_tokens   = 5;
    p.max_tokens = 1;
    p.flags      = 0;
    if (moon_serve_client_submit(g_client, &p, &id) != MOON_OK) {
        return -1;
    }
    while (moon_serve_client_next(g_client, WAIT_NS, &ev) == MOON_OK) {
        int done = ev.kind == MOON_SERVE_EV_DONE;
        if (ev.kind == MOON_SERVE_EV_TOKEN) {
            tok = ev.token;
        }
        moon_serve_event_fini(&ev);
        if (done) {
            break;
        }
    }
    return tok;
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_unsupported_fields_are_400s(void)
{
    uint32_t               n;
    const moon_gw_field_t *rows    = moon_gw_fields(&n);
    int                    refused = 0;

    for (uint32_t i = 0; i < n; i++) {
        for (int chat = 0; chat < 2; chat++) {
            unsigned route = chat ? MOON_GW_ROUTE_CHAT : MOON_GW_ROUTE_COMPLETIONS;
            char     body[256];
            int      code;
            cJSON   *j, *e;

            if (rows[i].how != MOON_GW_FIELD_REFUSED || !(rows[i].routes & route)) {
                continue;
            }
            snprintf(body, sizeof(body), "{%s,\"max_tokens\":2,\"%s\":{\"a\":1}}",
                     chat ? "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]"
                          : "\"prompt\":\"Hi\"",
                     rows[i].name);
            j = post(g_port, chat ? "/v1/chat/completions" : "/v1/completions", body, &code);
            e = cJSON_GetObjectItem(j, "error");
            CU_ASSERT_EQUAL(code, 400);
            CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(e, "param")),
                                   rows[i].name);
            CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(e, "type")),
                                   "invalid_request_error");
            cJSON_Delete(j);
            refused++;
        }
    }
    CU_ASSERT(refused > 40);
    {
        int    code;
        cJSON *j = post(g_port, "/v1/completions", "{\"prompt\":\"Hi\",\"frobnicate\":1}", &code);
        CU_ASSERT_EQUAL(code, 400);
        CU_ASSERT_STRING_EQUAL(
            cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "param")),
            "frobnicate");
        cJSON_Delete(j);
    }
}

#define GREEDY "\"prompt\":\"Once upon a time\",\"temperature\":0"

static void test_logit_bias(void)
{
    char  body[256], finish[16];
    char *plain = complete("{" GREEDY ",\"max_tokens\":8}", NULL, 0, NULL);
    char *banned, *forced, *want;
    int   id, n = 0, code;

    CU_ASSERT_PTR_NOT_NULL_FATAL(plain);
    id = greedy_first_id();
    CU_ASSERT_FATAL(id >= 0);
    /* -100 on the greedy token: another first token */
    snprintf(body, sizeof(body), "{" GREEDY ",\"max_tokens\":8,\"logit_bias\":{\"%d\":-100}}", id);
    banned = complete(body, NULL, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(banned);
    CU_ASSERT_STRING_NOT_EQUAL(banned, plain);
    /* +100 forces a token at every step */
    forced = complete("{" GREEDY ",\"max_tokens\":4,\"logit_bias\":{\"300\":100}}", finish,
                      sizeof(finish), &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(forced);
    CU_ASSERT_EQUAL(n, 4);
    {
        cJSON *j = post(g_port, "/detokenize", "{\"tokens\":[300,300,300,300]}", &code);
        want     = strdup(cJSON_GetStringValue(cJSON_GetObjectItem(j, "prompt")));
        cJSON_Delete(j);
    }
    CU_ASSERT_STRING_EQUAL(forced, want);
    free(want);
    free(plain);
    free(banned);
    free(forced);
}

static void test_penalties_and_min_tokens(void)
{
    char  body[256], finish[16];
    char *plain = complete("{" GREEDY ",\"max_tokens\":60}", NULL, 0, NULL);
    char *pen   = complete("{" GREEDY ",\"max_tokens\":60,\"presence_penalty\":2,"
                             "\"frequency_penalty\":2}",
                           NULL, 0, NULL);
    char *rep =
        complete("{" GREEDY ",\"max_tokens\":60,\"repetition_penalty\":1.8}", NULL, 0, NULL);
    char *t;
    int   id, n = -1;

    CU_ASSERT_PTR_NOT_NULL_FATAL(plain);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pen);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
    CU_ASSERT_STRING_NOT_EQUAL(pen, plain);
    CU_ASSERT_STRING_NOT_EQUAL(rep, plain);
    /* the greedy first token as a stop id ends at once; min_tokens masks it */
    id = greedy_first_id();
    CU_ASSERT_FATAL(id >= 0);
    snprintf(body, sizeof(body), "{" GREEDY ",\"max_tokens\":8,\"stop_token_ids\":[%d]}", id);
    t = complete(body, finish, sizeof(finish), &n);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_STRING_EQUAL(finish, "stop");
    free(t);
    snprintf(body, sizeof(body),
             "{" GREEDY ",\"max_tokens\":8,\"stop_token_ids\":[%d],\"min_tokens\":5}", id);
    t = complete(body, finish, sizeof(finish), &n);
    CU_ASSERT(n >= 5);
    free(t);
    free(plain);
    free(pen);
    free(rep);
}

static void test_include_stop_str(void)
{
    char  *cut  = complete("{" GREEDY ",\"max_tokens\":30,\"stop\":[\"Lily\"]}", NULL, 0, NULL);
    char  *kept = complete("{" GREEDY ",\"max_tokens\":30,\"stop\":[\"Lily\"],"
                            "\"include_stop_str_in_output\":true}",
                           NULL, 0, NULL);
    size_t n;

    CU_ASSERT_PTR_NOT_NULL_FATAL(cut);
    CU_ASSERT_PTR_NOT_NULL_FATAL(kept);
    CU_ASSERT_PTR_NULL(strstr(cut, "Lily"));
    n = strlen(kept);
    CU_ASSERT(n > 4 && strcmp(kept + n - 4, "Lily") == 0);
    CU_ASSERT(strncmp(kept, cut, strlen(cut)) == 0);
    free(cut);
    free(kept);
}

static void test_tokenize_routes(void)
{
    int       code;
    cJSON    *j;
    gw_http_t r;

    j = post(g_port, "/tokenize", "{\"prompt\":\"Once upon a time\"}", &code);
    CU_ASSERT_EQUAL(code, 200);
    CU_ASSERT_EQUAL((int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "count")), 5);
    CU_ASSERT_EQUAL((int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "max_model_len")), 512);
    CU_ASSERT_EQUAL(
        (int)cJSON_GetNumberValue(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tokens"), 0)),
        1); /* BOS */
    cJSON_Delete(j);
    j = post(g_port, "/detokenize", "{\"tokens\":[1,403,407,261,378]}", &code);
    CU_ASSERT_EQUAL(code, 200);
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(j, "prompt")),
                           "Once upon a time");
    cJSON_Delete(j);
    j = post(g_port, "/tokenize",
             "{\"model\":\"stories260K\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
             &code);
    CU_ASSERT_EQUAL(code, 200);
    CU_ASSERT(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "count")) > 1);
    cJSON_Delete(j);
    j = post(g_port, "/detokenize", "{\"tokens\":[99999]}", &code);
    CU_ASSERT_EQUAL(code, 400);
    cJSON_Delete(j);
    j = post(g_port, "/tokenize", "{\"prompt\":\"x\",\"bogus\":1}", &code);
    CU_ASSERT_EQUAL(code, 400);
    CU_ASSERT_STRING_EQUAL(
        cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "param")),
        "bogus");
    cJSON_Delete(j);
    j = post(g_port, "/tokenize", "{\"prompt\":\"x\",\"model\":\"llama\"}", &code);
    CU_ASSERT_EQUAL(code, 404);
    cJSON_Delete(j);
    CU_ASSERT_EQUAL(gw_curl(&r, g_port, "/version", NULL), 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "\"version\":\""));
    gw_http_fini(&r);
    /* the key guards the tokenizer routes too */
    CU_ASSERT_EQUAL(gw_post(&r, g_port_key, "/tokenize", "{\"prompt\":\"x\"}", NULL), 401);
    gw_http_fini(&r);
    CU_ASSERT_EQUAL(gw_post(&r, g_port_key, "/tokenize", "{\"prompt\":\"x\"}",
                            "-H 'Authorization: Bearer sekret'"),
                    200);
    gw_http_fini(&r);
}

static void test_cors(void)
{
    gw_http_t r;
    /* allowed: 204, the origin echoed, methods and the asked headers */
    CU_ASSERT_EQUAL(gw_curl(&r, g_port_key, "/v1/chat/completions",
                            "-X OPTIONS -H 'Origin: " ORIGIN_OK "' "
                            "-H 'Access-Control-Request-Method: POST' "
                            "-H 'Access-Control-Request-Headers: authorization, content-type'"),
                    204);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.headers, "Access-Control-Allow-Origin: " ORIGIN_OK));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(r.headers, "Access-Control-Allow-Methods: GET, POST, DELETE, OPTIONS"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(r.headers, "Access-Control-Allow-Headers: authorization, content-type"));
    gw_http_fini(&r);
    /* denied: no CORS header, so the browser refuses */
    CU_ASSERT_EQUAL(gw_curl(&r, g_port_key, "/v1/chat/completions",
                            "-X OPTIONS -H 'Origin: http://evil.example' "
                            "-H 'Access-Control-Request-Method: POST'"),
                    403);
    CU_ASSERT_PTR_NULL(strstr(r.headers, "Access-Control-Allow-Origin"));
    gw_http_fini(&r);
    /* the real request: headers on the answer; the key still needed */
    CU_ASSERT_EQUAL(gw_post(&r, g_port_key, "/v1/completions",
                            "{\"prompt\":\"Hi\",\"max_tokens\":2}",
                            "-H 'Origin: http://two.example'"),
                    401);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.headers, "Access-Control-Allow-Origin: http://two.example"));
    gw_http_fini(&r);
    CU_ASSERT_EQUAL(gw_post(&r, g_port_key, "/v1/completions",
                            "{\"prompt\":\"Hi\",\"max_tokens\":2}",
                            "-H 'Origin: " ORIGIN_OK "' -H 'Authorization: Bearer sekret'"),
                    200);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.headers, "Access-Control-Allow-Origin: " ORIGIN_OK));
    gw_http_fini(&r);
    /* streamed answers carry them too */
    CU_ASSERT_EQUAL(gw_post(&r, g_port, "/v1/completions",
                            "{\"prompt\":\"Hi\",\"max_tokens\":2,\"stream\":true}",
                            "-H 'Origin: " ORIGIN_OK "'"),
                    200);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.headers, "Access-Control-Allow-Origin: " ORIGIN_OK));
    gw_http_fini(&r);
    CU_ASSERT_EQUAL(gw_curl(&r, g_port, "/health", "-H 'Origin: http://evil.example'"), 200);
    CU_ASSERT_PTR_NULL(strstr(r.headers, "Access-Control-Allow-Origin"));
    gw_http_fini(&r);
}

/* promtool check metrics passes but for the colon prefix (vLLM's too). */
static void test_promtool(void)
{
    gw_http_t r;
    char      cmd[1024];
    int       ret;

    if (system("command -v promtool >/dev/null 2>&1") != 0) {
        moon_test_skip("promtool is not installed (Debian's prometheus package): metrics naming "
                       "not linted");
        return;
    }
    CU_ASSERT_EQUAL_FATAL(gw_curl(&r, g_port, "/metrics", NULL), 200);
    gw_tmp_file("metrics.txt", r.body, r.len);
    gw_http_fini(&r);
    snprintf(cmd, sizeof(cmd),
             "promtool check metrics < '%s/metrics.txt' 2>&1 | grep -v 'metric names should not "
             "contain' | grep -v '^$' > '%s/promtool.txt'; test ! -s '%s/promtool.txt' || "
             "{ cat '%s/promtool.txt'; exit 1; }",
             gw_tmp_dir(), gw_tmp_dir(), gw_tmp_dir(), gw_tmp_dir());
    ret = system(cmd);
    CU_ASSERT_EQUAL(WEXITSTATUS(ret), 0);
}

/* Starts the browser test's page server (python http.server) in DIR on a
 * port the kernel picks (port 0: asking for a free port first and binding it
 * later raced with other tests, "Address already in use"), waits until it
 * serves page.html, and returns its port (0 if it never came up; its log is
 * printed). */
static unsigned start_page_server(const char *dir)
{
    char     cmd[1536], path[512];
    char    *text;
    unsigned port = 0;
    int      ret;

    snprintf(cmd, sizeof(cmd),
             "d='%s'; cp '%s' \"$d/page.html\" && cd \"$d\" && "
             "{ timeout 120 python3 -u -m http.server 0 --bind 127.0.0.1 >http.log 2>&1 & "
             "echo $! >http.pid; } && "
             "for i in $(seq 100); do p=$(sed -n 's/.* port \\([0-9]*\\) .*/\\1/p' http.log); "
             "test -n \"$p\" && curl -sf -o /dev/null \"http://127.0.0.1:$p/page.html\" && "
             "echo \"$p\" >http.port && exit 0; sleep 0.1; done; cat http.log >&2; exit 1",
             dir, MOON_TEST_CORS_PAGE);
    ret = system(cmd);
    if (WEXITSTATUS(ret) != 0) {
        return 0;
    }
    snprintf(path, sizeof(path), "%s/http.port", dir);
    text = gw_read_file(path, NULL);
    if (text != NULL) {
        port = (unsigned)strtoul(text, NULL, 10);
        free(text);
    }
    return port;
}

/* A real browser: headless Chromium loads a page from its own origin (a
 * python http.server) whose fetch() calls a gateway allowing that origin
 * (key right: 200; key wrong: 401 readable), and one that does not
 * (blocked). Skipped without chromium or python3. A browser that printed
 * no page at all died before loading it (once in CI, under ASan and a full
 * ctest -j): it is started again, up to 3 times, with its reasons logged;
 * a page that printed anything is judged as it is. */
static void test_cors_browser(void)
{
    char        cmd[2048], origin[64], path[512];
    const char *want = "RESULT allowed=200:text denied=blocked badkey=401:error";
    unsigned    page, port = 0;
    char       *out;
    int         ret;

    if (system("command -v chromium >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1") != 0) {
        moon_test_skip("chromium (Debian's chromium package) or python3 is missing: the browser "
                       "CORS test did not run (curl-level preflights are checked in test_gw_api)");
        return;
    }
    page = start_page_server(gw_tmp_dir());
    CU_ASSERT_FATAL(page != 0);
    snprintf(origin, sizeof(origin), "http://127.0.0.1:%u", page);
    CU_ASSERT_EQUAL_FATAL(
        spawn_gateway(moon_serve_cluster_conductor(g_cluster), "sekret", origin, &port), MOON_OK);
    CU_ASSERT_FATAL(gw_wait_health(port, 200));
    snprintf(cmd, sizeof(cmd),
             "d='%s'; cd \"$d\" && "
             "for try in 1 2 3; do rm -rf \"$d/chrome\"; "
             "timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
             "--user-data-dir=\"$d/chrome\" --virtual-time-budget=5000 --dump-dom "
             "'http://127.0.0.1:%u/page.html?allowed=%u&denied=%u' >dom.txt 2>chrome.log; "
             "echo \"chromium exit $? (try $try)\" >>chrome.log; test -s dom.txt && break; "
             "grep -v dbus chrome.log | tail -n 5 >&2; done; "
             "kill $(cat http.pid) 2>/dev/null; true",
             gw_tmp_dir(), page, port, g_port);
    ret = system(cmd);
    CU_ASSERT_EQUAL(WEXITSTATUS(ret), 0);
    snprintf(path, sizeof(path), "%s/dom.txt", gw_tmp_dir());
    out = gw_read_file(path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    if (strstr(out, want) == NULL) {
        fprintf(stderr, "browser page said: %.400s\n", out);
        snprintf(cmd, sizeof(cmd), "grep -v dbus '%s/chrome.log' | tail -n 20 >&2", gw_tmp_dir());
        ret = system(cmd);
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    free(out);
}

static void test_openai_npm(void)
{
    gw_run_npm_openai(MOON_TEST_NPM_SCRIPT, "fields.mjs", g_port);
}

/* Greedy tokens and their logprobs from the cluster's events. Returns n. */
static int run_ids(const int32_t *prompt, uint32_t n_prompt, uint32_t max_tokens, int32_t *toks,
                   float *lps)
{
    moon_serve_params_t p;
    moon_serve_event_t  ev;
    uint64_t            id;
    int                 n = 0;

    moon_serve_params_default(&p);
    p.tokens     = prompt;
    p.n_tokens   = n_prompt;
    p.max_tokens = max_tokens;
    p.flags      = 0;
    p.logprobs   = 1;
    if (moon_serve_client_submit(g_client, &p, &id) != MOON_OK) {
        return -1;
    }
    while (moon_serve_client_next(g_client, WAIT_NS, &ev) == MOON_OK) {
        int done = ev.kind == MOON_SERVE_EV_DONE;
        if (ev.kind == MOON_SERVE_EV_TOKEN && n < (int)max_tokens) {
            toks[n]  = ev.token;
            lps[n++] = ev.logprob;
        }
        moon_serve_event_fini(&ev);
        if (done) {
            break;
        }
    }
    return n;
}

/* logprobs: each <= 0, the greedy token the most likely of its top list, the
 * HTTP answer's equal to the cluster's events, and each equal to a fresh
 * request's that recomputes it (the prefill path) from prompt + tokens so far. */
static void test_logprobs(void)
{
    int32_t prompt[32] = {1, 403, 407, 261, 378};
    int32_t toks[8], one;
    float   lps[8], again;
    double  sum = 0;
    int     n   = run_ids(prompt, 5, 8, toks, lps), code;
    cJSON  *j, *lp, *tl, *top;

    CU_ASSERT_EQUAL_FATAL(n, 8);
    for (int i = 0; i < n; i++) {
        CU_ASSERT(lps[i] <= 0.0f);
        sum += lps[i];
        prompt[5 + i] = toks[i];
        CU_ASSERT_EQUAL_FATAL(run_ids(prompt, 5 + (uint32_t)i, 1, &one, &again), 1);
        CU_ASSERT_EQUAL(one, toks[i]);
        CU_ASSERT_DOUBLE_EQUAL(again, lps[i], 2e-3);
    }
    CU_ASSERT(sum <= 0.0);
    j   = post(g_port, "/v1/completions",
               "{\"prompt\":[1,403,407,261,378],\"max_tokens\":8,\"temperature\":0,\"logprobs\":3}",
               &code);
    lp  = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "logprobs");
    tl  = cJSON_GetObjectItem(lp, "token_logprobs");
    top = cJSON_GetObjectItem(lp, "top_logprobs");
    CU_ASSERT_EQUAL(code, 200);
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(tl), 8);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "tokens")), 8);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "text_offset")), 8);
    for (int i = 0; i < 8; i++) {
        cJSON *alts = cJSON_GetArrayItem(top, i);
        double best = -1e9;
        cJSON *a;

        CU_ASSERT_DOUBLE_EQUAL(cJSON_GetNumberValue(cJSON_GetArrayItem(tl, i)), lps[i], 1e-6);
        CU_ASSERT(cJSON_GetArraySize(alts) >= 1 && cJSON_GetArraySize(alts) <= 3);
        cJSON_ArrayForEach(a, alts)
        {
            best = a->valuedouble > best ? a->valuedouble : best;
        }
        CU_ASSERT_DOUBLE_EQUAL(best, lps[i], 1e-6); /* greedy: the chosen is the top one */
    }
    cJSON_Delete(j);
    /* chat, streamed: every token's entry arrives in some chunk */
    {
        gw_http_t r;
        int       entries = 0;
        char     *at;

        CU_ASSERT_EQUAL(gw_post(&r, g_port, "/v1/chat/completions",
                                "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                                "\"max_tokens\":6,\"temperature\":0,\"logprobs\":true,"
                                "\"top_logprobs\":2,\"stream\":true}",
                                NULL),
                        200);
        for (at = r.body; (at = strstr(at, "\"top_logprobs\":[{")) != NULL; at++) {
            entries++;
        }
        CU_ASSERT_EQUAL(entries, 6);
        gw_http_fini(&r);
    }
}

/* ---- n, best_of, echo (issue 29) ------------------------------------------------ */

/* The choices of a completion answer, texts by index into texts[] (strdup'd),
 * code returned; *n_p choices, usage into *prompt_p and *completion_p. */
static int choices_of(const char *path, const char *json, char **texts, int cap, int *n_p,
                      int *prompt_p, int *completion_p)
{
    int    code;
    cJSON *j = post(g_port, path, json, &code);
    cJSON *c;
    cJSON *u = cJSON_GetObjectItem(j, "usage");

    *n_p = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "choices"))
    {
        int    i   = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(c, "index"));
        cJSON *msg = cJSON_GetObjectItem(c, "message");
        char  *t   = cJSON_GetStringValue(msg != NULL ? cJSON_GetObjectItem(msg, "content")
                                                      : cJSON_GetObjectItem(c, "text"));

        CU_ASSERT_FATAL(i >= 0 && i < cap);
        CU_ASSERT_PTR_NULL(texts[i]); /* each index once */
        texts[i] = strdup(t != NULL ? t : "");
        (*n_p)++;
    }
    if (prompt_p != NULL) {
        *prompt_p     = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(u, "prompt_tokens"));
        *completion_p = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(u, "completion_tokens"));
    }
    cJSON_Delete(j);
    return code;
}

static void free_texts(char **texts, int n)
{
    for (int i = 0; i < n; i++) {
        free(texts[i]);
        texts[i] = NULL;
    }
}

/* n = 4 with a seed: four indexes, not all the same text, the same four
 * again; the prompt counted once in the usage. */
static void test_n_choices(void)
{
    const char *body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"n\":4,\"seed\":7,"
                       "\"temperature\":1}";
    char       *a[4] = {NULL}, *b[4] = {NULL}, *one[1] = {NULL};
    int         n, prompt, comp, prompt1, comp1, differ = 0;

    CU_ASSERT_EQUAL_FATAL(choices_of("/v1/completions", body, a, 4, &n, &prompt, &comp), 200);
    CU_ASSERT_EQUAL_FATAL(n, 4);
    CU_ASSERT_EQUAL_FATAL(choices_of("/v1/completions", body, b, 4, &n, NULL, NULL), 200);
    CU_ASSERT_EQUAL_FATAL(n, 4);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_STRING_EQUAL(a[i], b[i]);
        differ += strcmp(a[i], a[0]) != 0;
    }
    CU_ASSERT(differ > 0);
    CU_ASSERT_EQUAL_FATAL(choices_of("/v1/completions",
                                     "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,"
                                     "\"seed\":7,\"temperature\":1}",
                                     one, 1, &n, &prompt1, &comp1),
                          200);
    CU_ASSERT_STRING_EQUAL(one[0], a[0]); /* choice 0 samples as n = 1 does */
    CU_ASSERT_EQUAL(prompt, prompt1);
    CU_ASSERT(comp > comp1 && comp <= 4 * 12);
    free_texts(a, 4);
    free_texts(b, 4);
    free_texts(one, 1);
    /* chat */
    CU_ASSERT_EQUAL(choices_of("/v1/chat/completions",
                               "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                               "\"max_tokens\":6,\"n\":3,\"seed\":3}",
                               a, 4, &n, NULL, NULL),
                    200);
    CU_ASSERT_EQUAL(n, 3);
    free_texts(a, 4);
    /* best_of: the n best of best_of sequences */
    CU_ASSERT_EQUAL(choices_of("/v1/completions",
                               "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"n\":2,"
                               "\"best_of\":5,\"seed\":1}",
                               a, 4, &n, NULL, NULL),
                    200);
    CU_ASSERT_EQUAL(n, 2);
    free_texts(a, 4);
}

/* A stream of n = 3: every index opens, carries text and finishes once;
 * one [DONE]. */
static void test_n_stream(void)
{
    for (int chat = 0; chat < 2; chat++) {
        gw_http_t r;
        int       finished[3] = {0}, text[3] = {0}, dones = 0;
        char     *line, *save = NULL;

        CU_ASSERT_EQUAL_FATAL(
            gw_post(&r, g_port, chat ? "/v1/chat/completions" : "/v1/completions",
                    chat ? "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                           "\"max_tokens\":10,\"n\":3,\"seed\":5,\"stream\":true}"
                         : "{\"prompt\":\"Once upon a time\",\"max_tokens\":10,\"n\":3,"
                           "\"seed\":5,\"stream\":true}",
                    NULL),
            200);
        for (line = strtok_r(r.body, "\n", &save); line != NULL;
             line = strtok_r(NULL, "\n", &save)) {
            cJSON *j, *c;
            if (strcmp(line, "data: [DONE]") == 0) {
                dones++;
                continue;
            }
            if (strncmp(line, "data: ", 6) != 0) {
                continue;
            }
            j = cJSON_Parse(line + 6);
            cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "choices"))
            {
                int    i = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(c, "index"));
                cJSON *d = cJSON_GetObjectItem(c, "delta");
                cJSON *t =
                    chat ? cJSON_GetObjectItem(d, "content") : cJSON_GetObjectItem(c, "text");

                CU_ASSERT_FATAL(i >= 0 && i < 3);
                text[i] += cJSON_IsString(t) && t->valuestring[0] != '\0';
                finished[i] += cJSON_IsString(cJSON_GetObjectItem(c, "finish_reason"));
            }
            cJSON_Delete(j);
        }
        CU_ASSERT_EQUAL(dones, 1);
        for (int i = 0; i < 3; i++) {
            CU_ASSERT(text[i] > 0);
            CU_ASSERT_EQUAL(finished[i], 1);
        }
        gw_http_fini(&r);
    }
}

/* The prompt is prefilled once for n = 4: one SUBMIT of 4 choices, the KV
 * forked on the decode instance (the prefill instances' computed tokens
 * grow by the prompt alone; 4 requests would compute at least its last
 * token again each, even from the prefix cache). */
static void test_n_prefill_once(void)
{
    char               body[2048];
    size_t             len = 0;
    moon_serve_stats_t before, after;
    int                code;
    cJSON             *j;
    uint64_t           computed;

    len += (size_t)snprintf(body + len, sizeof(body) - len, "{\"prompt\":[1");
    for (int i = 1; i < 96; i++) { /* a prompt no other test sends */
        len += (size_t)snprintf(body + len, sizeof(body) - len, ",%d", 300 + (i * 37) % 200);
    }
    snprintf(body + len, sizeof(body) - len, "],\"max_tokens\":4,\"n\":4,\"seed\":2}");
    nap_ms(300); /* the load reports of earlier tests are in */
    CU_ASSERT_EQUAL_FATAL(moon_serve_client_stats(g_client, WAIT_NS, &before), MOON_OK);
    j = post(g_port, "/v1/completions", body, &code);
    CU_ASSERT_EQUAL(code, 200);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")), 4);
    CU_ASSERT_EQUAL(
        cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens")),
        96);
    cJSON_Delete(j);
    /* the counters sum the instances' load reports: until two reads agree */
    for (uint64_t last = UINT64_MAX, i = 0; i < 50; i++) {
        nap_ms(100);
        CU_ASSERT_EQUAL_FATAL(moon_serve_client_stats(g_client, WAIT_NS, &after), MOON_OK);
        if (after.computed_tokens == last) {
            break;
        }
        last = after.computed_tokens;
    }
    computed = after.computed_tokens - before.computed_tokens;
    fprintf(stderr, "n = 4 on a 96-token prompt: %llu prompt tokens computed\n",
            (unsigned long long)computed);
    CU_ASSERT_EQUAL(computed, 96);
}

/* echo: the prompt's text before the answer, as given or as the ids decode. */
static void test_echo(void)
{
    char *plain = complete("{" GREEDY ",\"max_tokens\":6}", NULL, 0, NULL);
    char *echo  = complete("{" GREEDY ",\"max_tokens\":6,\"echo\":true}", NULL, 0, NULL);
    char *ids   = complete("{\"prompt\":[1,403,407,261,378],\"temperature\":0,\"max_tokens\":2,"
                             "\"echo\":true}",
                           NULL, 0, NULL);
    char  want[256];

    CU_ASSERT_PTR_NOT_NULL_FATAL(plain);
    CU_ASSERT_PTR_NOT_NULL_FATAL(echo);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ids);
    snprintf(want, sizeof(want), "Once upon a time%s", plain);
    CU_ASSERT_STRING_EQUAL(echo, want);
    CU_ASSERT(strncmp(ids, "Once upon a time", 16) == 0);
    free(plain);
    free(echo);
    free(ids);
}

/* A list of prompts: each answered in order, choice prompt_index * n + i,
 * each the same as its prompt alone; the prompts' tokens summed. */
static void test_prompt_list(void)
{
    char *a = complete("{" GREEDY ",\"max_tokens\":6}", NULL, 0, NULL);
    char *b =
        complete("{\"prompt\":\"The cat\",\"temperature\":0,\"max_tokens\":6}", NULL, 0, NULL);
    char *c =
        complete("{\"prompt\":[1,403,407],\"temperature\":0,\"max_tokens\":6}", NULL, 0, NULL);
    char *got[6] = {NULL};
    int   n, prompt, comp;

    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL_FATAL(choices_of("/v1/completions",
                                     "{\"prompt\":[\"Once upon a time\",\"The cat\"],"
                                     "\"temperature\":0,\"max_tokens\":6,\"n\":2}",
                                     got, 6, &n, &prompt, &comp),
                          200);
    CU_ASSERT_EQUAL_FATAL(n, 4);
    CU_ASSERT_STRING_EQUAL(got[0], a);
    CU_ASSERT_STRING_EQUAL(got[1], a);
    CU_ASSERT_STRING_EQUAL(got[2], b);
    CU_ASSERT_STRING_EQUAL(got[3], b);
    CU_ASSERT(comp <= 4 * 6);
    free_texts(got, 6);
    /* lists of ids, and a text beside ids */
    CU_ASSERT_EQUAL_FATAL(choices_of("/v1/completions",
                                     "{\"prompt\":[[1,403,407],\"The cat\",[1,403,407]],"
                                     "\"temperature\":0,\"max_tokens\":6}",
                                     got, 6, &n, &prompt, &comp),
                          200);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    CU_ASSERT_STRING_EQUAL(got[0], c);
    CU_ASSERT_STRING_EQUAL(got[1], b);
    CU_ASSERT_STRING_EQUAL(got[2], c);
    CU_ASSERT(prompt > 6); /* 3 + the text's + 3 */
    free_texts(got, 6);
    free(a);
    free(b);
    free(c);
}

/* What n and best_of cannot be. */
static void test_choices_errors(void)
{
    static const struct {
        const char *body, *param;
    } cases[] = {
        {"{\"prompt\":\"Hi\",\"n\":17}", "n"},
        {"{\"prompt\":\"Hi\",\"n\":3,\"best_of\":2}", "best_of"},
        {"{\"prompt\":\"Hi\",\"best_of\":2,\"stream\":true}", "best_of"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int    code;
        cJSON *j = post(g_port, "/v1/completions", cases[i].body, &code);

        CU_ASSERT_EQUAL(code, 400);
        CU_ASSERT_STRING_EQUAL(
            cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "param")),
            cases[i].param);
        cJSON_Delete(j);
    }
}

int main(int argc, char **argv)
{
    int                        browser = argc > 1 && strcmp(argv[1], "--browser") == 0;
    moon_runtime_config_t      rcfg;
    moon_serve_config_t        scfg;
    moon_addr_t                conductor;
    moon_serve_client_config_t ccfg = {0};
    int                        rc   = 1;

    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 2;
    if (moon_runtime_create(&rcfg, &g_rt) != MOON_OK || moon_runtime_start(g_rt) != MOON_OK) {
        return 1;
    }
    moon_serve_config_default(&scfg);
    scfg.model_path     = MOON_TEST_MODEL;
    scfg.store_dram_mib = 16;
    if (moon_serve_cluster_start(&scfg, g_rt, NULL, &g_cluster) != MOON_OK) {
        fprintf(stderr, "test_gw_api: the cluster did not start\n");
        return 1;
    }
    gw_tmp_name(browser ? "gw_api_browser" : "gw_api"); /* ctest -j runs both at once */
    conductor      = moon_serve_cluster_conductor(g_cluster);
    ccfg.conductor = conductor;
    if (moon_serve_client_create(g_rt, &ccfg, &g_client) != MOON_OK ||
        moon_serve_client_wait_ready(g_client, 1, 1, WAIT_NS) != MOON_OK ||
        spawn_gateway(conductor, NULL, ORIGINS, &g_port) != MOON_OK ||
        spawn_gateway(conductor, "sekret", ORIGINS, &g_port_key) != MOON_OK ||
        !gw_wait_health(g_port, 200) || !gw_wait_health(g_port_key, 200)) {
        fprintf(stderr, "test_gw_api: a gateway did not start\n");
    } else {
        rc = browser ? MOON_TEST_RUN("gw_cors_browser", NULL, NULL, test_cors_browser)
                     : MOON_TEST_RUN("gw_api", NULL, NULL, test_unsupported_fields_are_400s,
                                     test_logit_bias, test_penalties_and_min_tokens,
                                     test_include_stop_str, test_logprobs, test_tokenize_routes,
                                     test_cors, test_promtool, test_openai_npm, test_n_choices,
                                     test_n_stream, test_n_prefill_once, test_echo,
                                     test_prompt_list, test_choices_errors);
    }
    moon_serve_client_destroy(g_client);
    moon_serve_cluster_stop(g_cluster);
    moon_runtime_shutdown(g_rt, 0);
    moon_runtime_wait(g_rt);
    moon_runtime_destroy(g_rt);
    return rc;
}
