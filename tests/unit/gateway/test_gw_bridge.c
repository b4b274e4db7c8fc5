/* tests/unit/gateway/test_gw_bridge.c - the HTTP <-> actor bridge under
 * load: producer threads (standing in for HTTP threads) submit thousands of
 * requests at once through the inbound ring, park on their queues and are
 * woken by the owner actor; a fake conductor answers each with a TOKEN and a
 * DONE. No wake-up may be lost (a lost one times out), no event lost or
 * duplicated, and cancels from closing requests reach the conductor. */
#include "gw_bridge.h"
#include "moon_test.h"
#include "moonlet/runtime.h"

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define N_THREADS 4
#define N_PER_THREAD 3000

static moon_runtime_t           *g_rt;
static moon_gw_bridge_t *_Atomic g_bridge;
static moon_addr_t               g_conductor;
static atomic_uint               g_cancels, g_submits;

/* ---- fake conductor: TOKEN then DONE for every SUBMIT ------------------------ */
static moon_status_t cond_on_submit(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    const moon_serve_submit_t *s = (const moon_serve_submit_t *)msg;
    moon_serve_token_t        *t = moon_msg_new(MOON_MSG_SERVE_TOKEN, 8);
    moon_serve_done_t         *d = moon_msg_new(MOON_MSG_SERVE_DONE, 8);

    atomic_fetch_add(&g_submits, 1);
    if (t == NULL || d == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    t->request_id = s->request_id;
    moon_msg_set_str(t, &t->text, "x");
    d->request_id = s->request_id;
    d->finish     = MOON_FINISH_LENGTH;
    moon_msg_set_str(d, &d->text, "");
    moon_msg_set_str(d, &d->message, "");
    moon_tell(self, s->reply_to, &t->hdr);
    return moon_tell(self, s->reply_to, &d->hdr);
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

/* ---- the bridge's owner: a minimal gateway -------------------------------------- */
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

static moon_status_t owner_on_event(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    owner_t *o  = moon_actor_state(self);
    uint64_t id = msg->type == MOON_MSG_SERVE_TOKEN ? ((const moon_serve_token_t *)msg)->request_id
                                                    : ((const moon_serve_done_t *)msg)->request_id;
    moon_gw_req_t *req = moon_gw_bridge_find(o->bridge, self, id);

    if (req != NULL) {
        moon_gw_bridge_deliver(o->bridge, req, msg);
    }
    return MOON_OK;
}

static const moon_actor_ops_t owner_ops = {
    .name        = "owner",
    .state_bytes = sizeof(owner_t),
    .init        = owner_init,
    .fini        = owner_fini,
    .on_msg      = {[MOON_MSG_GW_WAKE]     = owner_on_wake,
                    [MOON_MSG_SERVE_TOKEN] = owner_on_event,
                    [MOON_MSG_SERVE_DONE]  = owner_on_event},
};

/* ---- producers ----------------------------------------------------------------------- */
typedef struct {
    sem_t    woken;
    int      id;
    uint32_t n_done, n_tokens, n_lost_wakeups, n_cancelled, n_full, n_errors;
} producer_t;

static void park(void *conn)
{
    (void)conn; /* the producer waits on its semaphore after park returns */
}

static void wake(void *conn)
{
    sem_post(&((producer_t *)conn)->woken);
}

static int wait_woken(producer_t *p)
{
    struct timespec t;

    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += 20;
    return sem_timedwait(&p->woken, &t) == 0;
}

static void *producer(void *arg)
{
    producer_t         *p = arg;
    moon_gw_bridge_t   *b = atomic_load(&g_bridge);
    moon_serve_params_t params;
    int32_t             tokens[3] = {1, 2, 3};

    moon_serve_params_default(&params);
    params.tokens   = tokens;
    params.n_tokens = 3;
    for (int i = 0; i < N_PER_THREAD; i++) {
        moon_gw_req_t *req = NULL;
        moon_status_t  status;
        int            done = 0;
        /* half of them want a wake for DONE only (the token is taken along) */
        moon_gw_conn_t conn = {.park          = park,
                               .wake          = wake,
                               .arg           = p,
                               .token_wake_ns = (i % 2) ? 0 : 1000000000ull,
                               .arrival_ns    = 0};

        status = moon_gw_bridge_submit(b, &params, &conn, &req);
        if (status == MOON_ERR_NO_RESOURCE) { /* ring full: retry later */
            p->n_full++;
            i--;
            sched_yield();
            continue;
        }
        if (status != MOON_OK) { /* CUnit asserts from the main thread only */
            p->n_errors++;
            break;
        }
        if ((i + p->id) % 7 == 3) {
            moon_gw_req_close(req, 1); /* the client left at once */
            p->n_cancelled++;
            continue;
        }
        while (!done) {
            const moon_msg_hdr_t *msg = moon_gw_req_next(req);

            if (msg == NULL) {
                if (moon_gw_req_park(req) && !wait_woken(p)) {
                    p->n_lost_wakeups++;
                    break;
                }
                continue;
            }
            p->n_tokens += msg->type == MOON_MSG_SERVE_TOKEN;
            done = msg->type == MOON_MSG_SERVE_DONE;
            moon_msg_release(msg);
        }
        p->n_done += done;
        moon_gw_req_close(req, !done);
        /* a wake may have come for an event read without parking: drain it */
        while (sem_trywait(&p->woken) == 0) {
        }
    }
    moon_msg_cache_flush(); /* this thread's cached messages back to the pool */
    return NULL;
}

static void test_many_producers(void)
{
    pthread_t  th[N_THREADS];
    producer_t p[N_THREADS];
    uint32_t   n_cancelled = 0, n_full = 0;

    for (int i = 0; i < N_THREADS; i++) {
        memset(&p[i], 0, sizeof(p[i]));
        p[i].id = i;
        sem_init(&p[i].woken, 0, 0);
        pthread_create(&th[i], NULL, producer, &p[i]);
    }
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        CU_ASSERT_EQUAL(p[i].n_errors, 0);
        CU_ASSERT_EQUAL(p[i].n_lost_wakeups, 0);
        CU_ASSERT_EQUAL(p[i].n_done + p[i].n_cancelled, N_PER_THREAD);
        CU_ASSERT_EQUAL(p[i].n_tokens, p[i].n_done); /* one TOKEN each, in order */
        n_cancelled += p[i].n_cancelled;
        n_full += p[i].n_full;
        sem_destroy(&p[i].woken);
    }
    /* requests closed at once may still be on their way to the conductor */
    for (double end = moon_test_now_s() + 30;
         atomic_load(&g_submits) < N_THREADS * N_PER_THREAD && moon_test_now_s() < end;) {
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    CU_ASSERT_EQUAL(atomic_load(&g_submits), N_THREADS * N_PER_THREAD);
    /* cancels of requests already answered are dropped by the owner: at most all */
    CU_ASSERT(atomic_load(&g_cancels) <= n_cancelled);
    fprintf(stderr,
            "%u requests, %u closed at once (%u cancels reached the conductor), ring "
            "full %u times\n",
            N_THREADS * N_PER_THREAD, n_cancelled, atomic_load(&g_cancels), n_full);
}

int main(void)
{
    moon_runtime_config_t cfg;
    moon_addr_t           owner;
    int                   rc;

    moon_runtime_config_default(&cfg);
    cfg.n_workers = 2;
    if (moon_runtime_create(&cfg, &g_rt) != MOON_OK || moon_serve_msgs_register() != MOON_OK ||
        moon_runtime_start(g_rt) != MOON_OK ||
        moon_spawn(g_rt, &cond_ops, NULL, NULL, &g_conductor) != MOON_OK ||
        moon_spawn(g_rt, &owner_ops, NULL, NULL, &owner) != MOON_OK) {
        return 1;
    }
    rc = MOON_TEST_RUN("gw_bridge", NULL, NULL, test_many_producers);
    moon_runtime_shutdown(g_rt, 0);
    moon_runtime_wait(g_rt);
    moon_runtime_destroy(g_rt);
    return rc;
}
