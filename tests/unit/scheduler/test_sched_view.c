/* tests/unit/scheduler/test_sched_view.c - the cluster view's bookkeeping:
 * queues drain in real time, commits grow the queue and add a predicted
 * sequence, releases and reports overwrite the prediction (reports keep the
 * commits made after them), and bad input or a failed allocation change
 * nothing. */
#include "moonlet/sched_view.h"

#include "moonlet/alloc.h"

#include "sched_test_util.h"

#include <string.h>

/* An admitted decision prefill 0 -> decode 1 with the given predictions. */
static moon_sched_decision_t decision(double prefill_s, uint64_t n_new, double join_s,
                                      double step_s)
{
    moon_sched_decision_t d = {0};

    d.prefill       = 0;
    d.decode        = 1;
    d.fetch_from    = -1;
    d.n_new_tokens  = n_new;
    d.prefill_s     = prefill_s;
    d.ttft_s        = prefill_s;
    d.decode_join_s = join_s;
    d.step_s        = step_s;
    return d;
}

static void test_init_refuses_bad_input(void)
{
    moon_sched_view_t view = {0};

    CU_ASSERT_EQUAL(moon_sched_view_init(NULL, 2), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_view_init(&view, 0), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NULL(view.inst);
    moon_sched_view_fini(NULL);
    moon_sched_view_fini(&view);
    moon_fault_fail_after(1);
    CU_ASSERT_EQUAL(moon_sched_view_init(&view, 2), MOON_ERR_NO_MEMORY);
    moon_fault_reset();
    CU_ASSERT_PTR_NULL(view.inst);
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_init(&view, 2), MOON_OK);
    CU_ASSERT_EQUAL(view.n_inst, 2);
    CU_ASSERT_EQUAL(view.inst[1].alive, 0);
    moon_sched_view_fini(&view);
    CU_ASSERT_PTR_NULL(view.inst);
}

static void test_queue_drains_in_real_time(void)
{
    moon_sched_instance_t inst = {.queue_s = 5.0, .queue_at_s = 10.0};

    CU_ASSERT_EQUAL(moon_sched_instance_queue_at(&inst, 12.0), 3.0);
    CU_ASSERT_EQUAL(moon_sched_instance_queue_at(&inst, 20.0), 0.0);
    CU_ASSERT_EQUAL(moon_sched_instance_queue_at(&inst, 9.0), 5.0);
}

static void test_commit_grows_queue_and_adds_sequence(void)
{
    moon_sched_view_t     view;
    moon_sched_request_t  req = sched_test_request(2, NULL); /* 32 tokens, 100 to generate */
    moon_sched_decision_t d   = decision(2.0, 32, 2.0, 0.01);
    uint32_t              batch;
    uint64_t              ctx;

    sched_test_view(&view, 1, 1);
    view.inst[1].kv_blocks_total = 100;
    view.inst[1].kv_blocks_free  = 100;
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_commit(&view, &req, &d), MOON_OK);
    CU_ASSERT_EQUAL(view.inst[0].queue_s, 2.0);
    CU_ASSERT_EQUAL(view.inst[0].queue_tokens, 32);
    CU_ASSERT_EQUAL(view.inst[0].queue_reqs, 1);
    /* 132 tokens of context = 9 blocks of 16 */
    CU_ASSERT_EQUAL(view.inst[1].kv_blocks_free, 91);
    moon_sched_instance_load_at(&view.inst[1], 1.0, &batch, &ctx);
    CU_ASSERT_EQUAL(batch, 0);
    moon_sched_instance_load_at(&view.inst[1], 2.5, &batch, &ctx);
    CU_ASSERT_EQUAL(batch, 1);
    CU_ASSERT_EQUAL(ctx, 132);
    /* it finishes 100 steps of 10 ms after joining */
    moon_sched_instance_load_at(&view.inst[1], 3.0, &batch, &ctx);
    CU_ASSERT_EQUAL(batch, 0);

    /* a second commit a second later queues behind what is left */
    req.now_s = 1.0;
    req.tag   = 2;
    d         = decision(2.0, 32, 5.0, 0.01);
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_commit(&view, &req, &d), MOON_OK);
    CU_ASSERT_EQUAL(view.inst[0].queue_s, 3.0);
    CU_ASSERT_EQUAL(view.inst[0].queue_at_s, 1.0);
    CU_ASSERT_EQUAL(view.inst[1].kv_blocks_free, 82);

    /* a commit after the first finished drops its prediction, blocks back */
    req.now_s = 4.0;
    req.tag   = 3;
    d         = decision(1.0, 32, 5.0, 0.01);
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_commit(&view, &req, &d), MOON_OK);
    CU_ASSERT_EQUAL(view.inst[1].n_seqs, 2);
    CU_ASSERT_EQUAL(view.inst[1].kv_blocks_free, 82);
    CU_ASSERT_EQUAL(moon_sched_view_release(&view, 1, 1), MOON_ERR_NOT_FOUND);
    moon_sched_view_fini(&view);
}

