/* tests/fuzz/fuzz_gw_http.c - the gateway's HTTP handling on any bytes: a
 * real gateway (libmicrohttpd, the connection guard, the routes, the
 * OpenAI parsing, the bridge) in front of a fake conductor that answers
 * every request at once, on a loopback port. Each input is sent on a new
 * connection whose write side is then shut; whatever the server sends back
 * must be HTTP, and a /health on a new connection must then be answered
 * (else: a hang, abort). One gateway for the process, made on the first
 * input. */
#include "fuzz_target.h"
#include "gateway.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_msgs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static moon_runtime_t *g_rt;
static uint16_t        g_port;

static moon_status_t fake_on_submit(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    const moon_serve_submit_t *s = (const moon_serve_submit_t *)msg;
    moon_serve_done_t         *d = moon_msg_new(MOON_MSG_SERVE_DONE, 64);

    if (d == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    d->request_id = s->request_id;
    /* max_tokens picks the ending: text, an error, or a rejection */
    d->finish = s->max_tokens % 3 == 0   ? MOON_FINISH_STOP
                : s->max_tokens % 3 == 1 ? MOON_FINISH_LENGTH
                                         : MOON_FINISH_REJECTED;
    moon_msg_set_str(d, &d->text, "ok \xe2\x82\xac");
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

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int tcp_open(void)
{
    struct sockaddr_in a  = {0};
    int                fd = socket(AF_INET, SOCK_STREAM, 0);

    a.sin_family = AF_INET;
    a.sin_port   = htons(g_port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Sends data, shuts the write side, reads until close, until 100 ms of
 * silence (quiet != 0: 10 ms before any byte came), or 5 s: the bytes read
 * (into buf, cap), or -1 when nothing came and the connection stayed open. */
static long exchange(const uint8_t *data, size_t size, char *buf, size_t cap, int quiet)
{
    int      fd = tcp_open();
    size_t   n  = 0;
    uint64_t t0 = now_ms();

    if (fd < 0) {
        fprintf(stderr, "fuzz_gw_http: cannot connect: %s\n", strerror(errno));
        abort();
    }
    while (size > 0) {
        ssize_t k = send(fd, data, size, MSG_NOSIGNAL);
        if (k <= 0) {
            break; /* the server closed early: fine */
        }
        data += k;
        size -= (size_t)k;
    }
    shutdown(fd, SHUT_WR);
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        char          sink[4096];
        ssize_t       k;

        if (now_ms() - t0 > 5000) {
            close(fd);
            return -1;
        }
        /* 100 ms of silence ends an answer; 10 ms before any byte, if quiet */
        if (poll(&p, 1, n == 0 && quiet ? 10 : 100) <= 0) {
            /* an answer came and then nothing for 100 ms: done (the server
             * may keep a half-closed keep-alive connection until its idle
             * timeout; that is bounded, and slow to wait for) */
            if (n > 0 || quiet) {
                break;
            }
            continue;
        }
        k = recv(fd, n + 1 < cap ? buf + n : sink, n + 1 < cap ? cap - n - 1 : sizeof(sink), 0);
        if (k <= 0) {
            break;
        }
        if (n + 1 < cap) {
            n += (size_t)k;
        }
    }
    close(fd);
    buf[n] = '\0';
    return (long)n;
}

static void fuzz_init(void)
{
    moon_runtime_config_t rcfg;
    moon_gateway_args_t   args;
    moon_addr_t           fake, gw;
    char                  buf[256];

    moon_log_set_level(MOON_LOG_ERROR);
    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 1;
    memset(&args, 0, sizeof(args));
    moon_gateway_config_default(&args.config);
    args.config.port             = 0;
    args.config.body_limit_bytes = 64 << 10;
    /* an input cut short (half a request line) waits for its deadline: many
     * linger at once, from one address */
    args.config.header_timeout_s       = 1;
    args.config.body_timeout_s         = 2;
    args.config.idle_timeout_s         = 2;
    args.config.write_timeout_s        = 2;
    args.config.max_connections        = 4096;
    args.config.max_connections_per_ip = 0;
    args.config.api_key                = NULL;
    args.config.stats_interval_ms      = 10;
    args.port_p                        = &g_port;
    if (moon_serve_msgs_register() != MOON_OK || moon_runtime_create(&rcfg, &g_rt) != MOON_OK ||
        moon_runtime_start(g_rt) != MOON_OK ||
        moon_spawn(g_rt, &fake_ops, NULL, NULL, &fake) != MOON_OK) {
        abort();
    }
    args.conductor = fake;
    if (moon_spawn(g_rt, &moon_gateway_ops, &args, NULL, &gw) != MOON_OK) {
        abort();
    }
    /* served once the fake's first STATS is in */
    for (int i = 0; i < 500; i++) {
        static const uint8_t health[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        if (exchange(health, sizeof(health) - 1, buf, sizeof(buf), 0) > 12 &&
            strncmp(buf, "HTTP/1.1 200", 12) == 0) {
            return;
        }
        struct timespec t = {0, 10000000};
        nanosleep(&t, NULL);
    }
    fprintf(stderr, "fuzz_gw_http: the gateway never became ready\n");
    abort();
}

/* The server still answers a plain request (nothing hangs). */
static void probe(void)
{
    static const uint8_t health[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    char                 buf[256];

    for (int i = 0; i < 50; i++) {
        if (exchange(health, sizeof(health) - 1, buf, sizeof(buf), 0) > 12 &&
            strncmp(buf, "HTTP/1.1 200", 12) == 0) {
            return;
        }
    }
    fprintf(stderr, "fuzz_gw_http: the server stopped answering /health\n");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char buf[1 << 16];
    long        n;

    if (g_rt == NULL) {
        fuzz_init();
    }
    /* half a request gets no answer until its deadline: not waited for
     * (the probe tells a hang from that) */
    n = exchange(data, size, buf, sizeof(buf), 1);
    if (n > 0 && strncmp(buf, "HTTP/1.", 7) != 0) {
        fprintf(stderr, "fuzz_gw_http: the server sent something other than HTTP: %.80s\n", buf);
        abort();
    }
    probe();
    return 0;
}
