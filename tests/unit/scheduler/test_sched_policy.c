/* tests/unit/scheduler/test_sched_policy.c - each policy's placement on
 * hand-built cluster views: random is seeded, round-robin skips the dead,
 * least-loaded and cache-aware pick what they say, Algorithm 1 picks by TTFT
 * with transfer and queue and pulls hot blocks above its threshold only,
 * moonlet prices the pull and predicts decode load at the prefill's end,
 * early rejection on TTFT and TBT (with the load at the prefill's end, both
 * ways), colocated views, and bad input. Costs (sched_test_util.h): prefill
 * 1 ms per token, 16 tokens per block, transfer 1 ms per block, decode step
 * 10 ms + 1 ms per sequence. */
#include "moonlet/sched_policy.h"

#include "moonlet/alloc.h"

#include "sched_test_util.h"

#include <string.h>

/* Predicted TBT of a 100-token request joining at once with this step: the
 * mean of the slowest 10 of its 99 gaps, the first a step longer. */
#define TBT100(_step) ((_step)*1.1)

static moon_sched_decision_t decide_ok(moon_sched_policy_t *p, const moon_sched_view_t *view,
                                       const moon_sched_request_t *req)
{
    moon_sched_decision_t d;

    memset(&d, 0xab, sizeof(d));
    CU_ASSERT_EQUAL(moon_sched_policy_decide(p, view, req, &d), MOON_OK);
    return d;
}

/* n sequences on view instance j, alive from start_s to finish_s. */
static void add_seqs(moon_sched_view_t *view, uint32_t j, uint32_t n, double start_s,
                     double finish_s)
{
    for (uint32_t k = 0; k < n; k++) {
        moon_sched_seq_t s = {.tag        = 1000 + k,
                              .start_s    = start_s,
                              .finish_s   = finish_s,
                              .ctx_tokens = 100,
                              .kv_blocks  = 1};
        CU_ASSERT_EQUAL_FATAL(moon_sched_view_add_seq(view, j, &s), MOON_OK);
    }
}

static void test_names_list_and_create(void)
{
    const char          *want[] = {"moonlet",      "mooncake",    "cache-aware",
                                   "least-loaded", "round-robin", "random"};
    moon_sched_policy_t *p      = NULL;
    moon_sched_config_t  cfg;
    uint32_t             n = 0;

    while (moon_sched_policy_name_at(n) != NULL) {
        CU_ASSERT_PTR_NOT_NULL(moon_sched_policy_doc_at(n));
        n++;
    }
    CU_ASSERT_EQUAL_FATAL(n, 6);
    CU_ASSERT_PTR_NULL(moon_sched_policy_doc_at(n));
    for (uint32_t i = 0; i < n; i++) {
        CU_ASSERT_STRING_EQUAL(moon_sched_policy_name_at(i), want[i]);
        p = sched_test_policy(want[i]);
        CU_ASSERT_STRING_EQUAL(moon_sched_policy_name(p), want[i]);
        CU_ASSERT_EQUAL(moon_sched_policy_early_reject(p), 0);
        moon_sched_policy_destroy(p);
    }
    CU_ASSERT_STRING_EQUAL(moon_sched_policy_name_at(0), MOON_SCHED_POLICY_DEFAULT);
    p = sched_test_policy("mooncake+reject");
    CU_ASSERT_STRING_EQUAL(moon_sched_policy_name(p), "mooncake");
    CU_ASSERT_EQUAL(moon_sched_policy_early_reject(p), 1);
    moon_sched_policy_destroy(p);
    moon_sched_config_default(&cfg);
    cfg.early_reject = 1;
    CU_ASSERT_EQUAL_FATAL(moon_sched_policy_create("random+noreject", &cfg, &p), MOON_OK);
    CU_ASSERT_EQUAL(moon_sched_policy_early_reject(p), 0);
    moon_sched_policy_destroy(p);

    p = NULL;
    CU_ASSERT_EQUAL(moon_sched_policy_create("fastest", NULL, &p), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_sched_policy_create("mooncake+maybe", NULL, &p), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_sched_policy_create("moon", NULL, &p), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_sched_policy_create(NULL, NULL, &p), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_policy_create("random", NULL, NULL), MOON_ERR_INVALID_PARAM);
    cfg.balance_threshold = 0.0;
    CU_ASSERT_EQUAL(moon_sched_policy_create("mooncake", &cfg, &p), MOON_ERR_INVALID_PARAM);
    moon_sched_config_default(&cfg);
    cfg.shed_after = 1.5;
    CU_ASSERT_EQUAL(moon_sched_policy_create("moonlet", &cfg, &p), MOON_ERR_INVALID_PARAM);
    cfg.shed_after = 0.3;
    cfg.shed_share = NAN;
    CU_ASSERT_EQUAL(moon_sched_policy_create("moonlet", &cfg, &p), MOON_ERR_INVALID_PARAM);
    moon_fault_fail_after(1);
    CU_ASSERT_EQUAL(moon_sched_policy_create("random", NULL, &p), MOON_ERR_NO_MEMORY);
    moon_fault_reset();
    CU_ASSERT_PTR_NULL(p);
    moon_sched_policy_destroy(NULL);
}