static void test_commit_refuses_bad_input_and_changes_nothing(void)
{
    moon_sched_view_t     view;
    moon_sched_request_t  req = sched_test_request(2, NULL);
    moon_sched_decision_t d   = decision(2.0, 32, 2.0, 0.01);

    sched_test_view(&view, 1, 1);
    CU_ASSERT_EQUAL(moon_sched_view_commit(NULL, &req, &d), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_view_commit(&view, NULL, &d), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_view_commit(&view, &req, NULL), MOON_ERR_INVALID_PARAM);
    d.rejected = MOON_SCHED_REJECT_TTFT;
    CU_ASSERT_EQUAL(moon_sched_view_commit(&view, &req, &d), MOON_ERR_INVALID_PARAM);
    d.rejected = MOON_SCHED_ADMIT;
    d.decode   = 2;
    CU_ASSERT_EQUAL(moon_sched_view_commit(&view, &req, &d), MOON_ERR_INVALID_PARAM);
    d.decode  = 1;
    d.prefill = -1;
    CU_ASSERT_EQUAL(moon_sched_view_commit(&view, &req, &d), MOON_ERR_INVALID_PARAM);
    d.prefill = 0;
    /* out of memory for the commit ring, then for the sequence list */
    for (uint64_t n = 1; n <= 2; n++) {
        moon_fault_fail_after(n);
        CU_ASSERT_EQUAL(moon_sched_view_commit(&view, &req, &d), MOON_ERR_NO_MEMORY);
        moon_fault_reset();
    }
    CU_ASSERT_EQUAL(view.inst[0].queue_s, 0.0);
    CU_ASSERT_EQUAL(view.inst[0].queue_reqs, 0);
    CU_ASSERT_EQUAL(view.inst[1].n_seqs, 0);
    CU_ASSERT_EQUAL(moon_sched_view_commit(&view, &req, &d), MOON_OK);
    moon_sched_view_fini(&view);
}

static void test_release_returns_blocks(void)
{
    moon_sched_view_t view;
    moon_sched_seq_t  seq = {
         .tag = 7, .start_s = 0.0, .finish_s = 10.0, .ctx_tokens = 64, .kv_blocks = 4};
    uint32_t batch;

    sched_test_view(&view, 1, 1);
    view.inst[1].kv_blocks_total = 10;
    view.inst[1].kv_blocks_free  = 10;
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_add_seq(&view, 1, &seq), MOON_OK);
    CU_ASSERT_EQUAL(view.inst[1].kv_blocks_free, 6);
    moon_sched_instance_load_at(&view.inst[1], 5.0, &batch, NULL);
    CU_ASSERT_EQUAL(batch, 1);
    CU_ASSERT_EQUAL(moon_sched_view_release(&view, 1, 8), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_sched_view_release(&view, 1, 7), MOON_OK);
    CU_ASSERT_EQUAL(view.inst[1].kv_blocks_free, 10);
    CU_ASSERT_EQUAL(moon_sched_view_release(&view, 1, 7), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_sched_view_release(&view, 2, 7), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_view_release(NULL, 0, 7), MOON_ERR_INVALID_PARAM);
    seq.finish_s = -1.0;
    CU_ASSERT_EQUAL(moon_sched_view_add_seq(&view, 1, &seq), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_view_add_seq(&view, 1, NULL), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(view.inst[1].n_seqs, 0);
    moon_sched_view_fini(&view);
}

