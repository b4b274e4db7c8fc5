/* tests/unit/actors/test_decode_script.c - the decode instance's request
 * state machine (decode.c's diagram) against scripted peers: the real decode
 * actor runs in the deterministic runtime on stories260K, and one scripted
 * actor plays its conductor, the prefill instance and the client at once
 * (reply_to, prefill and conductor are all its address). Each case sends
 * messages from a script and checks what comes back: the handover in two
 * KV_READYs (tokens, DONE, KV_DONE, RELEASED), again with the first token
 * sent by the prefill (not sent again), a KV pull that fails, the
 * prefill lost while the KV moves (and its late KV_READY dropped), a CANCEL
 * mid-stream and one before the request, a weight version the instance does
 * not hold, a handover of a bad length, and (colocated) a PREFILL computed
 * here, then again from the instance's prefix cache, the choices of one
 * prompt forked (one pull, one release) and too many of them refused. Two
 * cases run in the
 * threaded runtime with the engine on its thread, where a batch runs several
 * steps per engine job (decode_steps.c): a second request joining a running
 * one, and the CANCEL mid-stream. The runtime and the instance are set up by
 * tests/support/moon_test_script. */
#include "decode.h"
#include "moon_test.h"
#include "moon_test_script.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_msgs.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/moonlet.h"

#include <stdatomic.h>
#include <string.h>

#define BT 16u
#define MS 1000000ull
#define MAX_REQ 4u

static moon_model_t *model;
static void         *remote; /* the scripted prefill's pool: blocks at remote + b * bytes */

typedef enum {
    CASE_HANDOVER,
    CASE_FIRST_SENT, /* the prefill sent the first token itself */
    CASE_FIRST_ENDS,
    CASE_PULL_FAILS,
    CASE_PREFILL_LOST,
    CASE_CANCEL,
    CASE_VERSION,
    CASE_BAD_LENGTH,
    CASE_COLOCATED,
    CASE_JOIN, /* threaded: request 1 comes while request 0 streams */
    CASE_CHOICES,
    CASE_TOO_MANY_CHOICES,
    CASE_CHOICES_LOST,
    CASE_CHOICE0_CANCEL
} script_case_t;

#define DEADLINE_STEP 99u /* the peer's timer that ends a threaded case which hangs */

/* What came back, per request id (0 .. MAX_REQ - 1). */
typedef struct {
    uint32_t n_tokens, next_index, bad_index;
    uint32_t n_done, finish, n_completion, done_after_tokens;
    int32_t  status;
    uint32_t n_kv_done, n_released, released_finish, n_cached;
} seen_t;

static struct {
    script_case_t c;
    moon_addr_t   decode;
    seen_t        seen[MAX_REQ];
    uint32_t      n_hello, n_other, n_cancel_sent;
    uint32_t      n_choices; /* the KV_READYs' (SUBMIT n_choices) */
    /* threaded cases: they end when want_ends requests were released and
     * their KV_DONEs came (a KV_DONE may come first: once the KV is in) */
    int              threaded, sent_join;
    uint32_t         n_kv_done, n_released, want_ends;
    _Atomic uint64_t n_engine_done; /* the engine's completions (runtime trace) */
} g;

/* A KV_READY of request id: blocks [first, first + n) are the remote ones
 * listed; final: the prompt (n_prompt tokens) is done, first token 5. */