static void test_random_is_seeded_and_skips_dead(void)
{
    moon_sched_view_t    view;
    moon_sched_request_t req = sched_test_request(4, NULL);
    moon_sched_config_t  cfg;
    moon_sched_policy_t *a = NULL, *b = NULL, *c = NULL;
    int                  seen[6] = {0}, differs = 0;

    sched_test_view(&view, 3, 3); /* prefill 0..2, decode 3..5 */
    view.inst[1].alive = 0;
    view.inst[4].alive = 0;
    moon_sched_config_default(&cfg);
    cfg.seed = 42;
    CU_ASSERT_EQUAL_FATAL(moon_sched_policy_create("random", &cfg, &a), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_sched_policy_create("random", &cfg, &b), MOON_OK);
    cfg.seed = 43;
    CU_ASSERT_EQUAL_FATAL(moon_sched_policy_create("random", &cfg, &c), MOON_OK);
    for (int k = 0; k < 64; k++) {
        moon_sched_decision_t da = decide_ok(a, &view, &req), db = decide_ok(b, &view, &req);
        moon_sched_decision_t dc = decide_ok(c, &view, &req);

        CU_ASSERT_EQUAL(da.prefill, db.prefill);
        CU_ASSERT_EQUAL(da.decode, db.decode);
        differs |= da.prefill != dc.prefill || da.decode != dc.decode;
        CU_ASSERT(da.prefill == 0 || da.prefill == 2);
        CU_ASSERT(da.decode == 3 || da.decode == 5);
        seen[da.prefill] = seen[da.decode] = 1;
    }
    CU_ASSERT(differs);
    CU_ASSERT(seen[0] && seen[2] && seen[3] && seen[5]);
    moon_sched_policy_destroy(a);
    moon_sched_policy_destroy(b);
    moon_sched_policy_destroy(c);
    moon_sched_view_fini(&view);
}

static void test_round_robin_cycles_and_skips_dead(void)
{
    moon_sched_view_t     view;
    moon_sched_request_t  req       = sched_test_request(4, NULL);
    moon_sched_policy_t  *p         = sched_test_policy("round-robin");
    int32_t               want_p[5] = {0, 2, 0, 2, 0}, want_d[5] = {3, 4, 3, 4, 3};
    moon_sched_decision_t d;

    sched_test_view(&view, 3, 2);
    view.inst[1].alive = 0;
    for (int k = 0; k < 5; k++) {
        d = decide_ok(p, &view, &req);
        CU_ASSERT_EQUAL(d.prefill, want_p[k]);
        CU_ASSERT_EQUAL(d.decode, want_d[k]);
        CU_ASSERT_EQUAL(d.rejected, MOON_SCHED_ADMIT);
    }
    /* a failed decision does not move the cursor */
    req.max_tokens = 0;
    CU_ASSERT_EQUAL(moon_sched_policy_decide(p, &view, &req, &d), MOON_ERR_INVALID_PARAM);
    req.max_tokens     = 100;
    view.inst[1].alive = 1;
    d                  = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.prefill, 1);
    CU_ASSERT_EQUAL(d.decode, 4);
    moon_sched_policy_destroy(p);
    moon_sched_view_fini(&view);
}

static void test_least_loaded_picks_smallest_queue(void)
{
    moon_sched_view_t     view;
    uint32_t              local[5] = {0, 0, 4, 0, 0};
    moon_sched_request_t  req      = sched_test_request(4, local);
    moon_sched_policy_t  *p        = sched_test_policy("least-loaded");
    moon_sched_decision_t d;

    sched_test_view(&view, 3, 2);
    view.inst[0].queue_s = 3.0;
    view.inst[1].queue_s = 1.0;
    view.inst[2].queue_s = 2.0;
    view.inst[3].batch   = 5;
    view.inst[4].batch   = 2;
    d                    = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.prefill, 1);
    CU_ASSERT_EQUAL(d.decode, 4);
    CU_ASSERT_EQUAL(d.fetch_blocks, 0);
    SCHED_ASSERT_NEAR(d.queue_s, 1.0, 1e-12);
    SCHED_ASSERT_NEAR(d.prefill_s, 0.064, 1e-12);
    SCHED_ASSERT_NEAR(d.ttft_s, 1.064, 1e-12);
    /* the queue drains: at t = 2.5 instance 0 (0.5 left) is the least loaded */
    view.inst[1].queue_s = 10.0;
    view.inst[2].queue_s = 10.0;
    req.now_s            = 2.5;
    d                    = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.prefill, 0);
    SCHED_ASSERT_NEAR(d.queue_s, 0.5, 1e-12);
    moon_sched_policy_destroy(p);
    moon_sched_view_fini(&view);
}

