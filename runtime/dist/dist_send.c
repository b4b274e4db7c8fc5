/* runtime/dist/dist_send.c - the transport seam (moon_transport_ops_t) and the
 * send path: a message to a remote actor queues on its peer's MPSC queue (or
 * leaves at once from the handler's thread when the queue is empty), and the
 * progress thread drains ready peers into frames of records. */
#include "dist_core.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>

/* Queues msg for rank r; ownership moves to the queue. */
void dist_enqueue(moon_dist_t *d, uint32_t r, moon_addr_t to, moon_msg_hdr_t *msg)
{
    dist_peer_t *p = &d->peers[r];

    moon_msg_env(msg)->dst = to;
    atomic_fetch_add_explicit(&p->queued, 1, memory_order_relaxed);
    if (moon_mailbox_push(&p->q, moon_msg_env(msg))) {
        dist_mark_ready(d, r);
        dist_wake(d);
    }
}

static int send_direct(moon_dist_t *d, uint32_t r, moon_addr_t to, moon_msg_hdr_t *msg,
                       size_t rec_need, size_t image);

static moon_status_t dist_send(void *ctx, moon_addr_t to, moon_msg_hdr_t *msg)
{
    moon_dist_t *d = ctx;
    uint32_t     r = moon_addr_rank(to);
    dist_peer_t *p;
    size_t       bound, image = 0;

    if (MOON_UNLIKELY(r >= d->size || r == d->rank)) {
        return MOON_ERR_NO_ACTOR;
    }
    p = &d->peers[r];
    if (MOON_UNLIKELY(atomic_load_explicit(&p->down, memory_order_relaxed))) {
        return MOON_ERR_PEER_LOST;
    }
    if (MOON_UNLIKELY((bound = moon_msg_checked_bound(msg, p->images ? &image : NULL)) == 0)) {
        return MOON_ERR_INVALID_PARAM; /* logged; the message stays the sender's */
    }
    if (MOON_UNLIKELY(msg->type < MOON_MSG_SYS_END)) {
        dist_note_sys_tx(d, to, msg);
    }
    if (send_direct(d, r, to, msg, record_need(image, bound), image)) {
        return MOON_OK;
    }
    dist_enqueue(d, r, to, msg);
    if (MOON_UNLIKELY(atomic_load_explicit(&p->queued, memory_order_relaxed) > d->cfg.credits)) {
        dist_gate_close(d, p, msg);
    }
    return MOON_OK;
}

const moon_transport_ops_t dist_transport_ops = {"dist", dist_send};

/* SYS_ERROR {type, seq, status} from `to` back to the sender `src` of a
 * message that could not be delivered, when the sender is an actor of rank r. */
void dist_send_error_reply(moon_dist_t *d, uint32_t r, moon_addr_t to, moon_addr_t src,
                           uint32_t type, uint64_t seq, moon_status_t status)
{
    moon_sys_error_t *e;

    if (src == MOON_ADDR_NONE || moon_addr_rank(src) != r || type == MOON_MSG_SYS_ERROR ||
        atomic_load(&d->peers[r].down)) {
        return;
    }
    e = moon_msg_new(MOON_MSG_SYS_ERROR, 0);
    if (e == NULL) {
        return;
    }
    e->orig_type = type;
    e->status    = status;
    e->orig_seq  = seq;
    e->hdr.src   = to;
    e->hdr.flags = MOON_MSG_F_SYSTEM;
    dist_enqueue(d, r, src, &e->hdr);
}

/* ---- sending: drain ready peers into frames ------------------------------- */

/* Encodes msg for `to` as a record at rec, in room bytes (>= record_need):
 * its image of `image` bytes, or (image 0) msgpack. The record's bytes, or
 * 0 (logged by the codec) if it does not encode. */
