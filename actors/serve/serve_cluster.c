/* actors/serve/serve_cluster.c - places and spawns a serving cluster's actors.
 * The placement is a moon_dist_place spec built from the role counts, so
 * every rank computes the same answer on its own. */
#include "moonlet/serve_cluster.h"

#include "conductor.h"
#include "decode.h"
#include "moonlet/alloc.h"
#include "moonlet/launcher.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "moonlet/sched_policy.h"
#include "prefill.h"
#include "serve_instance.h"
#include "store_shard.h"
#include "weights_bcast.h"
#include "moonlet/weights_msgs.h"
#include "weights_recv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLUSTER_MAX_ACTORS 256u

struct moon_serve_cluster {
    moon_serve_config_t cfg;
    moon_runtime_t     *rt;
    moon_dist_t        *dist;
    moon_model_t       *model;
    moon_kv_tag_t       tag;
    moon_kv_type_t      kv_type; /* the instances' KV caches (cfg's, resolved) */
    moon_addr_t         conductor;
    moon_addr_t         weights; /* the broadcaster; NONE without dist */
    moon_addr_t        *shards;
    moon_addr_t         mine[CLUSTER_MAX_ACTORS]; /* spawned on this rank */
    uint32_t            next_core;                /* engine cores handed out on this rank */
    uint32_t            gpu;                      /* --gpu resolved (CUDA: modulo the devices) */
    uint32_t            n_mine;
    /* when each of this rank's instances last held requests, for its weight
     * receiver */
    _Atomic uint64_t busy[CLUSTER_MAX_ACTORS];
    uint32_t         n_busy;
    _Atomic uint64_t conductor_busy; /* the last request's arrival, for the broadcaster */
    char             spec[4096];     /* the placement */
};

static const char *const backend_names[] = {"ref", "cpu", "cuda", "cost", NULL};
/* in moon_kv_type_t's order */
static const char *const kv_type_names[] = {"f32", "f16", "auto", NULL};

