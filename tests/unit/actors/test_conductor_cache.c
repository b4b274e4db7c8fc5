/* tests/unit/actors/test_conductor_cache.c - the conductor's picture of the
 * colocated instances' prefix caches (their CACHE_EVENTS), in the
 * deterministic runtime with two scripted colocated instances: a prompt goes
 * to the instance whose snapshot holds its blocks, with them as its local
 * prefix; after a gap in that instance's events the conductor asks it for a
 * snapshot (CACHE_SYNC) and, until the snapshot comes, places as if it held
 * nothing; events claiming another instance's id from an actor that is not
 * that instance change nothing. */
#include "conductor.h"
#include "moon_test.h"
#include "serve_instance.h"
#include "moonlet/serve_msgs.h"
#include "moonlet/store_msgs.h"

#include "moonlet/kv_shard.h"
#include "moonlet/log.h"
#include "moonlet/moonlet.h"

#include <string.h>

#define BT 16u
#define N_TOK 64u /* 4 full blocks */
#define N_BLK (N_TOK / BT)
#define SEC 1000000000ull
#define N_SUBMITS 3u

static moon_model_t *model;
static moon_kv_tag_t tag;
static uint32_t      prompt[N_TOK];
static moon_kv_key_t keys[N_BLK];

/* what the scripted instances saw, by request id (1..N_SUBMITS) */
static int32_t  placed_on[N_SUBMITS + 1]; /* -1: never placed */
static uint32_t local_of[N_SUBMITS + 1];
static uint32_t n_placed;
static uint32_t n_sync[2], n_answered;

typedef struct {
    moon_addr_t conductor;
    uint32_t    instance;
    int         holds; /* its cache holds the prompt's blocks */
    int         gap;   /* at 1.5 s it sends events numbered past a gap */
} inst_args_t;

typedef struct {
    inst_args_t a;
    uint64_t    seq, timer;
} inst_t;

/* CACHE_EVENTS numbered from seq: the prompt's blocks, STORED (n of them). */
static void send_events(moon_actor_t *self, moon_addr_t to, uint32_t instance, uint64_t seq,
                        uint32_t snapshot, uint32_t n)
{
    moon_serve_cache_events_t *m =
        moon_msg_new(MOON_MSG_SERVE_CACHE_EVENTS, (size_t)n * MOON_STORE_EVENT_U64S * 8);
    uint64_t *ev;

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    m->instance = instance;
    m->seq      = seq;
    m->snapshot = snapshot;
    ev          = n ? moon_msg_span_alloc(m, &m->ev, n * MOON_STORE_EVENT_U64S, 8, 0) : NULL;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t *e = ev + (size_t)i * MOON_STORE_EVENT_U64S;
        e[0]        = MOON_KV_EVENT_STORED;
        e[1]        = keys[i].lo;
        e[2]        = keys[i].hi;
        e[3]        = tag.model_id;
        e[4]        = tag.weight_version;
    }
    CU_ASSERT_EQUAL(moon_tell(self, to, &m->hdr), MOON_OK);
}

static void send_snapshot(moon_actor_t *self, inst_t *s)
{
    send_events(self, s->a.conductor, s->a.instance, s->seq, 1, s->a.holds ? N_BLK : 0);
}

static moon_status_t inst_init(moon_actor_t *self, const void *args)
{
    inst_t             *s = moon_actor_state(self);
    moon_serve_hello_t *h = moon_msg_new(MOON_MSG_SERVE_HELLO, 0);

    s->a = *(const inst_args_t *)args;
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    h->instance     = s->a.instance;
    h->role         = MOON_SERVE_ROLE_COLOCATED;
    h->total_blocks = 1000;
    h->max_batch    = 8;
    h->a0           = 1e-3;
    h->a1           = 1e-4; /* 6.4 ms for the prompt: its blocks are worth reusing */
    h->d0           = 1e-3;
    CU_ASSERT_EQUAL(moon_tell(self, s->a.conductor, &h->hdr), MOON_OK);
    send_snapshot(self, s); /* after HELLO, as an instance does */
    if (s->a.gap) {
        CU_ASSERT_EQUAL(moon_timer_start(self, 3 * SEC / 2, 0, 0, &s->timer), MOON_OK);
    }
    return MOON_OK;
}

