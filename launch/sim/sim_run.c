/* launch/sim/sim_run.c - the simulated cluster: the real conductor, store shard,
 * prefill and decode actors in one deterministic runtime (virtual clock,
 * seeded order), instances on the COST engine (inline runners: modeled
 * durations become timers), and the replay driver actor.
 *
 * The instances need a model for their bookkeeping (vocabulary, context,
 * KV pools, tokenizer): a tiny random one (dim 2, one layer, one head: RoPE needs pairs) is
 * written and loaded for the run, and the engine models the profile's shape
 * (moonlet/model.h: COST over a model with a modeled shape). KV payloads are
 * virtual: pools and store shards keep block tables, keys, sizes, leases
 * and eviction but no bytes (kv_pool.h, store_shard.h), so memory does not
 * grow with the modeled KV; capacities in blocks come from the profile (HBM
 * left after the weights, store DRAM), the store's capped by what the trace
 * can ever fill. Which
 * instances the conductor chose is read off its PREFILL messages as they are
 * dispatched (the runtime's trace hook). KV moves take their modeled time
 * on the profile's network (sim_net.h: per-node NICs with busy-until lanes,
 * store DRAM): prefill instance i is on node i, decode instance j on node
 * P + j, and a prompt's store blocks come evenly from every shard's node.
 * Store shard k is on node k; the conductor and the driver (the clients)
 * on a front node of their own. A message between actors on different
 * nodes takes its bytes at one NIC's rate, queued behind its sender's
 * earlier messages, then the profile's network latency (the runtime's
 * sim_bytes_per_s and sim_latency_ns). */
#include "sim_run.h"

#include "conductor.h"
#include "decode.h"
#include "prefill.h"
#include "serve_instance.h"
#include "moonlet/serve_msgs.h"
#include "replay_watch.h"
#include "sim_driver.h"
#include "sim_faults.h"
#include "sim_net.h"
#include "moonlet/store_client.h"
#include "store_shard.h"

#include "moonlet/alloc.h"
#include "moonlet/dist.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "moonlet/sched_policy.h"
#include "plugin_host.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SIM_MAX_SEQS 256u
#define SIM_MAX_BATCH 128u
#define SIM_PREFILL_CHUNK 8192u /* at most; a quarter of the context for short ones */
#define SIM_FIRST_TOKEN 3u      /* after unk, bos, eos of the random model's tokenizer */
#define SIM_VOCAB 512u
#define SIM_START_NS 1000000ull /* the driver's first arrival: every LOAD is in by then */

typedef struct {
    moon_runtime_t     *rt;
    moon_model_t       *model;
    moon_kv_tag_t       tag;
    moon_addr_t         conductor;
    moon_addr_t        *shards, *inst; /* inst: prefill instances, then decode ones */
    uint32_t            n_store, n_prefill, n_decode;
    moon_sim_records_t *recs;
    moon_replay_watch_t watch; /* placements, read off the dispatched messages */
    moon_sim_net_t     *net;
    uint64_t            block_bytes; /* the modeled model's KV bytes per block */
    moon_sim_faults_t  *faults;      /* NULL: no chaos */
    uint32_t            shard_node[MOON_STORE_CLIENT_MAX_SHARDS];
} sim_t;

/* A KV move's modeled duration (moon_serve_xfer_fn), booked on the network. */
static uint64_t sim_xfer(void *arg, uint64_t now, uint32_t kind, uint32_t src, uint32_t dst,
                         uint32_t n_blocks)
{
    sim_t   *s   = arg;
    uint64_t end = now, done;

    if (kind == MOON_SERVE_XFER_PULL) {
        if (moon_sim_net_transfer(s->net, now, src, MOON_SIM_MEDIA_HBM, s->n_prefill + dst,
                                  MOON_SIM_MEDIA_HBM, n_blocks * s->block_bytes,
                                  &done) == MOON_OK) {
            end = done;
        }
        return end - now;
    }
    /* a fetch: the blocks are spread over the shards by rendezvous hashing */
    for (uint32_t k = 0; k < s->n_store; k++) {
        uint64_t n = n_blocks / s->n_store + (k < n_blocks % s->n_store);
        if (n > 0 &&
            moon_sim_net_transfer(s->net, now, k, MOON_SIM_MEDIA_DRAM, dst, MOON_SIM_MEDIA_HBM,
                                  n * s->block_bytes, &done) == MOON_OK) {
            end = MOON_MAX(end, done);
        }
    }
    return end - now;
}