#define SC(_f) MOON_CONFIG_AT(moon_serve_config_t, _f)
static const moon_config_field_t serve_fields[] = {
    {"model", MOON_CONFIG_STRING, SC(model_path), NULL, "gguf model file to serve", 0, 0, 0, 0,
     NULL},
    {"prefill", MOON_CONFIG_U32, SC(n_prefill), "1", "prefill instances", 1, 64, 0, 0, NULL},
    {"decode", MOON_CONFIG_U32, SC(n_decode), "1", "decode instances", 1, 64, 0, 0, NULL},
    {"store", MOON_CONFIG_U32, SC(n_store), "1", "kv store shards (0: no store)", 0, 64, 0, 0,
     NULL},
    {"colocated", MOON_CONFIG_BOOL, SC(colocated), "0",
     "each instance prefills and decodes, with its own prefix cache (prefill + decode "
     "instances, no store): the vllm-like baseline",
     0, 1, 0, 0, NULL},
    {"block-tokens", MOON_CONFIG_U32, SC(block_tokens), "16",
     "tokens per kv block and store key (fixed per deployment)", 1, 4096, 0, 0, NULL},
    {"prefill-chunk", MOON_CONFIG_U32, SC(prefill_chunk), "128", "tokens per prefill call", 1, 8192,
     0, 0, NULL},
    {"prefill-chunk-alone", MOON_CONFIG_U32, SC(prefill_chunk_alone), "512",
     "tokens per prefill call of a prefill instance with no other request queued (0: "
     "--prefill-chunk)",
     0, 8192, 0, 0, NULL},
    {"kv-blocks", MOON_CONFIG_U32, SC(kv_blocks), "0",
     "kv pool blocks per instance (0: four full contexts)", 0, 1u << 24, 0, 0, NULL},
    {"max-seqs", MOON_CONFIG_U32, SC(max_seqs), "64", "sequences per instance", 1, 4096, 0, 0,
     NULL},
    {"max-batch", MOON_CONFIG_U32, SC(max_batch), "32", "decode batch", 1, 1024, 0, 0, NULL},
    {"threads", MOON_CONFIG_U32, SC(threads), "1", "engine threads per instance (0: all cores)", 0,
     1024, 0, 0, NULL},
    {"pin", MOON_CONFIG_BOOL, SC(pin), "1",
     "bind each instance's engine threads to cores of their own, after the actor workers'", 0, 1, 0,
     0, NULL},
    {"numa", MOON_CONFIG_BOOL, SC(numa), "1",
     "bind each instance's kv pool and each store shard's arena to the numa node(s) of the "
     "cores that use them",
     0, 1, 0, 0, NULL},
    {"backend", MOON_CONFIG_ENUM, SC(backend), "cpu", "engine backend", 0, 0, 0, 0, backend_names},
    {"kv-cache-type", MOON_CONFIG_ENUM, SC(kv_type), "auto",
     "the kv cache's elements: f16 (half the memory and bytes moved, llama.cpp's default), f32, "
     "or auto: f16 where the backend reads it (ref, cpu), else f32 (cuda)",
     0, 0, 0, 0, kv_type_names},
    {"gpu", MOON_CONFIG_STRING, SC(gpu), "auto",
     "cuda device of this rank's instances: auto (the rank's local rank on its host) or an "
     "index; modulo the devices present",
     0, 0, 0, 0, NULL},
    {"store-dram-mib", MOON_CONFIG_U64, SC(store_dram_mib), "64", "dram arena per store shard, mib",
     1, 1u << 20, 0, 0, NULL},
    {"store-ssd", MOON_CONFIG_STRING, SC(store_ssd), NULL,
     "folder of the store shards' ssd tier files (unset: dram only)", 0, 0, 0, 0, NULL},
    {"store-ssd-mib", MOON_CONFIG_U64, SC(store_ssd_mib), "1024", "ssd tier per store shard, mib",
     1, 1ull << 30, 0, 0, NULL},
    {"replicas", MOON_CONFIG_U32, SC(replicas), "1", "store replicas per block", 1, 64, 0, 0, NULL},
    {"policy", MOON_CONFIG_STRING, SC(policy), "moonlet",
     "placement policy: random, round-robin, least-loaded, cache-aware, mooncake, moonlet", 0, 0, 0,
     0, NULL},
    {"ttft-slo-ms", MOON_CONFIG_DOUBLE, SC(ttft_slo_ms), "0",
     "reject at arrival a request whose predicted ttft exceeds this (0: no slo)", 0, 0, 0, 1e9,
     NULL},
    {"tbt-slo-ms", MOON_CONFIG_DOUBLE, SC(tbt_slo_ms), "0",
     "reject at arrival a request whose predicted tbt exceeds this (0: no slo)", 0, 0, 0, 1e9,
     NULL},
    {"balance-threshold", MOON_CONFIG_DOUBLE, SC(balance_threshold), "0",
     "mooncake policy: pull the prefix when best / local exceeds this (0: default)", 0, 0, 0, 1e9,
     NULL},
    {"shed-after", MOON_CONFIG_DOUBLE, SC(shed_after), MOON_XSTR(MOON_SCHED_SHED_AFTER_DEFAULT),
     MOON_SCHED_SHED_AFTER_DOC, 0, 0, 1e-3, 1, NULL},
    {"shed-share", MOON_CONFIG_DOUBLE, SC(shed_share), MOON_XSTR(MOON_SCHED_SHED_SHARE_DEFAULT),
     MOON_SCHED_SHED_SHARE_DOC, 0, 0, 1e-3, 1, NULL},
    {"kv-link-gbps", MOON_CONFIG_DOUBLE, SC(kv_link_gbps), "80",
     "kv transfer bandwidth the conductor predicts with, gbit/s", 0, 0, 1e-3, 1e6, NULL},
    {"seed", MOON_CONFIG_U64, SC(seed), "1", "seed of the random policy", 0, UINT64_MAX, 0, 0,
     NULL},
    {"weights-chunk-mib", MOON_CONFIG_DOUBLE, SC(weights_chunk_mib), "4",
     "a weight push travels in chunks of this many mib (each with its xxh3; a delta push sends "
     "the chunks that changed)",
     0, 0, 1.0 / 1024, 1024, NULL},
    {"weights-busy-share", MOON_CONFIG_DOUBLE, SC(weights_busy_share), "0.125",
     "while an instance holds requests, its end of a weight push copies at most this share of "
     "the time (a chunk at a time, resting between chunks) so serving keeps the cores; 1: full "
     "speed always",
     0, 0, 0.01, 1, NULL},
    {"calibration-cache", MOON_CONFIG_STRING, SC(calibration_cache), NULL,
     "folder keeping each instance's start-up calibration by model, engine and machine, so a "
     "restarted deployment skips it (unset: calibrate at every start)",
     0, 0, 0, 0, NULL},
    {"first-via-decode", MOON_CONFIG_BOOL, SC(first_via_decode), "0",
     "a request's first token reaches its client through the decode instance, as the other "
     "tokens (0: straight from the prefill instance unless it ends the request)",
     0, 1, 0, 0, NULL},
    {"client-ranks", MOON_CONFIG_U32, SC(client_ranks), "0",
     "ranks at the end left to client programs (no serving role)", 0, 1u << 20, 0, 0, NULL},
    MOON_CONFIG_END,
};
#undef SC