static void test_report_keeps_commits_made_after_it(void)
{
    moon_sched_view_t     view;
    moon_sched_request_t  req    = sched_test_request(2, NULL);
    moon_sched_decision_t d      = decision(2.0, 32, 10.0, 0.01);
    moon_sched_report_t   report = {
          .now_s = 2.0, .queue_s = 0.5, .queue_reqs = 1, .queue_tokens = 10};

    sched_test_view(&view, 1, 1);
    req.now_s = 1.0;
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_commit(&view, &req, &d), MOON_OK);
    req.now_s = 5.0;
    d         = decision(3.0, 40, 10.0, 0.01);
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_commit(&view, &req, &d), MOON_OK);
    /* made at 2: covers the commit at 1, not the one at 5 */
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_report(&view, 0, &report), MOON_OK);
    CU_ASSERT_EQUAL(view.inst[0].queue_reqs, 2);
    CU_ASSERT_EQUAL(view.inst[0].queue_tokens, 50);
    /* 0.5 s left at 2 drained by 5, then the 3 s committed at 5 */
    SCHED_ASSERT_NEAR(moon_sched_instance_queue_at(&view.inst[0], 5.0), 3.0, 1e-12);
    SCHED_ASSERT_NEAR(moon_sched_instance_queue_at(&view.inst[0], 6.0), 2.0, 1e-12);
    /* a later report covers both */
    report.now_s = 6.0;
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_report(&view, 0, &report), MOON_OK);
    CU_ASSERT_EQUAL(view.inst[0].queue_s, 0.5);
    CU_ASSERT_EQUAL(view.inst[0].queue_reqs, 1);
    CU_ASSERT_EQUAL(view.inst[0].n_covered, 2); /* seen: none replayed */
    moon_sched_view_fini(&view);
}

/* Without queue_s, the requests still queued are the last ones committed
 * before the report: their predicted prefill times (prefixes included),
 * the one in progress scaled by the tokens it has left. */
static void test_report_estimates_queue_from_commits(void)
{
    moon_sched_view_t     view;
    moon_sched_request_t  req    = sched_test_request(2, NULL);
    moon_sched_decision_t d      = decision(2.0, 32, 10.0, 0.01);
    moon_sched_report_t   report = {
          .now_s = 6.0, .queue_s = -1.0, .queue_reqs = 2, .queue_tokens = 60};

    sched_test_view(&view, 1, 1);
    view.inst[0].cost.a1 = 1.0; /* the token estimate would say 60 s */
    req.now_s            = 1.0;
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_commit(&view, &req, &d), MOON_OK);
    req.now_s = 2.0;
    d         = decision(3.0, 40, 10.0, 0.01);
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_commit(&view, &req, &d), MOON_OK);
    /* both still there, 60 of their 72 tokens left: (2 + 3) x 60 / 72 */
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_report(&view, 0, &report), MOON_OK);
    SCHED_ASSERT_NEAR(view.inst[0].queue_s, 5.0 * 60.0 / 72.0, 1e-12);
    /* one left, untouched: its 3 s */
    report.queue_reqs   = 1;
    report.queue_tokens = 40;
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_report(&view, 0, &report), MOON_OK);
    SCHED_ASSERT_NEAR(view.inst[0].queue_s, 3.0, 1e-12);
    /* more than were committed: the token estimate */
    report.queue_reqs = 3;
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_report(&view, 0, &report), MOON_OK);
    CU_ASSERT(view.inst[0].queue_s > 30.0);
    moon_sched_view_fini(&view);
}