static void test_least_loaded_spreads_through_commits(void)
{
    moon_sched_view_t    view;
    moon_sched_request_t req      = sched_test_request(4, NULL);
    moon_sched_policy_t *p        = sched_test_policy("least-loaded");
    int                  count[2] = {0};

    sched_test_view(&view, 2, 1);
    for (uint64_t k = 0; k < 10; k++) {
        moon_sched_decision_t d = decide_ok(p, &view, &req);
        req.tag                 = k;
        CU_ASSERT_EQUAL_FATAL(moon_sched_view_commit(&view, &req, &d), MOON_OK);
        count[d.prefill]++;
    }
    CU_ASSERT_EQUAL(count[0], 5);
    CU_ASSERT_EQUAL(count[1], 5);
    SCHED_ASSERT_NEAR(view.inst[0].queue_s, 5 * 0.064, 1e-9);
    CU_ASSERT_EQUAL(view.inst[2].n_seqs, 10);
    moon_sched_policy_destroy(p);
    moon_sched_view_fini(&view);
}

static void test_cache_aware_picks_longest_local_prefix(void)
{
    moon_sched_view_t     view;
    uint32_t              local[4] = {1, 4, 2, 0};
    moon_sched_request_t  req      = sched_test_request(8, local);
    moon_sched_policy_t  *p        = sched_test_policy("cache-aware");
    moon_sched_decision_t d;

    sched_test_view(&view, 3, 1);
    view.inst[1].queue_s = 5.0; /* busier, but it holds the longest prefix */
    req.store_blocks     = 8;   /* local cache only: the store is not used */
    d                    = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.prefill, 1);
    CU_ASSERT_EQUAL(d.local_blocks, 4);
    CU_ASSERT_EQUAL(d.fetch_blocks, 0);
    CU_ASSERT_EQUAL(d.n_new_tokens, 64);
    /* ties on the prefix go to the smaller queue */
    local[0]             = 4;
    view.inst[0].queue_s = 2.0;
    view.inst[1].queue_s = 1.0;
    d                    = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.prefill, 1);
    view.inst[0].queue_s = 0.5;
    d                    = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.prefill, 0);
    moon_sched_policy_destroy(p);
    moon_sched_view_fini(&view);
}

static void test_mooncake_picks_by_ttft_with_transfer_and_queue(void)
{
    moon_sched_view_t     view;
    uint32_t              local[3] = {0, 60, 0};
    moon_sched_request_t  req      = sched_test_request(64, local); /* 1024 tokens */
    moon_sched_policy_t  *p        = sched_test_policy("mooncake");
    moon_sched_decision_t d;

    sched_test_view(&view, 2, 1);
    view.inst[1].queue_s = 2.0;
    /* 0: pull 60 blocks (60 ms) + 64 tokens (64 ms); 1: 2 s queue + 64 ms */
    d = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.prefill, 0);
    CU_ASSERT_EQUAL(d.local_blocks, 0);
    CU_ASSERT_EQUAL(d.fetch_blocks, 60);
    CU_ASSERT_EQUAL(d.fetch_from, 1);
    SCHED_ASSERT_NEAR(d.transfer_s, 0.060, 1e-12);
    SCHED_ASSERT_NEAR(d.prefill_s, 0.064, 1e-12);
    SCHED_ASSERT_NEAR(d.ttft_s, 0.124, 1e-12);
    CU_ASSERT_EQUAL(d.decode, 2);
    /* the store holding the whole prefix is the source */
    req.store_blocks = 60;
    d                = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.fetch_from, -1);
    /* a slow link into 0 (3 s for 60 blocks): the queue of 1 is cheaper */
    view.inst[0].cost.xfer_bytes_per_s = 2e7;
    d                                  = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.prefill, 1);
    CU_ASSERT_EQUAL(d.fetch_blocks, 0);
    SCHED_ASSERT_NEAR(d.ttft_s, 2.064, 1e-12);
    /* ...unless 0's queue were empty and 1's longer still */
    view.inst[1].queue_s = 4.0;
    d                    = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.prefill, 0);
    SCHED_ASSERT_NEAR(d.ttft_s, 3.064, 1e-9);
    moon_sched_policy_destroy(p);
    moon_sched_view_fini(&view);
}

static void test_mooncake_pulls_above_threshold_only(void)
{
    moon_sched_view_t     view;
    uint32_t              local[3] = {20, 50, 0};
    moon_sched_request_t  req      = sched_test_request(64, local);
    moon_sched_policy_t  *p        = sched_test_policy("mooncake"); /* threshold 2 */
    moon_sched_decision_t d;

    sched_test_view(&view, 2, 1);
    view.inst[1].queue_s = 10.0; /* the holder is busy: 0 is picked */
    /* 50 / 20 = 2.5 > 2: pull the 30 missing blocks from the holder */
    d = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.prefill, 0);
    CU_ASSERT_EQUAL(d.local_blocks, 20);
    CU_ASSERT_EQUAL(d.fetch_blocks, 30);
    CU_ASSERT_EQUAL(d.fetch_from, 1);
    CU_ASSERT_EQUAL(d.n_new_tokens, 14 * 16);
    /* 50 / 30 = 1.67 < 2: no pull, the 20 blocks are computed */
    local[0] = 30;
    d        = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.prefill, 0);
    CU_ASSERT_EQUAL(d.local_blocks, 30);
    CU_ASSERT_EQUAL(d.fetch_blocks, 0);
    CU_ASSERT_EQUAL(d.n_new_tokens, 34 * 16);
    moon_sched_policy_destroy(p);
    /* a lower threshold pulls here too */
    {
        moon_sched_config_t cfg;
        moon_sched_config_default(&cfg);
        cfg.balance_threshold = 1.5;
        CU_ASSERT_EQUAL_FATAL(moon_sched_policy_create("mooncake", &cfg, &p), MOON_OK);
        d = decide_ok(p, &view, &req);
        CU_ASSERT_EQUAL(d.fetch_blocks, 20);
        moon_sched_policy_destroy(p);
    }
    moon_sched_view_fini(&view);
}

