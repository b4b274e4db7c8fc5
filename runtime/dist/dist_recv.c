/* runtime/dist/dist_recv.c - the receive path: a frame from the engine is checked,
 * its credits taken, and each record decoded and delivered to its actor (or
 * answered with SYS_ERROR); system frames update the peer. Progress lock held. */
#include "dist_core.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>

/* ---- receiving ------------------------------------------------------------ */
void dist_log_once(_Atomic int *flag, const char *what, uint32_t r, moon_status_t status)
{
    if (atomic_exchange(flag, 1) == 0) {
        MOON_WARN("dropped %s from rank %u: %s (counted; logged once)", what, r,
                  moon_status_str(status));
    }
}

/* The message of a record: msgpack, or a layout and an image. */
static moon_status_t decode_record(const rec_hdr_t *rec, const char *payload,
                                   moon_msg_hdr_t **msg_p)
{
    uint32_t layout;

    if (!rec->image) {
        return moon_msg_decode(payload, rec->len, msg_p);
    }
    if (rec->len < 4) {
        return MOON_ERR_INVALID_PARAM;
    }
    memcpy(&layout, payload, 4);
    return moon_msg_image_decode(payload + 4, rec->len - 4, layout, msg_p);
}

/* The header of a record's message that did not decode, if it reads. */
static moon_status_t peek_record(const rec_hdr_t *rec, const char *payload, uint32_t *type_p,
                                 moon_addr_t *src_p, uint64_t *seq_p)
{
    if (!rec->image) {
        return moon_msg_peek(payload, rec->len, type_p, src_p, seq_p);
    }
    return rec->len < 4 ? MOON_ERR_INVALID_PARAM
                        : moon_msg_image_peek(payload + 4, rec->len - 4, type_p, src_p, seq_p);
}

static void deliver_record(moon_dist_t *d, uint32_t r, const rec_hdr_t *rec, const char *payload)
{
    dist_peer_t    *p   = &d->peers[r];
    moon_msg_hdr_t *msg = NULL;
    moon_status_t   status;

    status = decode_record(rec, payload, &msg);
    if (status != MOON_OK) {
        uint32_t    type;
        moon_addr_t src;
        uint64_t    seq;

        atomic_fetch_add_explicit(&d->st.bad_msgs, 1, memory_order_relaxed);
        dist_log_once(&d->logged_bad_msg, "a message that failed to decode", r, status);
        /* a reply needs the sender, which only a readable header names */
        if (peek_record(rec, payload, &type, &src, &seq) == MOON_OK) {
            dist_send_error_reply(d, r, rec->to, src, type, seq, MOON_ERR_PEER_REJECTED);
        }
        p->owed++;
        return;
    }
    if (MOON_UNLIKELY(d->trace != NULL)) {
        dist_trace_msg(d, "rx", rec->to, msg, msg->src, msg->seq, msg->type);
    }
    count_locked(&d->st.received, 1);
    if (rec->to == MOON_ADDR_NONE) { /* for the transport itself */
        dist_names_on_msg(d, r, msg);
        moon_msg_release(msg);
        p->owed++;
        return;
    }
    if (MOON_UNLIKELY(msg->type < MOON_MSG_SYS_END)) {
        dist_note_sys_rx(d, rec->to, msg);
    }
    status = moon_runtime_deliver_remote(d->rt, rec->to, msg);
    if (status != MOON_OK) {
        atomic_fetch_add_explicit(&d->st.stale, 1, memory_order_relaxed);
        if (msg->type == MOON_MSG_SYS_MONITOR || msg->type == MOON_MSG_SYS_LINK) {
            /* the runtime answers these for ended actors; do the same here */
            if (msg->type == MOON_MSG_SYS_MONITOR) {
                moon_sys_down_t *m = moon_msg_new(MOON_MSG_SYS_DOWN, 0);
                if (m != NULL) {
                    m->actor     = rec->to;
                    m->reason    = MOON_ERR_NO_ACTOR;
                    m->ref       = ((const moon_sys_monitor_t *)msg)->ref;
                    m->hdr.src   = rec->to;
                    m->hdr.flags = MOON_MSG_F_SYSTEM;
                    dist_enqueue(d, r, msg->src, &m->hdr);
                }
            } else if (!((const moon_sys_link_t *)msg)->unlink) {
                moon_sys_exit_t *m = moon_msg_new(MOON_MSG_SYS_EXIT, 0);
                if (m != NULL) {
                    m->actor     = rec->to;
                    m->reason    = MOON_ERR_NO_ACTOR;
                    m->hdr.src   = rec->to;
                    m->hdr.flags = MOON_MSG_F_SYSTEM;
                    dist_enqueue(d, r, msg->src, &m->hdr);
                }
            }
        } else {
            dist_log_once(&d->logged_stale, "a message for a stale address", r, status);
            dist_send_error_reply(d, r, rec->to, msg->src, msg->type, msg->seq, status);
        }
        moon_msg_release(msg);
        p->owed++;
        return;
    }
    /* withhold the credit while the target is overloaded, or while what this
     * peer delivered to it and it has not processed reaches its mailbox bound
     * (the overloaded flag is set by the target's own turns, which may not
     * run for a while on a loaded machine) */
    if (dist_target_pressed(d, rec->to) || p->held > 0) {
        if (p->held++ == 0) {
            p->held_addr = rec->to;
            d->n_held++;
        }
    } else {
        p->owed++;
    }
}