const moon_config_table_t moon_serve_config_table = {
    "serve",
    "the serving cluster",
    "MOON_",
    serve_fields,
};

void moon_serve_config_default(moon_serve_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    MOON_CHECK(moon_config_defaults(&moon_serve_config_table, cfg) == MOON_OK);
}

moon_status_t moon_serve_config_kv(const moon_serve_config_t *cfg, moon_kv_type_t *kv_type_p,
                                   moon_kv_tag_t *tag_p)
{
    moon_kv_type_t type;
    moon_status_t  status = moon_backend_kv_type(cfg->backend, cfg->kv_type, &type);

    if (status == MOON_OK && tag_p != NULL) {
        status = moon_serve_model_tag(cfg->model_path, cfg->block_tokens, type, tag_p);
    }
    if (status == MOON_OK && kv_type_p != NULL) {
        *kv_type_p = type;
    }
    return status;
}

/* "conductor=0; store*=a,b; prefill*=...; decode*=..." over ranks 1..n-1-clients. */
static moon_status_t build_spec(const moon_serve_config_t *cfg, uint32_t n_ranks, char *spec,
                                size_t cap)
{
    uint32_t    first = n_ranks > 1 ? 1 : 0, last = n_ranks > 1 ? n_ranks - 1 : 0, next = first;
    const char *roles[3]  = {"store", "prefill", "decode"};
    uint32_t    counts[3] = {cfg->n_store, cfg->n_prefill, cfg->n_decode};
    size_t      len;

    if (cfg->client_ranks > 0 && n_ranks > 1) {
        if (cfg->client_ranks >= n_ranks - 1) {
            return MOON_ERR_INVALID_PARAM;
        }
        last = n_ranks - 1 - cfg->client_ranks;
    }
    len = (size_t)snprintf(spec, cap, "conductor=0");
    for (uint32_t k = 0; k < 3; k++) {
        if (counts[k] == 0) {
            continue;
        }
        len += (size_t)snprintf(spec + len, cap - len, "; %s*=", roles[k]);
        for (uint32_t i = 0; i < counts[k] && len < cap; i++) {
            len += (size_t)snprintf(spec + len, cap - len, "%s%u", i ? "," : "", next);
            next = next == last ? first : next + 1;
        }
    }
    return len < cap ? MOON_OK : MOON_ERR_INVALID_PARAM;
}

static uint32_t rank_of(const char *spec, const char *name, uint32_t n_ranks)
{
    uint32_t r = 0;
    MOON_CHECK(moon_dist_place(spec, name, n_ranks, &r) == MOON_OK);
    return r;
}

static moon_status_t spawn_mine(moon_serve_cluster_t *c, const moon_actor_ops_t *ops,
                                const void *args, const char *name, uint32_t flags,
                                moon_addr_t *addr_p)
{
    moon_spawn_opts_t opts = {.flags = flags};
    moon_addr_t       a;
    moon_status_t     status;

    if (c->n_mine == CLUSTER_MAX_ACTORS) {
        return MOON_ERR_NO_RESOURCE;
    }
    status = moon_spawn(c->rt, ops, args, &opts, &a);
    if (status != MOON_OK) {
        MOON_ERROR("serve: spawning %s failed: %s", name, moon_status_str(status));
        return status;
    }
    c->mine[c->n_mine++] = a;
    if (addr_p != NULL) {
        *addr_p = a;
    }
    return MOON_OK;
}