static void send_kv_ready(moon_actor_t *self, uint64_t id, uint32_t first, const uint32_t *blocks,
                          uint32_t n, int final, uint32_t n_prompt, uint32_t max_tokens,
                          uint64_t version)
{
    uint32_t               n_tok = final ? n_prompt : 0;
    uint32_t               n_ch  = final && g.n_choices > 1 ? g.n_choices - 1 : 0;
    moon_serve_kv_ready_t *m =
        moon_msg_new(MOON_MSG_SERVE_KV_READY, (size_t)(n + n_tok + 4 * n_ch) * 4 + 64);
    uint32_t *tok;

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    m->reply_to         = moon_actor_addr(self);
    m->request_id       = id;
    m->prefill          = moon_actor_addr(self);
    m->prefill_instance = 0;
    m->first_block      = first;
    m->final            = (uint32_t) final;
    m->n_tokens         = n_prompt;
    m->token            = 5;
    m->base             = (uint64_t)(uintptr_t)remote;
    m->max_tokens       = max_tokens;
    m->top_p            = 1.0f;
    m->flags            = MOON_SERVE_F_IGNORE_EOS;
    m->weight_version   = version;
    m->n_choices        = g.n_choices;
    if (n_ch > 0) { /* choice i: first token 5 + i, its sampler's state i */
        uint32_t *c = moon_msg_span_alloc(m, &m->choices, 4 * n_ch, 4, 0);
        for (uint32_t i = 0; i < n_ch; i++) {
            c[4 * i]     = 6 + i;
            c[4 * i + 1] = i + 1;
            c[4 * i + 2] = 0;
            c[4 * i + 3] = 0;
        }
    }
    m->first_sent = final && g.c == CASE_FIRST_SENT;
    if (n > 0) {
        memcpy(moon_msg_span_alloc(m, &m->blocks, n, 4, 0), blocks, (size_t)n * 4);
    }
    if (n_tok > 0) {
        tok = moon_msg_span_alloc(m, &m->tokens, n_tok, 4, 0);
        for (uint32_t i = 0; i < n_tok; i++) {
            tok[i] = 3 + (i * 7) % 250;
        }
    }
    CU_ASSERT_EQUAL(moon_tell(self, g.decode, &m->hdr), MOON_OK);
}

/* Colocated: a PREFILL of 40 tokens for the instance itself. */
static void send_prefill(moon_actor_t *self, uint64_t id)
{
    moon_serve_prefill_t *m = moon_msg_new(MOON_MSG_SERVE_PREFILL, 40 * 4 + 4 * 8 + 64);
    uint32_t             *tok;
    uint64_t             *key;

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    m->reply_to   = moon_actor_addr(self);
    m->request_id = id;
    m->decode     = g.decode;
    m->max_tokens = 4;
    m->top_p      = 1.0f;
    m->flags      = MOON_SERVE_F_IGNORE_EOS;
    tok           = moon_msg_span_alloc(m, &m->tokens, 40, 4, 0);
    key           = moon_msg_span_alloc(m, &m->keys, 4, 8, 0);
    CU_ASSERT_FATAL(tok != NULL && key != NULL);
    for (uint32_t i = 0; i < 40; i++) {
        tok[i] = 3 + (i * 7) % 250;
    }
    for (uint32_t i = 0; i < 4; i++) {
        key[i] = 1000 + i;
    }
    CU_ASSERT_EQUAL(moon_tell(self, g.decode, &m->hdr), MOON_OK);
}

static void send_req(moon_actor_t *self, uint32_t type, uint64_t id)
{
    moon_serve_cancel_t *m = moon_msg_new(type, 0); /* CANCEL and LOST begin alike */

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    m->reply_to   = moon_actor_addr(self);
    m->request_id = id;
    if (type == MOON_MSG_SERVE_LOST) {
        ((moon_serve_lost_t *)m)->lost = moon_actor_addr(self); /* the prefill: us */
    }
    CU_ASSERT_EQUAL(moon_tell(self, g.decode, &m->hdr), MOON_OK);
}

/* A pulled run's completion as the transfer engine would send it, failed. */
static void send_pull_failure(moon_actor_t *self, uint64_t cookie)
{
    moon_dist_bulk_done_t *m = moon_msg_new(MOON_MSG_DIST_BULK_DONE, 0);

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    m->cookie = cookie;
    m->status = MOON_ERR_IO;
    CU_ASSERT_EQUAL(moon_tell(self, g.decode, &m->hdr), MOON_OK);
}