/* A placement: noted, then released at once (as a decode that finished). */
static moon_status_t inst_on_prefill(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    inst_t                     *s = moon_actor_state(self);
    const moon_serve_prefill_t *p = (const void *)msg;
    moon_serve_released_t      *r = moon_msg_new(MOON_MSG_SERVE_RELEASED, 0);

    if (p->request_id >= 1 && p->request_id <= N_SUBMITS) {
        placed_on[p->request_id] = (int32_t)s->a.instance;
        local_of[p->request_id]  = p->n_local;
        n_placed++;
    }
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    r->reply_to   = p->reply_to;
    r->request_id = p->request_id;
    r->finish     = MOON_FINISH_LENGTH;
    CU_ASSERT_EQUAL(moon_tell(self, s->a.conductor, &r->hdr), MOON_OK);
    return MOON_OK;
}

/* The gap (1.5 s): events numbered 5 past the next. The snapshot the
 * conductor then asks for comes a second later (2.5 s). */
static moon_status_t inst_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    inst_t *s = moon_actor_state(self);

    (void)msg;
    if (s->a.gap == 1) {
        send_events(self, s->a.conductor, s->a.instance, s->seq + 5, 0, 1);
        s->a.gap = 2;
    } else {
        send_snapshot(self, s);
    }
    return MOON_OK;
}

static moon_status_t inst_on_sync(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    inst_t *s = moon_actor_state(self);

    CU_ASSERT_EQUAL(msg->src, s->a.conductor);
    n_sync[s->a.instance]++;
    CU_ASSERT_EQUAL(moon_timer_start(self, SEC, 0, 0, &s->timer), MOON_OK);
    return MOON_OK;
}

static const moon_actor_ops_t inst_ops = {
    .name        = "scripted instance",
    .state_bytes = sizeof(inst_t),
    .init        = inst_init,
    .on_msg      = {[MOON_MSG_SERVE_PREFILL]    = inst_on_prefill,
                    [MOON_MSG_SYS_TIMER]        = inst_on_timer,
                    [MOON_MSG_SERVE_CACHE_SYNC] = inst_on_sync},
};

/* Not instance 0, though its events say so (0.5 s): they must be ignored. */
static moon_status_t spoof_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)msg;
    send_events(self, *(const moon_addr_t *)moon_actor_state(self), 0, 1, 1, N_BLK);
    return MOON_OK;
}

static moon_status_t spoof_init(moon_actor_t *self, const void *args)
{
    uint64_t timer;

    *(moon_addr_t *)moon_actor_state(self) = *(const moon_addr_t *)args;
    return moon_timer_start(self, SEC / 2, 0, 0, &timer);
}

static const moon_actor_ops_t spoof_ops = {.name        = "spoofer",
                                           .state_bytes = sizeof(moon_addr_t),
                                           .init        = spoof_init,
                                           .on_msg      = {[MOON_MSG_SYS_TIMER] = spoof_on_timer}};

/* The client: the prompt at 1, 2 and 3 s (request ids 1, 2, 3). */
static moon_status_t client_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    const moon_sys_timer_t *t = (const void *)msg;
    moon_serve_submit_t    *m = moon_msg_new(MOON_MSG_SERVE_SUBMIT, N_TOK * 4 + 64);

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    m->reply_to   = moon_actor_addr(self);
    m->request_id = t->cookie;
    m->max_tokens = 4;
    m->top_p      = 1.0f;
    memcpy(moon_msg_span_alloc(m, &m->tokens, N_TOK, 4, 0), prompt, sizeof(prompt));
    CU_ASSERT_EQUAL(moon_tell(self, *(const moon_addr_t *)moon_actor_state(self), &m->hdr),
                    MOON_OK);
    return MOON_OK;
}

static moon_status_t client_on_done(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)self;
    (void)msg;
    n_answered++; /* the conductor answers only what it refuses */
    return MOON_OK;
}

static moon_status_t client_init(moon_actor_t *self, const void *args)
{
    uint64_t timer;

    *(moon_addr_t *)moon_actor_state(self) = *(const moon_addr_t *)args;
    for (uint64_t i = 1; i <= N_SUBMITS; i++) {
        MOON_CHECK(moon_timer_start(self, i * SEC, 0, i, &timer) == MOON_OK);
    }
    return MOON_OK;
}

