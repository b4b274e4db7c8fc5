/* runtime/core/actor.c - actor slots, spawn, send, the actor turn, exits, links and
 * monitors, back-pressure. Runs on whatever thread the executor gives a turn;
 * an actor's fields under "owned by the running turn" are touched only there. */
#include "runtime_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>
#include <time.h>

static _Thread_local moon_actor_t *tls_current;
/* Nonzero, and new for each handler call, while a handler runs on this
 * thread (see moon_rt_dispatch_seq). */
static _Thread_local uint64_t tls_dispatch_seq, tls_dispatch_count;

uint64_t moon_rt_dispatch_seq(void)
{
    return tls_dispatch_seq;
}

static int links_find(const moon_actor_t *a, moon_addr_t addr)
{
    const moon_addr_t *links = moon_vec_data(&a->links);

    for (uint32_t i = 0; i < moon_vec_len(&a->links); i++) {
        if (links[i] == addr) {
            return (int)i;
        }
    }
    return -1;
}

/* ---- slots ---------------------------------------------------------------- */
static moon_actor_t *slot_get(moon_runtime_t *rt, uint32_t index)
{
    _Atomic(moon_actor_t *) *slots = (_Atomic(moon_actor_t *) *)rt->slots;

    if (index == 0 || index >= rt->cfg.max_actors) {
        return NULL;
    }
    /* acquire: pairs with the release store that published the slot. */
    return atomic_load_explicit(&slots[index], memory_order_acquire);
}

moon_actor_t *moon_rt_lookup(moon_runtime_t *rt, moon_addr_t addr)
{
    moon_actor_t *a = slot_get(rt, addr_slot(addr));

    if (a == NULL || atomic_load_explicit(&a->gen, memory_order_acquire) != addr_gen(addr) ||
        !atomic_load_explicit(&a->alive, memory_order_acquire)) {
        return NULL;
    }
    return a;
}

static moon_actor_t *slot_new(moon_runtime_t *rt)
{
    _Atomic(moon_actor_t *) *slots = (_Atomic(moon_actor_t *) *)rt->slots;
    moon_actor_t            *a;
    uint32_t                 index = atomic_load(&rt->n_slots_used) + 1; /* 0 is never used */

    a = moon_aligned_alloc(MOON_CACHE_LINE, sizeof(*a));
    if (a == NULL) {
        return NULL;
    }
    memset(a, 0, sizeof(*a));
    moon_mailbox_init(&a->mbox);
    pthread_mutex_init(&a->mute_lock, NULL);
    atomic_store(&a->gen, 1);
    a->index = index;
    a->rt    = rt;
    /* release: the slot is fully built before a sender can find it. */
    atomic_store_explicit(&slots[index], a, memory_order_release);
    /* release: readers that see the count see the slot (moon_actors_processed). */
    atomic_store_explicit(&rt->n_slots_used, index, memory_order_release);
    return a;
}

/* A free slot whose mailbox we could claim, or a new one. Free slots are
 * reused oldest first (a FIFO ring), so generations advance slowly; slots on
 * the ring may still be draining dead letters: those go to the back. */
static moon_status_t slot_acquire(moon_runtime_t *rt, moon_actor_t **a_p)
{
    uint32_t      cap    = rt->cfg.max_actors;
    moon_actor_t *a      = NULL;
    moon_status_t status = MOON_OK;

    pthread_mutex_lock(&rt->slot_lock);
    for (uint32_t tries = 0; tries < 8 && tries < rt->n_free; tries++) {
        uint32_t      index = rt->free_slots[rt->free_head];
        moon_actor_t *cand  = slot_get(rt, index);

        rt->free_head = (rt->free_head + 1) % cap;
        if (moon_mailbox_claim(&cand->mbox)) {
            rt->n_free--;
            a = cand;
            break;
        }
        rt->free_slots[(rt->free_head + rt->n_free - 1) % cap] = index; /* busy: to the back */
    }
    if (a == NULL) {
        if (atomic_load(&rt->n_slots_used) + 1 >= cap) {
            status = MOON_ERR_NO_RESOURCE;
        } else if ((a = slot_new(rt)) == NULL) {
            status = MOON_ERR_NO_MEMORY;
        } else {
            MOON_CHECK(moon_mailbox_claim(&a->mbox)); /* a new mailbox is always claimable */
        }
    }
    pthread_mutex_unlock(&rt->slot_lock);
    *a_p = a;
    return status;
}

/* Returns a slot to the ring, unless its generations are used up: a slot is
 * retired rather than let an old address come back to life. */
