/* runtime/dist/dist_credit.c - credit windows (dist.c's "Credits"): a sender whose
 * peer queue passes a window is muted on the peer's gate until it drains; a
 * receiver withholds the credits of a target under pressure and returns them
 * (piggybacked or in a CREDIT frame) once it has caught up. */
#include "dist_core.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <pthread.h>

/* The credits a frame about to leave for p carries back: all this rank
 * owes p. Counts the frame. */
uint32_t dist_frame_carry_credits(moon_dist_t *d, dist_peer_t *p)
{
    uint32_t owed = p->owed;

    p->owed = 0;
    p->tx_frames++;
    count_locked(&d->st.frames_sent, 1);
    return owed;
}

/* ---- the transport seam ---------------------------------------------------- */
/* Mutes the sending actor (the one whose turn is running this send) on the
 * peer's gate, as actor.c does for an overloaded local receiver. */
void dist_gate_close(moon_dist_t *d, dist_peer_t *p, const moon_msg_hdr_t *msg)
{
    moon_actor_t *s;

    if (msg->src == MOON_ADDR_NONE || (msg->flags & MOON_MSG_F_SYSTEM) ||
        moon_addr_rank(msg->src) != d->rank) {
        return;
    }
    s = moon_rt_lookup(d->rt, msg->src);
    if (s == NULL || (s->flags & MOON_SPAWN_CONTROL) ||
        atomic_load_explicit(&s->overloaded, memory_order_relaxed) || s->mute_on != NULL) {
        return;
    }
    /* seq_cst store, then the queue's length: the progress thread may have
     * drained the queue (and found the gate open) since our push, and would
     * then never reopen it: the sender would stay muted. It decrements
     * `queued`, then reads the flag (drain_peer); one of us sees the other. */
    atomic_store(&p->gate->overloaded, 1);
    s->mute_on = p->gate;
    atomic_fetch_add_explicit(&d->st.gate_mutes, 1, memory_order_relaxed);
    if (atomic_load(&p->queued) <= d->cfg.credits / 2) {
        dist_gate_open(p);
    }
}

/* Reopens a gate: the senders muted on it run again (actor.c unmute_all). */
void dist_gate_open(dist_peer_t *p)
{
    moon_actor_t *g = p->gate, *list;

    pthread_mutex_lock(&g->mute_lock);
    atomic_store_explicit(&g->overloaded, 0, memory_order_relaxed);
    list          = g->muted_head;
    g->muted_head = NULL;
    pthread_mutex_unlock(&g->mute_lock);
    while (list != NULL) {
        moon_actor_t *s = list;
        list            = s->mute_next;
        s->mute_next    = NULL;
        g->rt->exec->schedule(g->rt, s);
    }
}

/* Counts a delivery to `to` and says whether it is under pressure: flagged
 * overloaded, or what was delivered to it (from any peer) and it has not
 * processed yet reaches its mailbox bound. Only the last target is tracked. */
int dist_target_pressed(moon_dist_t *d, moon_addr_t to)
{
    moon_actor_t *a = moon_rt_lookup(d->rt, to);
    uint64_t      processed;

    if (a == NULL) {
        return 0;
    }
    processed = atomic_load_explicit(&a->n_processed, memory_order_relaxed);
    if (d->tgt_addr != to) {
        d->tgt_addr      = to;
        d->tgt_base      = processed;
        d->tgt_delivered = 0;
    }
    d->tgt_delivered++;
    /* processed also counts messages from elsewhere: below zero means no backlog */
    return atomic_load_explicit(&a->overloaded, memory_order_relaxed) ||
           (int64_t)(d->tgt_delivered - (processed - d->tgt_base)) >=
               (int64_t)d->rt->cfg.mailbox_bound;
}

/* 1 once a held target has drained below half its bound. */
static int target_relieved(moon_dist_t *d, dist_peer_t *p)
{
    moon_actor_t *a = moon_rt_lookup(d->rt, p->held_addr);
    uint64_t      processed;

    if (a == NULL || d->tgt_addr != p->held_addr) {
        return 1;
    }
    processed = atomic_load_explicit(&a->n_processed, memory_order_relaxed);
    return !atomic_load_explicit(&a->overloaded, memory_order_relaxed) &&
           (int64_t)(d->tgt_delivered - (processed - d->tgt_base)) <
               (int64_t)d->rt->cfg.mailbox_bound / 2;
}

int dist_release_held(moon_dist_t *d)
{
    int n = 0;

    for (uint32_t r = 0; r < d->size; r++) {
        dist_peer_t *p = &d->peers[r];

        if (p->held > 0 && target_relieved(d, p)) {
            /* the target caught up: restart the count from here */
            p->owed += p->held;
            p->held = 0;
            d->n_held--;
            dist_send_small_frame(d, r, FRAME_CREDIT);
            n++;
        }
    }
    return n;
}