/* The script, step by step on the peer's timer (cookie: the step). */
static void script_step(moon_actor_t *self, uint64_t step)
{
    static const uint32_t b012[] = {0, 1, 2};
    uint64_t              timer;

    if (step == DEADLINE_STEP) {
        moon_runtime_shutdown(moon_actor_runtime(self), 1);
        return;
    }
    switch (g.c) {
    case CASE_JOIN: /* request 1 is sent on request 0's 10th token */
        send_kv_ready(self, 0, 0, b012, 3, 1, 40, 70, 0);
        break;
    case CASE_FIRST_SENT: /* as CASE_HANDOVER; index 0 came from the prefill */
        g.seen[0].next_index = 1;
        /* fall through */
    case CASE_HANDOVER: /* 40 tokens: 2 full blocks and 8 in a partial one */
        send_kv_ready(self, 0, 0, b012, 1, 0, 40, 4, 0);
        send_kv_ready(self, 0, 1, b012 + 1, 2, 1, 40, 4, 0);
        break;
    case CASE_FIRST_ENDS:
        /* request 0 ends at its first token once block 0 is in (no pull
         * in flight: freed at once, before the final's blocks would move);
         * request 1 then takes the slot */
        if (step == 0) {
            send_kv_ready(self, 0, 0, b012, 1, 0, 40, 1, 0);
            MOON_CHECK(moon_timer_start(self, 50 * MS, 0, 1, &timer) == MOON_OK);
        } else {
            send_kv_ready(self, 0, 1, b012 + 1, 2, 1, 40, 1, 0);
            send_kv_ready(self, 1, 0, b012, 3, 1, 40, 4, 0);
        }
        break;
    case CASE_PULL_FAILS: /* 20 tokens: block 0's pull fails before it lands */
        send_kv_ready(self, 0, 0, b012, 2, 1, 20, 4, 0);
        send_pull_failure(self, 0); /* slot 0, block 0: decode.c's DEC_COOKIE(0, 0) */
        break;
    case CASE_PREFILL_LOST:
        if (step == 0) {
            send_kv_ready(self, 0, 0, b012, 1, 0, 40, 4, 0);
            send_req(self, MOON_MSG_SERVE_LOST, 0); /* while block 0 moves */
            send_req(self, MOON_MSG_SERVE_LOST, 3); /* one never taken here */
            MOON_CHECK(moon_timer_start(self, 50 * MS, 0, 1, &timer) == MOON_OK);
        } else { /* sent before the loss, arriving after: dropped */
            send_kv_ready(self, 0, 1, b012 + 1, 2, 1, 40, 4, 0);
        }
        break;
    case CASE_CANCEL: /* request 0 cancelled after its 2nd token; 1 before it comes */
        send_kv_ready(self, 0, 0, b012, 3, 1, 40, 200, 0);
        send_req(self, MOON_MSG_SERVE_CANCEL, 1);
        send_kv_ready(self, 1, 0, b012, 3, 1, 40, 200, 0);
        break;
    case CASE_VERSION: /* version 7: not held (only 0 is) */
        send_kv_ready(self, 0, 0, b012, 3, 1, 40, 4, 7);
        break;
    case CASE_BAD_LENGTH: /* stories260K's context is 512 tokens */
        send_kv_ready(self, 0, 0, b012, 3, 1, 512, 4, 0);
        break;
    case CASE_CHOICES: /* 3 choices of 40 tokens; choice 2 cancelled before them */
        g.n_choices = 3;
        send_req(self, MOON_MSG_SERVE_CANCEL, 2);
        send_kv_ready(self, 0, 0, b012, 1, 0, 40, 4, 0);
        send_kv_ready(self, 0, 1, b012 + 1, 2, 1, 40, 4, 0);
        break;
    case CASE_CHOICE0_CANCEL: /* 3 choices; choice 0 cancelled while block 0 moves */
        g.n_choices = 3;
        send_kv_ready(self, 0, 0, b012, 1, 0, 40, 4, 0);
        send_req(self, MOON_MSG_SERVE_CANCEL, 0);
        send_kv_ready(self, 0, 1, b012 + 1, 2, 1, 40, 4, 0);
        break;
    case CASE_CHOICES_LOST: /* 3 choices, the prefill lost while block 0 moves */
        g.n_choices = 3;
        send_kv_ready(self, 0, 0, b012, 1, 0, 40, 4, 0);
        send_req(self, MOON_MSG_SERVE_LOST, 0);
        break;
    case CASE_TOO_MANY_CHOICES: /* 5 choices: more than the instance's 4 slots */
        g.n_choices = 5;
        send_kv_ready(self, 0, 0, b012, 3, 1, 40, 4, 0);
        break;
    case CASE_COLOCATED: /* its own prompt, then again from its prefix cache */
        send_prefill(self, step == 0 ? 0 : 1);
        if (step == 0) {
            MOON_CHECK(moon_timer_start(self, 500 * MS, 0, 1, &timer) == MOON_OK);
        }
        break;
    }
}

static seen_t *seen_of(uint64_t id)
{
    static seen_t junk;
    return id < MAX_REQ ? &g.seen[id] : &junk;
}