static void slot_release(moon_runtime_t *rt, moon_actor_t *a)
{
    if (atomic_load(&a->gen) == 0) {
        MOON_DEBUG_LOG("slot %u retired: generations exhausted", a->index);
        return;
    }
    pthread_mutex_lock(&rt->slot_lock);
    rt->free_slots[(rt->free_head + rt->n_free) % rt->cfg.max_actors] = a->index;
    rt->n_free++;
    pthread_mutex_unlock(&rt->slot_lock);
}

/* ---- delivery ------------------------------------------------------------- */
/* Back-pressure, at the sender (Pony): a sender that feeds an overloaded
 * actor is muted after its handler, unless it is a control actor or
 * overloaded itself (two overloaded actors feeding each other must keep
 * draining). A receiver flags itself overloaded when it sees its depth; a
 * sender also flags it when its own messages outrun what the receiver has
 * processed by more than the bound (checked every 64 sends), so a receiver
 * whose thread is not running cannot be flooded meanwhile. */
static void check_pressure(moon_actor_t *sender, moon_actor_t *a)
{
    uint32_t bound = a->rt->cfg.mailbox_bound;

    if (sender->flags & MOON_SPAWN_CONTROL) {
        return;
    }
    if (MOON_UNLIKELY(sender->bp_target != a)) {
        sender->bp_target = a;
        sender->bp_sent   = 0;
        sender->bp_excess = 0;
        sender->bp_seen   = atomic_load_explicit(&a->n_processed, memory_order_relaxed);
    }
    if (MOON_UNLIKELY(++sender->bp_sent == 64)) {
        uint64_t seen = atomic_load_explicit(&a->n_processed, memory_order_relaxed);
        uint64_t done = seen - sender->bp_seen;

        /* excess: our messages the receiver has not caught up with (at least). */
        sender->bp_excess = sender->bp_excess + 64 > done ? sender->bp_excess + 64 - done : 0;
        if (sender->bp_excess > bound) {
            /* seq_cst: pairs with the receiver's last look (run_turn) */
            atomic_store(&a->overloaded, 1);
        }
        sender->bp_sent = 0;
        sender->bp_seen = seen;
    }
    if (MOON_UNLIKELY(atomic_load_explicit(&a->overloaded, memory_order_relaxed)) &&
        !atomic_load_explicit(&sender->overloaded, memory_order_relaxed)) {
        sender->mute_on = a;
    }
}

static moon_status_t deliver(moon_runtime_t *rt, moon_actor_t *sender, moon_addr_t to,
                             moon_msg_hdr_t *msg)
{
    moon_actor_t *a;

    if (MOON_UNLIKELY(moon_addr_rank(to) != rt->cfg.rank)) {
        if (rt->transport == NULL) {
            MOON_DEBUG_LOG("send %s to rank %u: no transport attached", moon_msg_name(msg->type),
                           moon_addr_rank(to));
            return MOON_ERR_UNSUPPORTED;
        }
        return rt->transport->send(rt->transport_ctx, to, msg);
    }
    a = moon_rt_lookup(rt, to);
    if (MOON_UNLIKELY(a == NULL)) {
        return MOON_ERR_NO_ACTOR;
    }
    if (MOON_UNLIKELY(atomic_load_explicit(&moon_msg_env(msg)->refs, memory_order_relaxed) != 1 ||
                      (sender != NULL && moon_msg_env(msg) == sender->mbox.tail))) {
        /* Still linked in a mailbox (a received message being forwarded):
         * pushing it again would cut that mailbox's chain. Send a copy. */
        MOON_ERROR("send %s: message is shared or still in a mailbox; send moon_msg_dup()",
                   moon_msg_name(msg->type));
        return MOON_ERR_INVALID_PARAM;
    }
    moon_msg_env(msg)->dst = to;
    if (MOON_UNLIKELY(rt->detexec != NULL) && sender != NULL && sender->sim_node != a->sim_node &&
        (rt->cfg.sim_latency_ns > 0 || rt->cfg.sim_bytes_per_s > 0.0)) {
        return moon_detexec_send_remote(rt->detexec, sender, a->sim_node, msg); /* the network */
    }
    if (moon_mailbox_push(&a->mbox, moon_msg_env(msg))) {
        rt->exec->schedule(rt, a);
    }
    if (sender != NULL && sender != a) {
        check_pressure(sender, a);
    }
    return MOON_OK;
}

