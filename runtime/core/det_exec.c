/* runtime/core/det_exec.c - the deterministic executor: every actor of the runtime runs
 * on the calling thread; a seeded generator picks which runnable actor goes
 * next and how many messages its turn takes; the virtual clock stands still
 * while anything is runnable and jumps to the next timer deadline when
 * nothing is. Same seed, same configuration -> the same sequence of
 * dispatches, byte for byte; different seeds explore different interleavings.
 * Messages between actors on different simulated nodes are held until their
 * modeled arrival before they reach the mailbox: each sender has a lane of
 * its own (busy-until, like launch/sim/sim_net.h's NIC lanes), a message leaves
 * once the sender's earlier ones have, holds the lane for its bytes /
 * sim_bytes_per_s and arrives sim_latency_ns later. A sender's messages so
 * arrive in send order (each pair's order holds); messages of different
 * senders are held in a heap by (arrival, send number), so equal arrivals
 * go in send order and the run stays deterministic. */
#include "deadline_heap.h"
#include "runtime_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

struct moon_detexec {
    moon_runtime_t      *rt;
    moon_actor_t       **ready;
    uint32_t             n_ready, cap_ready;
    moon_deadline_heap_t held; /* messages in flight between nodes, by arrival */
    uint64_t             now_ns;
    uint64_t             rng;
    int                  oom; /* a schedule could not grow the ready set */
};

static uint64_t sim_rand(moon_detexec_t *sim)
{
    uint64_t z = (sim->rng += 0x9e3779b97f4a7c15ull); /* splitmix64 */

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void sim_schedule(moon_runtime_t *rt, moon_actor_t *a)
{
    moon_detexec_t *sim = rt->detexec;

    if (sim->n_ready == sim->cap_ready) {
        uint32_t       cap   = sim->cap_ready ? sim->cap_ready * 2 : 64;
        moon_actor_t **ready = moon_realloc(sim->ready, cap * sizeof(*ready));

        /* Losing a runnable actor would hang it forever: treat as fatal. */
        MOON_CHECK(ready != NULL);
        sim->ready     = ready;
        sim->cap_ready = cap;
    }
    sim->ready[sim->n_ready++] = a;
}

moon_status_t moon_detexec_send_remote(moon_detexec_t *sim, moon_actor_t *sender, uint32_t to_node,
                                       moon_msg_hdr_t *msg)
{
    const moon_runtime_config_t *cfg   = &sim->rt->cfg;
    uint64_t                     bytes = moon_msg_env(msg)->tail_used; /* header and spans */
    uint64_t                     hold = 0, not_before = 0, left;
    moon_status_t                status;

    if (cfg->sim_fault != NULL && cfg->sim_fault(cfg->sim_fault_arg, sender->sim_node, to_node,
                                                 sim->now_ns, &hold, &not_before)) {
        moon_msg_release(msg); /* lost on the way: the send itself succeeded */
        return MOON_OK;
    }
    /* a held lane is busy until now + hold: the sender's later messages wait too */
    left = MOON_MAX(MOON_MAX(sim->now_ns, sender->sim_lane_free_ns), sim->now_ns + hold);
    if (cfg->sim_bytes_per_s > 0.0) {
        left += (uint64_t)((double)bytes * 1e9 / cfg->sim_bytes_per_s + 0.5);
    }
    /* the sender keeps the message on failure */
    status =
        moon_deadline_push(&sim->held, MOON_MAX(left + cfg->sim_latency_ns, not_before),
                           (uintptr_t)msg); /* a floor keeps a pair's order (equal: push order) */
    if (status == MOON_OK) {
        sender->sim_lane_free_ns = left; /* only a message that went holds the lane */
    }
    return status;
}

/* Hands the messages due by now to their mailboxes (a message to an actor
 * that ended meanwhile is dropped, as the network would); the next arrival. */
static uint64_t sim_deliver_due(moon_detexec_t *sim)
{
    while (moon_deadline_top(&sim->held) != NULL &&
           moon_deadline_top(&sim->held)->deadline_ns <= sim->now_ns) {
        moon_msg_hdr_t *msg = (moon_msg_hdr_t *)(uintptr_t)moon_deadline_pop(&sim->held).payload;
        moon_actor_t   *a   = moon_rt_lookup(sim->rt, moon_env_msg_dst(msg));

        if (a == NULL) {
            moon_msg_release(msg);
        } else if (moon_mailbox_push(&a->mbox, moon_msg_env(msg))) {
            sim_schedule(sim->rt, a);
        }
    }
    return moon_deadline_top(&sim->held) != NULL ? moon_deadline_top(&sim->held)->deadline_ns
                                                 : UINT64_MAX;
}

static uint64_t sim_now(const moon_runtime_t *rt)
{
    return rt->detexec->now_ns;
}

static void sim_timers_changed(moon_runtime_t *rt)
{
    (void)rt; /* the loop looks at the heap after every turn */
}

const moon_exec_ops_t moon_detexec_exec_ops = {
    .schedule       = sim_schedule,
    .now            = sim_now,
    .timers_changed = sim_timers_changed,
};

moon_status_t moon_detexec_create(moon_runtime_t *rt, moon_detexec_t **sim_p)
{
    moon_detexec_t *sim = moon_calloc(1, sizeof(*sim));

    if (sim == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    sim->rt  = rt;
    sim->rng = rt->cfg.seed;
    *sim_p   = sim;
    return MOON_OK;
}

void moon_detexec_destroy(moon_detexec_t *sim)
{
    if (sim != NULL) {
        for (uint32_t i = 0; i < sim->held.n; i++) {
            moon_msg_release((moon_msg_hdr_t *)(uintptr_t)sim->held.items[i].payload);
        }
        moon_deadline_heap_fini(&sim->held);
        moon_free(sim->ready);
        moon_free(sim);
    }
}

uint64_t moon_detexec_run(moon_detexec_t *sim, uint64_t max_turns)
{
    moon_runtime_t *rt    = sim->rt;
    uint64_t        turns = 0;

    while (max_turns == 0 || turns < max_turns) {
        uint64_t      next = moon_timers_fire_due(rt->timers, sim->now_ns);
        uint64_t      held = sim_deliver_due(sim);
        uint32_t      i;
        moon_actor_t *a;

        if (atomic_load(&rt->shutdown_requested)) {
            break;
        }
        if (sim->n_ready == 0) {
            next = MOON_MIN(next, held);
            if (next == UINT64_MAX || (rt->cfg.sim_max_ns != 0 && next > rt->cfg.sim_max_ns)) {
                break; /* idle: nothing runnable, no timer left in range */
            }
            sim->now_ns = next;
            continue;
        }
        i             = (uint32_t)(sim_rand(sim) % sim->n_ready);
        a             = sim->ready[i];
        sim->ready[i] = sim->ready[--sim->n_ready];
        if (moon_actor_run_turn(a, 1 + (uint32_t)(sim_rand(sim) % rt->cfg.batch))) {
            sim_schedule(rt, a);
        }
        turns++;
    }
    return turns;
}
