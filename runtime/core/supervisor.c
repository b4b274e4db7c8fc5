/* runtime/core/supervisor.c - the supervisor actor (moonlet/supervisor.h). Each
 * child is watched with a monitor whose ref holds the child index and an
 * epoch; children stopped on purpose (one-for-all) get a new epoch first, so
 * their DOWNs are recognised as stale and ignored. */
#include "moonlet/supervisor.h"

#include "runtime_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>

typedef struct {
    moon_child_spec_t spec; /* args point into args_copy */
    void             *args_copy;
    moon_addr_t       addr; /* MOON_ADDR_NONE while not running */
    uint32_t          epoch;
} child_t;

typedef struct {
    moon_sup_strategy_t strategy;
    uint32_t            max_restarts;
    uint64_t            window_ns;
    child_t            *children;
    uint32_t            n_children;
    uint64_t           *restart_times; /* ring of the last max_restarts restarts */
    uint32_t            n_restarts;
} sup_state_t;

static moon_status_t start_child(moon_actor_t *self, sup_state_t *st, uint32_t i)
{
    child_t          *c    = &st->children[i];
    moon_spawn_opts_t opts = {
        .name        = c->spec.name,
        .flags       = c->spec.spawn_flags,
        .monitor     = moon_actor_addr(self),
        .monitor_ref = ((uint64_t)c->epoch << 32) | i,
    };
    moon_status_t status =
        moon_spawn(moon_actor_runtime(self), c->spec.ops, c->args_copy, &opts, &c->addr);

    if (status != MOON_OK) {
        MOON_ERROR("supervisor: starting child %u (%s) failed: %s", i, c->spec.ops->name,
                   moon_status_str(status));
        c->addr = MOON_ADDR_NONE;
    }
    return status;
}

static void stop_children(moon_actor_t *self, sup_state_t *st, uint32_t except)
{
    for (uint32_t i = 0; i < st->n_children; i++) {
        child_t *c = &st->children[i];

        if (i != except && c->addr != MOON_ADDR_NONE) {
            moon_runtime_t *rt = moon_actor_runtime(self);

            c->epoch++; /* its DOWN is now stale */
            /* The stop is asynchronous: free the name now so the new
             * incarnation can take it while the old one finishes. */
            if (c->spec.name != NULL) {
                moon_names_drop_addr(rt->names, c->spec.name, c->addr);
            }
            (void)moon_stop(rt, c->addr, MOON_OK);
            c->addr = MOON_ADDR_NONE;
        }
    }
}

static void sup_fini(moon_actor_t *self)
{
    sup_state_t *st = moon_actor_state(self);

    if (st->children != NULL) {
        stop_children(self, st, UINT32_MAX);
        for (uint32_t i = 0; i < st->n_children; i++) {
            moon_free(st->children[i].args_copy);
        }
    }
    moon_free(st->children);
    moon_free(st->restart_times);
}

static moon_status_t sup_init(moon_actor_t *self, const void *arg)
{
    const moon_supervisor_args_t *args = arg;
    sup_state_t                  *st   = moon_actor_state(self);
    moon_status_t                 status;

    if (args == NULL || (args->n_children > 0 && args->children == NULL)) {
        return MOON_ERR_INVALID_PARAM;
    }
    st->strategy      = args->strategy;
    st->max_restarts  = args->max_restarts;
    st->window_ns     = args->window_ns;
    st->children      = moon_calloc(args->n_children ? args->n_children : 1, sizeof(child_t));
    st->restart_times = moon_calloc(args->max_restarts + 1, sizeof(uint64_t));
    if (st->children == NULL || st->restart_times == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto err;
    }
    st->n_children = args->n_children;
    for (uint32_t i = 0; i < args->n_children; i++) {
        child_t *c = &st->children[i];

        c->spec = args->children[i];
        if (c->spec.ops == NULL) {
            status = MOON_ERR_INVALID_PARAM;
            goto err;
        }
        if (c->spec.args_bytes > 0) {
            c->args_copy = moon_malloc(c->spec.args_bytes);
            if (c->args_copy == NULL) {
                status = MOON_ERR_NO_MEMORY;
                goto err;
            }
            memcpy(c->args_copy, c->spec.args, c->spec.args_bytes);
        }
    }
    for (uint32_t i = 0; i < st->n_children; i++) {
        status = start_child(self, st, i);
        if (status != MOON_OK) {
            goto err;
        }
    }
    return MOON_OK;

err:
    sup_fini(self); /* init failed: the runtime will not call fini */
    st->children      = NULL;
    st->restart_times = NULL;
    return status;
}

/* Records a restart now; 0 if that exceeds the allowed intensity. */
static int restart_allowed(moon_actor_t *self, sup_state_t *st)
{
    uint64_t now    = moon_now(moon_actor_runtime(self));
    uint32_t recent = 0;
    uint32_t ring   = st->max_restarts + 1;

    st->restart_times[st->n_restarts++ % ring] = now;
    for (uint32_t k = 0; k < ring && k < st->n_restarts; k++) {
        if (now - st->restart_times[k] <= st->window_ns) {
            recent++;
        }
    }
    return recent <= st->max_restarts;
}

static moon_status_t sup_on_down(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    const moon_sys_down_t *m  = (const moon_sys_down_t *)msg;
    sup_state_t           *st = moon_actor_state(self);
    uint32_t               i  = (uint32_t)m->ref;
    child_t               *c;
    int                    restart;

    if (i >= st->n_children || st->children[i].epoch != (uint32_t)(m->ref >> 32)) {
        return MOON_OK; /* stale: a child we stopped on purpose */
    }
    c       = &st->children[i];
    c->addr = MOON_ADDR_NONE;
    restart = c->spec.restart == MOON_RESTART_PERMANENT ||
              (c->spec.restart == MOON_RESTART_TRANSIENT && m->reason != MOON_OK);
    if (!restart) {
        return MOON_OK;
    }
    if (!restart_allowed(self, st)) {
        MOON_ERROR("supervisor: more than %u restarts in %llu ms, giving up", st->max_restarts,
                   (unsigned long long)(st->window_ns / 1000000));
        return MOON_ERR_ACTOR_FAILED; /* escalate: fini stops the rest */
    }
    MOON_INFO("supervisor: restarting child %u (%s) after %s", i, c->spec.ops->name,
              moon_status_str(m->reason));
    c->epoch++;
    if (st->strategy == MOON_SUP_ONE_FOR_ALL) {
        stop_children(self, st, i);
        for (uint32_t k = 0; k < st->n_children; k++) {
            if (st->children[k].addr == MOON_ADDR_NONE && start_child(self, st, k) != MOON_OK) {
                return MOON_ERR_ACTOR_FAILED;
            }
        }
        return MOON_OK;
    }
    return start_child(self, st, i) == MOON_OK ? MOON_OK : MOON_ERR_ACTOR_FAILED;
}

const moon_actor_ops_t moon_supervisor_ops = {
    .name        = "supervisor",
    .state_bytes = sizeof(sup_state_t),
    .init        = sup_init,
    .fini        = sup_fini,
    .on_msg      = {[MOON_MSG_SYS_DOWN] = sup_on_down},
};

moon_status_t moon_supervisor_spawn(moon_runtime_t *rt, const moon_supervisor_args_t *args,
                                    const moon_spawn_opts_t *opts, moon_addr_t *addr_p)
{
    moon_spawn_opts_t o = opts != NULL ? *opts : (moon_spawn_opts_t){0};

    o.flags |= MOON_SPAWN_CONTROL;
    return moon_spawn(rt, &moon_supervisor_ops, args, &o, addr_p);
}