moon_status_t moon_send(moon_actor_t *self, moon_addr_t to, moon_msg_hdr_t *msg)
{
    self->turn_sends++;
    msg->src = self->addr;
    msg->seq = ++self->send_seq;
    return deliver(self->rt, self, to, msg);
}

moon_status_t moon_tell(moon_actor_t *self, moon_addr_t to, moon_msg_hdr_t *msg)
{
    moon_status_t status = moon_send(self, to, msg);

    if (status != MOON_OK) {
        moon_msg_release(msg);
    }
    return status;
}

moon_status_t moon_runtime_send(moon_runtime_t *rt, moon_addr_t to, moon_msg_hdr_t *msg)
{
    msg->src = MOON_ADDR_NONE;
    msg->seq = 0;
    return deliver(rt, NULL, to, msg);
}

moon_status_t moon_runtime_deliver_remote(moon_runtime_t *rt, moon_addr_t to, moon_msg_hdr_t *msg)
{
    if (moon_addr_rank(to) != rt->cfg.rank) {
        return MOON_ERR_INVALID_PARAM; /* never forward: a routing loop */
    }
    return deliver(rt, NULL, to, msg);
}

void moon_runtime_attach_transport(moon_runtime_t *rt, const moon_transport_ops_t *ops, void *ctx)
{
    rt->transport_ctx = ctx;
    rt->transport     = ops;
}

void moon_runtime_set_idle_hook(moon_runtime_t *rt, moon_idle_fn fn, void *ctx)
{
    atomic_store(&rt->idle_ctx, ctx);
    atomic_store(&rt->idle_hook, fn); /* seq_cst: ctx is visible before fn */
}

uint32_t moon_runtime_rank(const moon_runtime_t *rt)
{
    return rt->cfg.rank;
}

/* Runtime-originated message "from" src (possibly an ended actor). */
static moon_status_t sys_send(moon_runtime_t *rt, moon_addr_t src, moon_addr_t to, void *m)
{
    moon_msg_hdr_t *msg = m;
    moon_status_t   status;

    msg->src   = src;
    msg->flags = MOON_MSG_F_SYSTEM;
    status     = deliver(rt, NULL, to, msg);
    if (status != MOON_OK) {
        moon_msg_release(msg);
    }
    return status;
}

/* Tells `to` that actor `from` ended: DOWN (a monitor, with its ref) or EXIT
 * (a link). Out of memory is logged: the watcher then never hears of it. */
static void send_ended(moon_runtime_t *rt, uint32_t type, moon_addr_t from, moon_addr_t to,
                       moon_status_t reason, uint64_t ref)
{
    void *m = moon_msg_new(type, 0);

    if (m == NULL) {
        MOON_ERROR("no memory for %s of %llx to %llx", moon_msg_name(type),
                   (unsigned long long)from, (unsigned long long)to);
        return;
    }
    if (type == MOON_MSG_SYS_DOWN) {
        moon_sys_down_t *down = m;
        down->actor           = from;
        down->reason          = reason;
        down->ref             = ref;
    } else {
        moon_sys_exit_t *ex = m;
        ex->actor           = from;
        ex->reason          = reason;
    }
    (void)sys_send(rt, from, to, m);
}

static void send_down(moon_runtime_t *rt, moon_addr_t from, moon_addr_t to, moon_status_t reason,
                      uint64_t ref)
{
    send_ended(rt, MOON_MSG_SYS_DOWN, from, to, reason, ref);
}

static void send_exit(moon_runtime_t *rt, moon_addr_t from, moon_addr_t to, moon_status_t reason)
{
    send_ended(rt, MOON_MSG_SYS_EXIT, from, to, reason, 0);
}

/* ---- back-pressure -------------------------------------------------------- */
static void unmute_all(moon_actor_t *r)
{
    moon_actor_t *list;

    pthread_mutex_lock(&r->mute_lock);
    atomic_store_explicit(&r->overloaded, 0, memory_order_relaxed);
    list          = r->muted_head;
    r->muted_head = NULL;
    pthread_mutex_unlock(&r->mute_lock);
    while (list != NULL) {
        moon_actor_t *s = list;
        list            = s->mute_next;
        s->mute_next    = NULL;
        r->rt->exec->schedule(r->rt, s); /* s kept its claimed mailbox while muted */
    }
}

/* Parks s on r's muted list; 0 if r is no longer overloaded (run s again).
 * A sender's estimate (check_pressure) may flag r overloaded after r's last
 * look at its flag, when r has drained and gone idle: nothing would run r
 * again to unmute s, so an idle r is not overloaded (the flag is cleared).
 * r looks once more after it went idle (run_turn), so one of the two sees
 * the other (seq_cst loads and stores on both sides). Dist gates never idle
 * (their mailbox is not one). */
