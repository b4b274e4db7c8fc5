/* tests/e2e/gateway/test_gw_hostile.c - the gateway against hostile
 * clients, over raw loopback sockets: ambiguous HTTP framing (each case
 * answered once, 400 or 501, and the connection closed, so no leftover byte
 * runs as a second request), strict JSON bodies, the caps on what travels
 * between ranks, errors in valid UTF-8, 429 with Retry-After past
 * max-requests (and the log lines about it rate-limited), a Slowloris flood
 * (slow headers, more connections than the server takes) and a slow-body
 * flood beside a normal client that must be served throughout, the
 * per-address connection limit, and a shutdown with a request parked.
 * A fake conductor answers at once ("ok"), or holds requests with
 * max_tokens 99 until their client leaves. Loopback only, bounded in time;
 * timings are printed (the figures), never asserted. */
#include "gateway.h"
#include "gw_json.h"
#include "moon_test.h"
#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_msgs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HOLD_TOKENS 99  /* max_tokens the fake conductor never answers */
#define FLOOD_TOKENS 98 /* max_tokens answered with 16 MB of tokens */

static moon_runtime_t *g_rt;
static moon_addr_t     g_fake;

/* ---- a fake conductor --------------------------------------------------------- */
static moon_status_t fake_on_submit(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    const moon_serve_submit_t *s = (const moon_serve_submit_t *)msg;
    moon_serve_done_t         *d;
    uint32_t                   n_sent = 0;

    if (s->max_tokens == HOLD_TOKENS) {
        return MOON_OK; /* held: its client leaves, or the gateway stops */
    }
    if (s->max_tokens == FLOOD_TOKENS) {
        static char text[8192];

        memset(text, 't', sizeof(text) - 1);
        for (uint32_t i = 0; i < 2048; i++) {
            moon_serve_token_t *t = moon_msg_new(MOON_MSG_SERVE_TOKEN, sizeof(text) + 8);
            if (t == NULL) {
                break;
            }
            t->request_id = s->request_id;
            t->index      = i;
            moon_msg_set_str(t, &t->text, text);
            n_sent += moon_tell(self, s->reply_to, &t->hdr) == MOON_OK;
        }
    }
    d = moon_msg_new(MOON_MSG_SERVE_DONE, 64);
    if (d == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    d->request_id   = s->request_id;
    d->finish       = MOON_FINISH_STOP;
    d->n_completion = n_sent; /* the tokens sent: a client waits for as many before DONE */
    moon_msg_set_str(d, &d->text, "ok");
    moon_msg_set_str(d, &d->message, "");
    /* a gateway that stopped meanwhile is no error of the fake's (an error
     * would stop it) */
    (void)moon_tell(self, s->reply_to, &d->hdr);
    return MOON_OK;
}

static moon_status_t fake_on_ignore(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)self;
    (void)msg;
    return MOON_OK;
}

