/* tests/unit/sim/test_sim_replay.c - the simulated cluster (the real
 * conductor, store, prefill and decode actors in the deterministic runtime):
 * TTFT and TBT of a tiny trace computed by hand from the profile's cost
 * model, a prefix reused from the prefill's own cache, byte-identical CSVs from two runs
 * of the same trace and seed, and configurations it refuses. */
#include "moon_test.h"
#include "sim_net.h"
#include "sim_run.h"

#include "moonlet/log.h"

#include <stdlib.h>
#include <string.h>

static moon_profile_t profile;

static moon_sim_run_config_t config(const moon_trace_t *t, uint32_t p, uint32_t d)
{
    moon_sim_run_config_t c = {.trace         = t,
                               .profile       = &profile,
                               .nodes_prefill = p,
                               .nodes_decode  = d,
                               .block_tokens  = 512,
                               .ttft_slo_s    = 30,
                               .tbt_slo_s     = 0.1,
                               .time_scale    = 1.0,
                               .seed          = 1};
    return c;
}

static uint64_t ns(double s)
{
    return (uint64_t)(s * 1e9); /* the engine runner's timers truncate */
}

/* One message between actors on different simulated nodes: the profile's
 * network latency (20 us), as the runtime holds it, plus its bytes at one
 * NIC's rate (wire_ns). */
static uint64_t hop(void)
{
    return (uint64_t)(profile.network.latency_s * 1e9 + 0.5);
}

static uint64_t wire_ns(uint64_t bytes)
{
    return (uint64_t)((double)bytes * 1e9 / moon_profile_nic_bytes_per_s(&profile) + 0.5);
}

/* 1 when t is base plus n messages' bytes: at least min_bytes in all, at
 * most 16 KiB each (no message of these prompts is larger). */
static int priced(uint64_t t, uint64_t base, uint64_t min_bytes, uint32_t n)
{
    return t >= base + wire_ns(min_bytes) && t <= base + n * wire_ns(16384);
}

/* Request 0: 1024 tokens, 3 out, from scratch. Request 1 a minute later:
 * 1536 tokens sharing request 0's two blocks (hash ids 1, 2), which the
 * prefill instance still holds in its own prefix cache: it computes 512
 * tokens after a 1024-token prefix, with no fetch, and the decode pulls the
 * two cached blocks while it computes (done before it ends), the third
 * after it.
 * Decode steps are batch-1 roofline steps over the context (prompt + tokens
 * so far). KV moves take the profile network's time on idle links (a minute
 * apart, nothing else books them): the first token leaves with the
 * handover, so the first decode step waits for the pull of the prompt's
 * blocks from the prefill node (one move striped over the NICs, then the
 * link latency), after the final KV_READY's hop.
 * Messages between nodes take one hop (the network latency, plus their
 * bytes at a NIC's rate: the PREFILL carries the prompt's token ids, 4 bytes
 * each): the driver and the conductor share the front node, so a request
 * reaches the prefill instance one hop after its arrival (its queue time),
 * and its first token reaches the driver one hop after the prefill ends
 * (sent by the prefill itself). The first gap is from that token to the
 * decode's first: the handover's hop, the pull and a step; the others are
 * between two tokens that travel the same way, of the same size: no hop. */