static int try_mute(moon_actor_t *s, moon_actor_t *r)
{
    int muted = 0;

    pthread_mutex_lock(&r->mute_lock);
    if (atomic_load(&r->overloaded) && atomic_load_explicit(&r->alive, memory_order_relaxed)) {
        if (moon_mailbox_idle(&r->mbox)) {
            atomic_store_explicit(&r->overloaded, 0, memory_order_relaxed);
        } else {
            s->mute_next  = r->muted_head;
            r->muted_head = s;
            muted         = 1;
        }
    }
    pthread_mutex_unlock(&r->mute_lock);
    if (muted) {
        atomic_fetch_add_explicit(&s->n_muted, 1, memory_order_relaxed);
    }
    return muted;
}

static void update_pressure(moon_actor_t *a)
{
    uint32_t bound = a->rt->cfg.mailbox_bound;
    uint32_t depth = moon_mailbox_depth(&a->mbox, bound);

    if (depth > atomic_load_explicit(&a->depth_hwm, memory_order_relaxed)) {
        atomic_store_explicit(&a->depth_hwm, depth, memory_order_relaxed);
    }
    if (depth >= bound) {
        atomic_store_explicit(&a->overloaded, 1, memory_order_relaxed);
    } else if (depth < bound / 2 && atomic_load_explicit(&a->overloaded, memory_order_relaxed)) {
        unmute_all(a);
    }
}

/* ---- lifecycle ------------------------------------------------------------ */
/* Generation of the next incarnation; 0 when the slot has used them all (it is
 * then retired: generation 0 never matches an address). */
static uint32_t next_gen(moon_addr_t addr)
{
    return (addr_gen(addr) + 1) & ADDR_GEN_MASK;
}

static void set_current(moon_actor_t *a)
{
    tls_current = a;
    if (a != NULL) {
        moon_log_set_thread_actor(a->ops ? a->ops->name : "?", a->addr);
    } else {
        moon_log_set_thread_actor(NULL, 0);
    }
}

/* Drops every name of the incarnation. Done before anyone is told of its end,
 * so a supervisor that restarts it can register the name again at once. */
static void drop_names(moon_actor_t *a)
{
    if (a->name != NULL) {
        moon_names_drop_addr(a->rt->names, a->name, a->addr);
        moon_free(a->name);
        a->name = NULL;
    }
    if (atomic_exchange(&a->n_extra_names, 0) > 0) {
        moon_names_drop_all(a->rt->names, a->addr);
    }
}

/* Frees what an incarnation owns; no notifications. */
static void incarnation_free(moon_actor_t *a)
{
    drop_names(a);
    moon_free(a->state);
    a->state = NULL;
    moon_vec_fini(&a->links);
    moon_vec_fini(&a->monitors);
}

/* Ends the live incarnation of a, in its own turn: fini, then its address
 * goes stale, then links and monitors are told. */
static void finish(moon_actor_t *a)
{
    moon_runtime_t    *rt     = a->rt;
    moon_status_t      reason = a->exit_reason;
    const moon_addr_t *links  = moon_vec_data(&a->links);
    const monitor_t   *mons   = moon_vec_data(&a->monitors);

    if (reason != MOON_OK) {
        MOON_WARN("actor %s@%llx failed: %s", a->ops->name, (unsigned long long)a->addr,
                  moon_status_str(reason));
    }
    if (a->ops->fini != NULL) {
        a->ops->fini(a);
    }
    drop_names(a);
    /* release: senders that see the new generation see the actor as gone. */
    atomic_store_explicit(&a->alive, 0, memory_order_release);
    atomic_store_explicit(&a->gen, next_gen(a->addr), memory_order_release);
    for (size_t i = 0; i < moon_vec_len(&a->links); i++) {
        send_exit(rt, a->addr, links[i], reason);
    }
    for (size_t i = 0; i < moon_vec_len(&a->monitors); i++) {
        send_down(rt, a->addr, mons[i].watcher, reason, mons[i].ref);
    }
    unmute_all(a);
    incarnation_free(a);
    a->exiting = 0;
    slot_release(rt, a);
    if (atomic_fetch_sub_explicit(&rt->n_alive, 1, memory_order_acq_rel) == 1) {
        moon_rt_note_maybe_done(rt);
    }
}

void moon_actor_exit(moon_actor_t *self, moon_status_t reason)
{
    if (!self->exiting) {
        self->exiting     = 1;
        self->exit_reason = reason;
    }
}

