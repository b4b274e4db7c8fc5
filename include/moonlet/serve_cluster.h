/* moonlet/serve_cluster.h - a serving cluster's actors, placed by role over
 * the ranks: the conductor on rank 0, then store shards, prefill and decode
 * instances one per rank over ranks 1.. (wrapping around; everything on rank
 * 0 with one rank, or in one process without a distributed runtime). Every
 * rank calls start with the same configuration (collective with dist): each
 * spawns what lands on it. Used by `moonlet serve`, the tests, the examples
 * and the benchmarks. Main thread only. */
#ifndef MOON_ACTORS_SERVE_CLUSTER_H
#define MOON_ACTORS_SERVE_CLUSTER_H

#include "moonlet/dist.h"
#include "moonlet/kv_key.h"
#include "moonlet/model.h"

typedef struct {
    const char *model_path;
    uint32_t    n_prefill, n_decode, n_store;
    int         colocated;           /* reserved: each instance prefills and decodes */
    uint32_t    block_tokens;        /* tokens per KV block (and store key) */
    uint32_t    prefill_chunk;       /* tokens per prefill call */
    uint32_t    prefill_chunk_alone; /* ... of a prefill instance nothing waits at (0: same) */
    uint32_t    kv_blocks;           /* per instance pool; 0: 4 full contexts */
    uint32_t    max_seqs;            /* sequences per instance (0: 64) */
    uint32_t    max_batch;           /* decode batch (0: 32) */
    uint32_t    threads;             /* engine threads per instance (0: 1) */
    int         pin;                 /* bind engine threads to cores after the runtime's
                                        workers' (which the runtime pins) */
    moon_backend_kind_t backend;
    moon_kv_type_t      kv_type; /* the instances' KV caches (MOON_KV_AUTO: per backend) */
    moon_cost_config_t  cost;    /* backend cost: the modeled rates (a profile's); not an option */
    uint64_t            store_dram_mib; /* per shard */
    const char         *store_ssd;      /* a folder for each shard's SSD tier file (NULL: none) */
    uint64_t            store_ssd_mib;  /* per shard */
    uint32_t            replicas;
    uint32_t            client_ranks; /* ranks at the end left to drivers (no role) */
    const char         *policy;       /* conductor policy (moon_sched_policy_create) */
    double              ttft_slo_ms;  /* early rejection: 0 none */
    double              tbt_slo_ms;
    double              balance_threshold;
    double              shed_after, shed_share;
    double              kv_link_gbps; /* KV transfer bandwidth the predictions assume */
    uint64_t            seed;
    double              weights_chunk_mib; /* weight pushes travel in chunks of this size */
    double weights_busy_share; /* a receiver's share of copying time while its instance serves */
    const char *calibration_cache; /* folder of the instances' start-up fits (NULL: none) */
    int first_via_decode; /* the first token through the decode instance (0: from the prefill) */
    /* CUDA device of this rank's instances: "auto" (NULL too: the rank's
     * local rank on its host) or an index; modulo the devices present */
    const char *gpu;
    int         numa; /* KV pools and store arenas on their cores' NUMA node(s) (numa.h) */
} moon_serve_config_t;

/* The options of a serving deployment (`moonlet serve --help`): rows
 * writing a moon_serve_config_t, env MOON_<NAME>. */
#include "moonlet/config.h"
MOON_API extern const moon_config_table_t moon_serve_config_table;

/* The defaults: 1 prefill, 1 decode, 1 store, block 16, chunk 128, CPU. */
MOON_API void moon_serve_config_default(moon_serve_config_t *cfg);

/* The KV cache type cfg's instances hold (cfg->kv_type resolved for its
 * backend: moon_backend_kv_type) and the tag of its store keys
 * (moon_serve_model_tag of the model file); either pointer may be NULL.
 * MOON_ERR_UNSUPPORTED: the backend has no such cache (logged). */
MOON_API moon_status_t moon_serve_config_kv(const moon_serve_config_t *cfg,
                                            moon_kv_type_t *kv_type_p, moon_kv_tag_t *tag_p);

typedef struct moon_serve_cluster moon_serve_cluster_t;

/* Loads the model, spawns this rank's actors in rt (running: threaded
 * runtimes must be started before) and, with dist, waits for the conductor
 * and the shards to be known (collective). MOON_ERR_INVALID_PARAM (bad
 * config), the model's load status, or a spawn's. */
MOON_API moon_status_t moon_serve_cluster_start(const moon_serve_config_t *cfg, moon_runtime_t *rt,
                                                moon_dist_t *dist, moon_serve_cluster_t **c_p);
MOON_API moon_addr_t   moon_serve_cluster_conductor(const moon_serve_cluster_t *c);
/* The weight-sync broadcaster (weights_bcast.h); MOON_ADDR_NONE without a
 * distributed runtime. */
MOON_API moon_addr_t moon_serve_cluster_weights(const moon_serve_cluster_t *c);
/* The placement spec of the roles (moon_dist_place: "conductor=0; store*=1;
 * prefill*=2; decode*=3"), owned by c. */
MOON_API const char *moon_serve_cluster_spec(const moon_serve_cluster_t *c);
/* The loaded model (tokenizer, config). */
MOON_API const moon_model_t *moon_serve_cluster_model(const moon_serve_cluster_t *c);
/* Stops this rank's serving actors and frees (after the runtime stopped, or
 * while it runs). NULL: no-op. */
MOON_API void moon_serve_cluster_stop(moon_serve_cluster_t *c);

/* The actors cfg places on rank (of n_ranks), comma-separated into buf
 * ("conductor,weights,store/0"; "" when none), and in *n_instances_p how many
 * of them are prefill or decode instances (each runs an engine). Pure: any
 * thread, no cluster needed. MOON_ERR_INVALID_PARAM: the roles do not place
 * (client ranks leave none), or buf is too small. */
MOON_API moon_status_t moon_serve_cluster_placement(const moon_serve_config_t *cfg,
                                                    uint32_t n_ranks, uint32_t rank, char *buf,
                                                    size_t cap, uint32_t *n_instances_p);

#endif /* MOON_ACTORS_SERVE_CLUSTER_H */