static void test_moonlet_pulls_when_transfer_beats_compute(void)
{
    moon_sched_view_t     view;
    uint32_t              local[3] = {30, 50, 0};
    moon_sched_request_t  req      = sched_test_request(64, local);
    moon_sched_policy_t  *p        = sched_test_policy("moonlet");
    moon_sched_decision_t d;

    sched_test_view(&view, 2, 1);
    view.inst[1].queue_s = 10.0;
    /* below Algorithm 1's threshold, but 20 blocks move in 20 ms and save
     * 320 ms of compute: pull */
    d = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.prefill, 0);
    CU_ASSERT_EQUAL(d.fetch_blocks, 20);
    CU_ASSERT_EQUAL(d.fetch_from, 1);
    SCHED_ASSERT_NEAR(d.ttft_s, 0.020 + 0.224, 1e-12);
    /* the store, when it holds as much, is preferred on a tie */
    req.store_blocks = 50;
    d                = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.fetch_from, -1);
    CU_ASSERT_EQUAL(d.fetch_blocks, 20);
    /* a link so slow that 20 blocks take 1 s (more than the 320 ms saved):
     * compute them */
    view.inst[0].cost.xfer_bytes_per_s = 2e7;
    d                                  = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.prefill, 0);
    CU_ASSERT_EQUAL(d.fetch_blocks, 0);
    SCHED_ASSERT_NEAR(d.ttft_s, 0.544, 1e-12);
    /* no link at all: never a pull, even from nothing local */
    view.inst[0].cost.xfer_bytes_per_s = 0.0;
    local[0]                           = 0;
    d                                  = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.prefill, 0);
    CU_ASSERT_EQUAL(d.fetch_blocks, 0);
    CU_ASSERT(isfinite(d.ttft_s));
    moon_sched_policy_destroy(p);
    moon_sched_view_fini(&view);
}

static void test_fully_cached_prompt_computes_one_token(void)
{
    moon_sched_view_t     view;
    uint32_t              local[2] = {4, 0};
    moon_sched_request_t  req      = sched_test_request(4, local);
    moon_sched_policy_t  *p        = sched_test_policy("cache-aware");
    moon_sched_decision_t d;

    sched_test_view(&view, 1, 1);
    d = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.n_new_tokens, 1);
    SCHED_ASSERT_NEAR(d.prefill_s, 0.001, 1e-12);
    moon_sched_policy_destroy(p);
    moon_sched_view_fini(&view);
}

static void test_early_rejection_on_ttft(void)
{
    moon_sched_view_t     view;
    moon_sched_request_t  req = sched_test_request(4, NULL);
    moon_sched_policy_t  *on  = sched_test_policy("mooncake+reject");
    moon_sched_policy_t  *off = sched_test_policy("mooncake");
    moon_sched_decision_t d;

    sched_test_view(&view, 2, 1);
    view.inst[0].queue_s = 2.0;
    view.inst[1].queue_s = 3.0;
    req.ttft_slo_s       = 1.0;
    d                    = decide_ok(on, &view, &req);
    CU_ASSERT_EQUAL(d.rejected, MOON_SCHED_REJECT_TTFT);
    CU_ASSERT_PTR_NOT_NULL(d.reason);
    CU_ASSERT_EQUAL(d.prefill, 0);
    SCHED_ASSERT_NEAR(d.ttft_s, 2.064, 1e-12);
    d = decide_ok(off, &view, &req);
    CU_ASSERT_EQUAL(d.rejected, MOON_SCHED_ADMIT);
    CU_ASSERT_PTR_NULL(d.reason);
    /* within the SLO: admitted; no SLO: never rejected */
    req.ttft_slo_s = 2.1;
    CU_ASSERT_EQUAL(decide_ok(on, &view, &req).rejected, MOON_SCHED_ADMIT);
    req.ttft_slo_s = 0.0;
    CU_ASSERT_EQUAL(decide_ok(on, &view, &req).rejected, MOON_SCHED_ADMIT);
    moon_sched_policy_destroy(on);
    moon_sched_policy_destroy(off);
    moon_sched_view_fini(&view);
}

/* moonlet sheds by cost once the queue passes 0.3 of the TTFT SLO: a
 * prefill over half the budget left is rejected though it would meet the
 * SLO; a cheap one, a short queue, shed_share 1 or Algorithm 1 admit it. */
