/* tests/unit/actors/test_serve_order.c - a request's stream put back in
 * order on the client's side (moonlet/serve_order.h): the first token late
 * (after token 1, after DONE), a resumed stream's numbering, repeats, and
 * the deadlines: a token that never comes
 * ends the stream resumable, with or without the server's DONE. */
#include "moon_test.h"

#include "moonlet/serve_msgs.h"
#include "moonlet/log.h"
#include "moonlet/serve_order.h"

#include <string.h>

#define WAIT MOON_SERVE_ORDER_WAIT_NS

/* What went out: -1 for DONE, else the token's index. */
static struct {
    int32_t  seq[32];
    uint32_t n;
    uint32_t done_finish, done_n_completion;
    int32_t  done_status;
} g;

static void out(void *arg, const moon_msg_hdr_t *msg)
{
    (void)arg;
    CU_ASSERT_FATAL(g.n < 32);
    if (msg->type == MOON_MSG_SERVE_DONE) {
        const moon_serve_done_t *d = (const void *)msg;
        g.seq[g.n++]               = -1;
        g.done_finish              = d->finish;
        g.done_status              = d->status;
        g.done_n_completion        = d->n_completion;
        return;
    }
    CU_ASSERT_EQUAL_FATAL(msg->type, MOON_MSG_SERVE_TOKEN);
    g.seq[g.n++] = (int32_t)((const moon_serve_token_t *)(const void *)msg)->index;
}

/* Feeds a TOKEN of index i (request 9); returns feed's answer. */
static int feed_token(moon_serve_order_t *o, uint32_t i, uint64_t now)
{
    moon_serve_token_t *t = moon_msg_new(MOON_MSG_SERVE_TOKEN, 8);
    int                 r;

    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    t->request_id = 9;
    t->index      = i;
    t->token      = 100 + i;
    moon_msg_set_str(t, &t->text, "x");
    r = moon_serve_order_feed(o, &t->hdr, now, out, NULL);
    moon_msg_release(&t->hdr);
    return r;
}

static int feed_done(moon_serve_order_t *o, uint32_t n_completion, uint64_t now)
{
    moon_serve_done_t *d = moon_msg_new(MOON_MSG_SERVE_DONE, 8);
    int                r;

    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    d->request_id   = 9;
    d->finish       = MOON_FINISH_LENGTH;
    d->n_completion = n_completion;
    r               = moon_serve_order_feed(o, &d->hdr, now, out, NULL);
    moon_msg_release(&d->hdr);
    return r;
}

static void check_seq(const int32_t *want, uint32_t n)
{
    CU_ASSERT_EQUAL_FATAL(g.n, n);
    for (uint32_t i = 0; i < n; i++) {
        CU_ASSERT_EQUAL(g.seq[i], want[i]);
    }
}

/* Token 0 after 1 and 2: all go out in order once it comes, then DONE. */
static void test_first_late(void)
{
    moon_serve_order_t o;

    memset(&g, 0, sizeof(g));
    moon_serve_order_init(&o, 0);
    CU_ASSERT_EQUAL(feed_token(&o, 1, 10), 0);
    CU_ASSERT_EQUAL(feed_token(&o, 2, 11), 0);
    CU_ASSERT_EQUAL(g.n, 0);
    CU_ASSERT(moon_serve_order_waiting(&o));
    CU_ASSERT_EQUAL(feed_token(&o, 0, 12), 0);
    CU_ASSERT(!moon_serve_order_waiting(&o));
    CU_ASSERT_EQUAL(feed_done(&o, 3, 13), 1);
    check_seq((const int32_t[]){0, 1, 2, -1}, 4);
    CU_ASSERT_EQUAL(g.done_finish, MOON_FINISH_LENGTH);
    moon_serve_order_fini(&o);
}