static void test_hand_checked_trace(void)
{
    static const char *text =
        "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 3, \"hash_ids\": [1, 2]}\n"
        "{\"timestamp\": 60000, \"input_length\": 1536, \"output_length\": 2, "
        "\"hash_ids\": [1, 2, 3]}\n";
    moon_trace_t         *t = NULL;
    moon_sim_records_t    r;
    moon_sim_run_config_t c;
    moon_cost_config_t    cost = moon_profile_cost(&profile);
    moon_sim_record_t    *x;
    moon_sim_net_config_t nc  = moon_sim_net_config_from_profile(&profile, 2);
    moon_sim_net_t       *net = NULL;
    uint64_t              blk = 512 * moon_cost_kv_bytes_per_token(&cost), pull1, pull2;
    int64_t               end;

    CU_ASSERT_EQUAL_FATAL(moon_sim_net_create(&nc, &net), MOON_OK);
    pull2 = moon_sim_net_idle_ns(net, 0, MOON_SIM_MEDIA_HBM, MOON_SIM_MEDIA_HBM, 2 * blk);
    pull1 = moon_sim_net_idle_ns(net, 0, MOON_SIM_MEDIA_HBM, MOON_SIM_MEDIA_HBM, blk);
    moon_sim_net_destroy(net);
    CU_ASSERT(pull1 > 0 && pull2 < ns(moon_cost_prefill_s(&cost, 1024, 512)));
    CU_ASSERT_EQUAL_FATAL(moon_trace_parse(text, strlen(text), NULL, &t, NULL), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_sim_records_init(&r, 2), MOON_OK);
    c = config(t, 1, 1);
    CU_ASSERT_EQUAL_FATAL(moon_replay_sim_run(&c, &r), MOON_OK);
    x = &r.recs[0];
    CU_ASSERT_EQUAL(x->status, MOON_SIM_REQ_OK);
    CU_ASSERT_EQUAL(x->prefill, 0);
    CU_ASSERT_EQUAL(x->decode, 0);
    CU_ASSERT_EQUAL(x->output_tokens, 3);
    CU_ASSERT_EQUAL(x->prefix_hit_tokens, 0);
    CU_ASSERT(priced(x->prefill_start_ns, hop(), 4 * 1024, 1));
    /* Eq. 1 over 1.248 PFLOP/s: 99.1 ms, and two hops of 20 us */
    CU_ASSERT(priced(x->first_token_ns - x->arrival_ns,
                     2 * hop() + ns(moon_cost_prefill_s(&cost, 0, 1024)), 4 * 1024 + 24, 2));
    CU_ASSERT(priced(x->first_token_ns - x->arrival_ns, 99114629 + 40000, 4 * 1024, 2));
    /* gaps: the handover's hop (its prompt ids), the pull and the step over
     * 1025 tokens; the step over 1026; TBT = the slower */
    CU_ASSERT(
        priced(x->tbt_ns, hop() + pull2 + ns(moon_cost_decode_s(&cost, 1, 1025)), 4 * 1024, 1));
    /* the end is the DONE's arrival: a message of another size than a token's */
    end = (int64_t)(x->finish_ns - x->first_token_ns - x->tbt_ns -
                    ns(moon_cost_decode_s(&cost, 1, 1026)));
    CU_ASSERT(end >= -(int64_t)wire_ns(16384) && end <= (int64_t)wire_ns(16384));
    x = &r.recs[1];
    CU_ASSERT_EQUAL(x->status, MOON_SIM_REQ_OK);
    CU_ASSERT_EQUAL(x->arrival_ns, 60000000000ull);
    CU_ASSERT_EQUAL(x->prefix_hit_tokens, 1024);
    CU_ASSERT(priced(x->prefill_start_ns - x->arrival_ns, hop(), 4 * 1536, 1));
    CU_ASSERT(priced(x->first_token_ns - x->arrival_ns,
                     2 * hop() + ns(moon_cost_prefill_s(&cost, 1024, 512)), 4 * 1536 + 24, 2));
    CU_ASSERT(
        priced(x->tbt_ns, hop() + pull1 + ns(moon_cost_decode_s(&cost, 1, 1537)), 4 * 1536, 1));
    moon_sim_records_fini(&r);
    moon_trace_destroy(t);
}

/* The same trace with a profile whose fit was refitted in service
 * (moonlet calibrate --trace): the prefill instance charges request_s with
 * each request's first chunk, so both TTFTs grow by exactly that (one
 * chunk each), and the token gaps stay as they were. */