static void on_token(moon_actor_t *self, uint64_t id, uint32_t index)
{
    seen_t *s = seen_of(id);

    s->bad_index += index != s->next_index;
    s->next_index = index + 1;
    s->n_tokens++;
    if (g.c == CASE_CANCEL && id == 0 && s->n_tokens == 2 && g.n_cancel_sent++ == 0) {
        send_req(self, MOON_MSG_SERVE_CANCEL, 0);
    }
    if (g.c == CASE_JOIN && id == 0 && s->n_tokens == 10 && !g.sent_join) {
        g.sent_join = 1;
        send_kv_ready(self, 1, 0, (const uint32_t[]){0, 1, 2}, 3, 1, 40, 40, 0);
    }
}

static void maybe_end(moon_actor_t *self)
{
    if (g.threaded && g.n_released == g.want_ends && g.n_kv_done == g.want_ends) {
        moon_runtime_shutdown(moon_actor_runtime(self), 0); /* all ended */
    }
}

static moon_status_t peer_on_msg(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    const moon_serve_done_t     *dn = (const void *)msg;
    const moon_serve_kv_done_t  *kd = (const void *)msg;
    const moon_serve_released_t *rl = (const void *)msg;
    moon_serve_event_t           ev;
    seen_t                      *s;

    if (moon_test_script_report(msg, &g.n_hello)) {
        return MOON_OK;
    }
    switch (msg->type) {
    case MOON_MSG_SERVE_TOKEN:
        on_token(self, ((const moon_serve_token_t *)msg)->request_id,
                 ((const moon_serve_token_t *)msg)->index);
        break;
    case MOON_MSG_SERVE_TOKENS:
        for (uint32_t i = 0; i < moon_serve_tokens_count(msg); i++) {
            CU_ASSERT_EQUAL_FATAL(moon_serve_tokens_event(msg, i, &ev), MOON_OK);
            on_token(self, ev.request_id, ev.index);
        }
        break;
    case MOON_MSG_SERVE_DONE:
        s = seen_of(dn->request_id);
        s->n_done++;
        s->finish            = dn->finish;
        s->status            = dn->status;
        s->n_completion      = dn->n_completion;
        s->n_cached          = dn->n_cached;
        s->done_after_tokens = s->n_tokens;
        break;
    case MOON_MSG_SERVE_KV_DONE:
        seen_of(kd->request_id)->n_kv_done++;
        g.n_kv_done++;
        maybe_end(self);
        break;
    case MOON_MSG_SERVE_RELEASED:
        s = seen_of(rl->request_id);
        s->n_released++;
        s->released_finish = rl->finish;
        g.n_released++;
        maybe_end(self);
        break;
    case MOON_MSG_SYS_TIMER:
        script_step(self, ((const moon_sys_timer_t *)msg)->cookie);
        break;
    default:
        g.n_other++;
    }
    return MOON_OK;
}

static moon_status_t peer_init(moon_actor_t *self, const void *args)
{
    uint64_t timer;

    (void)args;
    if (g.threaded && moon_timer_start(self, 60000 * MS, 0, DEADLINE_STEP, &timer) != MOON_OK) {
        return MOON_ERR_NO_MEMORY;
    }
    return moon_timer_start(self, 10 * MS, 0, 0, &timer); /* after the decode's HELLO */
}

static const moon_actor_ops_t peer_ops = {
    .name        = "scripted peers",
    .state_bytes = 8,
    .init        = peer_init,
    .on_msg      = {[MOON_MSG_SERVE_HELLO]        = peer_on_msg,
                    [MOON_MSG_SERVE_LOAD]         = peer_on_msg,
                    [MOON_MSG_SERVE_CACHE_EVENTS] = peer_on_msg,
                    [MOON_MSG_SERVE_TOKEN]        = peer_on_msg,
                    [MOON_MSG_SERVE_TOKENS]       = peer_on_msg,
                    [MOON_MSG_SERVE_DONE]         = peer_on_msg,
                    [MOON_MSG_SERVE_KV_DONE]      = peer_on_msg,
                    [MOON_MSG_SERVE_RELEASED]     = peer_on_msg,
                    [MOON_MSG_SYS_TIMER]          = peer_on_msg},
};