/* Names are registered in every rank's copy with dist, locally without. */
static moon_status_t name_it(moon_serve_cluster_t *c, const char *name, moon_addr_t a)
{
    return c->dist ? moon_dist_register(c->dist, name, a) : moon_register(c->rt, name, a);
}

static moon_status_t resolve(moon_serve_cluster_t *c, const char *name, moon_addr_t *a)
{
    return c->dist ? moon_dist_whereis(c->dist, name, 10000000000ull, a)
                   : moon_whereis(c->rt, name, a);
}

/* Every rank's outcome of a start-up step (mine: this rank's); the ranks that
 * did their part log that another one failed. */
static moon_status_t agree(moon_serve_cluster_t *c, moon_status_t mine, const char *step)
{
    moon_status_t all = moon_dist_agree(c->dist, mine);

    if (mine == MOON_OK && all != MOON_OK) {
        MOON_ERROR("serve: another rank failed while starting %s: %s", step, moon_status_str(all));
    }
    return all;
}

/* Spawns this rank's actors in three steps (store shards, the conductor, the
 * instances), each ended by an agreement of every rank on its outcome: a
 * failure on one rank (its model did not load, its SSD file could not be
 * made) fails the start everywhere, where a plain barrier would leave the
 * other ranks waiting for it. status is this rank's outcome so far: a rank
 * that already failed still takes part in the agreements. */
