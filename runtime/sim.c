/* runtime/sim.c - the deterministic executor: every actor of the runtime runs
 * on the calling thread; a seeded generator picks which runnable actor goes
 * next and how many messages its turn takes; the virtual clock stands still
 * while anything is runnable and jumps to the next timer deadline when
 * nothing is. Same seed, same configuration -> the same sequence of
 * dispatches, byte for byte; different seeds explore different interleavings.
 * Messages between actors on different simulated nodes wait sim_latency_ns
 * of virtual time in a FIFO (one latency for every pair, so arrival order is
 * send order and each pair's order holds) before they reach the mailbox. */
#include "runtime_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

typedef struct {
    uint64_t        at_ns;
    moon_msg_hdr_t *msg;
} sim_held_t;

struct moon_sim {
    moon_runtime_t *rt;
    moon_actor_t  **ready;
    uint32_t        n_ready, cap_ready;
    sim_held_t     *held; /* ring of messages in flight between nodes, by arrival */
    size_t          held_head, n_held, cap_held;
    uint64_t        now_ns;
    uint64_t        rng;
    int             oom; /* a schedule could not grow the ready set */
};

static uint64_t sim_rand(moon_sim_t *sim)
{
    uint64_t z = (sim->rng += 0x9e3779b97f4a7c15ull); /* splitmix64 */

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void sim_schedule(moon_runtime_t *rt, moon_actor_t *a)
{
    moon_sim_t *sim = rt->sim;

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

moon_status_t moon_sim_defer(moon_sim_t *sim, moon_msg_hdr_t *msg, uint64_t delay_ns)
{
    if (sim->n_held == sim->cap_held) {
        size_t      cap  = sim->cap_held ? sim->cap_held * 2 : 256;
        sim_held_t *held = moon_malloc(cap * sizeof(*held));

        if (held == NULL) {
            return MOON_ERR_NO_MEMORY; /* the sender keeps the message */
        }
        for (size_t i = 0; i < sim->n_held; i++) {
            held[i] = sim->held[(sim->held_head + i) % sim->cap_held];
        }
        moon_free(sim->held);
        sim->held      = held;
        sim->cap_held  = cap;
        sim->held_head = 0;
    }
    sim->held[(sim->held_head + sim->n_held++) % sim->cap_held] =
        (sim_held_t){sim->now_ns + delay_ns, msg};
    return MOON_OK;
}

/* Hands the messages due by now to their mailboxes (a message to an actor
 * that ended meanwhile is dropped, as the network would); the next arrival. */
static uint64_t sim_deliver_due(moon_sim_t *sim)
{
    while (sim->n_held > 0 && sim->held[sim->held_head].at_ns <= sim->now_ns) {
        moon_msg_hdr_t *msg = sim->held[sim->held_head].msg;
        moon_actor_t   *a   = moon_rt_lookup(sim->rt, moon_env_msg_dst(msg));

        sim->held_head = (sim->held_head + 1) % sim->cap_held;
        sim->n_held--;
        if (a == NULL) {
            moon_msg_release(msg);
        } else if (moon_mailbox_push(&a->mbox, moon_msg_env(msg))) {
            sim_schedule(sim->rt, a);
        }
    }
    return sim->n_held > 0 ? sim->held[sim->held_head].at_ns : UINT64_MAX;
}

static uint64_t sim_now(const moon_runtime_t *rt)
{
    return rt->sim->now_ns;
}

static void sim_timers_changed(moon_runtime_t *rt)
{
    (void)rt; /* the loop looks at the heap after every turn */
}

const moon_exec_ops_t moon_sim_exec_ops = {
    .schedule       = sim_schedule,
    .now            = sim_now,
    .timers_changed = sim_timers_changed,
};

moon_status_t moon_sim_create(moon_runtime_t *rt, moon_sim_t **sim_p)
{
    moon_sim_t *sim = moon_calloc(1, sizeof(*sim));

    if (sim == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    sim->rt  = rt;
    sim->rng = rt->cfg.seed;
    *sim_p   = sim;
    return MOON_OK;
}

void moon_sim_destroy(moon_sim_t *sim)
{
    if (sim != NULL) {
        for (; sim->n_held > 0; sim->n_held--) {
            moon_msg_release(sim->held[sim->held_head].msg);
            sim->held_head = (sim->held_head + 1) % sim->cap_held;
        }
        moon_free(sim->held);
        moon_free(sim->ready);
        moon_free(sim);
    }
}

uint64_t moon_sim_run(moon_sim_t *sim, uint64_t max_turns)
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
