/* moonlet/supervisor.h - a supervisor actor: spawns its children, watches
 * them, restarts those that end according to their restart type, and gives
 * up (fails itself, so its own supervisor or monitors hear of it) when more
 * than max_restarts happen within window_ns. Stopping it stops its children. */
#ifndef MOONLET_SUPERVISOR_H
#define MOONLET_SUPERVISOR_H

#include "moonlet/actor.h"

MOON_EXTERN_C_BEGIN

typedef enum {
    MOON_RESTART_PERMANENT, /* always restarted */
    MOON_RESTART_TRANSIENT, /* restarted only after a failure */
    MOON_RESTART_TEMPORARY, /* never restarted */
} moon_restart_t;

typedef enum {
    MOON_SUP_ONE_FOR_ONE, /* restart the child that ended */
    MOON_SUP_ONE_FOR_ALL, /* stop the others and restart every child */
} moon_sup_strategy_t;

typedef struct {
    const char             *name; /* optional: registered name of each incarnation */
    const moon_actor_ops_t *ops;
    const void             *args; /* copied (args_bytes) at supervisor init */
    size_t                  args_bytes;
    moon_restart_t          restart;
    uint32_t                spawn_flags; /* MOON_SPAWN_* */
} moon_child_spec_t;

typedef struct {
    moon_sup_strategy_t      strategy;
    uint32_t                 max_restarts; /* within window_ns, then escalate */
    uint64_t                 window_ns;
    const moon_child_spec_t *children; /* copied at init */
    uint32_t                 n_children;
} moon_supervisor_args_t;

MOON_API extern const moon_actor_ops_t moon_supervisor_ops;

/* Spawns a supervisor (a control actor) with the given args; opts as for
 * moon_spawn (its flags gain MOON_SPAWN_CONTROL). Fails like moon_spawn, also
 * when a child's init fails. */
MOON_API moon_status_t moon_supervisor_spawn(moon_runtime_t *rt, const moon_supervisor_args_t *args,
                                             const moon_spawn_opts_t *opts, moon_addr_t *addr_p);

MOON_EXTERN_C_END

#endif /* MOONLET_SUPERVISOR_H */