static moon_status_t spawn_roles(moon_serve_cluster_t *c, const char *spec, uint32_t n_ranks,
                                 uint32_t me, moon_status_t status)
{
    const moon_serve_config_t *cfg         = &c->cfg;
    size_t                     block_bytes = 0;
    char                       name[64];

    if (status == MOON_OK) { /* one block of the instances' caches: a store slot, a KV move */
        moon_kv_config_t kc =
            moon_model_kv_config(moon_model_config(c->model), cfg->block_tokens, 1, 1);
        kc.elem_type = c->kv_type;
        block_bytes  = moon_kv_config_pool_bytes(&kc);
    }
    for (uint32_t i = 0; status == MOON_OK && i < cfg->n_store; i++) {
        snprintf(name, sizeof(name), "store/%u", i);
        if (rank_of(spec, name, n_ranks) == me) {
            char ssd[4096];
            snprintf(ssd, sizeof(ssd), "%s/store-%u.bin", cfg->store_ssd ? cfg->store_ssd : ".", i);
            moon_store_shard_args_t sa = {
                .ssd_path   = cfg->store_ssd ? ssd : NULL,
                .ssd_bytes  = cfg->store_ssd_mib << 20,
                .shard_id   = i,
                .slot_bytes = block_bytes,
                .n_slots    = (uint32_t)MOON_MAX(1, (cfg->store_dram_mib << 20) / block_bytes),
                .dist       = c->dist,
                .name       = name,
                .numa       = cfg->numa,
            };
            status = spawn_mine(c, &moon_store_shard_ops, &sa, name, 0, NULL);
        }
    }
    status = agree(c, status, "the store shards"); /* their names are registered everywhere */
    for (uint32_t i = 0; status == MOON_OK && i < cfg->n_store; i++) {
        snprintf(name, sizeof(name), "store/%u", i);
        status = resolve(c, name, &c->shards[i]);
    }
    if (status == MOON_OK && rank_of(spec, "conductor", n_ranks) == me) {
        moon_conductor_args_t ca = {
            .model               = c->model,
            .tag                 = c->tag,
            .block_tokens        = cfg->block_tokens,
            .n_prefill           = cfg->n_prefill,
            .n_decode            = cfg->n_decode,
            .colocated           = cfg->colocated,
            .shards              = c->shards,
            .n_shards            = cfg->n_store,
            .policy              = cfg->policy,
            .ttft_slo_s          = cfg->ttft_slo_ms * 1e-3,
            .tbt_slo_s           = cfg->tbt_slo_ms * 1e-3,
            .balance_threshold   = cfg->balance_threshold,
            .shed_after          = cfg->shed_after,
            .shed_share          = cfg->shed_share,
            .kv_link_bytes_per_s = cfg->kv_link_gbps * 1e9 / 8,
            .kv_block_bytes      = block_bytes,
            .seed                = cfg->seed,
            .busy_ns             = &c->conductor_busy,
        };
        status =
            spawn_mine(c, &moon_conductor_ops, &ca, "conductor", MOON_SPAWN_CONTROL, &c->conductor);
        if (status == MOON_OK) {
            status = name_it(c, "conductor", c->conductor);
        }
        if (status == MOON_OK && c->dist != NULL) {
            moon_weights_bcast_args_t wa = {
                .dist        = c->dist,
                .conductor   = c->conductor,
                .model       = c->model,
                .n_receivers = cfg->n_prefill + cfg->n_decode,
                .chunk_bytes = (uint64_t)(cfg->weights_chunk_mib * (1 << 20)),
                .busy_ns     = &c->conductor_busy,
                .busy_share  = cfg->weights_busy_share,
            };
            status = spawn_mine(c, &moon_weights_bcast_ops, &wa, "weights", 0, &c->weights);
            if (status == MOON_OK) {
                status = name_it(c, "weights", c->weights);
            }
        }
    }
    status = agree(c, status, "the conductor");
    if (status == MOON_OK) {
        status = resolve(c, "conductor", &c->conductor);
    }
    if (status == MOON_OK && c->dist != NULL) {
        status = resolve(c, "weights", &c->weights);
    }
    for (uint32_t role = MOON_SERVE_ROLE_PREFILL; role <= MOON_SERVE_ROLE_DECODE; role++) {
        uint32_t n = role == MOON_SERVE_ROLE_PREFILL ? cfg->n_prefill : cfg->n_decode;
        for (uint32_t i = 0; status == MOON_OK && i < n; i++) {
            snprintf(name, sizeof(name), "%s/%u",
                     role == MOON_SERVE_ROLE_PREFILL ? "prefill" : "decode", i);
            if (rank_of(spec, name, n_ranks) != me) {
                continue;
            }
            /* cores: the runtime's workers take the first ones, each instance
             * of this rank the next (wrapping round when they run out) */
            moon_runtime_stats_t rs;
            moon_runtime_stats(c->rt, &rs);
            uint32_t first = rs.n_workers + c->next_core;
            c->next_core += cfg->threads ? cfg->threads : 1;
            moon_serve_instance_args_t ia = {
                .model             = c->model,
                .engine            = {.kind       = cfg->backend,
                                      .n_threads  = cfg->threads,
                                      .pin        = (uint32_t)cfg->pin,
                                      .first_core = first,
                                      .max_batch  = role == MOON_SERVE_ROLE_DECODE ? cfg->max_batch : 1,
                                      .max_chunk  = cfg->prefill_chunk,
                                      .gpu        = c->gpu,
                                      .cost       = cfg->cost},
                .role              = cfg->colocated ? MOON_SERVE_ROLE_COLOCATED : role,
                .instance          = i,
                .block_tokens      = cfg->block_tokens,
                .n_blocks          = cfg->kv_blocks,
                .kv_type           = c->kv_type,
                .max_seqs          = cfg->max_seqs,
                .prefill_chunk     = cfg->prefill_chunk,
                .dist              = c->dist,
                .conductor         = c->conductor,
                .shards            = c->shards,
                .n_shards          = cfg->n_store,
                .n_replicas        = cfg->replicas,
                .tag               = c->tag,
                .calibration_cache = cfg->calibration_cache,
                .numa              = cfg->numa,
                /* the cost engine's steps are timers of their modeled
                 * length on the runtime's clock (nothing to run on a thread) */
                .threaded = cfg->backend != MOON_BACKEND_COST,
            };
            /* the prefill raises its engine's max_chunk to it */
            ia.prefill_chunk_alone = cfg->prefill_chunk_alone;
            ia.first_via_decode    = cfg->first_via_decode;
            ia.busy_ns             = c->n_busy < CLUSTER_MAX_ACTORS ? &c->busy[c->n_busy++] : NULL;
            moon_addr_t inst       = MOON_ADDR_NONE;
            status                 = spawn_mine(
                                c, role == MOON_SERVE_ROLE_PREFILL ? &moon_prefill_ops : &moon_decode_ops, &ia,
                                name, 0, &inst);
            if (status == MOON_OK && c->dist != NULL) {
                /* its end of weight pushes, stopped before it */
                moon_weights_recv_args_t wr = {
                    .dist       = c->dist,
                    .bcast      = c->weights,
                    .instance   = inst,
                    .role       = role,
                    .index      = i,
                    .model      = c->model,
                    .busy_ns    = ia.busy_ns,
                    .busy_share = cfg->weights_busy_share,
                };
                status = spawn_mine(c, &moon_weights_recv_ops, &wr, "weights-recv", 0, NULL);
            }
        }
    }
    return agree(c, status, "the instances");
}

