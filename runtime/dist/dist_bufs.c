/* runtime/dist/dist_bufs.c - frame buffers (a pool of batch_bytes buffers, larger
 * ones allocated for one frame) and frames out to the engine. Progress lock
 * held, except dist_buf_put from the engine's completions (same lock). */
#include "dist_core.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>

/* ---- buffers -------------------------------------------------------------- */
dist_buf_t *dist_buf_get(moon_dist_t *d, uint32_t peer, size_t need)
{
    dist_buf_t *b;

    if (need <= d->cfg.batch_bytes && d->buf_pool != NULL) {
        b           = d->buf_pool;
        d->buf_pool = b->next;
        d->n_pool--;
    } else {
        size_t cap = MOON_MAX(need, (size_t)d->cfg.batch_bytes);
        b          = moon_malloc(sizeof(*b) + cap);
        if (b == NULL) {
            return NULL;
        }
        b->cap = (uint32_t)cap;
        b->big = cap > d->cfg.batch_bytes;
    }
    b->next = NULL;
    b->d    = d;
    b->len  = 0;
    b->peer = peer;
    return b;
}

void dist_buf_put(moon_dist_t *d, dist_buf_t *b)
{
    if (b->big || d->n_pool >= BUF_POOL_MAX) {
        moon_free(b);
        return;
    }
    b->next     = d->buf_pool;
    d->buf_pool = b;
    d->n_pool++;
}

void dist_frame_done(moon_dist_t *d, dist_buf_t *buf, moon_status_t status)
{
    if (status != MOON_OK && moon_status_is_peer(status)) {
        dist_peer_failed(d, buf->peer, status);
    }
    dist_buf_put(d, buf);
}

void dist_frame_begin(moon_dist_t *d, dist_buf_t *b, uint32_t kind)
{
    frame_hdr_t h = {FRAME_MAGIC, (uint8_t)kind, 0, d->rank, 0, 0};

    memcpy(b->data, &h, sizeof(h));
    b->len = sizeof(h);
}

/* Sends b (header filled, records counted); piggybacks owed credits. */
void dist_frame_send(moon_dist_t *d, dist_buf_t *b, uint32_t n_records)
{
    dist_peer_t  *p = &d->peers[b->peer];
    frame_hdr_t  *h = (frame_hdr_t *)b->data;
    moon_status_t status;

    if (atomic_load_explicit(&p->down, memory_order_relaxed)) {
        dist_buf_put(d, b);
        return;
    }
    h->credits   = dist_frame_carry_credits(d, p);
    h->n_records = n_records;
    status       = d->eng->send_frame(d, b);
    if (status != MOON_OK) {
        /* the engine did not take it */
        if (moon_status_is_peer(status)) {
            dist_peer_failed(d, b->peer, status);
        }
        dist_buf_put(d, b);
    }
}

void dist_send_small_frame(moon_dist_t *d, uint32_t r, uint32_t kind)
{
    dist_buf_t *b = dist_buf_get(d, r, sizeof(frame_hdr_t));

    if (b == NULL) {
        return;
    }
    dist_frame_begin(d, b, kind);
    dist_frame_send(d, b, 0);
}

moon_status_t dist_send_engine_frame(moon_dist_t *d, uint32_t r, uint32_t kind, const void *body,
                                     size_t len)
{
    dist_buf_t *b = dist_buf_get(d, r, sizeof(frame_hdr_t) + len);

    if (b == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    dist_frame_begin(d, b, kind);
    memcpy(b->data + b->len, body, len);
    b->len += (uint32_t)len;
    dist_frame_send(d, b, 0);
    return MOON_OK;
}