/* A message for an incarnation that has ended. Requests that expect an answer
 * from the runtime get it, so nobody waits for a DOWN that never comes. */
static void dead_letter(moon_actor_t *a, const moon_msg_hdr_t *msg)
{
    moon_runtime_t *rt  = a->rt;
    moon_addr_t     dst = moon_msg_env(msg)->dst;

    atomic_fetch_add_explicit(&rt->n_dead_letters, 1, memory_order_relaxed);
    if (msg->type == MOON_MSG_SYS_TIMER) {
        (void)moon_timers_accept(rt->timers, (const moon_sys_timer_t *)msg); /* frees a one-shot */
    } else if (msg->type == MOON_MSG_SYS_MONITOR) {
        send_down(rt, dst, msg->src, MOON_ERR_NO_ACTOR, ((const moon_sys_monitor_t *)msg)->ref);
    } else if (msg->type == MOON_MSG_SYS_LINK && !((const moon_sys_link_t *)msg)->unlink) {
        send_exit(rt, dst, msg->src, MOON_ERR_NO_ACTOR);
    }
}

static void call_handler(moon_actor_t *a, const moon_msg_hdr_t *msg)
{
    moon_handler_fn fn = a->ops->on_msg[msg->type];
    moon_status_t   status;

    if (fn == NULL) {
        atomic_fetch_add_explicit(&a->n_dropped, 1, memory_order_relaxed);
        MOON_DEBUG_LOG("%s: no handler for %s, dropped", a->ops->name, moon_msg_name(msg->type));
        return;
    }
    tls_dispatch_seq = ++tls_dispatch_count;
    status           = fn(a, msg);
    tls_dispatch_seq = 0;
    if (MOON_UNLIKELY(status != MOON_OK)) {
        MOON_DEBUG_LOG("%s: handler for %s returned %s", a->ops->name, moon_msg_name(msg->type),
                       moon_status_str(status));
        moon_actor_exit(a, status);
    }
}

static void dispatch_system(moon_actor_t *a, const moon_msg_hdr_t *msg)
{
    switch (msg->type) {
    case MOON_MSG_SYS_STOP:
        moon_actor_exit(a, ((const moon_sys_stop_t *)msg)->reason);
        break;
    case MOON_MSG_SYS_MONITOR: {
        monitor_t m = {msg->src, ((const moon_sys_monitor_t *)msg)->ref};
        if (moon_vec_push(&a->monitors, &m) != MOON_OK) {
            MOON_ERROR("%s: no memory for a monitor", a->ops->name);
            send_down(a->rt, a->addr, msg->src, MOON_ERR_NO_MEMORY, m.ref);
        }
        break;
    }
    case MOON_MSG_SYS_LINK: {
        int i = links_find(a, msg->src);
        if (((const moon_sys_link_t *)msg)->unlink) {
            if (i >= 0) {
                moon_vec_remove_swap(&a->links, (size_t)i);
            }
        } else if (i < 0 && moon_vec_push(&a->links, &msg->src) != MOON_OK) {
            MOON_ERROR("%s: no memory for a link", a->ops->name);
            send_exit(a->rt, a->addr, msg->src, MOON_ERR_NO_MEMORY);
        }
        break;
    }
    case MOON_MSG_SYS_EXIT: {
        const moon_sys_exit_t *m = (const moon_sys_exit_t *)msg;
        int                    i = links_find(a, m->actor);
        if (i >= 0) {
            moon_vec_remove_swap(&a->links, (size_t)i);
        }
        if (a->ops->on_msg[MOON_MSG_SYS_EXIT] != NULL) {
            call_handler(a, msg);
        } else if (m->reason != MOON_OK) {
            moon_actor_exit(a, MOON_ERR_ACTOR_FAILED); /* propagate along the link */
        }
        break;
    }
    case MOON_MSG_SYS_TIMER:
        if (moon_timers_accept(a->rt->timers, (const moon_sys_timer_t *)msg)) {
            call_handler(a, msg);
        }
        break;
    default:
        call_handler(a, msg);
        break;
    }
}