static void test_moonlet_sheds_expensive_prefills_when_queued(void)
{
    moon_sched_view_t    view;
    moon_sched_request_t big = sched_test_request(20, NULL), small = sched_test_request(4, NULL);
    moon_sched_policy_t *p = sched_test_policy("moonlet+reject"), *off = NULL;
    moon_sched_policy_t *mk = sched_test_policy("mooncake+reject");
    moon_sched_config_t  cfg;

    sched_test_view(&view, 1, 1);
    big.ttft_slo_s = small.ttft_slo_s = 1.0;
    view.inst[0].queue_s              = 0.5; /* over 0.3 s: budget 0.5 s, half 0.25 s */
    moon_sched_decision_t d           = decide_ok(p, &view, &big);
    SCHED_ASSERT_NEAR(d.ttft_s, 0.82, 1e-12);            /* within the SLO... */
    CU_ASSERT_EQUAL(d.rejected, MOON_SCHED_REJECT_TTFT); /* ...but 0.32 s > 0.25 s */
    CU_ASSERT_PTR_NOT_NULL(d.reason);
    CU_ASSERT_EQUAL(decide_ok(p, &view, &small).rejected, MOON_SCHED_ADMIT); /* 0.064 s */
    CU_ASSERT_EQUAL(decide_ok(mk, &view, &big).rejected, MOON_SCHED_ADMIT);
    view.inst[0].queue_s = 0.29; /* under the bar: whatever fits */
    CU_ASSERT_EQUAL(decide_ok(p, &view, &big).rejected, MOON_SCHED_ADMIT);
    view.inst[0].queue_s = 0.5;
    moon_sched_config_default(&cfg);
    cfg.shed_share = 1.0;
    CU_ASSERT_EQUAL_FATAL(moon_sched_policy_create("moonlet+reject", &cfg, &off), MOON_OK);
    CU_ASSERT_EQUAL(decide_ok(off, &view, &big).rejected, MOON_SCHED_ADMIT);
    big.ttft_slo_s = 0.0; /* no SLO: nothing to shed against */
    CU_ASSERT_EQUAL(decide_ok(p, &view, &big).rejected, MOON_SCHED_ADMIT);
    moon_sched_policy_destroy(p);
    moon_sched_policy_destroy(off);
    moon_sched_policy_destroy(mk);
    moon_sched_view_fini(&view);
}

static void test_early_rejection_on_tbt(void)
{
    moon_sched_view_t     view;
    moon_sched_request_t  req = sched_test_request(4, NULL);
    moon_sched_decision_t d;

    sched_test_view(&view, 1, 1);
    view.inst[1].batch = 100; /* untracked: runs on; step 10 + 101 ms */
    req.tbt_slo_s      = 0.05;
    for (uint32_t i = 0; moon_sched_policy_name_at(i) != NULL; i++) {
        char                 name[64];
        moon_sched_policy_t *p;

        snprintf(name, sizeof(name), "%s+reject", moon_sched_policy_name_at(i));
        p = sched_test_policy(name);
        d = decide_ok(p, &view, &req);
        CU_ASSERT_EQUAL(d.rejected, MOON_SCHED_REJECT_TBT);
        SCHED_ASSERT_NEAR(d.tbt_s, TBT100(0.111), 1e-12);
        moon_sched_policy_destroy(p);
    }
    /* one token to generate: no decode gap, nothing to reject */
    req.max_tokens = 1;
    {
        moon_sched_policy_t *p = sched_test_policy("mooncake+reject");
        d                      = decide_ok(p, &view, &req);
        CU_ASSERT_EQUAL(d.rejected, MOON_SCHED_ADMIT);
        CU_ASSERT_EQUAL(d.tbt_s, 0.0);
        moon_sched_policy_destroy(p);
    }
    moon_sched_view_fini(&view);
}

static void test_tbt_predicted_at_prefill_end_admits_what_now_would_reject(void)
{
    moon_sched_view_t     view;
    moon_sched_request_t  req = sched_test_request(125, NULL); /* 2000 tokens: 2 s prefill */
    moon_sched_decision_t d;

    sched_test_view(&view, 1, 1);
    add_seqs(&view, 1, 90, 0.0, 1.0); /* busy now, all done by 1 s */
    req.tbt_slo_s = 0.05;
    /* at arrival the step would be 10 + 91 ms, over the SLO */
    CU_ASSERT(moon_sched_cost_step_s(&view.inst[1].cost, 91, 0) > req.tbt_slo_s);
    for (uint32_t i = 0; moon_sched_policy_name_at(i) != NULL; i++) {
        char                 name[64];
        moon_sched_policy_t *p;

        snprintf(name, sizeof(name), "%s+reject", moon_sched_policy_name_at(i));
        p = sched_test_policy(name);
        d = decide_ok(p, &view, &req);
        CU_ASSERT_EQUAL(d.rejected, MOON_SCHED_ADMIT);
        SCHED_ASSERT_NEAR(d.tbt_s, TBT100(0.011), 1e-12);
        SCHED_ASSERT_NEAR(d.decode_join_s, 2.0, 1e-12);
        moon_sched_policy_destroy(p);
    }
    moon_sched_view_fini(&view);
}

