/* tests/unit/actors/test_prefill_script.c - the prefill instance's request
 * states (QUEUED, FETCHING, COMPUTING, HANDED) against scripted peers: the
 * real prefill actor runs in the deterministic runtime on stories260K with
 * no store, and one scripted actor plays its conductor, the decode instance
 * and the client at once. Each case sends PREFILL (and CANCEL, LOST,
 * KV_DONE) from a script and checks the KV_READYs that come back: a prompt
 * in chunks (one KV_READY per chunk, the last final with the first token,
 * which went to the client first unless it ends the request),
 * and again after KV_DONE from the prefix cache; a CANCEL mid-prompt; the
 * decode lost mid-prompt (nothing more told to it); a weight version not
 * held; a prompt as long as the context. The runtime and the instance are
 * set up by tests/support/moon_test_script. */
#include "moon_test.h"
#include "moon_test_script.h"
#include "prefill.h"
#include "moonlet/serve_msgs.h"

#include "moonlet/moonlet.h"

#include <string.h>

#define BT 16u
#define MS 1000000ull
#define N_PROMPT 40u /* 2 full blocks and 8 tokens: 3 chunks of 16 */

static moon_model_t *model;

typedef enum {
    CASE_CHUNKS,
    CASE_CANCEL,
    CASE_DECODE_LOST,
    CASE_VERSION,
    CASE_BAD_LENGTH,
    CASE_FIRST_STOPS,     /* every id a stop id: the first token ends the request */
    CASE_FIRST_VIA_DECODE /* the instance told to leave the first token to the decode */
} script_case_t;

/* What came back, per request id (0 or 1). */
typedef struct {
    uint32_t n_ready, n_final, n_blocks, next_block, bad_order;
    int32_t  final_status;
    uint32_t final_n_tokens, final_n_cached, first_ready_blocks;
    /* the first token as a TOKEN to reply_to (before the final KV_READY) and
     * as the final KV_READY says it */
    uint32_t n_first, first_index, first_token, first_before_final, final_first_sent;
    uint32_t final_token;
    uint64_t first_version;
} seen_t;

static struct {
    script_case_t c;
    moon_addr_t   prefill;
    seen_t        seen[2];
    uint32_t      n_hello, n_other;
} g;

static void send_prefill(moon_actor_t *self, uint64_t id, uint32_t n_tokens, uint64_t version)
{
    moon_serve_prefill_t *m =
        moon_msg_new(MOON_MSG_SERVE_PREFILL, (size_t)n_tokens * 5 + 512 * 4 + 128); /* tokens, keys,
                                                                                       stop ids */
    uint32_t *tok = NULL;
    uint64_t *key;

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    m->reply_to       = moon_actor_addr(self);
    m->request_id     = id;
    m->decode         = moon_actor_addr(self);
    m->max_tokens     = 4;
    m->top_p          = 1.0f;
    m->weight_version = version;
    tok               = moon_msg_span_alloc(m, &m->tokens, n_tokens, 4, 0);
    key               = moon_msg_span_alloc(m, &m->keys, 2 * (n_tokens / BT), 8, 0);
    CU_ASSERT_FATAL(tok != NULL && key != NULL);
    if (g.c == CASE_FIRST_STOPS) {
        uint32_t *stop = moon_msg_span_alloc(m, &m->stop_ids, 512, 4, 0);
        CU_ASSERT_FATAL(stop != NULL);
        for (uint32_t i = 0; i < 512; i++) {
            stop[i] = i; /* stories260K's vocabulary */
        }
    }
    for (uint32_t i = 0; i < n_tokens; i++) {
        tok[i] = 3 + (i * 7) % 250;
    }
    for (uint32_t i = 0; i < 2 * (n_tokens / BT); i++) {
        key[i] = 1000 + i; /* any distinct keys: no store, the instance's own cache */
    }
    CU_ASSERT_EQUAL(moon_tell(self, g.prefill, &m->hdr), MOON_OK);
}

static void send_req(moon_actor_t *self, uint32_t type, uint64_t id)
{
    moon_serve_kv_done_t *m = moon_msg_new(type, 0); /* CANCEL, LOST, KV_DONE begin alike */

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    m->reply_to   = moon_actor_addr(self);
    m->request_id = id;
    if (type == MOON_MSG_SERVE_LOST) {
        ((moon_serve_lost_t *)(void *)m)->lost = moon_actor_addr(self); /* the decode: us */
    }
    CU_ASSERT_EQUAL(moon_tell(self, g.prefill, &m->hdr), MOON_OK);
}