static size_t record_put(moon_dist_t *d, char *rec, size_t room, moon_addr_t to,
                         const moon_msg_hdr_t *msg, size_t image)
{
    size_t len = 0;

    if (image > 0) {
        uint32_t layout = moon_msg_layout(msg->type);

        memcpy(rec + REC_BYTES, &layout, 4);
        memcpy(rec + REC_BYTES + 4, msg, image);
        len = 4 + image;
    } else if (moon_msg_encode(msg, rec + REC_BYTES, room - REC_BYTES, &len) != MOON_OK) {
        return 0;
    }
    rec_write(rec, to, (uint32_t)len, image > 0);
    if (MOON_UNLIKELY(d->trace != NULL)) {
        dist_trace_msg(d, "tx", to, msg, msg->src, msg->seq, msg->type);
    }
    return REC_BYTES + len;
}

/* One more record of frame b (see record_put); -1 (logged by the codec) if
 * msg does not encode into the room left. */
static int frame_add(moon_dist_t *d, dist_buf_t *b, moon_addr_t to, const moon_msg_hdr_t *msg,
                     size_t image)
{
    size_t n = record_put(d, b->data + b->len, b->cap - b->len, to, msg, image);

    b->len += (uint32_t)n;
    return n > 0 ? 0 : -1;
}

static int drain_peer(moon_dist_t *d, uint32_t r)
{
    dist_peer_t *p     = &d->peers[r];
    dist_buf_t  *b     = NULL;
    uint32_t     n_rec = 0, n = 0;
    int          empty = 0;

    if (atomic_load_explicit(&p->down, memory_order_relaxed)) {
        return 0;
    }
    while (n < MAX_PER_PEER) {
        moon_msg_env_t *env;
        moon_msg_hdr_t *msg;
        size_t          need, image;

        if (p->credits == 0) {
            if (!p->stalled) {
                p->stalled = 1;
                atomic_fetch_add_explicit(&d->st.credit_stalls, 1, memory_order_relaxed);
            }
            break;
        }
        env = moon_mailbox_pop(&p->q);
        if (env == NULL) {
            empty = 1;
            break;
        }
        msg   = moon_env_msg(env);
        image = p->images ? moon_msg_image_bytes(msg) : 0;
        need  = record_need(image, image > 0 ? 0 : moon_msg_encoded_bound(msg));
        if (b != NULL && need > b->cap - b->len) {
            dist_frame_send(d, b, n_rec);
            b     = NULL;
            n_rec = 0;
        }
        if (b == NULL) {
            b = dist_buf_get(d, r, sizeof(frame_hdr_t) + need);
            if (b == NULL) {
                MOON_ERROR("no memory for a frame to rank %u: message %s dropped", r,
                           moon_msg_name(msg->type));
                atomic_fetch_sub_explicit(&p->queued, 1, memory_order_relaxed);
                continue;
            }
            dist_frame_begin(d, b, FRAME_BATCH);
        }
        if (frame_add(d, b, env->dst, msg, image) == 0) {
            n_rec++;
            n++;
            __atomic_store_n(&p->credits, p->credits - 1, __ATOMIC_RELAXED);
        } /* else dropped, logged by the codec */
        /* only now, with its credit taken: moon_dist_barrier reads "nothing
         * queued and every credit back" as delivered, and a message off the
         * queue but not yet charged would look delivered before it left */
        atomic_fetch_sub_explicit(&p->queued, 1, memory_order_release);
        /* the popped message is released by the next pop (the queue's stub) */
    }
    if (b != NULL) {
        if (n_rec > 0) {
            dist_frame_send(d, b, n_rec);
        } else {
            dist_buf_put(d, b);
        }
    }
    count_locked(&d->st.sent, n);
    /* pairs with dist_gate_close: the decrements of `queued`, then the flag */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&p->gate->overloaded, memory_order_relaxed) &&
        atomic_load_explicit(&p->queued, memory_order_relaxed) <= d->cfg.credits / 2) {
        dist_gate_open(p);
    }
    if (empty) {
        if (!moon_mailbox_mark_empty(&p->q)) {
            dist_mark_ready(d, r); /* a push raced in */
        }
    } else if (!p->stalled) {
        dist_mark_ready(d, r); /* budget used up: come back next pass */
    }
    return (int)n;
}