static void test_tbt_predicted_at_prefill_end_rejects_what_now_would_admit(void)
{
    moon_sched_view_t     view;
    moon_sched_request_t  req = sched_test_request(125, NULL);
    moon_sched_policy_t  *p   = sched_test_policy("mooncake+reject");
    moon_sched_decision_t d;

    sched_test_view(&view, 1, 1);
    add_seqs(&view, 1, 90, 1.0, 100.0); /* idle now, 90 join at 1 s */
    req.tbt_slo_s = 0.05;
    CU_ASSERT(moon_sched_cost_step_s(&view.inst[1].cost, 1, 0) < req.tbt_slo_s);
    d = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.rejected, MOON_SCHED_REJECT_TBT);
    SCHED_ASSERT_NEAR(d.tbt_s, TBT100(0.101), 1e-12);
    moon_sched_policy_destroy(p);
    moon_sched_view_fini(&view);
}

static void test_moonlet_picks_decode_by_load_at_prefill_end(void)
{
    moon_sched_view_t     view;
    moon_sched_request_t  req  = sched_test_request(125, NULL); /* prefill ends at 2 s */
    moon_sched_policy_t  *ours = sched_test_policy("moonlet");
    moon_sched_policy_t  *alg1 = sched_test_policy("mooncake");
    moon_sched_decision_t d;

    sched_test_view(&view, 1, 2);       /* decode 1 and 2 */
    add_seqs(&view, 1, 10, 0.0, 1.0);   /* 1: busy now, free at 2 s */
    add_seqs(&view, 2, 20, 1.5, 100.0); /* 2: idle now, busy at 2 s */
    d = decide_ok(alg1, &view, &req);
    CU_ASSERT_EQUAL(d.decode, 2);
    SCHED_ASSERT_NEAR(d.tbt_s, TBT100(0.031), 1e-12);
    d = decide_ok(ours, &view, &req);
    CU_ASSERT_EQUAL(d.decode, 1);
    SCHED_ASSERT_NEAR(d.tbt_s, TBT100(0.011), 1e-12);
    moon_sched_policy_destroy(ours);
    moon_sched_policy_destroy(alg1);
    moon_sched_view_fini(&view);
}

/* 99 of 100 blocks cached: a 16 ms suffix, then the decode pulls 100 blocks
 * (1 ms each) of which the compute hides 16 ms. On decode 1 another
 * 100-block sequence arrives at the same moment and shares the link: 184 ms
 * to wait against 84 ms on decode 2, whose bigger batch Algorithm 1 avoids. */
static void test_moonlet_counts_the_kv_handover(void)
{
    static const uint32_t local[3] = {99, 0, 0};
    moon_sched_view_t     view;
    moon_sched_request_t  req  = sched_test_request(100, local);
    moon_sched_policy_t  *ours = sched_test_policy("moonlet");
    moon_sched_policy_t  *alg1 = sched_test_policy("mooncake");
    moon_sched_seq_t      big  = {
              .tag = 7, .start_s = 0.016, .finish_s = 100.0, .ctx_tokens = 1600, .kv_blocks = 100};
    moon_sched_decision_t d;

    sched_test_view(&view, 1, 2);
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_add_seq(&view, 1, &big), MOON_OK);
    add_seqs(&view, 2, 5, 0.0, 100.0);
    d = decide_ok(alg1, &view, &req);
    CU_ASSERT_EQUAL(d.decode, 1);
    d = decide_ok(ours, &view, &req);
    SCHED_ASSERT_NEAR(d.ttft_s, 0.016, 1e-12);
    CU_ASSERT_EQUAL(d.decode, 2);
    /* step 16 ms; the first of ten slow gaps waits 84 ms more */
    SCHED_ASSERT_NEAR(d.tbt_s, 0.016 + (0.084 + 0.016) / 10, 1e-9);
    SCHED_ASSERT_NEAR(d.decode_join_s, 0.1, 1e-9);
    moon_sched_policy_destroy(ours);
    moon_sched_policy_destroy(alg1);
    moon_sched_view_fini(&view);
}

static void test_moonlet_tbt_counts_sequences_joining_during_its_life(void)
{
    moon_sched_view_t     view;
    moon_sched_request_t  req  = sched_test_request(125, NULL); /* joins at 2 s, ~1.1 s of life */
    moon_sched_policy_t  *ours = sched_test_policy("moonlet+reject");
    moon_sched_policy_t  *alg1 = sched_test_policy("mooncake+reject");
    moon_sched_decision_t d;

    sched_test_view(&view, 1, 1);
    add_seqs(&view, 1, 40, 2.5, 100.0); /* placed earlier, they join half a second later */
    add_seqs(&view, 1, 40, 9.0, 100.0); /* ...and these after it is done */
    req.tbt_slo_s = 0.03;
    /* Algorithm 1 sees the batch at the prefill's end only: 11 ms */
    d = decide_ok(alg1, &view, &req);
    CU_ASSERT_EQUAL(d.rejected, MOON_SCHED_ADMIT);
    SCHED_ASSERT_NEAR(d.tbt_s, TBT100(0.011), 1e-12);
    /* moonlet: 41 sequences from 2.5 s on, a 51 ms step for it and them */
    d = decide_ok(ours, &view, &req);
    CU_ASSERT_EQUAL(d.rejected, MOON_SCHED_REJECT_TBT);
    SCHED_ASSERT_NEAR(d.step_s, 0.051, 1e-12);
    SCHED_ASSERT_NEAR(d.tbt_s, TBT100(0.051), 1e-12);
    /* sequences that finish before it joins do not count */
    moon_sched_view_fini(&view);
    sched_test_view(&view, 1, 1);
    add_seqs(&view, 1, 40, 0.0, 1.9);
    d = decide_ok(ours, &view, &req);
    CU_ASSERT_EQUAL(d.rejected, MOON_SCHED_ADMIT);
    SCHED_ASSERT_NEAR(d.tbt_s, TBT100(0.011), 1e-12);
    moon_sched_policy_destroy(ours);
    moon_sched_policy_destroy(alg1);
    moon_sched_view_fini(&view);
}