static void script_start(moon_actor_t *self)
{
    switch (g.c) {
    case CASE_CHUNKS:
    case CASE_CANCEL:
    case CASE_DECODE_LOST:
    case CASE_FIRST_STOPS:
    case CASE_FIRST_VIA_DECODE:
        send_prefill(self, 0, N_PROMPT, 0);
        break;
    case CASE_VERSION:
        send_prefill(self, 0, N_PROMPT, 7);
        break;
    case CASE_BAD_LENGTH:
        send_prefill(self, 0, 512, 0); /* stories260K's context */
        break;
    }
}

/* A KV_READY: checked, then the script's answer. */
static void on_ready(moon_actor_t *self, const moon_serve_kv_ready_t *m)
{
    seen_t *s = &g.seen[m->request_id < 2 ? m->request_id : 1];

    if (s->n_ready++ == 0) {
        s->first_ready_blocks = m->blocks.n;
    }
    s->bad_order += m->blocks.n > 0 && m->first_block != s->next_block;
    s->next_block = m->first_block + m->blocks.n;
    s->n_blocks += m->blocks.n;
    CU_ASSERT(m->blocks.n == 0 || m->base != 0); /* one process: its pool's address */
    if (m->final) {
        s->n_final++;
        s->final_status     = m->status;
        s->final_n_tokens   = m->n_tokens;
        s->final_n_cached   = m->n_cached;
        s->final_token      = m->token;
        s->final_first_sent = m->first_sent;
    }
    if (g.c == CASE_CHUNKS && m->final && m->request_id == 0) {
        send_req(self, MOON_MSG_SERVE_KV_DONE, 0); /* pulled: its blocks go to the cache */
        send_prefill(self, 1, N_PROMPT, 0);        /* the same prompt again */
    } else if (g.c == CASE_CANCEL && s->n_ready == 1) {
        send_req(self, MOON_MSG_SERVE_CANCEL, 0);
    } else if (g.c == CASE_DECODE_LOST && s->n_ready == 1) {
        send_req(self, MOON_MSG_SERVE_LOST, 0);
    }
}

/* A TOKEN from the prefill: only a request's first, before its final KV_READY. */
static void on_first(const moon_msg_hdr_t *msg)
{
    const moon_serve_token_t *t = (const void *)msg;
    seen_t                   *s = &g.seen[t->request_id < 2 ? t->request_id : 1];

    s->n_first++;
    s->first_index        = t->index;
    s->first_token        = t->token;
    s->first_version      = t->weight_version;
    s->first_before_final = s->n_final == 0;
}