/* send_direct's frame of one record (see record_put), encoded straight into
 * the engine's memory (a shared-memory ring): no frame buffer, no copy. 1
 * sent, -1 the message did not encode (logged by the codec; nothing sent), 0
 * no room in place (then a frame buffer). */
static int send_in_place(moon_dist_t *d, uint32_t r, moon_addr_t to, const moon_msg_hdr_t *msg,
                         size_t need, size_t image)
{
    char       *f = d->eng->frame_reserve != NULL ? d->eng->frame_reserve(d, r, need) : NULL;
    frame_hdr_t h = {FRAME_MAGIC, FRAME_BATCH, 0, d->rank, 0, 1};
    size_t      n;

    if (f == NULL) {
        return 0;
    }
    if ((n = record_put(d, f + sizeof(h), need - sizeof(h), to, msg, image)) == 0) {
        return -1; /* the room was not committed: it stays free */
    }
    h.credits = dist_frame_carry_credits(d, &d->peers[r]);
    memcpy(f, &h, sizeof(h));
    d->eng->frame_commit(d, r, sizeof(h) + n);
    return 1;
}

/* The first remote message a handler sends, to a peer whose queue is empty,
 * leaves at once from the handler's thread as a frame of its own: a request
 * or a reply does not wait for the worker to finish its turn, come back idle
 * and drain the queue. The handler's later messages (to any peer) queue up
 * and leave batched. FIFO per pair holds: an empty queue, checked under the progress
 * lock, means everything sent before is already with the engine. rec_need:
 * msg's record_need, as its image of `image` bytes or (0) msgpack. Returns 1
 * if msg was consumed. */
static int send_direct(moon_dist_t *d, uint32_t r, moon_addr_t to, moon_msg_hdr_t *msg,
                       size_t rec_need, size_t image)
{
    static _Thread_local uint64_t last_seq;
    dist_peer_t                  *p   = &d->peers[r];
    uint64_t                      seq = moon_rt_dispatch_seq();
    dist_buf_t                   *b   = NULL;
    size_t                        need;
    int                           sent;

    if (seq == 0 || seq == last_seq || !atomic_load_explicit(&d->direct, memory_order_relaxed) ||
        atomic_load_explicit(&p->queued, memory_order_relaxed) != 0 ||
        atomic_load_explicit(&d->progress_wanted, memory_order_relaxed) ||
        !dist_progress_trylock(d)) {
        return 0;
    }
    need = sizeof(frame_hdr_t) + rec_need;
    if (atomic_load(&d->closing) || p->credits == 0 ||
        atomic_load_explicit(&p->queued, memory_order_relaxed) != 0 ||
        atomic_load_explicit(&p->down, memory_order_relaxed) ||
        ((sent = send_in_place(d, r, to, msg, need, image)) == 0 &&
         (b = dist_buf_get(d, r, need)) == NULL)) {
        dist_progress_unlock(d);
        return 0;
    }
    last_seq = seq;
    if (b != NULL) {
        dist_frame_begin(d, b, FRAME_BATCH);
        sent = frame_add(d, b, to, msg, image) == 0 ? 1 : -1;
        if (sent > 0) {
            dist_frame_send(d, b, 1);
        } else {
            dist_buf_put(d, b);
        }
    }
    if (sent > 0) {
        __atomic_store_n(&p->credits, p->credits - 1, __ATOMIC_RELAXED);
        count_locked(&d->st.sent, 1);
    }
    dist_progress_unlock(d);
    moon_msg_release(msg); /* sent, or dropped (logged by the codec) */
    return 1;
}

int dist_pump_sends(moon_dist_t *d)
{
    int n = 0;

    for (uint32_t w = 0; w < d->n_ready_words; w++) {
        uint64_t bits;

        if (atomic_load_explicit(&d->ready[w], memory_order_relaxed) == 0) {
            continue;
        }
        bits = atomic_exchange(&d->ready[w], 0);
        while (bits != 0) {
            uint32_t r = w * 64 + (uint32_t)__builtin_ctzll(bits);
            bits &= bits - 1;
            n += drain_peer(d, r);
        }
    }
    return n;
}