/* Pulls take 5 ms (as a simulation models them): a script can act while one moves. */
static uint64_t slow_pull(void *arg, uint64_t now_ns, uint32_t kind, uint32_t src, uint32_t dst,
                          uint32_t n_blocks)
{
    (void)arg, (void)now_ns, (void)kind, (void)src, (void)dst, (void)n_blocks;
    return 5 * MS;
}

static void count_engine_done(void *arg, uint64_t now_ns, const moon_msg_hdr_t *msg,
                              moon_addr_t dst)
{
    (void)arg, (void)now_ns, (void)dst;
    if (msg->type == MOON_MSG_SERVE_ENGINE_DONE) {
        atomic_fetch_add(&g.n_engine_done, 1);
    }
}

/* threaded: the real runtime and the engine on its thread; the case ends
 * once want_ends requests ended (or fails at a deadline). */
static void run_case_mode(script_case_t c, int threaded, uint32_t want_ends)
{
    moon_serve_instance_args_t ia = {
        .model        = model,
        .engine       = {.kind = MOON_BACKEND_CPU, .n_threads = 1, .max_batch = 4, .max_chunk = 64},
        .role         = c == CASE_COLOCATED ? MOON_SERVE_ROLE_COLOCATED : MOON_SERVE_ROLE_DECODE,
        .block_tokens = BT,
        .n_blocks     = 64,
        .max_seqs     = MAX_REQ,
        .prefill_chunk = 64,
        .threaded      = threaded,
        .xfer_ns       = c == CASE_HANDOVER || c == CASE_FIRST_SENT || c == CASE_FIRST_ENDS ||
                           c == CASE_CANCEL || c == CASE_JOIN
                             ? NULL
                             : slow_pull,
    };

    memset(&g, 0, sizeof(g));
    g.c         = c;
    g.threaded  = threaded;
    g.want_ends = want_ends;
    CU_ASSERT_EQUAL(moon_test_script_run(&peer_ops, &moon_decode_ops, &ia, threaded,
                                         count_engine_done, &g.decode),
                    0); /* threaded: not the deadline */
    CU_ASSERT_EQUAL(g.n_hello, 1);
    CU_ASSERT_EQUAL(g.n_other, 0);
    for (uint32_t i = 0; i < MAX_REQ; i++) {
        CU_ASSERT_EQUAL(g.seen[i].bad_index, 0); /* indices 0, 1, 2, ... */
        CU_ASSERT(g.seen[i].n_done <= 1);        /* one end at most, never two */
        CU_ASSERT_EQUAL(g.seen[i].n_tokens, g.seen[i].done_after_tokens); /* none after DONE */
    }
}

static void run_case(script_case_t c)
{
    run_case_mode(c, 0, 0);
}

/* Ended once: DONE (finish, status) after n tokens, RELEASED to the
 * conductor, KV_DONE to the prefill (kv_done 0 or 1). */
static void check_end(uint64_t id, uint32_t finish, int32_t status, uint32_t n_tokens,
                      uint32_t kv_done)
{
    seen_t *s = &g.seen[id];

    CU_ASSERT_EQUAL(s->n_done, 1);
    CU_ASSERT_EQUAL(s->finish, finish);
    CU_ASSERT_EQUAL(s->status, status);
    CU_ASSERT_EQUAL(s->n_tokens, n_tokens);
    CU_ASSERT_EQUAL(s->n_released, 1);
    CU_ASSERT_EQUAL(s->released_finish, finish);
    CU_ASSERT_EQUAL(s->n_kv_done, kv_done);
}

/* PULLING -> RUNNING -> ENDED: the first token comes with the final KV_READY. */
static void test_handover(void)
{
    run_case(CASE_HANDOVER);
    check_end(0, MOON_FINISH_LENGTH, MOON_OK, 4, 1);
    CU_ASSERT_EQUAL(g.seen[0].n_completion, 4);
}

/* The final KV_READY says first_sent: the decode streams from index 1 on
 * (on_token checks the indices), never token 0 again, and counts it. */
static void test_first_sent(void)
{
    run_case(CASE_FIRST_SENT);
    check_end(0, MOON_FINISH_LENGTH, MOON_OK, 3, 1);
    CU_ASSERT_EQUAL(g.seen[0].n_completion, 4);
}

/* PULLING -> ENDED: the transfer's failure ends it; the late landing is ignored. */
/* The first token ends request 0 (max_tokens 1) with its earlier blocks
 * in: it is freed before the rest of its handover, whose blocks are not
 * pulled; the slot serves the next request. */
