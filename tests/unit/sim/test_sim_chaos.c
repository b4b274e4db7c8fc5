/* tests/unit/sim/test_sim_chaos.c - seeded chaos in the simulated cluster
 * (launch/sim/sim_faults.h): the spec parser and its errors, the faults
 * landing (a kill counted, messages lost and delayed), a failing seed
 * replaying identically, and the invariants (every request ends exactly
 * once, an ok request streams exactly what it asked) over many seeds of
 * random pauses and of random kills on a 2P + 2D cluster with its store
 * shards. */
#include "moon_test.h"
#include "sim_run.h"

#include "moonlet/log.h"

#include <string.h>

#ifndef MOON_CHAOS_SEEDS
#define MOON_CHAOS_SEEDS 100 /* per kind of fault: 200 runs */
#endif

static moon_profile_t profile;
static moon_trace_t  *trace;

static void test_parse(void)
{
    moon_sim_faults_spec_t s;

    CU_ASSERT_EQUAL(moon_sim_faults_parse("kill=decode:1@1.5,pause=prefill:0@2+0.5,drop=0.01,"
                                          "delay=0.1+20,random=3",
                                          &s),
                    MOON_OK);
    CU_ASSERT_EQUAL(s.n_faults, 2);
    CU_ASSERT_EQUAL(s.faults[0].kind, MOON_SIM_FAULT_KILL);
    CU_ASSERT_EQUAL(s.faults[0].role, MOON_SIM_ROLE_DECODE);
    CU_ASSERT_EQUAL(s.faults[0].index, 1);
    CU_ASSERT_EQUAL(s.faults[0].at_ns, 1500000000ull);
    CU_ASSERT_EQUAL(s.faults[1].kind, MOON_SIM_FAULT_PAUSE);
    CU_ASSERT_EQUAL(s.faults[1].for_ns, 500000000ull);
    CU_ASSERT_DOUBLE_EQUAL(s.drop_p, 0.01, 1e-12);
    CU_ASSERT_EQUAL(s.delay_max_ns, 20000000ull);
    CU_ASSERT_EQUAL(s.n_random, 3);
    CU_ASSERT_FALSE(s.random_pause);
    CU_ASSERT_EQUAL(moon_sim_faults_parse("random-pauses=2", &s), MOON_OK);
    CU_ASSERT(s.random_pause);
    CU_ASSERT_EQUAL(moon_sim_faults_parse("", &s), MOON_OK);
    CU_ASSERT_EQUAL(s.n_faults + s.n_random, 0);

    moon_log_set_level(0); /* the refusals below log their reason */
    CU_ASSERT_EQUAL(moon_sim_faults_parse("kill=router:0@1", &s), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sim_faults_parse("kill=decode:0", &s), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sim_faults_parse("kill=decode:0@-1", &s), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sim_faults_parse("pause=decode:0@1", &s), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sim_faults_parse("drop=0.9", &s), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sim_faults_parse("delay=0.1", &s), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sim_faults_parse("drop=0.1,,random=1", &s), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sim_faults_parse("random=65", &s), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sim_faults_parse("kill=decode:0@1 ", &s), MOON_ERR_INVALID_PARAM);
    moon_log_set_level(MOON_LOG_WARN);
}

/* One replay of the test trace on 2P + 2D under spec; *report_p filled. */
static moon_status_t run(const char *spec, uint64_t seed, moon_sim_records_t *recs,
                         moon_sim_faults_report_t *report_p)
{
    moon_sim_faults_spec_t s;
    moon_sim_run_config_t  c = {.trace         = trace,
                                .profile       = &profile,
                                .nodes_prefill = 2,
                                .nodes_decode  = 2,
                                .block_tokens  = 512,
                                .ttft_slo_s    = 30,
                                .tbt_slo_s     = 0.1,
                                .time_scale    = 1.0,
                                .seed          = seed,
                                .faults        = &s,
                                .faults_report = report_p};

    if (moon_sim_faults_parse(spec, &s) != MOON_OK ||
        moon_sim_records_init(recs, (uint32_t)trace->n_reqs) != MOON_OK) {
        return MOON_ERR_INVALID_PARAM;
    }
    return moon_replay_sim_run(&c, recs);
}

/* The machinery itself: a kill is counted, lost and delayed messages are,
 * and a pause and delays alone change timings, never outcomes. */