static void test_request_overhead_adds_to_ttft(void)
{
    static const char *text =
        "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 3, \"hash_ids\": [1, 2]}\n"
        "{\"timestamp\": 60000, \"input_length\": 1536, \"output_length\": 2, "
        "\"hash_ids\": [1, 2, 3]}\n";
    moon_profile_t        plain = profile;
    moon_trace_t         *t     = NULL;
    moon_sim_records_t    r, base;
    moon_sim_run_config_t c;
    moon_cost_config_t    cost = moon_profile_cost(&profile);

    CU_ASSERT_EQUAL_FATAL(moon_trace_parse(text, strlen(text), NULL, &t, NULL), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_sim_records_init(&base, 2), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_sim_records_init(&r, 2), MOON_OK);
    c = config(t, 1, 1);
    CU_ASSERT_EQUAL_FATAL(moon_replay_sim_run(&c, &base), MOON_OK);
    profile.fit_request_s = 0.002;
    CU_ASSERT_EQUAL(moon_replay_sim_run(&c, &r), MOON_OK);
    profile = plain;
    CU_ASSERT(priced(r.recs[0].first_token_ns - r.recs[0].arrival_ns,
                     2 * hop() + ns(moon_cost_prefill_s(&cost, 0, 1024) + 0.002), 4 * 1024, 2));
    CU_ASSERT(priced(r.recs[1].first_token_ns - r.recs[1].arrival_ns,
                     2 * hop() + ns(moon_cost_prefill_s(&cost, 1024, 512) + 0.002), 4 * 1536, 2));
    for (int i = 0; i < 2; i++) {
        uint64_t d = (r.recs[i].first_token_ns - r.recs[i].arrival_ns) -
                     (base.recs[i].first_token_ns - base.recs[i].arrival_ns);
        CU_ASSERT(d >= 1999999 && d <= 2000001); /* 2 ms, give or take the truncation */
        CU_ASSERT_EQUAL(r.recs[i].tbt_ns, base.recs[i].tbt_ns);
        CU_ASSERT_EQUAL(r.recs[i].prefix_hit_tokens, base.recs[i].prefix_hit_tokens);
    }
    moon_sim_records_fini(&r);
    moon_sim_records_fini(&base);
    moon_trace_destroy(t);
}

/* requests.csv of one run of the first n requests of the synthetic trace */
static char *run_csv(const moon_trace_t *t, double time_scale, size_t *len_p)
{
    moon_sim_records_t    r;
    moon_sim_run_config_t c   = config(t, 2, 2);
    char                 *buf = NULL;
    FILE                 *f   = open_memstream(&buf, len_p);

    c.time_scale = time_scale;
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL_FATAL(moon_sim_records_init(&r, (uint32_t)t->n_reqs), MOON_OK);
    CU_ASSERT_EQUAL(moon_replay_sim_run(&c, &r), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_records_write_csv(&r, f), MOON_OK);
    fclose(f);
    for (uint32_t i = 0; i < r.n; i++) {
        CU_ASSERT_EQUAL(r.recs[i].status, MOON_SIM_REQ_OK);
    }
    moon_sim_records_fini(&r);
    return buf;
}

static void test_two_runs_byte_identical(void)
{
    moon_trace_opts_t o = {.max_reqs = 120};
    moon_trace_t     *t = NULL;
    size_t            la, lb, lc;
    char             *a, *b, *c;

    CU_ASSERT_EQUAL_FATAL(
        moon_trace_load(MOON_TEST_DATA_DIR "/traces/synthetic_trace.jsonl", &o, &t, NULL), MOON_OK);
    a = run_csv(t, 1.0, &la);
    b = run_csv(t, 1.0, &lb);
    c = run_csv(t, 0.25, &lc); /* four times the rate: other queues, other bytes */
    CU_ASSERT_EQUAL(la, lb);
    CU_ASSERT(la > 120 * 40);
    CU_ASSERT_EQUAL(memcmp(a, b, la), 0);
    CU_ASSERT(la != lc || memcmp(a, c, la) != 0);
    free(a);
    free(b);
    free(c);
    moon_trace_destroy(t);
}