static void test_first_token_ends(void)
{
    run_case(CASE_FIRST_ENDS);
    check_end(0, MOON_FINISH_LENGTH, MOON_OK, 1, 1);
    check_end(1, MOON_FINISH_LENGTH, MOON_OK, 4, 1);
}

static void test_pull_fails(void)
{
    run_case(CASE_PULL_FAILS);
    check_end(0, MOON_FINISH_ERROR, MOON_ERR_IO, 1, 1);
}

/* PULLING -> ENDED on LOST: resumable; the lost prefill's later KV_READY
 * starts nothing; a LOST for a request never taken is answered. */
static void test_prefill_lost(void)
{
    run_case(CASE_PREFILL_LOST);
    check_end(0, MOON_FINISH_ERROR, MOON_ERR_PEER_LOST, 0, 1);
    CU_ASSERT(MOON_SERVE_RESUMABLE(g.seen[0].finish, g.seen[0].status));
    check_end(3, MOON_FINISH_ERROR, MOON_ERR_PEER_LOST, 0, 0);
}

/* RUNNING -> ENDED on CANCEL mid-stream; a CANCEL before its request ends it on arrival. */
static void test_cancel(void)
{
    run_case(CASE_CANCEL);
    CU_ASSERT_EQUAL(g.n_cancel_sent, 1);
    CU_ASSERT(g.seen[0].n_tokens >= 2 && g.seen[0].n_tokens < 200);
    check_end(0, MOON_FINISH_CANCELLED, MOON_OK, g.seen[0].n_tokens, 1);
    check_end(1, MOON_FINISH_CANCELLED, MOON_OK, 0, 1);
}

/* The weight-version gate: a request on weights not held ends at once. */
static void test_version_gate(void)
{
    run_case(CASE_VERSION);
    check_end(0, MOON_FINISH_ERROR, MOON_ERR_NOT_FOUND, 0, 1);
}

/* A handover as long as the context is refused before it is taken. */
static void test_bad_length(void)
{
    run_case(CASE_BAD_LENGTH);
    check_end(0, MOON_FINISH_ERROR, MOON_ERR_INVALID_PARAM, 0, 1);
}

/* Colocated: FREE -> PREFILLING -> RUNNING -> ENDED, no KV_DONE (no
 * prefill instance); the same prompt again reuses its 2 full blocks. */
static void test_colocated(void)
{
    run_case(CASE_COLOCATED);
    check_end(0, MOON_FINISH_LENGTH, MOON_OK, 4, 0);
    CU_ASSERT_EQUAL(g.seen[0].n_cached, 0);
    check_end(1, MOON_FINISH_LENGTH, MOON_OK, 4, 0);
    CU_ASSERT_EQUAL(g.seen[1].n_cached, 2 * BT);
}

/* n choices: the KV pulled once (one KV_DONE), one sequence forked per
 * choice, each streaming under its own id (request id + i) and ending
 * once; choice 2, cancelled before the fork, ends alone; one RELEASED,
 * once the last choice ended. */
static void test_choices(void)
{
    run_case(CASE_CHOICES);
    check_end(0, MOON_FINISH_LENGTH, MOON_OK, 4, 1);
    for (uint32_t i = 1; i < 3; i++) {
        CU_ASSERT_EQUAL(g.seen[i].n_done, 1);
        CU_ASSERT_EQUAL(g.seen[i].n_released, 0);
        CU_ASSERT_EQUAL(g.seen[i].n_kv_done, 0);
    }
    CU_ASSERT_EQUAL(g.seen[1].finish, MOON_FINISH_LENGTH);
    CU_ASSERT_EQUAL(g.seen[1].n_tokens, 4);
    CU_ASSERT_EQUAL(g.seen[2].finish, MOON_FINISH_CANCELLED);
    CU_ASSERT_EQUAL(g.seen[2].n_tokens, 0);
    CU_ASSERT_EQUAL(g.n_kv_done, 1);
    CU_ASSERT_EQUAL(g.n_released, 1);
}

/* Choice 0 cancelled before the fork ends there alone: the others fork
 * from its KV and run to their length. */