/* A random model of the bookkeeping shape, its context the profile's. */
static moon_status_t load_tiny_model(sim_t *s, const moon_sim_run_config_t *cfg)
{
    moon_model_config_t mc     = {.dim        = 2,
                                  .hidden_dim = 2,
                                  .n_layers   = 1,
                                  .n_heads    = 1,
                                  .n_kv_heads = 1,
                                  .head_dim   = 2,
                                  .vocab_size = SIM_VOCAB,
                                  .seq_len    = cfg->profile->shape.seq_len,
                                  .norm_eps   = 1e-5f,
                                  .rope_theta = 10000.0f};
    char                path[] = "/tmp/moonlet-sim-XXXXXX";
    int                 fd     = mkstemp(path);
    moon_status_t       status;

    if (fd < 0) {
        MOON_ERROR("replay: cannot create a temporary model file");
        return MOON_ERR_IO;
    }
    close(fd);
    status = moon_model_write_random(&mc, MOON_GGML_F32, cfg->seed, path);
    if (status == MOON_OK) {
        status = moon_model_load(path, &s->model);
    }
    if (status == MOON_OK) {
        status = moon_serve_model_tag(path, cfg->block_tokens, MOON_KV_F32, &s->tag);
    }
    unlink(path); /* the mapping stays */
    if (status != MOON_OK) {
        MOON_ERROR("replay: the simulator's bookkeeping model failed: %s", moon_status_str(status));
    }
    return status;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* Distinct blocks the trace can put into the store at block_tokens (an upper
 * bound: distinct trace ids times the blocks one id spans). */
static uint64_t trace_blocks(const moon_trace_t *t, uint32_t block_tokens)
{
    uint64_t *ids = moon_malloc((t->n_ids ? t->n_ids : 1) * sizeof(uint64_t));
    uint64_t  n = 0, per = (t->block_tokens + block_tokens - 1) / block_tokens;

    if (ids == NULL) {
        return UINT64_MAX;
    }
    memcpy(ids, t->ids, t->n_ids * sizeof(uint64_t));
    qsort(ids, t->n_ids, sizeof(uint64_t), cmp_u64);
    for (size_t i = 0; i < t->n_ids; i++) {
        n += i == 0 || ids[i] != ids[i - 1];
    }
    moon_free(ids);
    return n * per;
}

/* The node of the conductor and the driver: past every instance's. */
static uint32_t sim_front_node(const sim_t *s)
{
    return s->n_prefill + s->n_decode;
}

static moon_status_t spawn(sim_t *s, const moon_actor_ops_t *ops, const void *args, uint32_t flags,
                           uint32_t node, moon_addr_t *addr_p)
{
    moon_spawn_opts_t opts   = {.flags = flags, .sim_node = node};
    moon_status_t     status = moon_spawn(s->rt, ops, args, &opts, addr_p);

    if (status != MOON_OK) {
        MOON_ERROR("replay: spawning a %s failed: %s", ops->name, moon_status_str(status));
    }
    return status;
}

static moon_status_t spawn_cluster(sim_t *s, const moon_sim_run_config_t *cfg)
{
    const moon_profile_t *pf   = cfg->profile;
    moon_cost_config_t    cost = moon_profile_cost(pf);
    double   blk_model         = (double)cfg->block_tokens * moon_cost_kv_bytes_per_token(&cost);
    uint64_t kv_blocks         = (uint64_t)(moon_profile_kv_capacity_bytes(pf) / blk_model);
    uint64_t ctx_blocks        = (pf->shape.seq_len + cfg->block_tokens - 1) / cfg->block_tokens;
    uint64_t slots = s->n_store ? (uint64_t)(pf->store.dram_bytes * (s->n_prefill + s->n_decode) /
                                             s->n_store / blk_model)
                                : 0;
    uint64_t need  = trace_blocks(cfg->trace, cfg->block_tokens);
    moon_conductor_args_t ca;
    char                  policy[96];
    moon_status_t         status = MOON_OK;

    if (kv_blocks < ctx_blocks || kv_blocks > UINT32_MAX) {
        MOON_ERROR("replay: profile %s holds %llu KV blocks of %u tokens per instance: not one "
                   "full context (%llu)",
                   pf->name, (unsigned long long)kv_blocks, cfg->block_tokens,
                   (unsigned long long)ctx_blocks);
        return MOON_ERR_INVALID_PARAM;
    }
    /* rendezvous hashing spreads a little unevenly: 1.5 times the even share + 64
     * (a shard that fills anyway evicts, as a real one would) */
    if (need != UINT64_MAX && s->n_store > 0 && slots > 3 * need / (2 * s->n_store) + 64) {
        slots = 3 * need / (2 * s->n_store) + 64;
    }
    for (uint32_t i = 0; status == MOON_OK && i < s->n_store; i++) {
        const moon_model_config_t *mc = moon_model_config(s->model);
        moon_store_shard_args_t    sa = {
               .shard_id   = i,
               .slot_bytes = 2ull * mc->n_layers * mc->n_kv_heads * mc->head_dim * cfg->block_tokens *
                             sizeof(float),
               .n_slots         = (uint32_t)(slots > 0 ? slots : 1),
               .virtual_payload = 1,
        };
        status = spawn(s, &moon_store_shard_ops, &sa, 0, i, &s->shards[i]);
    }
    /* the SLOs are the conductor's predictions' targets; it rejects early only
     * when the policy says NAME+reject (a bare NAME replays every request) */
    snprintf(policy, sizeof(policy), "%s%s", cfg->policy ? cfg->policy : MOON_SCHED_POLICY_DEFAULT,
             cfg->policy && strchr(cfg->policy, '+') ? "" : "+noreject");
    ca = (moon_conductor_args_t){
        .model        = s->model,
        .tag          = s->tag,
        .block_tokens = cfg->block_tokens,
        .max_requests = (uint32_t)MOON_MIN(cfg->trace->n_reqs + 1, 1u << 20),
        .n_prefill    = s->n_prefill,
        .colocated    = cfg->colocated,
        .n_decode     = s->n_decode,
        .shards       = s->shards,
        .n_shards     = s->n_store,
        .policy       = policy,
        .ttft_slo_s   = cfg->ttft_slo_s,
        .tbt_slo_s    = cfg->tbt_slo_s,
        .shed_after   = cfg->shed_after,
        .shed_share   = cfg->shed_share,
        .kv_link_bytes_per_s =
            MOON_MIN(pf->network.nics_per_node * moon_profile_nic_bytes_per_s(pf),
                     pf->store.dram_bytes_per_s),
        .kv_block_bytes = (uint64_t)blk_model,
        .seed           = cfg->seed,
    };
    if (status == MOON_OK) {
        status = spawn(s, &moon_conductor_ops, &ca, MOON_SPAWN_CONTROL, sim_front_node(s),
                       &s->conductor);
    }
    for (uint32_t i = 0; status == MOON_OK && i < s->n_prefill + s->n_decode; i++) {
        uint32_t chunk = MOON_MIN(SIM_PREFILL_CHUNK, MOON_MAX(16u, pf->shape.seq_len / 4));
        int      dec   = i >= s->n_prefill;
        moon_serve_instance_args_t ia = {
            .model         = s->model,
            .engine        = {.kind      = MOON_BACKEND_COST,
                              .max_batch = dec ? SIM_MAX_BATCH : 1,
                              .max_chunk = chunk,
                              .cost      = cost},
            .role          = cfg->colocated ? MOON_SERVE_ROLE_COLOCATED
                             : dec          ? MOON_SERVE_ROLE_DECODE
                                            : MOON_SERVE_ROLE_PREFILL,
            .instance      = dec ? i - s->n_prefill : i,
            .block_tokens  = cfg->block_tokens,
            .n_blocks      = (uint32_t)kv_blocks,
            .max_seqs      = SIM_MAX_SEQS,
            .prefill_chunk = chunk,
            .conductor     = s->conductor,
            .shards        = s->shards,
            .n_shards      = s->n_store,
            .n_replicas    = 1,
            .tag           = s->tag,
            .threaded      = 0,
            .xfer_ns       = s->net != NULL ? sim_xfer : NULL,
            .xfer_arg      = s,
            .virtual_kv    = 1,
            .request_s     = dec ? 0.0 : pf->fit_request_s,
        };
        status = spawn(s, dec ? &moon_decode_ops : &moon_prefill_ops, &ia, 0, i, &s->inst[i]);
    }
    return status;
}

/* Seeded chaos, planned over this cluster before the runtime exists (its
 * network hook needs the plan; the actors' addresses are read when the
 * faults fire, from the arrays spawn_cluster fills). */
static moon_status_t plan_faults(sim_t *s, const moon_sim_run_config_t *cfg, uint64_t last_ns)
{
    moon_sim_faults_target_t t = {.inst       = s->inst,
                                  .shards     = s->shards,
                                  .n_prefill  = s->n_prefill,
                                  .n_decode   = s->n_decode,
                                  .n_shards   = s->n_store,
                                  .shard_node = s->shard_node,
                                  .start_ns   = SIM_START_NS,
                                  .span_ns    = last_ns,
                                  .seed       = cfg->seed};

    for (uint32_t k = 0; k < s->n_store; k++) {
        s->shard_node[k] = k; /* spawn_cluster: store shard k on node k */
    }
    return moon_sim_faults_create(cfg->faults, &t, &s->faults);
}

/* After the run: what the faults did and whether the invariants held. */
static moon_status_t report_faults(sim_t *s, const moon_sim_run_config_t *cfg)
{
    uint32_t *asked = moon_malloc((cfg->trace->n_reqs + 1) * sizeof(uint32_t));

    if (asked == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < cfg->trace->n_reqs; i++) {
        asked[i] = cfg->trace->reqs[i].output_length;
    }
    moon_sim_faults_check(s->faults, s->recs, asked, cfg->faults_report);
    moon_free(asked);
    return MOON_OK;
}

static moon_status_t check(const moon_sim_run_config_t *cfg, const moon_sim_records_t *recs)
{
    if (cfg == NULL || recs == NULL || cfg->trace == NULL || cfg->profile == NULL ||
        recs->n != cfg->trace->n_reqs || cfg->nodes_prefill == 0 || cfg->nodes_decode == 0 ||
        (cfg->faults != NULL && (cfg->faults_report == NULL || cfg->colocated)) ||
        cfg->nodes_prefill > 64 || cfg->nodes_decode > 64 || cfg->block_tokens == 0 ||
        !(cfg->time_scale > 0.0) ||
        (cfg->colocated && cfg->nodes_prefill + cfg->nodes_decode > 64)) {
        MOON_ERROR("replay: bad simulation configuration (1-64 prefill and decode instances, "
                   "at most 64 colocated, a block size, a time scale > 0, records for every "
                   "request)");
        return MOON_ERR_INVALID_PARAM;
    }
    if (cfg->policy != NULL && strlen(cfg->policy) > 64) {
        MOON_ERROR("replay: policy name too long");
        return MOON_ERR_INVALID_PARAM;
    }
    return MOON_OK;
}

moon_status_t moon_replay_sim_run(const moon_sim_run_config_t *cfg, moon_sim_records_t *recs)
{
    sim_t                  s = {.recs = recs};
    moon_runtime_config_t  rc;
    moon_sim_driver_args_t da;
    moon_addr_t            driver;
    moon_status_t          status = check(cfg, recs);
    uint64_t               last;

    if (status != MOON_OK) {
        return status;
    }
    moon_replay_watch_init(&s.watch, recs);
    s.n_prefill = cfg->nodes_prefill;
    s.n_decode  = cfg->nodes_decode;
    /* every node lends its DRAM to the store; past the client's shard limit
     * one shard holds the DRAM of several nodes */
    s.n_store = MOON_MIN(s.n_prefill + s.n_decode, MOON_STORE_CLIENT_MAX_SHARDS);
    if (cfg->colocated) {
        /* vLLM-like: P + D instances that prefill and decode, each with its own
         * prefix cache in its pool; no store */
        s.n_decode  = s.n_prefill + s.n_decode;
        s.n_prefill = 0;
        s.n_store   = 0;
    }
    s.shards = moon_calloc(s.n_store + 1, sizeof(moon_addr_t));
    s.inst   = moon_calloc(s.n_prefill + s.n_decode, sizeof(moon_addr_t));
    status   = s.shards && s.inst ? MOON_OK : MOON_ERR_NO_MEMORY;
    if (status == MOON_OK) {
        status = moon_serve_msgs_register();
    }
    if (status == MOON_OK) {
        status = moon_msg_register(moon_dist_msg_descs); /* bulk completions in one process */
    }
    if (status == MOON_OK) {
        status = load_tiny_model(&s, cfg);
    }
    if (status == MOON_OK) {
        last = moon_trace_arrival_ns(&cfg->trace->reqs[cfg->trace->n_reqs - 1], cfg->time_scale);
        moon_runtime_config_default(&rc);
        rc.deterministic   = 1;
        rc.seed            = cfg->seed;
        rc.max_actors      = 4 * (s.n_store + s.n_prefill + s.n_decode) + 64;
        rc.sim_max_ns      = SIM_START_NS + last + 100000ull * 1000000000ull; /* a day past */
        rc.sim_latency_ns  = (uint64_t)(cfg->profile->network.latency_s * 1e9 + 0.5);
        rc.sim_bytes_per_s = moon_profile_nic_bytes_per_s(cfg->profile);
        rc.trace           = moon_replay_watch_hook;
        rc.trace_arg       = &s.watch;
        if (cfg->faults != NULL) {
            status           = plan_faults(&s, cfg, last);
            rc.sim_fault     = moon_sim_faults_net;
            rc.sim_fault_arg = s.faults;
        }
        if (status == MOON_OK) {
            status = moon_runtime_create(&rc, &s.rt);
        }
    }
    if (status == MOON_OK && !cfg->colocated) {
        moon_sim_net_config_t nc =
            moon_sim_net_config_from_profile(cfg->profile, s.n_prefill + s.n_decode);
        moon_cost_config_t cost = moon_profile_cost(cfg->profile);
        s.block_bytes           = cfg->block_tokens * moon_cost_kv_bytes_per_token(&cost);
        status                  = moon_sim_net_create(&nc, &s.net);
    }
    if (status == MOON_OK) {
        status = spawn_cluster(&s, cfg);
    }
    if (status == MOON_OK && moon_plugin_loaded()) {
        status = moon_plugin_start(s.rt, NULL, NULL); /* every plugin actor on the one rank */
    }
    if (status == MOON_OK) {
        da     = (moon_sim_driver_args_t){.trace          = cfg->trace,
                                          .time_scale     = cfg->time_scale,
                                          .conductor      = s.conductor,
                                          .first_token_id = SIM_FIRST_TOKEN,
                                          .vocab_size     = SIM_VOCAB,
                                          .seed           = cfg->seed,
                                          .recs           = recs,
                                          .progress       = cfg->progress,
                                          .start_ns       = SIM_START_NS};
        status = spawn(&s, &moon_sim_driver_ops, &da, 0, sim_front_node(&s), &driver);
    }
    if (status == MOON_OK && s.faults != NULL) {
        moon_addr_t injector;
        status = spawn(&s, &moon_sim_faults_ops, &s.faults, MOON_SPAWN_CONTROL, sim_front_node(&s),
                       &injector);
    }
    if (status == MOON_OK) {
        uint32_t pending = 0;

        moon_runtime_run(s.rt);
        for (uint32_t i = 0; i < recs->n; i++) {
            pending += recs->recs[i].status == MOON_SIM_REQ_PENDING;
        }
        if (pending > 0) {
            MOON_WARN("replay: %u requests had not finished when the simulation stopped", pending);
        }
    }
    if (status == MOON_OK && s.faults != NULL) {
        status = report_faults(&s, cfg);
    }
    moon_runtime_destroy(s.rt);
    moon_sim_faults_destroy(s.faults);
    moon_sim_net_destroy(s.net);
    moon_model_destroy(s.model);
    moon_free(s.shards);
    moon_free(s.inst);
    moon_replay_watch_fini(&s.watch);
    return status;
}