/* The colocated baseline (1 + 1: two instances that each prefill and
 * decode): request 0 as from scratch, on instance 0 (both idle: the first).
 * A minute later request 1, an unrelated 512-token prompt with a long
 * output, goes there too (idle again, the first); 20 ms later, while
 * instance 0 still computes request 1, request 2 shares request 0's two
 * blocks. Instance 0 told the conductor it holds them (CACHE_EVENTS), so the
 * policy weighs the 1024 tokens it saves against the wait: request 2 goes to
 * the busy instance 0, reuses the 1024 tokens and has its first token before
 * an idle instance could compute its 1536 from scratch. Without the events
 * the conductor would see instance 0 busy and instance 1 idle and send it
 * to instance 1, cold. */
static void test_colocated(void)
{
    static const char *text =
        "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 3, \"hash_ids\": [1, 2]}\n"
        "{\"timestamp\": 60000, \"input_length\": 512, \"output_length\": 200, "
        "\"hash_ids\": [7]}\n"
        "{\"timestamp\": 60020, \"input_length\": 1536, \"output_length\": 2, "
        "\"hash_ids\": [1, 2, 3]}\n";
    moon_trace_t         *t = NULL;
    moon_sim_records_t    r;
    moon_sim_run_config_t c;
    moon_cost_config_t    cost = moon_profile_cost(&profile);

    CU_ASSERT_EQUAL_FATAL(moon_trace_parse(text, strlen(text), NULL, &t, NULL), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_sim_records_init(&r, 3), MOON_OK);
    c           = config(t, 1, 1);
    c.colocated = 1;
    CU_ASSERT_EQUAL_FATAL(moon_replay_sim_run(&c, &r), MOON_OK);
    for (uint32_t i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(r.recs[i].status, MOON_SIM_REQ_OK);
        CU_ASSERT_EQUAL(r.recs[i].prefill, r.recs[i].decode); /* one instance does both */
    }
    /* a hop to the instance, one back to the driver */
    CU_ASSERT_EQUAL(r.recs[0].prefill, 0);
    CU_ASSERT_EQUAL(r.recs[0].prefix_hit_tokens, 0);
    CU_ASSERT(priced(r.recs[0].first_token_ns - r.recs[0].arrival_ns,
                     2 * hop() + ns(moon_cost_prefill_s(&cost, 0, 1024)), 4 * 1024 + 24, 2));
    CU_ASSERT_EQUAL(r.recs[1].prefill, 0);
    CU_ASSERT_EQUAL(r.recs[1].prefix_hit_tokens, 0);
    /* request 2 arrives while request 1 computes on instance 0 */
    CU_ASSERT(r.recs[2].arrival_ns < r.recs[1].first_token_ns);
    CU_ASSERT_EQUAL(r.recs[2].prefill, 0);
    CU_ASSERT_EQUAL(r.recs[2].prefix_hit_tokens, 1024);
    CU_ASSERT(r.recs[2].first_token_ns - r.recs[2].arrival_ns <
              2 * hop() + ns(moon_cost_prefill_s(&cost, 0, 1536)));
    moon_sim_records_fini(&r);
    moon_trace_destroy(t);
}

/* Mean TTFT of the first 300 requests of the synthetic trace on 8 + 8
 * instances under policy. */
static double mean_ttft(const moon_trace_t *t, const char *policy)
{
    moon_sim_records_t    r;
    moon_sim_run_config_t c = config(t, 8, 8);
    moon_sim_summary_t    s;

    c.policy = policy;
    CU_ASSERT_EQUAL_FATAL(moon_sim_records_init(&r, (uint32_t)t->n_reqs), MOON_OK);
    CU_ASSERT_EQUAL(moon_replay_sim_run(&c, &r), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_summarize(&r, 30, 0.1, &s), MOON_OK);
    CU_ASSERT_EQUAL(s.completed, t->n_reqs);
    moon_sim_records_fini(&r);
    return s.ttft_mean_s;
}