static void test_choice0_cancel(void)
{
    run_case(CASE_CHOICE0_CANCEL);
    CU_ASSERT_EQUAL(g.seen[0].n_done, 1);
    CU_ASSERT_EQUAL(g.seen[0].finish, MOON_FINISH_CANCELLED);
    CU_ASSERT_EQUAL(g.seen[0].n_tokens, 0);
    for (uint32_t i = 1; i < 3; i++) {
        CU_ASSERT_EQUAL(g.seen[i].n_done, 1);
        CU_ASSERT_EQUAL(g.seen[i].finish, MOON_FINISH_LENGTH);
        CU_ASSERT_EQUAL(g.seen[i].n_tokens, 4);
    }
    CU_ASSERT_EQUAL(g.n_kv_done, 1);
    CU_ASSERT_EQUAL(g.n_released, 1);
}

/* The prefill lost before the fork: every choice ends resumable (each is
 * submitted again alone), the request released once. */
static void test_choices_lost(void)
{
    run_case(CASE_CHOICES_LOST);
    check_end(0, MOON_FINISH_ERROR, MOON_ERR_PEER_LOST, 0, 1);
    for (uint32_t i = 1; i < 3; i++) {
        CU_ASSERT_EQUAL(g.seen[i].n_done, 1);
        CU_ASSERT(MOON_SERVE_RESUMABLE(g.seen[i].finish, g.seen[i].status));
    }
    CU_ASSERT_EQUAL(g.n_released, 1);
}

/* More choices than the instance has slots: every choice ends with an
 * error at once (waiting would be for ever), the request released once. */
static void test_too_many_choices(void)
{
    run_case(CASE_TOO_MANY_CHOICES);
    check_end(0, MOON_FINISH_ERROR, MOON_ERR_UNSUPPORTED, 0, 1);
    for (uint32_t i = 1; i < MAX_REQ; i++) {
        CU_ASSERT_EQUAL(g.seen[i].n_done, 1);
        CU_ASSERT_EQUAL(g.seen[i].finish, MOON_FINISH_ERROR);
        CU_ASSERT_EQUAL(g.seen[i].n_released, 0);
    }
    CU_ASSERT_EQUAL(g.n_released, 1);
}

/* Threaded, several steps per engine job: request 1 joins request 0's batch
 * mid-stream (the job in flight hands the batch back); every token leaves,
 * in order, before its DONE, and far fewer completions than steps come. */
static void test_join_multistep(void)
{
    run_case_mode(CASE_JOIN, 1, 2);
    check_end(0, MOON_FINISH_LENGTH, MOON_OK, 70, 1);
    check_end(1, MOON_FINISH_LENGTH, MOON_OK, 40, 1);
    CU_ASSERT_EQUAL(g.seen[0].n_completion, 70);
    /* 69 steps of request 0 (its first token came with the handover) */
    CU_ASSERT(atomic_load(&g.n_engine_done) > 0 && atomic_load(&g.n_engine_done) < 30);
}

/* Threaded: the CANCEL reaches a job running several steps; it ends the
 * request after the step in flight, with no token after its DONE. */
static void test_cancel_threaded(void)
{
    run_case_mode(CASE_CANCEL, 1, 2);
    CU_ASSERT_EQUAL(g.n_cancel_sent, 1);
    CU_ASSERT(g.seen[0].n_tokens >= 2 && g.seen[0].n_tokens < 200);
    check_end(0, MOON_FINISH_CANCELLED, MOON_OK, g.seen[0].n_tokens, 1);
    check_end(1, MOON_FINISH_CANCELLED, MOON_OK, 0, 1);
}

static int setup(void)
{
    moon_kv_config_t kcfg;

    if (moon_test_script_setup(MOON_STORIES, &model) != 0) {
        return -1;
    }
    kcfg   = moon_model_kv_config(moon_model_config(model), BT, 64, 1);
    remote = moon_calloc(1, moon_kv_config_pool_bytes(&kcfg)); /* zeros: any KV will do */
    return remote != NULL ? 0 : -1;
}

static int teardown(void)
{
    moon_free(remote);
    moon_model_destroy(model);
    moon_msg_cache_flush();
    return 0;
}

MOON_TEST_MAIN("decode_script", setup, teardown, test_handover, test_first_sent,
               test_first_token_ends, test_pull_fails, test_prefill_lost, test_cancel,
               test_version_gate, test_bad_length, test_colocated, test_choices,
               test_choice0_cancel, test_choices_lost, test_too_many_choices, test_join_multistep,
               test_cancel_threaded)