int moon_actor_run_turn(moon_actor_t *a, uint32_t budget)
{
    moon_runtime_t *rt      = a->rt;
    uint32_t        n       = 0;
    int             drained = 0;

    set_current(a);
    a->turn_sends = 0;
    while (n < budget) {
        moon_msg_env_t *env = moon_mailbox_pop(&a->mbox);
        moon_msg_hdr_t *msg;

        if (env == NULL) {
            drained = 1;
            break;
        }
        n++;
        msg = moon_env_msg(env);
        if (MOON_UNLIKELY(env->dst != a->addr ||
                          !atomic_load_explicit(&a->alive, memory_order_relaxed))) {
            dead_letter(a, msg);
            continue;
        }
        if (MOON_UNLIKELY(rt->cfg.trace != NULL)) {
            rt->cfg.trace(rt->cfg.trace_arg, rt->exec->now(rt), msg, env->dst);
        }
        if (msg->type < MOON_MSG_SYS_END) {
            dispatch_system(a, msg);
        } else {
            call_handler(a, msg);
        }
        atomic_store_explicit(&a->n_processed,
                              atomic_load_explicit(&a->n_processed, memory_order_relaxed) + 1,
                              memory_order_relaxed);
        if (MOON_UNLIKELY(a->exiting)) {
            finish(a);
            a->mute_on = NULL;
        } else if (MOON_UNLIKELY(a->mute_on != NULL || a->turn_sends >= rt->cfg.mailbox_bound)) {
            /* Muted, or sent a mailbox's worth this turn: yield, so the
             * receivers run and can flag themselves overloaded in time. */
            break;
        } else if (MOON_UNLIKELY(n % 16 == 0)) {
            /* Long turns re-check their depth so senders are muted in time;
             * the scan is amortised O(1) per message. */
            update_pressure(a);
        }
    }
    if (atomic_load_explicit(&a->alive, memory_order_relaxed)) {
        update_pressure(a);
    }
    set_current(NULL);
    if (MOON_UNLIKELY(a->mute_on != NULL)) {
        moon_actor_t *r = a->mute_on;
        a->mute_on      = NULL;
        /* An actor that became overloaded since its send is not muted: so a
         * muted actor is never overloaded, and no cycle of muted actors
         * waiting on each other can form. */
        if (!atomic_load_explicit(&a->overloaded, memory_order_relaxed) && try_mute(a, r)) {
            return 0; /* r reschedules a when it drains */
        }
    }
    if (drained && moon_mailbox_mark_empty(&a->mbox)) {
        /* Idle now: a sender that flagged us overloaded after update_pressure
         * looked may have muted itself on us (see try_mute); unmute it, as
         * no message may come to run us again. The slot's memory outlives
         * the actor, and unmuting is safe from any thread. */
        atomic_thread_fence(memory_order_seq_cst);
        if (MOON_UNLIKELY(atomic_load_explicit(&a->overloaded, memory_order_relaxed))) {
            unmute_all(a);
        }
        return 0;
    }
    return 1;
}

