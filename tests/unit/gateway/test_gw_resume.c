/* tests/unit/gateway/test_gw_resume.c - what the bridge does when an
 * instance serving a request is lost, and the request deadline. A fake
 * conductor streams two tokens (1 before 0: the first token comes from
 * another instance than the rest), then answers the loss (DONE error
 * MOON_ERR_PEER_LOST); the owner (a minimal gateway, putting each stream in
 * order as gateway.c does) resumes the request, whose new SUBMIT must carry
 * the two tokens as resume; the fake conductor then ends it (DONE of 3
 * tokens) before it sends token 1 again (as a resumed decode may after a
 * late message) and token 2. The client must read tokens 0, 1, 2 once each
 * and a normal DONE. With resumes off it reads the loss as an error; a
 * request nobody answers ends at its deadline with MOON_ERR_TIMED_OUT and a
 * CANCEL reaches the conductor. */
#include "gw_bridge.h"
#include "moon_test.h"
#include "moonlet/runtime.h"

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

static moon_runtime_t           *g_rt;
static moon_gw_bridge_t *_Atomic g_bridge;
static moon_addr_t               g_conductor, g_owner;
static atomic_uint               g_cancels, g_resumed_ok, g_resumed_bad;
static atomic_uint               g_max_resumes;

static void send_token(moon_actor_t *self, moon_addr_t to, uint64_t id, uint32_t index)
{
    moon_serve_token_t *t = moon_msg_new(MOON_MSG_SERVE_TOKEN, 8);

    if (t != NULL) {
        t->request_id = id;
        t->index      = index;
        t->token      = 100 + index;
        moon_msg_set_str(t, &t->text, "x");
        moon_tell(self, to, &t->hdr);
    }
}

static void send_done(moon_actor_t *self, moon_addr_t to, uint64_t id, uint32_t finish,
                      moon_status_t status, uint32_t n_completion)
{
    moon_serve_done_t *d = moon_msg_new(MOON_MSG_SERVE_DONE, 16);

    if (d != NULL) {
        d->request_id   = id;
        d->finish       = finish;
        d->status       = status;
        d->n_completion = n_completion;
        moon_msg_set_str(d, &d->text, "");
        moon_msg_set_str(d, &d->message, "lost");
        moon_tell(self, to, &d->hdr);
    }
}

/* prompt "silent": no answer (the deadline test); else two tokens and a
 * loss, or (resumed) the rest */
static moon_status_t cond_on_submit(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    const moon_serve_submit_t *s = (const moon_serve_submit_t *)msg;
    const uint32_t            *r = MOON_SPAN_PTR(s, s->resume);

    if (s->prompt.n > 0 && strcmp(MOON_SPAN_PTR(s, s->prompt), "silent") == 0) {
        return MOON_OK;
    }
    if (s->resume.n == 0) {
        send_token(self, s->reply_to, s->request_id, 1);
        send_token(self, s->reply_to, s->request_id, 0);
        send_done(self, s->reply_to, s->request_id, MOON_FINISH_ERROR, MOON_ERR_PEER_LOST, 2);
        return MOON_OK;
    }
    if (s->resume.n == 2 && r[0] == 100 && r[1] == 101 && s->max_tokens == 8 &&
        strcmp(MOON_SPAN_PTR(s, s->prompt), "hello") == 0) {
        atomic_fetch_add(&g_resumed_ok, 1);
    } else {
        atomic_fetch_add(&g_resumed_bad, 1);
    }
    send_done(self, s->reply_to, s->request_id, MOON_FINISH_LENGTH, MOON_OK, 3); /* held */
    send_token(self, s->reply_to, s->request_id, 1); /* a duplicate: dropped */
    send_token(self, s->reply_to, s->request_id, 2);
    return MOON_OK;
}

static moon_status_t cond_on_cancel(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)self;
    (void)msg;
    atomic_fetch_add(&g_cancels, 1);
    return MOON_OK;
}

static const moon_actor_ops_t cond_ops = {
    .name   = "fake_conductor",
    .on_msg = {[MOON_MSG_SERVE_SUBMIT] = cond_on_submit, [MOON_MSG_SERVE_CANCEL] = cond_on_cancel},
};

/* ---- the owner: what gateway.c does with TOKEN and DONE ---------------------- */
typedef struct {
    moon_gw_bridge_t *bridge;
} owner_t;

