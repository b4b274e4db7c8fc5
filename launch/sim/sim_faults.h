/* launch/sim/sim_faults.h - seeded chaos for the simulated cluster
 * (`moonlet replay --sim --faults SPEC`): instance and shard kills, paused
 * nodes, lost and delayed messages, injected at seeded virtual times into
 * the real actors, and the invariants checked after the run. Same spec and
 * seed, same faults at the same times, so a failing seed replays exactly.
 *
 * SPEC is a comma-separated list:
 *   kill=ROLE:I@T       stop actor I of ROLE (prefill, decode, shard) at T s
 *                       of trace time, as the loss of its rank would
 *   pause=ROLE:I@T+D    the node of ROLE I sends and receives nothing from T
 *                       for D s (a stopped or starved rank); its messages
 *                       wait and keep their order
 *   drop=P              each message between nodes is lost with probability P
 *   delay=P+MS          ... or arrives up to MS ms late with probability P
 *   random=N            N kills and pauses drawn from the seed over the
 *                       trace's span, keeping one live instance per role
 *   random-pauses=N     N pauses drawn the same way
 * e.g. "kill=decode:0@1.5,pause=prefill:1@2+3,drop=0.001".
 * Single-threaded (the deterministic executor's thread). */
#ifndef MOON_LAUNCH_SIM_FAULTS_H
#define MOON_LAUNCH_SIM_FAULTS_H

#include "sim_report.h"

#include "moonlet/actor.h"

#include <stdio.h>

#define MOON_SIM_FAULTS_MAX 64

typedef enum {
    MOON_SIM_FAULT_KILL  = 0,
    MOON_SIM_FAULT_PAUSE = 1,
} moon_sim_fault_kind_t;

typedef enum {
    MOON_SIM_ROLE_PREFILL = 0,
    MOON_SIM_ROLE_DECODE  = 1,
    MOON_SIM_ROLE_SHARD   = 2,
} moon_sim_role_t;

typedef struct {
    moon_sim_fault_kind_t kind;
    moon_sim_role_t       role;
    uint32_t              index;
    uint64_t              at_ns;  /* trace time */
    uint64_t              for_ns; /* PAUSE: its length */
} moon_sim_fault_t;

typedef struct {
    moon_sim_fault_t faults[MOON_SIM_FAULTS_MAX];
    uint32_t         n_faults;
    uint32_t         n_random;     /* random=N, drawn by moon_sim_faults_create */
    int              random_pause; /* random-pauses=N: draw pauses only */
    double           drop_p, delay_p;
    uint64_t         delay_max_ns;
} moon_sim_faults_spec_t;

/* Parses SPEC into *spec_p. MOON_ERR_INVALID_PARAM with a log line naming
 * the item that is wrong (unknown kind or role, a probability outside [0,
 * 0.5], a negative time, more than MOON_SIM_FAULTS_MAX faults). */
moon_status_t moon_sim_faults_parse(const char *spec, moon_sim_faults_spec_t *spec_p);

/* The cluster the faults land on: its actors by role, their nodes, and the
 * trace's span (for random faults). */
typedef struct {
    const moon_addr_t *inst; /* prefill instances, then decode ones */
    const moon_addr_t *shards;
    uint32_t           n_prefill, n_decode, n_shards;
    const uint32_t    *shard_node; /* (n_shards) */
    uint64_t           start_ns;   /* the trace's 0 in virtual time */
    uint64_t           span_ns;    /* the trace's last arrival */
    uint64_t           seed;
} moon_sim_faults_target_t;

typedef struct moon_sim_faults moon_sim_faults_t;

/* Draws the random faults (random=N) and checks every index against the
 * target (MOON_ERR_INVALID_PARAM: no such instance or shard, or a kill of
 * the last live instance of a role). MOON_ERR_NO_MEMORY. */
moon_status_t moon_sim_faults_create(const moon_sim_faults_spec_t   *spec,
                                     const moon_sim_faults_target_t *target,
                                     moon_sim_faults_t             **faults_p);
void          moon_sim_faults_destroy(moon_sim_faults_t *faults); /* NULL: no-op */

/* The runtime's network hook (moon_runtime_config_t.sim_fault; arg: faults). */
int moon_sim_faults_net(void *arg, uint32_t from, uint32_t to, uint64_t now_ns, uint64_t *hold_ns,
                        uint64_t *not_before_ns);

/* The injector actor (args: the moon_sim_faults_t *, borrowed): fires each
 * kill at its time. Spawn it on the clients' node once the cluster is up. */
extern const moon_actor_ops_t moon_sim_faults_ops;

/* What the faults did and what the invariants found after the run. */
typedef struct {
    uint32_t kills, pauses;     /* injected */
    uint64_t dropped, delayed;  /* messages */
    uint32_t completed, failed; /* requests that ended, ok / with an error */
    uint32_t rejected;          /* turned away by the policy */
    uint32_t lost;              /* never ended: must be 0 */
    uint32_t short_outputs;     /* ended ok with fewer tokens than asked: must be 0 */
    uint32_t long_outputs;      /* more tokens than asked (duplicates): must be 0 */
    uint32_t events_after_end;  /* a TOKEN or DONE after the DONE: must be 0 */
    int      holds;             /* 1: every invariant held */
} moon_sim_faults_report_t;

/* Checks the invariants over the records (every request ended exactly
 * once; an ok request streamed exactly the trace's output length) and fills
 * *report_p. Returns (and sets report_p->holds to) 1 when they all hold. */
int moon_sim_faults_check(const moon_sim_faults_t *faults, const moon_sim_records_t *recs,
                          const uint32_t *asked_tokens, moon_sim_faults_report_t *report_p);

/* One line of JSON for the report (summary.json's "faults"). */
void moon_sim_faults_report_print(const moon_sim_faults_report_t *r, FILE *out);

#endif /* MOON_LAUNCH_SIM_FAULTS_H */