/* DONE (2 tokens) before token 0 and 1: it waits for both. */
static void test_done_before_first(void)
{
    moon_serve_order_t o;

    memset(&g, 0, sizeof(g));
    moon_serve_order_init(&o, 0);
    CU_ASSERT_EQUAL(feed_done(&o, 2, 10), 0);
    CU_ASSERT_EQUAL(feed_token(&o, 1, 11), 0);
    CU_ASSERT_EQUAL(g.n, 0);
    CU_ASSERT_EQUAL(feed_token(&o, 0, 12), 1);
    check_seq((const int32_t[]){0, 1, -1}, 3);
    /* after the end: nothing more goes out */
    CU_ASSERT_EQUAL(feed_token(&o, 2, 13), 0);
    CU_ASSERT_EQUAL(g.n, 3);
    moon_serve_order_fini(&o);
}

/* A resumed stream starts at its resume count; repeats below it (sent
 * before the loss) and repeats of held ones go nowhere. */
static void test_resumed_and_repeats(void)
{
    moon_serve_order_t o;

    memset(&g, 0, sizeof(g));
    moon_serve_order_init(&o, 5);
    feed_token(&o, 3, 10);
    feed_token(&o, 6, 11);
    feed_token(&o, 6, 12);
    feed_token(&o, 5, 13);
    feed_token(&o, 5, 14);
    CU_ASSERT_EQUAL(feed_done(&o, 7, 15), 1);
    check_seq((const int32_t[]){5, 6, -1}, 3);
    moon_serve_order_fini(&o);
}

/* Token 0 never comes: before the deadline nothing happens; after it the
 * server's DONE goes out as a resumable error counting only what went out. */
static void test_deadline_with_done(void)
{
    moon_serve_order_t o;

    memset(&g, 0, sizeof(g));
    moon_serve_order_init(&o, 0);
    feed_token(&o, 1, 100);
    feed_done(&o, 2, 200);
    CU_ASSERT_EQUAL(moon_serve_order_expire(&o, 100 + WAIT, WAIT, out, NULL), 0);
    CU_ASSERT_EQUAL(g.n, 0);
    CU_ASSERT_EQUAL(moon_serve_order_expire(&o, 101 + WAIT, WAIT, out, NULL), 1);
    check_seq((const int32_t[]){-1}, 1);
    CU_ASSERT_EQUAL(g.done_finish, MOON_FINISH_ERROR);
    CU_ASSERT_EQUAL(g.done_status, MOON_ERR_PEER_LOST);
    CU_ASSERT(MOON_SERVE_RESUMABLE(g.done_finish, g.done_status));
    CU_ASSERT_EQUAL(g.done_n_completion, 0);
    CU_ASSERT_EQUAL(feed_token(&o, 0, 102 + WAIT), 0); /* too late: dropped */
    CU_ASSERT_EQUAL(g.n, 1);
    moon_serve_order_fini(&o);
}

/* Without the server's DONE: the stream ends all the same (2: the caller
 * cancels the request), after the tokens that did go out. */
static void test_deadline_without_done(void)
{
    moon_serve_order_t o;

    memset(&g, 0, sizeof(g));
    moon_serve_order_init(&o, 0);
    feed_token(&o, 0, 50);
    feed_token(&o, 2, 100);
    CU_ASSERT_EQUAL(moon_serve_order_expire(&o, 101 + WAIT, WAIT, out, NULL), 2);
    check_seq((const int32_t[]){0, -1}, 2);
    CU_ASSERT_EQUAL(g.done_n_completion, 1);
    CU_ASSERT_EQUAL(moon_serve_order_expire(&o, 999 + WAIT, WAIT, out, NULL), 0);
    moon_serve_order_fini(&o);
}

static int setup(void)
{
    moon_log_set_level(MOON_LOG_ERROR); /* the deadlines' warnings */
    return moon_serve_msgs_register() == MOON_OK ? 0 : -1;
}

static int teardown(void)
{
    moon_msg_cache_flush();
    return 0;
}

MOON_TEST_MAIN("serve_order", setup, teardown, test_first_late, test_done_before_first,
               test_resumed_and_repeats, test_deadline_with_done, test_deadline_without_done)