static moon_status_t owner_init(moon_actor_t *self, const void *args)
{
    owner_t      *o = moon_actor_state(self);
    moon_status_t status;

    (void)args;
    status = moon_gw_bridge_create(moon_actor_runtime(self), moon_actor_addr(self), g_conductor, 64,
                                   &o->bridge);
    if (status == MOON_OK) {
        atomic_store(&g_bridge, o->bridge);
    }
    return status;
}

static void owner_fini(moon_actor_t *self)
{
    moon_gw_bridge_destroy(((owner_t *)moon_actor_state(self))->bridge);
}

static moon_status_t owner_on_wake(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)msg;
    moon_gw_bridge_drain(((owner_t *)moon_actor_state(self))->bridge, self);
    return MOON_OK;
}

/* A TOKEN or DONE in order (moon_gw_bridge_order). */
static void owner_in_order(void *arg, moon_gw_req_t *req, const moon_msg_hdr_t *msg)
{
    moon_actor_t            *self = arg;
    owner_t                 *o    = moon_actor_state(self);
    const moon_serve_done_t *d    = (const moon_serve_done_t *)msg;

    if (msg->type == MOON_MSG_SERVE_TOKEN) {
        const moon_serve_token_t *t = (const moon_serve_token_t *)msg;
        if (!moon_gw_bridge_note_token(req, t->index, t->token)) {
            return;
        }
    } else if (MOON_SERVE_RESUMABLE(d->finish, d->status) &&
               moon_gw_bridge_resume(o->bridge, self, req, atomic_load(&g_max_resumes)) ==
                   MOON_OK) {
        return;
    }
    moon_gw_bridge_deliver(o->bridge, req, msg);
}

static moon_status_t owner_on_event(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    owner_t                 *o = moon_actor_state(self);
    const moon_serve_done_t *d = (const moon_serve_done_t *)msg;
    uint64_t id = msg->type == MOON_MSG_SERVE_TOKEN ? ((const moon_serve_token_t *)msg)->request_id
                                                    : d->request_id;
    moon_gw_req_t *req = moon_gw_bridge_find(o->bridge, self, id);

    if (req != NULL) {
        moon_gw_bridge_order(req, msg, moon_now(moon_actor_runtime(self)), owner_in_order, self);
    }
    return MOON_OK;
}

/* the deadline tick: the test sends a STATS message as the timer would fire */
static moon_status_t owner_on_tick(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    owner_t *o = moon_actor_state(self);

    (void)msg;
    moon_gw_bridge_expire(o->bridge, self, moon_now(moon_actor_runtime(self)), 1000000ull);
    return MOON_OK;
}

static const moon_actor_ops_t owner_ops = {
    .name        = "owner",
    .state_bytes = sizeof(owner_t),
    .init        = owner_init,
    .fini        = owner_fini,
    .on_msg      = {[MOON_MSG_GW_WAKE]     = owner_on_wake,
                    [MOON_MSG_SERVE_TOKEN] = owner_on_event,
                    [MOON_MSG_SERVE_DONE]  = owner_on_event,
                    [MOON_MSG_SERVE_STATS] = owner_on_tick},
};

/* ---- the HTTP side ---------------------------------------------------------------- */
static sem_t g_woken;

static void park(void *conn)
{
    (void)conn;
}

static void wake(void *conn)
{
    (void)conn;
    sem_post(&g_woken);
}

/* Reads req to its DONE (at most 20 s): token indices into idx, the DONE's
 * finish and status. Returns the number of tokens, -1 on a timeout. */
static int read_all(moon_gw_req_t *req, uint32_t *idx, int cap, uint32_t *finish,
                    moon_status_t *status)
{
    int n = 0;

    for (double end = moon_test_now_s() + 20; moon_test_now_s() < end;) {
        const moon_msg_hdr_t *msg = moon_gw_req_next(req);
        if (msg == NULL) {
            if (moon_gw_req_park(req)) {
                struct timespec t;
                clock_gettime(CLOCK_REALTIME, &t);
                t.tv_sec += 1;
                sem_timedwait(&g_woken, &t);
            }
            continue;
        }
        if (msg->type == MOON_MSG_SERVE_TOKEN) {
            if (n < cap) {
                idx[n] = ((const moon_serve_token_t *)msg)->index;
            }
            n++;
            moon_msg_release(msg);
            continue;
        }
        *finish = ((const moon_serve_done_t *)msg)->finish;
        *status = ((const moon_serve_done_t *)msg)->status;
        moon_msg_release(msg);
        return n;
    }
    return -1;
}