static void test_full_decode_waits_for_room(void)
{
    moon_sched_view_t     view;
    moon_sched_request_t  req = sched_test_request(1, NULL); /* 16 tokens: prefill 16 ms */
    moon_sched_policy_t  *p   = sched_test_policy("moonlet+reject");
    moon_sched_decision_t d;

    sched_test_view(&view, 1, 2);
    view.inst[1].max_batch = 2;
    add_seqs(&view, 1, 1, 0.0, 5.0);
    add_seqs(&view, 1, 1, 0.0, 8.0);
    view.inst[2].alive = 0;
    /* joins when the first finishes at 5 s: the first gap is ~5 s (and a
     * step) longer, one of the slowest 10 of 99 gaps */
    d = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.decode, 1);
    SCHED_ASSERT_NEAR(d.decode_join_s, 5.0, 1e-12);
    SCHED_ASSERT_NEAR(d.step_s, 0.012, 1e-12);
    SCHED_ASSERT_NEAR(d.tbt_s, 0.012 + (5.0 - 0.016 + 0.012) / 10, 1e-12);
    CU_ASSERT_EQUAL(d.rejected, MOON_SCHED_ADMIT);
    req.tbt_slo_s = 0.2;
    CU_ASSERT_EQUAL(decide_ok(p, &view, &req).rejected, MOON_SCHED_REJECT_TBT);

    /* KV: a sequence larger than the pool never fits */
    view.inst[1].max_batch       = 0;
    view.inst[1].kv_blocks_total = 4;
    view.inst[1].kv_blocks_free  = 4; /* needs ceil(116 / 16) = 8 */
    d                            = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.rejected, MOON_SCHED_REJECT_NO_ROOM);
    CU_ASSERT(isinf(d.tbt_s));
    moon_sched_policy_destroy(p);
    p = sched_test_policy("moonlet");
    d = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.rejected, MOON_SCHED_ADMIT);
    CU_ASSERT_EQUAL(d.decode, 1);
    moon_sched_policy_destroy(p);
    moon_sched_view_fini(&view);
}

static void test_colocated_uses_one_instance_and_local_cache(void)
{
    moon_sched_view_t    view;
    uint32_t             local[3] = {0, 3, 1};
    moon_sched_request_t req      = sched_test_request(8, local);

    CU_ASSERT_EQUAL_FATAL(moon_sched_view_init(&view, 3), MOON_OK);
    for (uint32_t i = 0; i < 3; i++) {
        view.inst[i].role  = MOON_SCHED_ROLE_COLOCATED;
        view.inst[i].alive = 1;
        view.inst[i].cost  = sched_test_cost();
    }
    req.store_blocks = 8;
    for (uint32_t i = 0; moon_sched_policy_name_at(i) != NULL; i++) {
        moon_sched_policy_t  *p = sched_test_policy(moon_sched_policy_name_at(i));
        moon_sched_decision_t d = decide_ok(p, &view, &req);

        CU_ASSERT_EQUAL(d.prefill, d.decode);
        CU_ASSERT_EQUAL(d.fetch_blocks, 0);
        CU_ASSERT_EQUAL(d.local_blocks, local[d.prefill]);
        moon_sched_policy_destroy(p);
    }
    /* a view mixing colocated with disaggregated instances is refused */
    view.inst[2].role = MOON_SCHED_ROLE_DECODE;
    {
        moon_sched_policy_t  *p = sched_test_policy("mooncake");
        moon_sched_decision_t d;
        CU_ASSERT_EQUAL(moon_sched_policy_decide(p, &view, &req, &d), MOON_ERR_INVALID_PARAM);
        moon_sched_policy_destroy(p);
    }
    moon_sched_view_fini(&view);
}