/* ---- spawn ---------------------------------------------------------------- */
moon_status_t moon_spawn(moon_runtime_t *rt, const moon_actor_ops_t *ops, const void *args,
                         const moon_spawn_opts_t *opts, moon_addr_t *addr_p)
{
    static const moon_spawn_opts_t no_opts;
    moon_actor_t                  *a, *caller = tls_current;
    moon_status_t                  status;

    if (rt == NULL || ops == NULL || ops->name == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    opts   = opts != NULL ? opts : &no_opts;
    status = slot_acquire(rt, &a);
    if (status != MOON_OK) {
        MOON_ERROR("spawn %s: %s", ops->name,
                   status == MOON_ERR_NO_RESOURCE ? "actor table full" : "no memory for a slot");
        return status;
    }
    a->ops              = ops;
    a->addr             = addr_make(rt->cfg.rank, a->index, atomic_load(&a->gen));
    a->flags            = opts->flags;
    a->sim_node         = opts->sim_node;
    a->sim_lane_free_ns = 0;
    a->exiting          = 0;
    a->exit_reason      = MOON_OK;
    a->send_seq         = 0;
    a->mute_on          = NULL;
    moon_vec_init(&a->links, sizeof(moon_addr_t)); /* empty: the last incarnation freed them */
    moon_vec_init(&a->monitors, sizeof(monitor_t));
    atomic_store(&a->n_processed, 0);
    atomic_store(&a->n_dropped, 0);
    atomic_store(&a->depth_hwm, 0);
    atomic_store(&a->n_muted, 0);
    status = MOON_ERR_NO_MEMORY;
    if (ops->state_bytes > 0 && (a->state = moon_calloc(1, ops->state_bytes)) == NULL) {
        goto err_release;
    }
    if (opts->monitor != MOON_ADDR_NONE) {
        monitor_t m = {opts->monitor, opts->monitor_ref};
        if (moon_vec_push(&a->monitors, &m) != MOON_OK) {
            goto err_free;
        }
    }
    if (opts->link != MOON_ADDR_NONE && moon_vec_push(&a->links, &opts->link) != MOON_OK) {
        goto err_free;
    }
    if (opts->name != NULL) {
        status = moon_register(rt, opts->name, a->addr);
        if (status != MOON_OK) {
            goto err_free;
        }
        if ((a->name = moon_strdup(opts->name)) == NULL) {
            moon_names_drop_addr(rt->names, opts->name, a->addr);
            status = MOON_ERR_NO_MEMORY;
            goto err_free;
        }
    }
    /* Live before init, so init may send to itself; the mailbox is claimed,
     * so nothing runs a turn of it until init is over. */
    atomic_store_explicit(&a->alive, 1, memory_order_release);
    atomic_fetch_add(&rt->n_alive, 1);
    set_current(a);
    status     = ops->init != NULL ? ops->init(a, args) : MOON_OK;
    a->mute_on = NULL; /* sends during init never mute */
    if (status != MOON_OK) {
        set_current(caller);
        MOON_WARN("spawn %s: init failed: %s", ops->name, moon_status_str(status));
        atomic_store_explicit(&a->alive, 0, memory_order_release);
        atomic_store(&a->gen, next_gen(a->addr));
        if (atomic_fetch_sub(&rt->n_alive, 1) == 1) {
            moon_rt_note_maybe_done(rt);
        }
        goto err_free;
    }
    if (a->exiting) {
        finish(a); /* init asked to end: it ends before any message */
    }
    set_current(caller);
    if (opts->link != MOON_ADDR_NONE) {
        moon_sys_link_t *m = moon_msg_new(MOON_MSG_SYS_LINK, 0);
        if (m == NULL || sys_send(rt, a->addr, opts->link, m) != MOON_OK) {
            send_exit(rt, opts->link, a->addr, MOON_ERR_NO_ACTOR);
        }
    }
    *addr_p = a->addr;
    /* As at the end of a turn: run it if init queued messages, else park it. */
    if (atomic_load_explicit(&a->mbox.tail->next, memory_order_acquire) != NULL ||
        !moon_mailbox_mark_empty(&a->mbox)) {
        rt->exec->schedule(rt, a);
    }
    return MOON_OK;

err_free:
    incarnation_free(a);
err_release:
    /* Whatever init queued is for a dead incarnation; then free the mailbox. */
    do {
        moon_msg_env_t *env;
        while ((env = moon_mailbox_pop(&a->mbox)) != NULL) {
            dead_letter(a, moon_env_msg(env));
        }
    } while (!moon_mailbox_mark_empty(&a->mbox));
    a->ops = NULL;
    slot_release(rt, a);
    return status;
}

/* ---- links, monitors, stop ------------------------------------------------ */
/* Sends a runtime control message from self (consumed whatever happens). */
static moon_status_t tell_sys(moon_actor_t *self, moon_addr_t target, moon_msg_hdr_t *m)
{
    m->flags = MOON_MSG_F_SYSTEM;
    return moon_tell(self, target, m);
}

moon_status_t moon_monitor(moon_actor_t *self, moon_addr_t target, uint64_t ref)
{
    moon_sys_monitor_t *m = moon_msg_new(MOON_MSG_SYS_MONITOR, 0);
    moon_status_t       status;

    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->ref = ref;
    status = tell_sys(self, target, &m->hdr);
    if (status == MOON_ERR_NO_ACTOR || moon_status_is_peer(status)) {
        /* Already gone, or its rank is: the DOWN says so, as if it ended now. */
        send_down(self->rt, target, self->addr, status, ref);
        return MOON_OK;
    }
    return status;
}

static moon_status_t send_link(moon_actor_t *self, moon_addr_t target, uint32_t unlink)
{
    moon_sys_link_t *m = moon_msg_new(MOON_MSG_SYS_LINK, 0);

    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->unlink = unlink;
    return tell_sys(self, target, &m->hdr);
}

moon_status_t moon_link(moon_actor_t *self, moon_addr_t target)
{
    moon_status_t status;

    if (target == self->addr) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (links_find(self, target) >= 0) {
        return MOON_OK;
    }
    if (moon_vec_push(&self->links, &target) != MOON_OK) {
        return MOON_ERR_NO_MEMORY;
    }
    status = send_link(self, target, 0);
    if (status == MOON_ERR_NO_ACTOR || moon_status_is_peer(status)) {
        send_exit(self->rt, target, self->addr, status); /* already gone, or its rank */
        return MOON_OK;
    }
    if (status != MOON_OK) {
        moon_vec_remove_swap(&self->links, moon_vec_len(&self->links) - 1);
    }
    return status;
}

moon_status_t moon_unlink(moon_actor_t *self, moon_addr_t target)
{
    int i = links_find(self, target);

    if (i < 0) {
        return MOON_ERR_NOT_FOUND;
    }
    moon_vec_remove_swap(&self->links, (size_t)i);
    (void)send_link(self, target, 1);
    return MOON_OK;
}

moon_status_t moon_stop(moon_runtime_t *rt, moon_addr_t actor, moon_status_t reason)
{
    moon_sys_stop_t *m = moon_msg_new(MOON_MSG_SYS_STOP, 0);

    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->reason = reason;
    return sys_send(rt, tls_current ? tls_current->addr : MOON_ADDR_NONE, actor, m);
}

moon_status_t moon_actor_wait_gone(moon_runtime_t *rt, moon_addr_t actor, uint32_t timeout_ms)
{
    for (uint32_t waited = 0;; waited++) {
        moon_actor_stats_t st;
        if (moon_actor_stats(rt, actor, &st) == MOON_ERR_NO_ACTOR) {
            return MOON_OK;
        }
        if (waited >= timeout_ms) {
            return MOON_ERR_TIMED_OUT;
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL); /* 1 ms */
    }
}

/* ---- accessors ------------------------------------------------------------ */
moon_addr_t moon_actor_addr(const moon_actor_t *self)
{
    return self->addr;
}

void *moon_actor_state(moon_actor_t *self)
{
    return self->state;
}

moon_runtime_t *moon_actor_runtime(moon_actor_t *self)
{
    return self->rt;
}

const char *moon_actor_name(const moon_actor_t *self)
{
    return self->ops->name;
}

moon_status_t moon_actor_stats(moon_runtime_t *rt, moon_addr_t actor, moon_actor_stats_t *stats_p)
{
    moon_actor_t *a = moon_rt_lookup(rt, actor);

    if (a == NULL) {
        return MOON_ERR_NO_ACTOR;
    }
    stats_p->n_processed      = atomic_load_explicit(&a->n_processed, memory_order_relaxed);
    stats_p->n_dropped        = atomic_load_explicit(&a->n_dropped, memory_order_relaxed);
    stats_p->depth_high_water = atomic_load_explicit(&a->depth_hwm, memory_order_relaxed);
    stats_p->n_muted          = atomic_load_explicit(&a->n_muted, memory_order_relaxed);
    stats_p->overloaded       = atomic_load_explicit(&a->overloaded, memory_order_relaxed);
    return MOON_OK;
}

uint64_t moon_actors_processed(moon_runtime_t *rt)
{
    uint64_t total = 0;

    uint32_t n = atomic_load_explicit(&rt->n_slots_used, memory_order_acquire);

    for (uint32_t i = 1; i <= n; i++) {
        moon_actor_t *a = slot_get(rt, i);
        if (a != NULL) {
            total += atomic_load_explicit(&a->n_processed, memory_order_relaxed);
        }
    }
    return total;
}

void moon_actors_destroy_all(moon_runtime_t *rt)
{
    for (uint32_t i = 1; i <= atomic_load(&rt->n_slots_used); i++) {
        moon_actor_t *a = slot_get(rt, i); /* NULL: past max_actors, or never published */

        if (a != NULL && atomic_load(&a->alive)) {
            set_current(a);
            if (a->ops->fini != NULL) {
                a->ops->fini(a);
            }
            set_current(NULL);
            atomic_store(&a->alive, 0);
            incarnation_free(a);
            atomic_fetch_sub(&rt->n_alive, 1);
        }
    }
    /* Second pass: fini may have sent messages to actors freed above. */
    for (uint32_t i = 1; i <= atomic_load(&rt->n_slots_used); i++) {
        moon_actor_t *a = slot_get(rt, i);

        moon_mailbox_drain(&a->mbox);
        pthread_mutex_destroy(&a->mute_lock);
        moon_free(a);
    }
}

void moon_names_note_extra(moon_runtime_t *rt, const char *name, moon_addr_t addr)
{
    moon_actor_t *a = moon_rt_lookup(rt, addr);

    /* Spawn-time names are dropped through a->name; count the others. */
    if (a != NULL && (a->name == NULL || strcmp(a->name, name) != 0)) {
        atomic_fetch_add(&a->n_extra_names, 1);
    }
}