static void test_report_estimates_queue_from_counts(void)
{
    moon_sched_view_t   view;
    moon_sched_report_t report = {
        .now_s = 0.0, .queue_s = -1.0, .queue_reqs = 2, .queue_tokens = 200};

    sched_test_view(&view, 1, 1);
    view.inst[0].cost.a0 = 0.01;
    view.inst[0].cost.a2 = 1e-6;
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_report(&view, 0, &report), MOON_OK);
    /* two requests of 100: 2 x (0.01 + 0.1 + 0.01) */
    SCHED_ASSERT_NEAR(view.inst[0].queue_s, 0.24, 1e-12);
    CU_ASSERT_EQUAL(moon_sched_view_report(&view, 2, &report), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_view_report(&view, 0, NULL), MOON_ERR_INVALID_PARAM);
    report.now_s = NAN;
    CU_ASSERT_EQUAL(moon_sched_view_report(&view, 0, &report), MOON_ERR_INVALID_PARAM);
    SCHED_ASSERT_NEAR(view.inst[0].queue_s, 0.24, 1e-12);
    moon_sched_view_fini(&view);
}

static void test_report_splits_running_into_predicted_and_untracked(void)
{
    moon_sched_view_t view;
    moon_sched_seq_t  running = {
         .tag = 1, .start_s = 0.0, .finish_s = 50.0, .ctx_tokens = 100, .kv_blocks = 7};
    moon_sched_seq_t later = {
        .tag = 2, .start_s = 20.0, .finish_s = 50.0, .ctx_tokens = 100, .kv_blocks = 7};
    moon_sched_report_t report = {.now_s           = 10.0,
                                  .running         = 3,
                                  .ctx_tokens      = 300,
                                  .kv_blocks_free  = 50,
                                  .kv_blocks_total = 100};
    uint32_t            batch;
    uint64_t            ctx;

    sched_test_view(&view, 1, 1);
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_add_seq(&view, 1, &running), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_add_seq(&view, 1, &later), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_report(&view, 1, &report), MOON_OK);
    /* 3 running, one of them predicted: 2 untracked with 100 tokens each */
    CU_ASSERT_EQUAL(view.inst[1].batch, 2);
    CU_ASSERT_EQUAL(view.inst[1].ctx_tokens, 200);
    CU_ASSERT_EQUAL(view.inst[1].kv_blocks_total, 100);
    /* the one not yet started will take its 7 blocks */
    CU_ASSERT_EQUAL(view.inst[1].kv_blocks_free, 43);
    moon_sched_instance_load_at(&view.inst[1], 30.0, &batch, &ctx);
    CU_ASSERT_EQUAL(batch, 4);
    CU_ASSERT_EQUAL(ctx, 400);
    moon_sched_instance_load_at(&view.inst[1], 60.0, &batch, &ctx);
    CU_ASSERT_EQUAL(batch, 2);

    /* no context given: estimated from the used blocks */
    report = (moon_sched_report_t){
        .now_s = 60.0, .running = 2, .block_tokens = 16, .kv_blocks_free = 94};
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_report(&view, 1, &report), MOON_OK);
    CU_ASSERT_EQUAL(view.inst[1].n_seqs, 0);
    CU_ASSERT_EQUAL(view.inst[1].batch, 2);
    CU_ASSERT_EQUAL(view.inst[1].ctx_tokens, 96);
    CU_ASSERT_EQUAL(view.inst[1].kv_blocks_free, 94);
    moon_sched_view_fini(&view);
}

MOON_TEST_MAIN("sched_view", NULL, NULL, test_init_refuses_bad_input,
               test_queue_drains_in_real_time, test_commit_grows_queue_and_adds_sequence,
               test_commit_refuses_bad_input_and_changes_nothing, test_release_returns_blocks,
               test_report_keeps_commits_made_after_it, test_report_estimates_queue_from_commits,
               test_report_estimates_queue_from_counts,
               test_report_splits_running_into_predicted_and_untracked)
