/* launch/sim/sim_run.h - one simulated replay of a trace: the serving cluster
 * (conductor, prefill and decode instances or colocated ones, store shards:
 * the real actors) spawned in one deterministic runtime (virtual clock,
 * seeded order) with the profile's cost-model engine and network model, and
 * a driver actor that submits each trace request at its (time-scaled)
 * arrival with a timer and records its TOKEN and DONE events.
 * Single-threaded: runs on the calling thread until every request ended. */
#ifndef MOON_LAUNCH_SIM_RUN_H
#define MOON_LAUNCH_SIM_RUN_H

#include "profile.h"
#include "progress.h"
#include "sim_faults.h"
#include "sim_report.h"
#include "trace.h"

typedef struct {
    const moon_trace_t   *trace;   /* borrowed */
    const moon_profile_t *profile; /* borrowed */
    const char           *policy;  /* scheduler policy (NAME or NAME+reject) */
    uint32_t              nodes_prefill, nodes_decode;
    int                   colocated; /* nodes_prefill + nodes_decode colocated instances */
    uint32_t              block_tokens;
    double                ttft_slo_s, tbt_slo_s;
    double                time_scale;
    double                shed_after, shed_share; /* moonlet's shedding by cost (0: defaults) */
    uint64_t              seed;
    moon_progress_t      *progress; /* may be NULL */
    /* moon_replay_sim_run only: seeded chaos (NULL: none); the invariants'
     * findings go to *faults_report (required with faults) */
    const moon_sim_faults_spec_t *faults;
    moon_sim_faults_report_t     *faults_report;
    /* moon_replay_real_run only */
    const char *model_path; /* the GGUF the instances serve */
    uint32_t    workers;    /* runtime worker threads (0: 1) */
    uint32_t    threads;    /* engine threads per instance (0: 1) */
    int         backend;    /* moon_backend_kind_t (COST: the profile's costs) */
} moon_sim_run_config_t;

/* Replays cfg->trace into recs (moon_sim_records_init'ed with the trace's
 * request count; request id = trace index). Same config and seed, same
 * records. MOON_ERR_INVALID_PARAM: bad config (logged);
 * MOON_ERR_UNSUPPORTED: this build has no serving actors to simulate;
 * MOON_ERR_NO_MEMORY; a request's failure is recorded, not returned. */
moon_status_t moon_replay_sim_run(const moon_sim_run_config_t *cfg, moon_sim_records_t *recs);

/* The same replay against a real cluster of the same actors in this process
 * (launch/replay/real_run.c): a threaded runtime, the CPU engine (or backend) on model_path, one
 * store shard, wall-clock time; the records are the same kind, so the two
 * can be compared (the cross-check of the cost model against the real
 * engine). Runs until every request ended. MOON_ERR_INVALID_PARAM (bad
 * config), the cluster's start status. */
moon_status_t moon_replay_real_run(const moon_sim_run_config_t *cfg, moon_sim_records_t *recs);

#endif /* MOON_LAUNCH_SIM_RUN_H */