/* The paper's scheduling ablation, strictly: random > least-loaded (no
 * cache) > local cache-aware (the prefill instances' own caches) >
 * Algorithm 1 (global: pulls from the store). */
static void test_policy_ordering(void)
{
    moon_trace_opts_t o = {.max_reqs = 300};
    moon_trace_t     *t = NULL;
    double            rnd, ll, ca, mc;

    CU_ASSERT_EQUAL_FATAL(
        moon_trace_load(MOON_TEST_DATA_DIR "/traces/synthetic_trace.jsonl", &o, &t, NULL), MOON_OK);
    rnd = mean_ttft(t, "random");
    ll  = mean_ttft(t, "least-loaded");
    ca  = mean_ttft(t, "cache-aware");
    mc  = mean_ttft(t, "mooncake");
    fprintf(stderr, "mean ttft: random %.3f least-loaded %.3f cache-aware %.3f mooncake %.3f s\n",
            rnd, ll, ca, mc);
    CU_ASSERT(rnd > 1.2 * ll);
    CU_ASSERT(ll > ca);
    CU_ASSERT(ca > mc);
    moon_trace_destroy(t);
}

static void test_refused_configs(void)
{
    static const char    *text = "{\"timestamp\": 0, \"input_length\": 8, \"output_length\": 1, "
                                 "\"hash_ids\": [1]}\n";
    moon_trace_t         *t    = NULL;
    moon_sim_records_t    r;
    moon_sim_run_config_t c;

    CU_ASSERT_EQUAL_FATAL(moon_trace_parse(text, strlen(text), NULL, &t, NULL), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_sim_records_init(&r, 1), MOON_OK);
    moon_log_set_level(0);
    c           = config(t, 40, 40);
    c.colocated = 1; /* 80 colocated instances: more than the conductor takes */
    CU_ASSERT_EQUAL(moon_replay_sim_run(&c, &r), MOON_ERR_INVALID_PARAM);
    c        = config(t, 1, 1);
    c.policy = "no-such-policy";
    CU_ASSERT_NOT_EQUAL(moon_replay_sim_run(&c, &r), MOON_OK);
    c = config(t, 0, 1);
    CU_ASSERT_EQUAL(moon_replay_sim_run(&c, &r), MOON_ERR_INVALID_PARAM);
    c            = config(t, 1, 1);
    c.time_scale = 0;
    CU_ASSERT_EQUAL(moon_replay_sim_run(&c, &r), MOON_ERR_INVALID_PARAM);
    moon_log_set_level(MOON_LOG_WARN);
    CU_ASSERT_EQUAL(r.recs[0].status, MOON_SIM_REQ_PENDING); /* nothing ran */
    /* the smallest run: one 8-token request, one token out */
    c = config(t, 1, 1);
    CU_ASSERT_EQUAL(moon_replay_sim_run(&c, &r), MOON_OK);
    CU_ASSERT_EQUAL(r.recs[0].status, MOON_SIM_REQ_OK);
    CU_ASSERT_EQUAL(r.recs[0].output_tokens, 1);
    moon_sim_records_fini(&r);
    moon_trace_destroy(t);
}

static int setup(void)
{
    return moon_profile_load(MOON_PROFILE_DEFAULT, MOON_PROFILE_DIR, &profile, NULL) == MOON_OK
               ? 0
               : -1;
}

MOON_TEST_MAIN("sim_replay", setup, NULL, test_hand_checked_trace,
               test_request_overhead_adds_to_ttft, test_two_runs_byte_identical, test_colocated,
               test_policy_ordering, test_refused_configs)