static const moon_actor_ops_t client_ops = {
    .name        = "client",
    .state_bytes = sizeof(moon_addr_t),
    .init        = client_init,
    .on_msg      = {[MOON_MSG_SYS_TIMER] = client_on_timer, [MOON_MSG_SERVE_DONE] = client_on_done},
};

static void test_colocated_cache_picture(void)
{
    moon_runtime_config_t cfg;
    moon_runtime_t       *rt = NULL;
    moon_addr_t           cond, addr;
    moon_conductor_args_t ca = {.model        = model,
                                .tag          = tag,
                                .block_tokens = BT,
                                .n_prefill    = 0,
                                .n_decode     = 2,
                                .colocated    = 1,
                                .policy       = NULL, /* the default, moonlet */
                                .seed         = 1};
    inst_args_t           ia[2];

    moon_runtime_config_default(&cfg);
    cfg.deterministic = 1;
    cfg.sim_max_ns    = 10 * SEC;
    memset(placed_on, 0xff, sizeof(placed_on));
    n_placed = 0;
    CU_ASSERT_EQUAL_FATAL(moon_runtime_create(&cfg, &rt), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_spawn(rt, &moon_conductor_ops, &ca,
                                     &(moon_spawn_opts_t){.flags = MOON_SPAWN_CONTROL}, &cond),
                          MOON_OK);
    ia[0] = (inst_args_t){cond, 0, 0, 0};
    ia[1] = (inst_args_t){cond, 1, 1, 1};
    for (uint32_t i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL_FATAL(moon_spawn(rt, &inst_ops, &ia[i], NULL, &addr), MOON_OK);
    }
    CU_ASSERT_EQUAL_FATAL(moon_spawn(rt, &spoof_ops, &cond, NULL, &addr), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_spawn(rt, &client_ops, &cond, NULL, &addr), MOON_OK);
    moon_log_set_level(MOON_LOG_ERROR); /* the gap's warning */
    moon_runtime_run(rt);
    moon_log_set_level(MOON_LOG_WARN);
    CU_ASSERT_EQUAL(n_answered, 0);
    CU_ASSERT_EQUAL(n_placed, N_SUBMITS); /* each placed once, none lost */
    /* 1 s: instance 1 told it holds the prompt's blocks; all of them reused
     * but the last block (its last token is computed for the first token) */
    CU_ASSERT_EQUAL(placed_on[1], 1);
    CU_ASSERT(local_of[1] >= N_BLK - 1);
    /* 1.5 s: the gap; the conductor asks instance 1 (only) for a snapshot */
    CU_ASSERT_EQUAL(n_sync[1], 1);
    CU_ASSERT_EQUAL(n_sync[0], 0);
    /* 2 s: no snapshot yet: instance 1's picture is not trusted, and the
     * spoofer's claim for instance 0 was not taken: nothing cached anywhere */
    CU_ASSERT_EQUAL(placed_on[2], 0);
    CU_ASSERT_EQUAL(local_of[2], 0);
    /* 3 s: after the snapshot (2.5 s), instance 1 again */
    CU_ASSERT_EQUAL(placed_on[3], 1);
    CU_ASSERT_EQUAL(local_of[3], local_of[1]);
    moon_runtime_destroy(rt);
}

static int setup(void)
{
    static const char *path = MOON_STORIES;
    size_t             got  = 0;
    int32_t            ids[N_TOK];

    moon_log_set_level(MOON_LOG_WARN);
    if (moon_serve_msgs_register() != MOON_OK || moon_model_load(path, &model) != MOON_OK ||
        moon_serve_model_tag(path, BT, MOON_KV_F32, &tag) != MOON_OK) {
        return -1;
    }
    for (uint32_t i = 0; i < N_TOK; i++) {
        prompt[i] = 3 + (i * 7) % 250;
        ids[i]    = (int32_t)prompt[i];
    }
    return moon_kv_keys_of_tokens(&tag, BT, ids, N_TOK, keys, N_BLK, &got) == MOON_OK &&
                   got == N_BLK
               ? 0
               : -1;
}

static int teardown(void)
{
    moon_model_destroy(model);
    return 0;
}

MOON_TEST_MAIN("conductor_cache", setup, teardown, test_colocated_cache_picture)