/* The CUDA device of this rank's instances before the modulo: "auto" (or
 * unset) the launcher's local rank, so the ranks of a host take a device
 * each; else the index given. MOON_ERR_INVALID_PARAM: neither. */
static moon_status_t gpu_index(const char *spec, uint32_t *gpu)
{
    char         *end = NULL;
    unsigned long v;

    if (spec == NULL || strcmp(spec, "auto") == 0) {
        *gpu = moon_launcher_local_rank();
        return MOON_OK;
    }
    v = spec[0] >= '0' && spec[0] <= '9' ? strtoul(spec, &end, 10) : 0;
    if (end == NULL || *end != '\0' || v > 1023) {
        MOON_ERROR("serve: --gpu %s is neither auto nor a device index (0-1023)", spec);
        return MOON_ERR_INVALID_PARAM;
    }
    *gpu = (uint32_t)v;
    return MOON_OK;
}

moon_status_t moon_serve_cluster_start(const moon_serve_config_t *cfg, moon_runtime_t *rt,
                                       moon_dist_t *dist, moon_serve_cluster_t **c_p)
{
    moon_serve_cluster_t *c;
    uint32_t              n_ranks = dist ? moon_dist_size(dist) : 1;
    uint32_t              me      = dist ? moon_dist_rank(dist) : 0;
    char                  spec[4096];
    moon_status_t         status;
    uint64_t              t_load;
    uint32_t              gpu = 0;

    if (cfg == NULL || rt == NULL || c_p == NULL || cfg->model_path == NULL ||
        cfg->block_tokens == 0 || cfg->n_prefill == 0 || cfg->n_decode == 0 ||
        cfg->n_prefill > 64 || cfg->n_decode > 64 || cfg->n_store > 64 ||
        (cfg->n_store > 0 && (cfg->replicas == 0 || cfg->replicas > cfg->n_store)) ||
        (cfg->colocated && cfg->n_prefill + cfg->n_decode > 64)) {
        MOON_ERROR("serve: bad cluster configuration (1-64 prefill and decode instances, 0-64 "
                   "store shards, 1 <= replicas <= shards, a block size)");
        return MOON_ERR_INVALID_PARAM;
    }
    status = gpu_index(cfg->gpu, &gpu);
    if (status == MOON_OK) {
        status = moon_serve_msgs_register();
    }
    if (status == MOON_OK) {
        status = moon_weights_msgs_register();
    }
    if (status == MOON_OK) {
        status = moon_msg_register(moon_dist_msg_descs); /* bulk completions in one process too */
    }
    if (status != MOON_OK) {
        return status;
    }
    c = moon_calloc(1, sizeof(*c));
    if (c == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    c->cfg = *cfg;
    c->gpu = gpu;
    if (cfg->colocated) {
        /* every instance does both, with its own prefix cache: no store */
        c->cfg.n_decode  = cfg->n_prefill + cfg->n_decode;
        c->cfg.n_prefill = 0;
        c->cfg.n_store   = 0;
    }
    c->rt     = rt;
    c->dist   = dist;
    c->shards = moon_calloc(cfg->n_store + 1, sizeof(*c->shards));
    t_load    = moon_now(rt);
    status    = c->shards ? moon_model_load(cfg->model_path, &c->model) : MOON_ERR_NO_MEMORY;
    if (status == MOON_OK) {
        /* a job's start-up figure (benchmarks/run batch: start to first token) */
        MOON_INFO("serve: rank %u loaded %s in %.3f s", me, cfg->model_path,
                  (double)(moon_now(rt) - t_load) * 1e-9);
        status = moon_serve_config_kv(cfg, &c->kv_type, &c->tag);
    }
    if (status == MOON_OK && cfg->backend == MOON_BACKEND_COST) {
        moon_cost_config_t cost = cfg->cost;
        if (cost.shape.n_layers == 0) {
            cost.shape = *moon_model_config(c->model); /* as the engine does */
        }
        if (moon_cost_check(&cost) != MOON_OK) {
            MOON_ERROR("serve: the cost backend needs the modeled hardware's rates: give "
                       "--profile NAME (a profile of launch/sim/profiles or a file)");
            status = MOON_ERR_INVALID_PARAM;
        }
    }
    if (status == MOON_OK && c->cfg.kv_blocks == 0) {
        uint32_t ctx     = moon_model_config(c->model)->seq_len;
        c->cfg.kv_blocks = 4 * ((ctx + cfg->block_tokens - 1) / cfg->block_tokens);
    }
    if (status == MOON_OK) {
        status = build_spec(&c->cfg, n_ranks, spec, sizeof(spec));
    }
    if (c->cfg.max_seqs == 0) {
        c->cfg.max_seqs = 64;
    }
    if (c->cfg.max_batch == 0) {
        c->cfg.max_batch = 32;
    }
    if (status != MOON_OK) {
        MOON_ERROR("serve: loading %s failed: %s", cfg->model_path, moon_status_str(status));
    }
    status = spawn_roles(c, spec, n_ranks, me, status);
    if (status != MOON_OK) {
        moon_serve_cluster_stop(c);
        return status;
    }
    MOON_INFO("serve: rank %u runs %u actors (placement: %s)", me, c->n_mine, spec);
    snprintf(c->spec, sizeof(c->spec), "%s", spec);
    *c_p = c;
    return MOON_OK;
}

moon_addr_t moon_serve_cluster_conductor(const moon_serve_cluster_t *c)
{
    return c->conductor;
}

moon_addr_t moon_serve_cluster_weights(const moon_serve_cluster_t *c)
{
    return c->weights;
}

const char *moon_serve_cluster_spec(const moon_serve_cluster_t *c)
{
    return c->spec;
}

const moon_model_t *moon_serve_cluster_model(const moon_serve_cluster_t *c)
{
    return c->model;
}

void moon_serve_cluster_stop(moon_serve_cluster_t *c)
{
    if (c == NULL) {
        return;
    }
    /* instances first (they hold store leases and pools), the conductor last */
    for (uint32_t i = c->n_mine; i-- > 0;) {
        moon_stop(c->rt, c->mine[i], MOON_OK);
    }
    for (uint32_t i = 0; i < c->n_mine; i++) {
        (void)moon_actor_wait_gone(c->rt, c->mine[i], 5000); /* they use the model */
    }
    moon_model_destroy(c->model);
    moon_free(c->shards);
    moon_free(c);
}

moon_status_t moon_serve_cluster_placement(const moon_serve_config_t *cfg, uint32_t n_ranks,
                                           uint32_t rank, char *buf, size_t cap,
                                           uint32_t *n_instances_p)
{
    char          spec[4096];
    char          name[64];
    size_t        len    = 0;
    uint32_t      n_inst = 0;
    moon_status_t status;

    if (cfg == NULL || buf == NULL || cap == 0 || n_ranks == 0 || rank >= n_ranks) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = build_spec(cfg, n_ranks, spec, sizeof(spec));
    if (status != MOON_OK) {
        return status;
    }
    buf[0] = '\0';
    if (rank_of(spec, "conductor", n_ranks) == rank) {
        len += (size_t)snprintf(buf + len, cap - len, "%s",
                                n_ranks > 1 ? "conductor,weights" : "conductor");
    }
    for (uint32_t k = 0; k < 3 && len < cap; k++) {
        static const char *const roles[3] = {"store", "prefill", "decode"};
        uint32_t n = k == 0 ? cfg->n_store : k == 1 ? cfg->n_prefill : cfg->n_decode;
        for (uint32_t i = 0; i < n && len < cap; i++) {
            snprintf(name, sizeof(name), "%s/%u", roles[k], i);
            if (rank_of(spec, name, n_ranks) != rank) {
                continue;
            }
            len += (size_t)snprintf(buf + len, cap - len, "%s%s%s", len ? "," : "",
                                    cfg->colocated && k > 0 ? "colocated:" : "", name);
            n_inst += k > 0;
        }
    }
    if (len >= cap) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (n_instances_p != NULL) {
        *n_instances_p = n_inst;
    }
    return MOON_OK;
}