static void test_faults_land(void)
{
    moon_sim_records_t       recs;
    moon_sim_faults_report_t r;

    CU_ASSERT_EQUAL_FATAL(run("kill=decode:1@10", 1, &recs, &r), MOON_OK);
    CU_ASSERT_EQUAL(r.kills, 1);
    moon_sim_records_fini(&recs);

    CU_ASSERT_EQUAL_FATAL(run("pause=prefill:0@5+3,pause=decode:1@8+2,delay=0.05+30", 1, &recs, &r),
                          MOON_OK);
    CU_ASSERT_EQUAL(r.pauses, 2);
    CU_ASSERT(r.delayed > 0);
    CU_ASSERT(r.holds);
    CU_ASSERT_EQUAL(r.completed + r.failed + r.rejected, recs.n);
    moon_sim_records_fini(&recs);

    /* a lost message is counted, and the invariants see what it broke */
    CU_ASSERT_EQUAL_FATAL(run("drop=0.02", 1, &recs, &r), MOON_OK);
    CU_ASSERT(r.dropped > 0);
    moon_sim_records_fini(&recs);

    /* a kill of an instance the cluster does not have is refused */
    moon_log_set_level(0);
    CU_ASSERT_EQUAL(run("kill=decode:2@1", 1, &recs, &r), MOON_ERR_INVALID_PARAM);
    moon_sim_records_fini(&recs);
    CU_ASSERT_EQUAL(run("kill=prefill:0@1,kill=prefill:1@2", 1, &recs, &r), MOON_ERR_INVALID_PARAM);
    moon_sim_records_fini(&recs);
    moon_log_set_level(MOON_LOG_WARN);
}

/* A seed replays exactly: the same records, field by field. */
static void test_seed_replays(void)
{
    moon_sim_records_t       a, b;
    moon_sim_faults_report_t ra, rb;

    CU_ASSERT_EQUAL_FATAL(run("random=4,delay=0.02+10", 7, &a, &ra), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(run("random=4,delay=0.02+10", 7, &b, &rb), MOON_OK);
    CU_ASSERT_EQUAL(memcmp(&ra, &rb, sizeof(ra)), 0);
    for (uint32_t i = 0; i < a.n; i++) {
        CU_ASSERT_EQUAL(a.recs[i].status, b.recs[i].status);
        CU_ASSERT_EQUAL(a.recs[i].finish_ns, b.recs[i].finish_ns);
        CU_ASSERT_EQUAL(a.recs[i].output_tokens, b.recs[i].output_tokens);
        CU_ASSERT_EQUAL(a.recs[i].decode, b.recs[i].decode);
    }
    moon_sim_records_fini(&a);
    moon_sim_records_fini(&b);
}

/* Many seeds of random pauses (stopped or starved ranks) and late messages:
 * every invariant holds for each; a failing seed is named. */
static void test_seeds_pauses(void)
{
    uint32_t broken = 0;

    for (uint64_t seed = 1; seed <= MOON_CHAOS_SEEDS; seed++) {
        moon_sim_records_t       recs;
        moon_sim_faults_report_t r;

        CU_ASSERT_EQUAL_FATAL(run("random-pauses=3,delay=0.01+20", seed, &recs, &r), MOON_OK);
        if (!r.holds) {
            fprintf(stderr, "chaos: seed %llu broke an invariant: ", (unsigned long long)seed);
            moon_sim_faults_report_print(&r, stderr);
            fprintf(stderr, "\n");
            broken++;
        }
        moon_sim_records_fini(&recs);
    }
    CU_ASSERT_EQUAL(broken, 0);
}

/* Many seeds of random kills (a lost prefill, decode or shard rank) and
 * pauses: a lost instance's requests end with a reason (the gateway resumes
 * them; the replay's client only records the end), none is lost, none ends
 * twice, none streams a token past its end. */
static void test_seeds_kills(void)
{
    uint32_t broken = 0, failed = 0;

    for (uint64_t seed = 1; seed <= MOON_CHAOS_SEEDS; seed++) {
        moon_sim_records_t       recs;
        moon_sim_faults_report_t r;

        CU_ASSERT_EQUAL_FATAL(run("random=3", seed, &recs, &r), MOON_OK);
        if (!r.holds) {
            fprintf(stderr, "chaos: seed %llu broke an invariant: ", (unsigned long long)seed);
            moon_sim_faults_report_print(&r, stderr);
            fprintf(stderr, "\n");
            broken++;
        }
        failed += r.failed;
        moon_sim_records_fini(&recs);
    }
    CU_ASSERT_EQUAL(broken, 0);
    CU_ASSERT(failed > 0); /* the kills landed on requests */
}

static int setup(void)
{
    moon_trace_opts_t o = {.max_reqs = 30};

    moon_log_set_level(MOON_LOG_WARN);
    if (moon_profile_load(MOON_PROFILE_DEFAULT, MOON_PROFILE_DIR, &profile, NULL) != MOON_OK ||
        moon_trace_load(MOON_TEST_DATA_DIR "/traces/synthetic_trace.jsonl", &o, &trace, NULL) !=
            MOON_OK) {
        return -1;
    }
    return 0;
}

static int teardown(void)
{
    moon_trace_destroy(trace);
    return 0;
}

MOON_TEST_MAIN("sim_chaos", setup, teardown, test_parse, test_faults_land, test_seed_replays,
               test_seeds_pauses, test_seeds_kills)