void dist_on_frame(moon_dist_t *d, const void *data, size_t len)
{
    frame_hdr_t  h;
    const char  *cur = (const char *)data + sizeof(h), *end = (const char *)data + len;
    dist_peer_t *p;

    if (len < sizeof(h)) {
        goto bad;
    }
    memcpy(&h, data, sizeof(h));
    if (h.magic != FRAME_MAGIC || h.src_rank >= d->size || h.src_rank == d->rank) {
        goto bad;
    }
    p = &d->peers[h.src_rank];
    count_locked(&d->st.frames_received, 1);
    p->rx_frames++;
    if (atomic_load_explicit(&p->down, memory_order_relaxed)) {
        return; /* declared lost: late frames are ignored */
    }
    if (h.credits > 0) {
        uint32_t c =
            MOON_MIN(p->credits + h.credits, d->cfg.credits); /* a lying peer gains nothing */
        __atomic_store_n(&p->credits, c, __ATOMIC_RELAXED);
        if (p->stalled) {
            p->stalled = 0;
            dist_mark_ready(d, h.src_rank);
        }
    }
    switch (h.kind) {
    case FRAME_BATCH:
        for (uint32_t i = 0; i < h.n_records; i++) {
            rec_hdr_t rec;

            if ((size_t)(end - cur) < REC_BYTES) {
                goto bad;
            }
            rec = rec_read(cur);
            cur += REC_BYTES;
            if (rec.len > (size_t)(end - cur)) {
                goto bad;
            }
            deliver_record(d, h.src_rank, &rec, cur);
            cur += rec.len;
        }
        if (p->owed >= d->cfg.credits / 4) {
            dist_send_small_frame(d, h.src_rank, FRAME_CREDIT);
        }
        return;
    case FRAME_CREDIT:
    case FRAME_HEARTBEAT:
        return;
    case FRAME_GOODBYE:
        p->goodbye = 1;
        return;
    case FRAME_REGION_GONE: {
        uint64_t id;
        if ((size_t)(end - cur) != sizeof(id)) {
            goto bad;
        }
        memcpy(&id, cur, sizeof(id));
        if (d->eng->region_gone != NULL) {
            atomic_fetch_add(&d->st.regions_forgotten, d->eng->region_gone(d, h.src_rank, id));
        }
        return;
    }
    default:
        if (h.kind >= DIST_FRAME_ENGINE && d->eng->on_engine_frame != NULL &&
            d->eng->on_engine_frame(d, h.src_rank, h.kind, cur, (size_t)(end - cur))) {
            return;
        }
        goto bad;
    }
bad:
    atomic_fetch_add_explicit(&d->st.bad_frames, 1, memory_order_relaxed);
    dist_log_once(&d->logged_bad_frame, "a malformed frame", len >= sizeof(h) ? h.src_rank : 0,
                  MOON_ERR_INVALID_PARAM);
}