static moon_status_t fake_on_stats(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    moon_serve_stats_reply_t *r = moon_msg_new(MOON_MSG_SERVE_STATS_REPLY, 64);

    if (r == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    r->req          = ((const moon_serve_stats_req_t *)msg)->req;
    r->n_prefill_up = 1;
    r->n_decode_up  = 1;
    (void)moon_tell(self, msg->src, &r->hdr);
    return MOON_OK;
}

static const moon_actor_ops_t fake_ops = {
    .name   = "fake_conductor",
    .on_msg = {[MOON_MSG_SERVE_SUBMIT] = fake_on_submit,
               [MOON_MSG_SERVE_CANCEL] = fake_on_ignore,
               [MOON_MSG_SERVE_STATS]  = fake_on_stats},
};

/* ---- clock, sockets ---------------------------------------------------------------- */

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void nap_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* A connection to the gateway from src (a loopback address: 127.0.0.1 is the
 * attacker's, 127.0.0.2 the normal client's); -1 on failure. nonblock: the
 * connect may still be in progress. */
static int tcp_open(unsigned port, const char *src, int nonblock)
{
    struct sockaddr_in a  = {0};
    int                fd = socket(AF_INET, SOCK_STREAM | (nonblock ? SOCK_NONBLOCK : 0), 0);

    if (fd < 0) {
        return -1;
    }
    a.sin_family = AF_INET;
    inet_pton(AF_INET, src, &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

typedef struct {
    char  *text; /* malloc'd, NUL-terminated */
    size_t len;
    int    closed; /* the server closed the connection (before the deadline) */
    int    code;   /* status of the first response; 0: none */
    int    n_responses;
} reply_t;

/* Reads until the server closes or deadline_ms passes. */
static void read_reply(int fd, uint64_t deadline_ms, reply_t *r)
{
    size_t cap = 1 << 16;

    memset(r, 0, sizeof(*r));
    r->text = malloc(cap);
    while (r->text != NULL) {
        struct pollfd p = {fd, POLLIN, 0};
        uint64_t      t = now_ms();
        ssize_t       n;

        if (t >= deadline_ms || poll(&p, 1, (int)(deadline_ms - t)) <= 0) {
            break;
        }
        if (r->len + 4096 > cap) {
            char *more = realloc(r->text, cap * 2);
            if (more == NULL) {
                break;
            }
            r->text = more;
            cap *= 2;
        }
        n = recv(fd, r->text + r->len, cap - r->len - 1, 0);
        if (n <= 0) {
            r->closed = 1;
            break;
        }
        r->len += (size_t)n;
    }
    if (r->text == NULL) {
        return;
    }
    r->text[r->len] = '\0';
    for (const char *p = r->text; (p = strstr(p, "HTTP/1.1 ")) != NULL; p += 9) {
        r->n_responses++;
    }
    if (r->len > 12 && strncmp(r->text, "HTTP/1.", 7) == 0) {
        r->code = atoi(r->text + 9);
    }
}

/* Sends raw bytes on a new connection and reads the reply (30 s at most: a
 * busy machine, a sanitizer build, megabytes of JSON). */
static void exchange(unsigned port, const char *req, size_t len, reply_t *r)
{
    int fd = tcp_open(port, "127.0.0.1", 0);

    memset(r, 0, sizeof(*r));
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(send_all(fd, req, len), 0);
    read_reply(fd, now_ms() + 30000, r);
    close(fd);
}

static const char *body_of(const reply_t *r)
{
    const char *b = strstr(r->text, "\r\n\r\n");

    return b != NULL ? b + 4 : "";
}

/* The first response's error object: its param ("" for null). */
static void expect_error(const reply_t *r, int code, const char *param)
{
    cJSON       *j;
    const cJSON *e;

    if (r->code != code) {
        fprintf(stderr, "want %d, got: %.300s\n", code, r->text);
    }
    CU_ASSERT_EQUAL(r->code, code);
    j = cJSON_Parse(body_of(r));
    e = cJSON_GetObjectItem(j, "error");
    CU_ASSERT_PTR_NOT_NULL(e);
    CU_ASSERT_TRUE(cJSON_IsString(cJSON_GetObjectItem(e, "message")));
    if (param != NULL) {
        const cJSON *p = cJSON_GetObjectItem(e, "param");
        CU_ASSERT_STRING_EQUAL(cJSON_IsString(p) ? p->valuestring : "", param);
    }
    cJSON_Delete(j);
}

static void post_raw(unsigned port, const char *body, size_t len, reply_t *r)
{
    char  head[256];
    char *req;
    int   n = snprintf(head, sizeof(head),
                       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                       len);

    req = malloc((size_t)n + len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(req);
    memcpy(req, head, (size_t)n);
    memcpy(req + n, body, len);
    exchange(port, req, (size_t)n + len, r);
    free(req);
}

/* One normal request from 127.0.0.2: the status, 0 if none came within
 * timeout_ms; *ms_p its latency. */
static int normal_request(unsigned port, uint64_t timeout_ms, uint64_t *ms_p)
{
    static const char req[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                              "Content-Length: 14\r\n\r\n{\"prompt\":\"x\"}";
    uint64_t          t0    = now_ms();
    int               fd    = tcp_open(port, "127.0.0.2", 0);
    reply_t           r;

    if (fd < 0) {
        return 0;
    }
    send_all(fd, req, sizeof(req) - 1);
    read_reply(fd, t0 + timeout_ms, &r);
    close(fd);
    *ms_p = now_ms() - t0;
    free(r.text);
    return r.code;
}

static void reply_fini(reply_t *r)
{
    free(r->text);
    r->text = NULL;
}

/* ---- gateways ------------------------------------------------------------------------ */

static moon_addr_t spawn(moon_gateway_config_t *cfg, unsigned *port_p)
{
    moon_gateway_args_t args;
    uint16_t            port = 0;
    moon_addr_t         addr = MOON_ADDR_NONE;

    memset(&args, 0, sizeof(args));
    args.config                   = *cfg;
    args.config.port              = 0;
    args.config.stats_interval_ms = 20;
    args.conductor                = g_fake;
    args.port_p                   = &port;
    if (moon_spawn(g_rt, &moon_gateway_ops, &args, NULL, &addr) != MOON_OK) {
        return MOON_ADDR_NONE;
    }
    *port_p = port;
    /* ready once the fake's first STATS came */
    for (int i = 0; i < 500; i++) {
        static const char health[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        int               fd       = tcp_open(port, "127.0.0.1", 0);
        reply_t           r;

        if (fd >= 0 && send_all(fd, health, sizeof(health) - 1) == 0) {
            read_reply(fd, now_ms() + 5000, &r);
            free(r.text);
            if (r.code == 200) {
                close(fd);
                return addr;
            }
        }
        if (fd >= 0) {
            close(fd);
        }
        nap_ms(10);
    }
    return MOON_ADDR_NONE;
}

static moon_gateway_config_t config(void)
{
    moon_gateway_config_t cfg;

    moon_gateway_config_default(&cfg);
    return cfg;
}

static unsigned g_port; /* a gateway with the default options */

/* ---- framing -------------------------------------------------------------------------- */

/* Each ambiguous framing: one answer (400 or 501), the connection closed, and
 * the bytes after the head never run as a request of their own. */
static void test_framing(void)
{
    static const struct {
        const char *req;
        int         code;
    } cases[] = {
        /* Content-Length and Transfer-Encoding: the chunked body ends at once, the
         * rest would be a request */
        {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 44\r\nTransfer-Encoding: "
         "chunked\r\n\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n",
         400},
        {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
         "chunked\r\nContent-Length: "
         "3\r\n\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n",
         400},
        /* two Content-Lengths */
        {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: "
         "40\r\n\r\n{}GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
         400},
        {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: "
         "2\r\n\r\n{}GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
         400},
        {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2, 2\r\n\r\n{}", 400},
        {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -2\r\n\r\n{}", 400},
        /* an unknown or doubled Transfer-Encoding */
        {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n{}", 501},
        {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
         "0\r\n\r\n",
         501},
        {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
         "Transfer-Encoding: identity\r\n\r\n0\r\n\r\n",
         501},
        {"GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n", 501},
        /* an answer before the body is read closes: its bytes are no request */
        {"POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 35\r\n\r\n"
         "GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
         404},
    };

    for (size_t i = 0; i < MOON_ARRAY_SIZE(cases); i++) {
        reply_t r;

        exchange(g_port, cases[i].req, strlen(cases[i].req), &r);
        /* (libmicrohttpd answers a malformed Content-Length itself, its head twice) */
        if (r.code != cases[i].code || strstr(r.text, " 200 OK") != NULL || !r.closed) {
            fprintf(stderr, "case %zu: want one %d and a close, got %d responses, closed %d: %s\n",
                    i, cases[i].code, r.n_responses, r.closed, r.text);
        }
        CU_ASSERT_EQUAL(r.code, cases[i].code);
        CU_ASSERT_PTR_NULL(strstr(r.text, " 200 OK")); /* the leftover never ran */
        CU_ASSERT_TRUE(r.closed);
        reply_fini(&r);
    }
}

/* Well-framed requests still share a keep-alive connection (chunked too). */
static void test_keep_alive_still_works(void)
{
    static const char req[] =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 14\r\n\r\n{\"prompt\":\"x\"}"
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        "e\r\n{\"prompt\":\"x\"}\r\n0\r\n\r\n"
        "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    reply_t r;

    exchange(g_port, req, sizeof(req) - 1, &r);
    CU_ASSERT_EQUAL(r.code, 200);
    CU_ASSERT_EQUAL(r.n_responses, 3);
    CU_ASSERT_TRUE(r.closed);
    reply_fini(&r);
}

/* ---- bodies -------------------------------------------------------------------------- */

static void test_json_bodies(void)
{
    static const char nul[] = "{\"prompt\":\"abc\0def\"}";
    reply_t           r;

    post_raw(g_port, "{\"prompt\":\"a\",\"prompt\":\"b\"}", 27, &r);
    expect_error(&r, 400, "prompt");
    reply_fini(&r);
    post_raw(g_port, "{\"prompt\":\"a\"}{\"prompt\":\"b\"}", 28, &r);
    expect_error(&r, 400, "");
    reply_fini(&r);
    post_raw(g_port, "{\"prompt\":\"a\\u0000b\"}", 21, &r);
    expect_error(&r, 400, "");
    CU_ASSERT_PTR_NOT_NULL(strstr(r.text, "NUL"));
    reply_fini(&r);
    post_raw(g_port, nul, sizeof(nul) - 1, &r);
    expect_error(&r, 400, "");
    reply_fini(&r);
    post_raw(g_port, "{\"prompt\":\"fine\"}", 17, &r);
    CU_ASSERT_EQUAL(r.code, 200);
    reply_fini(&r);
}

/* What the issue saw accepted: 16 stop strings of 250 KB, 700,000 stop ids. */
static void test_caps(void)
{
    size_t   cap  = 5u << 20;
    char    *body = malloc(cap);
    size_t   n;
    reply_t  r;
    uint64_t t0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(body);
    n = (size_t)snprintf(body, cap, "{\"prompt\":\"a\",\"stop\":[");
    for (int i = 0; i < 16; i++) {
        body[n++] = i > 0 ? ',' : ' ';
        body[n++] = '"';
        memset(body + n, 'a' + i, 250000);
        n += 250000;
        body[n++] = '"';
    }
    n += (size_t)snprintf(body + n, cap - n, "]}");
    t0 = now_ms();
    post_raw(g_port, body, n, &r);
    printf("\n  [figures] 16 stop strings of 250 KB (%zu bytes): 400 in %llu ms", n,
           (unsigned long long)(now_ms() - t0));
    expect_error(&r, 400, "stop");
    reply_fini(&r);
    n = (size_t)snprintf(body, cap, "{\"prompt\":\"a\",\"stop_token_ids\":[1");
    for (int i = 1; i < 700000; i++) {
        body[n++] = ',';
        body[n++] = '1';
    }
    n += (size_t)snprintf(body + n, cap - n, "]}");
    t0 = now_ms();
    post_raw(g_port, body, n, &r);
    printf("\n  [figures] 700,000 stop ids (%zu bytes): 400 in %llu ms\n", n,
           (unsigned long long)(now_ms() - t0));
    expect_error(&r, 400, "stop_token_ids");
    reply_fini(&r);
    free(body);
}

/* Errors echo the url: /v1/models/%ff must still answer valid UTF-8. */
static void test_errors_are_utf8(void)
{
    static const char *paths[] = {"/v1/models/%ff", "/v1/models/%c3%28x", "/v%ed%a0%80",
                                  "/v1/models/%f0%9f%98"};

    for (size_t i = 0; i < MOON_ARRAY_SIZE(paths); i++) {
        char        req[256];
        reply_t     r;
        const char *b;

        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 paths[i]);
        exchange(g_port, req, strlen(req), &r);
        expect_error(&r, 404, NULL);
        b = body_of(&r);
        CU_ASSERT_EQUAL(moon_gw_utf8_valid_len(b, strlen(b)), strlen(b));
        reply_fini(&r);
    }
}

/* ---- overload ----------------------------------------------------------------------- */

static atomic_int g_n_429_lines;

static void count_lines(int level, const char *line, void *arg)
{
    (void)level;
    (void)arg;
    if (strstr(line, "requests being served, the limit") != NULL) {
        atomic_fetch_add(&g_n_429_lines, 1);
    }
}

/* Past max-requests: 429 with Retry-After at once, nothing queued; the log
 * says so at most once a second; capacity comes back when clients leave; a
 * gateway stopped with a request parked ends it (no 5 s wait). */
static void test_overload_429(void)
{
    moon_gateway_config_t cfg = config();
    char                  req[256];
    int                   held[4];
    unsigned              port;
    moon_addr_t           gw;
    uint64_t              worst = 0, t0;
    reply_t               r;
    int                   n;

    cfg.max_requests = 4;
    gw               = spawn(&cfg, &port);
    CU_ASSERT_FATAL(gw != MOON_ADDR_NONE);
    n = snprintf(req, sizeof(req),
                 "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n\r\n"
                 "{\"prompt\":\"x\",\"max_tokens\":%d}",
                 HOLD_TOKENS);
    for (int i = 0; i < 4; i++) {
        held[i] = tcp_open(port, "127.0.0.1", 0);
        CU_ASSERT_FATAL(held[i] >= 0);
        CU_ASSERT_EQUAL(send_all(held[i], req, (size_t)n), 0);
    }
    nap_ms(200); /* the four are admitted and parked */
    atomic_store(&g_n_429_lines, 0);
    moon_log_set_sink(count_lines, NULL);
    moon_log_set_level(MOON_LOG_INFO);
    for (int i = 0; i < 50; i++) {
        t0 = now_ms();
        post_raw(port, "{\"prompt\":\"x\"}", 14, &r);
        worst = MOON_MAX(worst, now_ms() - t0);
        expect_error(&r, 429, NULL);
        CU_ASSERT_PTR_NOT_NULL(strstr(r.text, "Retry-After: 1\r\n"));
        reply_fini(&r);
    }
    moon_log_set_level(MOON_LOG_WARN);
    moon_log_set_sink(NULL, NULL);
    printf("\n  [figures] 429 past max-requests: slowest of 50 answers %llu ms; %d log lines "
           "for 50 rejections\n",
           (unsigned long long)worst, atomic_load(&g_n_429_lines));
    CU_ASSERT(atomic_load(&g_n_429_lines) >= 1 && atomic_load(&g_n_429_lines) <= 10);
    /* two clients leave: two requests fit again */
    close(held[0]);
    close(held[1]);
    for (int i = 0; i < 100; i++) {
        post_raw(port, "{\"prompt\":\"x\"}", 14, &r);
        n = r.code;
        reply_fini(&r);
        if (n == 200) {
            break;
        }
        nap_ms(20);
    }
    CU_ASSERT_EQUAL(n, 200);
    /* stopping ends the two still parked: they get their answer */
    t0 = now_ms();
    CU_ASSERT_EQUAL(moon_stop(g_rt, gw, MOON_OK), MOON_OK);
    for (int i = 2; i < 4; i++) {
        read_reply(held[i], now_ms() + 10000, &r);
        CU_ASSERT_TRUE(r.code >= 500);
        CU_ASSERT_TRUE(r.closed);
        reply_fini(&r);
        close(held[i]);
    }
    printf("  [figures] stop with 2 requests parked: answered in %llu ms\n",
           (unsigned long long)(now_ms() - t0));
}

/* A client that stops reading its stream is cut after write_timeout_s of no
 * progress (here 2 s; the idle timeout, 30 s, is not what ends it). */
static void test_slow_reader(void)
{
    moon_gateway_config_t cfg = config();
    char                  req[256];
    unsigned              port;
    moon_addr_t           gw;
    uint64_t              t0;
    reply_t               r;
    int                   fd, rcvbuf = 16 << 10, n;

    cfg.write_timeout_s = 2;
    gw                  = spawn(&cfg, &port);
    CU_ASSERT_FATAL(gw != MOON_ADDR_NONE);
    n  = snprintf(req, sizeof(req),
                  "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 44\r\n\r\n"
                   "{\"prompt\":\"x\",\"max_tokens\":%d,\"stream\":true}",
                  FLOOD_TOKENS);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    CU_ASSERT_FATAL(fd >= 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    {
        struct sockaddr_in a = {0};
        a.sin_family         = AF_INET;
        a.sin_port           = htons((uint16_t)port);
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        CU_ASSERT_FATAL(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    }
    CU_ASSERT_EQUAL(send_all(fd, req, (size_t)n), 0);
    t0 = now_ms();
    nap_ms(5000); /* not reading: the server's writes stall */
    read_reply(fd, now_ms() + 20000, &r);
    printf("\n  [figures] a client that stops reading: cut, %zu bytes had come, %llu ms\n", r.len,
           (unsigned long long)(now_ms() - t0));
    CU_ASSERT_EQUAL(r.code, 200);
    CU_ASSERT_TRUE(r.closed);
    CU_ASSERT_PTR_NULL(strstr(r.text, "data: [DONE]"));
    CU_ASSERT_TRUE(r.len < (size_t)2048 * 8191);
    reply_fini(&r);
    close(fd);
    moon_stop(g_rt, gw, MOON_OK);
}

/* ---- slow clients ---------------------------------------------------------------------- */

typedef struct {
    unsigned   port;
    int        n_conns;
    int        slow_body; /* 0: headers trickle; 1: the head whole, then the body trickles */
    int        step_ms;   /* one byte per connection per step */
    atomic_int stop;
    int        fds[512];
    int        started[512]; /* the opening bytes went out */
    uint64_t   opened_ms[512];
    /* results */
    uint64_t  n_opened, n_closed_by_server;
    uint64_t  longest_open_ms; /* the longest a connection lived before the server cut it */
    pthread_t thread;
} attack_t;

static const char slow_head[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
static const char body_head[] =
    "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n";

static int attack_open(attack_t *a, int i)
{
    a->fds[i] = tcp_open(a->port, "127.0.0.1", 1);
    if (a->fds[i] < 0) {
        return -1;
    }
    a->opened_ms[i] = now_ms();
    a->started[i]   = 0;
    a->n_opened++;
    return 0;
}

/* Every connection sends its first bytes, then one byte per step; one that
 * the server closes is opened again (as a real Slowloris does). */
static void *attack_main(void *arg)
{
    attack_t *a = arg;

    for (int i = 0; i < a->n_conns; i++) {
        attack_open(a, i);
    }
    while (!atomic_load(&a->stop)) {
        for (int i = 0; i < a->n_conns; i++) {
            char        probe;
            const char *first = a->slow_body ? body_head : slow_head;
            size_t      len   = a->slow_body ? sizeof(body_head) - 1 : sizeof(slow_head) - 1;
            ssize_t     n;

            if (a->fds[i] < 0) {
                attack_open(a, i);
                continue;
            }
            n = recv(a->fds[i], &probe, 1, MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN)) {
                a->n_closed_by_server++;
                a->longest_open_ms = MOON_MAX(a->longest_open_ms, now_ms() - a->opened_ms[i]);
                close(a->fds[i]);
                attack_open(a, i);
                continue;
            }
            if (n > 0) { /* an answer (408?): it is closing */
                continue;
            }
            /* the opening once connected, then a byte per step */
            if (!a->started[i]) {
                a->started[i] = send(a->fds[i], first, len, MSG_NOSIGNAL | MSG_DONTWAIT) > 0;
            } else {
                send(a->fds[i], a->slow_body ? "x" : "X", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            }
        }
        nap_ms(a->step_ms);
    }
    for (int i = 0; i < a->n_conns; i++) {
        if (a->fds[i] >= 0) {
            close(a->fds[i]);
        }
    }
    return NULL;
}

/* Runs an attack for run_ms while a normal client (another address) makes a
 * request every 200 ms; every one must be answered (within 10 s each). */
static void run_attack(const char *what, unsigned port, int n_conns, int slow_body, int run_ms,
                       attack_t *a)
{
    uint64_t lat[256];
    int      n = 0, ok  = 0;
    uint64_t t_end, sum = 0, worst = 0;

    memset(a, 0, sizeof(*a));
    a->port      = port;
    a->n_conns   = n_conns;
    a->slow_body = slow_body;
    a->step_ms   = 100;
    CU_ASSERT_FATAL(pthread_create(&a->thread, NULL, attack_main, a) == 0);
    nap_ms(500); /* the flood is in place */
    t_end = now_ms() + (uint64_t)run_ms;
    while (now_ms() < t_end && n < (int)MOON_ARRAY_SIZE(lat)) {
        int code = normal_request(port, 10000, &lat[n]);

        ok += code == 200;
        sum += lat[n];
        worst = MOON_MAX(worst, lat[n]);
        n++;
        nap_ms(200);
    }
    atomic_store(&a->stop, 1);
    pthread_join(a->thread, NULL);
    printf("\n  [figures] %s: %d attack connections (%llu opened, %llu cut by the server, the "
           "longest lived %llu ms); normal client: %d/%d served, mean %llu ms, worst %llu ms\n",
           what, n_conns, (unsigned long long)a->n_opened,
           (unsigned long long)a->n_closed_by_server, (unsigned long long)a->longest_open_ms, ok, n,
           (unsigned long long)(n > 0 ? sum / (uint64_t)n : 0), (unsigned long long)worst);
    CU_ASSERT_TRUE(n > 0);
    CU_ASSERT_EQUAL(ok, n);
}

/* 300 connections trickling their headers at a server that takes 128 (no
 * per-address limit: as from many addresses): the oldest are cut to make
 * room, each is cut by its header deadline, and the normal client is served. */
static void test_slowloris(void)
{
    moon_gateway_config_t cfg = config();
    attack_t             *a   = moon_calloc(1, sizeof(*a));
    unsigned              port;
    moon_addr_t           gw;

    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    cfg.max_connections        = 128;
    cfg.max_connections_per_ip = 0;
    cfg.header_timeout_s       = 3;
    gw                         = spawn(&cfg, &port);
    CU_ASSERT_FATAL(gw != MOON_ADDR_NONE);
    run_attack("slowloris, 128 connections at most", port, 300, 0, 6000, a);
    CU_ASSERT_TRUE(a->n_closed_by_server > 0);
    moon_stop(g_rt, gw, MOON_OK);
    moon_free(a);
}

/* 100 connections sending their body a byte at a time: cut at the body
 * deadline; the normal client is served meanwhile. */
static void test_slow_body(void)
{
    moon_gateway_config_t cfg = config();
    attack_t             *a   = moon_calloc(1, sizeof(*a));
    unsigned              port;
    moon_addr_t           gw;

    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    cfg.max_connections        = 64;
    cfg.max_connections_per_ip = 0;
    cfg.body_timeout_s         = 2;
    gw                         = spawn(&cfg, &port);
    CU_ASSERT_FATAL(gw != MOON_ADDR_NONE);
    run_attack("slow body, 64 connections at most", port, 100, 1, 6000, a);
    CU_ASSERT_TRUE(a->n_closed_by_server >= 64);
    moon_stop(g_rt, gw, MOON_OK);
    moon_free(a);
}

/* One address holds at most max-connections-per-ip: the flood from
 * 127.0.0.1 leaves room for 127.0.0.2. */
static void test_per_ip_limit(void)
{
    moon_gateway_config_t cfg = config();
    attack_t             *a   = moon_calloc(1, sizeof(*a));
    unsigned              port;
    moon_addr_t           gw;

    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    cfg.max_connections        = 128;
    cfg.max_connections_per_ip = 16;
    gw                         = spawn(&cfg, &port);
    CU_ASSERT_FATAL(gw != MOON_ADDR_NONE);
    run_attack("per-address limit 16", port, 100, 0, 3000, a);
    /* those past the limit are closed at once, again and again */
    CU_ASSERT_TRUE(a->n_closed_by_server >= 84);
    moon_stop(g_rt, gw, MOON_OK);
    moon_free(a);
}

int main(void)
{
    moon_runtime_config_t rcfg;
    moon_gateway_config_t cfg;
    int                   rc;

    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 2;
    if (moon_serve_msgs_register() != MOON_OK || moon_runtime_create(&rcfg, &g_rt) != MOON_OK ||
        moon_runtime_start(g_rt) != MOON_OK ||
        moon_spawn(g_rt, &fake_ops, NULL, NULL, &g_fake) != MOON_OK) {
        fprintf(stderr, "test_gw_hostile: no runtime\n");
        return 1;
    }
    cfg = config();
    if (spawn(&cfg, &g_port) == MOON_ADDR_NONE) {
        fprintf(stderr, "test_gw_hostile: the gateway did not start\n");
        return 1;
    }
    rc = MOON_TEST_RUN("gw_hostile", NULL, NULL, test_framing, test_keep_alive_still_works,
                       test_json_bodies, test_caps, test_errors_are_utf8, test_overload_429,
                       test_slow_reader, test_slowloris, test_slow_body, test_per_ip_limit);
    moon_runtime_shutdown(g_rt, 0);
    moon_runtime_wait(g_rt);
    moon_runtime_destroy(g_rt);
    return rc;
}