static void test_bad_input_changes_nothing(void)
{
    moon_sched_view_t     view;
    uint32_t              local[2] = {0, 0};
    moon_sched_request_t  good     = sched_test_request(4, local), req;
    moon_sched_policy_t  *p        = sched_test_policy("moonlet");
    moon_sched_decision_t d, keep;
    moon_sched_view_t     empty = {0};

    sched_test_view(&view, 1, 1);
    memset(&d, 0x5a, sizeof(d));
    keep = d;
    CU_ASSERT_EQUAL(moon_sched_policy_decide(NULL, &view, &good, &d), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_policy_decide(p, NULL, &good, &d), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_policy_decide(p, &empty, &good, &d), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_policy_decide(p, &view, NULL, &d), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_policy_decide(p, &view, &good, NULL), MOON_ERR_INVALID_PARAM);
    req               = good;
    req.prompt_tokens = 0;
    CU_ASSERT_EQUAL(moon_sched_policy_decide(p, &view, &req, &d), MOON_ERR_INVALID_PARAM);
    req              = good;
    req.block_tokens = 0;
    CU_ASSERT_EQUAL(moon_sched_policy_decide(p, &view, &req, &d), MOON_ERR_INVALID_PARAM);
    req          = good;
    req.n_blocks = 5; /* 5 blocks of 16 > 64 tokens */
    CU_ASSERT_EQUAL(moon_sched_policy_decide(p, &view, &req, &d), MOON_ERR_INVALID_PARAM);
    req              = good;
    req.store_blocks = 5;
    CU_ASSERT_EQUAL(moon_sched_policy_decide(p, &view, &req, &d), MOON_ERR_INVALID_PARAM);
    req      = good;
    local[0] = 5;
    CU_ASSERT_EQUAL(moon_sched_policy_decide(p, &view, &req, &d), MOON_ERR_INVALID_PARAM);
    local[0]       = 0;
    req.ttft_slo_s = -1.0;
    CU_ASSERT_EQUAL(moon_sched_policy_decide(p, &view, &req, &d), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(memcmp(&d, &keep, sizeof(d)), 0);
    moon_sched_policy_destroy(p);
    moon_sched_view_fini(&view);
}

static void test_no_alive_instance_is_no_resource(void)
{
    moon_sched_view_t     view;
    moon_sched_request_t  req = sched_test_request(4, NULL);
    moon_sched_decision_t d;

    sched_test_view(&view, 2, 2);
    for (uint32_t i = 0; moon_sched_policy_name_at(i) != NULL; i++) {
        moon_sched_policy_t *p = sched_test_policy(moon_sched_policy_name_at(i));

        view.inst[0].alive = view.inst[1].alive = 0;
        CU_ASSERT_EQUAL(moon_sched_policy_decide(p, &view, &req, &d), MOON_ERR_NO_RESOURCE);
        view.inst[0].alive = 1;
        view.inst[2].alive = view.inst[3].alive = 0;
        CU_ASSERT_EQUAL(moon_sched_policy_decide(p, &view, &req, &d), MOON_ERR_NO_RESOURCE);
        view.inst[3].alive = 1;
        d                  = decide_ok(p, &view, &req);
        CU_ASSERT_EQUAL(d.prefill, 0);
        CU_ASSERT_EQUAL(d.decode, 3);
        view.inst[1].alive = view.inst[2].alive = 1;
        moon_sched_policy_destroy(p);
    }
    moon_sched_view_fini(&view);
}

static void test_decide_out_of_memory_changes_nothing(void)
{
    moon_sched_view_t     view;
    moon_sched_request_t  req = sched_test_request(4, NULL);
    moon_sched_policy_t  *p   = sched_test_policy("round-robin");
    moon_sched_decision_t d;

    sched_test_view(&view, 2, 1);
    add_seqs(&view, 2, 3, 0.0, 10.0);
    moon_fault_fail_after(1);
    CU_ASSERT_EQUAL(moon_sched_policy_decide(p, &view, &req, &d), MOON_ERR_NO_MEMORY);
    moon_fault_reset();
    d = decide_ok(p, &view, &req);
    CU_ASSERT_EQUAL(d.prefill, 0); /* the cursor did not move */
    moon_sched_policy_destroy(p);
    moon_sched_view_fini(&view);
}

MOON_TEST_MAIN(
    "sched_policy", NULL, NULL, test_names_list_and_create, test_random_is_seeded_and_skips_dead,
    test_round_robin_cycles_and_skips_dead, test_least_loaded_picks_smallest_queue,
    test_least_loaded_spreads_through_commits, test_cache_aware_picks_longest_local_prefix,
    test_mooncake_picks_by_ttft_with_transfer_and_queue, test_mooncake_pulls_above_threshold_only,
    test_moonlet_pulls_when_transfer_beats_compute, test_fully_cached_prompt_computes_one_token,
    test_early_rejection_on_ttft, test_moonlet_sheds_expensive_prefills_when_queued,
    test_early_rejection_on_tbt, test_tbt_predicted_at_prefill_end_admits_what_now_would_reject,
    test_tbt_predicted_at_prefill_end_rejects_what_now_would_admit,
    test_moonlet_picks_decode_by_load_at_prefill_end, test_moonlet_counts_the_kv_handover,
    test_moonlet_tbt_counts_sequences_joining_during_its_life, test_full_decode_waits_for_room,
    test_colocated_uses_one_instance_and_local_cache, test_bad_input_changes_nothing,
    test_no_alive_instance_is_no_resource, test_decide_out_of_memory_changes_nothing)