static moon_status_t peer_on_msg(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    if (moon_test_script_report(msg, &g.n_hello)) {
        return MOON_OK;
    }
    switch (msg->type) {
    case MOON_MSG_SERVE_TOKEN:
        on_first(msg);
        break;
    case MOON_MSG_SERVE_KV_READY:
        on_ready(self, (const void *)msg);
        break;
    case MOON_MSG_SYS_TIMER:
        script_start(self);
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
    return moon_timer_start(self, 10 * MS, 0, 0, &timer); /* after the prefill's HELLO */
}

static const moon_actor_ops_t peer_ops = {
    .name        = "scripted peers",
    .state_bytes = 8,
    .init        = peer_init,
    .on_msg      = {[MOON_MSG_SERVE_HELLO]        = peer_on_msg,
                    [MOON_MSG_SERVE_LOAD]         = peer_on_msg,
                    [MOON_MSG_SERVE_CACHE_EVENTS] = peer_on_msg,
                    [MOON_MSG_SERVE_KV_READY]     = peer_on_msg,
                    [MOON_MSG_SERVE_TOKEN]        = peer_on_msg,
                    [MOON_MSG_SERVE_DONE]         = peer_on_msg,
                    [MOON_MSG_SYS_TIMER]          = peer_on_msg},
};

static void run_case(script_case_t c)
{
    moon_serve_instance_args_t ia = {
        .model        = model,
        .engine       = {.kind = MOON_BACKEND_CPU, .n_threads = 1, .max_batch = 1, .max_chunk = BT},
        .role         = MOON_SERVE_ROLE_PREFILL,
        .block_tokens = BT,
        .n_blocks     = 64,
        .max_seqs     = 4,
        .prefill_chunk    = BT,
        .threaded         = 0,
        .first_via_decode = c == CASE_FIRST_VIA_DECODE,
    };

    memset(&g, 0, sizeof(g));
    g.c = c;
    moon_test_script_run(&peer_ops, &moon_prefill_ops, &ia, 0, NULL, &g.prefill);
    CU_ASSERT_EQUAL(g.n_hello, 1);
    CU_ASSERT_EQUAL(g.n_other, 0);
    for (uint32_t i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(g.seen[i].bad_order, 0); /* blocks in order, none twice */
        CU_ASSERT(g.seen[i].n_final <= 1);
    }
}

/* QUEUED -> FETCHING -> COMPUTING (3 chunks, a KV_READY each) -> HANDED;
 * KV_DONE frees it, its full blocks stay cached: the same prompt again
 * reuses them (sent at once, before any compute). */
static void test_chunks_then_cache(void)
{
    run_case(CASE_CHUNKS);
    CU_ASSERT_EQUAL(g.seen[0].n_ready, 3);
    CU_ASSERT_EQUAL(g.seen[0].n_final, 1);
    CU_ASSERT_EQUAL(g.seen[0].final_status, MOON_OK);
    CU_ASSERT_EQUAL(g.seen[0].final_n_tokens, N_PROMPT);
    CU_ASSERT_EQUAL(g.seen[0].n_blocks, 3);
    CU_ASSERT_EQUAL(g.seen[0].final_n_cached, 0);
    CU_ASSERT_EQUAL(g.seen[1].n_final, 1);
    CU_ASSERT_EQUAL(g.seen[1].final_status, MOON_OK);
    CU_ASSERT_EQUAL(g.seen[1].final_n_cached, 2 * BT);
    CU_ASSERT_EQUAL(g.seen[1].first_ready_blocks, 2);
    CU_ASSERT_EQUAL(g.seen[1].n_blocks, 3);
}

/* The first token goes to reply_to straight from the prefill, before the
 * final KV_READY, which says so and carries the same token; the cached
 * prompt's request (1) alike. */
static void test_first_sent(void)
{
    run_case(CASE_CHUNKS);
    for (uint32_t i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(g.seen[i].n_first, 1);
        CU_ASSERT_EQUAL(g.seen[i].first_before_final, 1);
        CU_ASSERT_EQUAL(g.seen[i].first_index, 0);
        CU_ASSERT_EQUAL(g.seen[i].first_token, g.seen[i].final_token);
        CU_ASSERT_EQUAL(g.seen[i].first_version, 0);
        CU_ASSERT_EQUAL(g.seen[i].final_first_sent, 1);
    }
}

/* A first token that ends the request (a stop id), or an instance told to
 * leave it to the decode: no TOKEN from here, and the KV_READY says so. */
static void test_first_left_to_decode(void)
{
    for (script_case_t c = CASE_FIRST_STOPS; c <= CASE_FIRST_VIA_DECODE; c++) {
        run_case(c);
        CU_ASSERT_EQUAL(g.seen[0].n_final, 1);
        CU_ASSERT_EQUAL(g.seen[0].final_status, MOON_OK);
        CU_ASSERT_EQUAL(g.seen[0].n_first, 0);
        CU_ASSERT_EQUAL(g.seen[0].final_first_sent, 0);
    }
}

/* COMPUTING -> HANDED on CANCEL: at the chunk's end, a final KV_READY says so. */
static void test_cancel(void)
{
    run_case(CASE_CANCEL);
    CU_ASSERT_EQUAL(g.seen[0].n_final, 1);
    CU_ASSERT_EQUAL(g.seen[0].final_status, MOON_ERR_CANCELED);
    CU_ASSERT(g.seen[0].n_ready < 3 + 1);
    CU_ASSERT(g.seen[0].n_blocks < 3);
}

/* COMPUTING, decode lost: the request ends here at its chunk's end, and the
 * lost decode hears nothing more (not even a final KV_READY). */
static void test_decode_lost(void)
{
    run_case(CASE_DECODE_LOST);
    CU_ASSERT(g.seen[0].n_ready >= 1 && g.seen[0].n_ready < 3);
    CU_ASSERT_EQUAL(g.seen[0].n_final, 0);
}

/* The weight-version gate: ended before any compute. */
static void test_version_gate(void)
{
    run_case(CASE_VERSION);
    CU_ASSERT_EQUAL(g.seen[0].n_ready, 1);
    CU_ASSERT_EQUAL(g.seen[0].final_status, MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(g.seen[0].n_blocks, 0);
}

/* A prompt as long as the context: refused, never queued. */
static void test_bad_length(void)
{
    run_case(CASE_BAD_LENGTH);
    CU_ASSERT_EQUAL(g.seen[0].n_ready, 1);
    CU_ASSERT_EQUAL(g.seen[0].final_status, MOON_ERR_INVALID_PARAM);
}

static int setup(void)
{
    return moon_test_script_setup(MOON_STORIES, &model);
}

static int teardown(void)
{
    moon_model_destroy(model);
    moon_msg_cache_flush();
    return 0;
}

MOON_TEST_MAIN("prefill_script", setup, teardown, test_chunks_then_cache, test_first_sent,
               test_first_left_to_decode, test_cancel, test_decode_lost, test_version_gate,
               test_bad_length)