static moon_gw_req_t *submit(const char *prompt)
{
    moon_serve_params_t params;
    moon_gw_conn_t      conn = {.park = park, .wake = wake};
    moon_gw_req_t      *req  = NULL;

    moon_serve_params_default(&params);
    params.prompt     = prompt;
    params.max_tokens = 8;
    CU_ASSERT_EQUAL(moon_gw_bridge_submit(atomic_load(&g_bridge), &params, &conn, &req), MOON_OK);
    return req;
}

static void test_lost_instance_resumes_the_stream(void)
{
    uint32_t       idx[8], finish = 99;
    moon_status_t  status = MOON_OK;
    moon_gw_req_t *req;
    int            n;

    atomic_store(&g_max_resumes, 3);
    req = submit("hello");
    CU_ASSERT_PTR_NOT_NULL_FATAL(req);
    n = read_all(req, idx, 8, &finish, &status);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT(n == 3 && idx[0] == 0 && idx[1] == 1 && idx[2] == 2);
    CU_ASSERT_EQUAL(finish, MOON_FINISH_LENGTH);
    CU_ASSERT_EQUAL(status, MOON_OK);
    CU_ASSERT_EQUAL(atomic_load(&g_resumed_ok), 1);
    CU_ASSERT_EQUAL(atomic_load(&g_resumed_bad), 0);
    moon_gw_req_close(req, 0);
}

static void test_no_resume_reports_the_loss(void)
{
    uint32_t       idx[8], finish = 99;
    moon_status_t  status = MOON_OK;
    moon_gw_req_t *req;

    atomic_store(&g_max_resumes, 0);
    req = submit("hello");
    CU_ASSERT_PTR_NOT_NULL_FATAL(req);
    CU_ASSERT_EQUAL(read_all(req, idx, 8, &finish, &status), 2);
    CU_ASSERT_EQUAL(finish, MOON_FINISH_ERROR);
    CU_ASSERT_EQUAL(status, MOON_ERR_PEER_LOST);
    moon_gw_req_close(req, 0);
}

static void test_deadline_ends_and_cancels(void)
{
    uint32_t                idx[8], finish = 99;
    moon_status_t           status = MOON_OK;
    moon_gw_req_t          *req    = submit("silent");
    moon_serve_stats_req_t *tick;

    CU_ASSERT_PTR_NOT_NULL_FATAL(req);
    nanosleep(&(struct timespec){0, 20000000}, NULL); /* past its 1 ms deadline */
    tick = moon_msg_new(MOON_MSG_SERVE_STATS, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tick);
    CU_ASSERT_EQUAL_FATAL(moon_runtime_send(g_rt, g_owner, &tick->hdr), MOON_OK);
    CU_ASSERT_EQUAL(read_all(req, idx, 8, &finish, &status), 0);
    CU_ASSERT_EQUAL(finish, MOON_FINISH_ERROR);
    CU_ASSERT_EQUAL(status, MOON_ERR_TIMED_OUT);
    for (double end = moon_test_now_s() + 10;
         atomic_load(&g_cancels) == 0 && moon_test_now_s() < end;) {
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    CU_ASSERT_EQUAL(atomic_load(&g_cancels), 1);
    moon_gw_req_close(req, 0);
}

int main(void)
{
    moon_runtime_config_t cfg;
    int                   rc;

    sem_init(&g_woken, 0, 0);
    moon_runtime_config_default(&cfg);
    cfg.n_workers = 2;
    if (moon_runtime_create(&cfg, &g_rt) != MOON_OK || moon_serve_msgs_register() != MOON_OK ||
        moon_runtime_start(g_rt) != MOON_OK ||
        moon_spawn(g_rt, &cond_ops, NULL, NULL, &g_conductor) != MOON_OK ||
        moon_spawn(g_rt, &owner_ops, NULL, NULL, &g_owner) != MOON_OK) {
        return 1;
    }
    for (double end = moon_test_now_s() + 10;
         atomic_load(&g_bridge) == NULL && moon_test_now_s() < end;) {
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    rc = MOON_TEST_RUN("gw_resume", NULL, NULL, test_lost_instance_resumes_the_stream,
                       test_no_resume_reports_the_loss, test_deadline_ends_and_cancels);
    moon_runtime_shutdown(g_rt, 0);
    moon_runtime_wait(g_rt);
    moon_runtime_destroy(g_rt);
    sem_destroy(&g_woken);
    return rc;
}
