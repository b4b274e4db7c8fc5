/* actors/weights_recv.c - the receiving end of a weight push
 * (weights_recv.h). One push at a time. The chunks that travel are got
 * one-sided from the predecessor's region, at most RECV_WINDOW at once (one,
 * with rests between, while the instance serves: weights_pace.h), in the
 * order their CHUNK notices came; each is checked against the offer's XXH3
 * before it is passed on. The staging region becomes the memory of the
 * new model: on COMMIT both go to the instance, which frees them when the
 * version retires. */
#include "weights_recv.h"

#include "weights_pace.h"

#include "moonlet/alloc.h"
#include "moonlet/kv_key.h"
#include "moonlet/log.h"
#include "moonlet/weights_msgs.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#define RECV_WINDOW 16u
#define RECV_HANDED 4u /* regions handed to the instance, remembered for their return */

/* A staging region and what it holds: the XXH3 of each chunk of a checked
 * image (hashes NULL: not known, e.g. a failed push's). A push stages into
 * the region of the version retired before; the chunks it already holds
 * (most of them, when weights change little from push to push) are neither
 * copied nor got again. */
typedef struct {
    moon_dist_region_t *reg;
    void               *base;
    uint64_t            len;
    uint64_t           *hashes; /* owned */
    uint32_t            n;
    uint64_t            chunk_bytes, total;
} held_t;

typedef struct {
    moon_weights_recv_args_t a;
    /* what the instance serves new requests with (borrowed from it) */
    const moon_model_t *cur_model, *prev_model;
    uint64_t            cur_version, prev_version;
    /* XXH3 of cur_model's image cut in cur_chunk_bytes chunks (NULL: not
     * known): a push's HAVE without reading the image again; after a
     * commit they are the offer's, every one checked */
    uint64_t *cur_hashes;
    uint32_t  cur_n_hashes;
    uint64_t  cur_chunk_bytes;
    /* the push under way (push 0: none) */
    uint64_t            push, version;
    moon_addr_t         from; /* the broadcaster of this push */
    uint64_t            total, chunk_bytes;
    uint32_t            n_chunks;
    uint64_t           *hashes; /* (n_chunks) expected */
    uint8_t            *state;  /* (n_chunks) CH_* */
    uint32_t           *ready;  /* (n_chunks) CHUNK notices, in order */
    uint32_t            n_ready, next_ready, in_flight, n_travel, n_got;
    void               *stage;
    moon_dist_region_t *stage_reg;
    held_t              stage_had; /* what stage held before this push (reg unused) */
    void               *src;       /* predecessor's region descriptor (copy) */
    uint32_t            src_len;
    moon_addr_t         next;
    int                 planned, failed, staged;
    moon_model_t       *staged_model;
    uint64_t            got_bytes, copied_bytes;
    uint64_t            committed_push; /* the last push installed */
    /* a region to stage the next push in (a failed push's, or a retired
     * version's handed back): its pages are in, the next ranks map it */
    held_t              spare;
    held_t              handed[RECV_HANDED];
    uint64_t            kept_bytes; /* this push's chunks the staging region held already */
    uint32_t            flags;      /* the push's MOON_WEIGHTS_F_* */
    uint64_t            stage_len;  /* bytes of the staging region (>= total) */
    uint64_t            offer_ns, plan_ns, got_ns; /* this push's steps, for the log */
    moon_weights_pace_t pace;
} recv_t;

enum { CH_LOCAL = 0, CH_TRAVEL, CH_READY, CH_GETTING, CH_HAVE };

static uint64_t chunk_len(const recv_t *r, uint32_t k)
{
    uint64_t off = (uint64_t)k * r->chunk_bytes;
    return MOON_MIN(r->chunk_bytes, r->total - off);
}

static void held_free(recv_t *r, held_t *h)
{
    moon_dist_region_deregister(r->a.dist, h->reg);
    moon_free(h->hashes);
    memset(h, 0, sizeof(*h));
}

/* Keeps h as the spare: the one whose content is known, else the larger. */
static void keep_spare(recv_t *r, held_t *h)
{
    int better = r->spare.reg == NULL || (h->hashes != NULL && r->spare.hashes == NULL) ||
                 ((h->hashes != NULL) == (r->spare.hashes != NULL) && h->len > r->spare.len);

    if (!better) {
        held_free(r, h);
        return;
    }
    held_free(r, &r->spare);
    r->spare = *h;
    memset(h, 0, sizeof(*h));
}

/* Chunk k of the push is in the staging region already (its XXH3 known
 * from the checked image the region held, and equal to the offer's). */
static int stage_holds(const recv_t *r, uint32_t k)
{
    const held_t *h = &r->stage_had;

    return h->hashes != NULL && h->chunk_bytes == r->chunk_bytes && h->total == r->total &&
           k < h->n && h->hashes[k] == r->hashes[k];
}

/* Ends the push: the staged model freed (unless handed over), its staging
 * region kept as the spare. */
static void end_push(recv_t *r)
{
    moon_model_destroy(r->staged_model);
    if (r->stage_reg != NULL) {
        /* a failed push's: part of it may be written, its content unknown */
        held_t h = {.reg = r->stage_reg, .base = r->stage, .len = r->stage_len};
        keep_spare(r, &h);
    }
    moon_free(r->stage_had.hashes);
    memset(&r->stage_had, 0, sizeof(r->stage_had));
    moon_free(r->hashes);
    moon_free(r->state);
    moon_free(r->ready);
    moon_free(r->src);
    r->staged_model = NULL;
    r->stage_reg    = NULL;
    r->stage        = NULL;
    r->hashes       = NULL;
    r->state        = NULL;
    r->ready        = NULL;
    r->src          = NULL;
    r->push         = 0;
    r->planned = r->failed = r->staged = 0;
    r->n_ready = r->next_ready = r->in_flight = r->n_travel = r->n_got = 0;
    r->got_bytes = r->copied_bytes = r->kept_bytes = 0;
    moon_weights_pace_reset(&r->pace);
}

static void send_staged(moon_actor_t *self, recv_t *r, moon_status_t status, const char *why)
{
    moon_weights_staged_t *m = moon_msg_new(MOON_MSG_WEIGHTS_STAGED, strlen(why) + 2);

    if (m != NULL) {
        m->push         = r->push;
        m->status       = status;
        m->got_bytes    = r->got_bytes;
        m->copied_bytes = r->copied_bytes;
        moon_msg_set_str(m, &m->message, why);
        moon_tell(self, r->from, &m->hdr);
    }
}

static void fail(moon_actor_t *self, recv_t *r, moon_status_t status, const char *why)
{
    if (r->failed) {
        return;
    }
    r->failed = 1;
    MOON_ERROR("weights %s/%u: push of version %llu failed: %s", r->a.role ? "decode" : "prefill",
               r->a.index, (unsigned long long)r->version, why);
    send_staged(self, r, status, why);
}

/* Every chunk is in: parse the GGUF from the staging copy and check it
 * against what the instance serves. */
static void finish_staging(moon_actor_t *self, recv_t *r)
{
    char          why[256] = "";
    moon_status_t status   = moon_model_load_memory(r->stage, r->total, &r->staged_model);

    if (status != MOON_OK) {
        fail(self, r, status, "the new checkpoint is not a usable gguf model");
        return;
    }
    status = moon_model_check_compatible(r->cur_model, r->staged_model, why, sizeof(why));
    if (status != MOON_OK) {
        fail(self, r, status, why);
        return;
    }
    r->staged = 1;
    MOON_INFO("weights %s/%u: version %llu staged: plan after %.3f s, chunks after %.3f s, "
              "checked after %.3f s (%llu bytes got, %llu copied, %llu kept in place; %llu rests "
              "of %.3f s in all while the instance served)",
              r->a.role ? "decode" : "prefill", r->a.index, (unsigned long long)r->version,
              (double)(r->plan_ns - r->offer_ns) * 1e-9, (double)(r->got_ns - r->offer_ns) * 1e-9,
              (double)(moon_now(moon_actor_runtime(self)) - r->offer_ns) * 1e-9,
              (unsigned long long)r->got_bytes, (unsigned long long)r->copied_bytes,
              (unsigned long long)r->kept_bytes, (unsigned long long)r->pace.n_rests,
              (double)r->pace.rest_ns * 1e-9);
    send_staged(self, r, MOON_OK, "");
}

static void maybe_done(moon_actor_t *self, recv_t *r)
{
    if (r->planned && !r->failed && !r->staged && r->n_got == r->n_travel && r->in_flight == 0) {
        r->got_ns = moon_now(moon_actor_runtime(self));
        finish_staging(self, r);
    }
}

/* Issues gets for the chunks announced, up to the window. */
static void pump(moon_actor_t *self, recv_t *r)
{
    uint32_t window =
        moon_weights_pace_window(&r->pace, self, moon_now(moon_actor_runtime(self)), RECV_WINDOW);

    while (r->planned && !r->failed && r->in_flight < window && r->next_ready < r->n_ready) {
        uint32_t      k   = r->ready[r->next_ready++];
        uint64_t      off = (uint64_t)k * r->chunk_bytes;
        moon_status_t status;

        if (r->state[k] != CH_READY) {
            continue;
        }
        status = moon_dist_get(r->a.dist, (char *)r->stage + off, r->stage_reg, r->src, r->src_len,
                               off, chunk_len(r, k), moon_actor_addr(self), (r->push << 32) | k);
        if (status != MOON_OK) {
            fail(self, r, status, "a get from the previous rank of the chain failed");
            return;
        }
        r->state[k] = CH_GETTING;
        r->in_flight++;
        moon_weights_pace_issued(&r->pace, moon_now(moon_actor_runtime(self)));
    }
}

static moon_status_t recv_on_offer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    recv_t                     *r = moon_actor_state(self);
    const moon_weights_offer_t *m = (const void *)msg;
    const uint64_t             *h = MOON_SPAN_PTR(m, m->hashes);
    const void                 *img;
    size_t                      img_len;
    moon_weights_have_t        *q;
    moon_status_t               status = MOON_OK;
    const char                 *why    = "";
    uint32_t                    n_have = 0;

    if (r->push != 0 && m->push != r->push) {
        /* one push at a time: the broadcaster never overlaps them */
        status = MOON_ERR_NO_RESOURCE;
        why    = "a push is already under way here";
    } else if (m->chunk_bytes == 0 || m->total_bytes == 0 ||
               m->hashes.n != (m->total_bytes + m->chunk_bytes - 1) / m->chunk_bytes ||
               m->push >= (1ull << 31)) {
        status = MOON_ERR_INVALID_PARAM;
        why    = "malformed offer";
    } else {
        end_push(r);
        r->offer_ns    = moon_now(moon_actor_runtime(self));
        r->push        = m->push;
        r->version     = m->version;
        r->from        = msg->src;
        r->total       = m->total_bytes;
        r->chunk_bytes = m->chunk_bytes;
        r->flags       = m->flags;
        r->n_chunks    = m->hashes.n;
        r->hashes      = moon_malloc((size_t)r->n_chunks * 8);
        r->state       = moon_calloc(r->n_chunks, 1);
        r->ready       = moon_malloc((size_t)r->n_chunks * 4);
        if (r->hashes == NULL || r->state == NULL || r->ready == NULL) {
            status = MOON_ERR_NO_MEMORY;
        } else {
            memcpy(r->hashes, h, (size_t)r->n_chunks * 8);
            if (r->spare.reg != NULL && r->spare.len >= r->total) {
                r->stage_reg = r->spare.reg;
                r->stage     = r->spare.base;
                r->stage_len = r->spare.len;
                r->stage_had = r->spare;
                memset(&r->spare, 0, sizeof(r->spare));
                r->stage_had.reg = NULL;
            } else {
                status = moon_dist_region_alloc(r->a.dist, r->total, &r->stage, &r->stage_reg);
                r->stage_len = r->total;
            }
        }
        if (status != MOON_OK) {
            why = "the staging copy does not fit in memory";
        }
    }
    moon_model_image(r->cur_model, &img, &img_len);
    if (status == MOON_OK) {
        n_have = (uint32_t)((img_len + r->chunk_bytes - 1) / r->chunk_bytes);
        if (r->cur_hashes == NULL || r->cur_chunk_bytes != r->chunk_bytes ||
            r->cur_n_hashes != n_have) {
            moon_free(r->cur_hashes);
            r->cur_hashes = moon_malloc((size_t)n_have * 8 + 8);
            for (uint32_t k = 0; r->cur_hashes != NULL && k < n_have; k++) {
                uint64_t off     = (uint64_t)k * r->chunk_bytes;
                r->cur_hashes[k] = moon_kv_checksum((const char *)img + off,
                                                    MOON_MIN(r->chunk_bytes, img_len - off));
            }
            r->cur_n_hashes    = r->cur_hashes != NULL ? n_have : 0;
            r->cur_chunk_bytes = r->chunk_bytes;
        }
        if (r->cur_hashes == NULL) {
            status = MOON_ERR_NO_MEMORY;
            why    = "no memory";
            n_have = 0;
        }
    }
    q = moon_msg_new(MOON_MSG_WEIGHTS_HAVE,
                     (size_t)n_have * 8 + strlen(why) + 2 +
                         (r->stage_reg ? moon_dist_region_desc_bytes(r->stage_reg) : 0) + 16);
    if (q == NULL) {
        end_push(r);
        return MOON_ERR_NO_MEMORY;
    }
    q->push    = m->push;
    q->status  = status;
    q->version = r->cur_version;
    if (status == MOON_OK) {
        uint64_t *hv = moon_msg_span_alloc(q, &q->hashes, n_have, 8, 0);
        if (hv != NULL) {
            memcpy(hv, r->cur_hashes, (size_t)n_have * 8);
        }
        status = moon_dist_region_desc(r->stage_reg, q, &q->desc);
    }
    moon_msg_set_str(q, &q->message, why);
    if (status != MOON_OK && r->push == m->push) {
        MOON_ERROR("weights %s/%u: offer of version %llu refused: %s (%s)",
                   r->a.role ? "decode" : "prefill", r->a.index, (unsigned long long)m->version,
                   why, moon_status_str(status));
        q->status = status;
        end_push(r);
    }
    moon_tell(self, msg->src, &q->hdr);
    return MOON_OK;
}

static moon_status_t recv_on_plan(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    recv_t                    *r = moon_actor_state(self);
    const moon_weights_plan_t *m = (const void *)msg;
    const uint32_t            *t = MOON_SPAN_PTR(m, m->travel);
    const void                *img;
    size_t                     img_len;

    if (r->push == 0 || m->push != r->push || r->planned) {
        return MOON_OK;
    }
    r->src = moon_malloc(m->src.n + 1);
    if (r->src == NULL) {
        fail(self, r, MOON_ERR_NO_MEMORY, "no memory");
        return MOON_OK;
    }
    memcpy(r->src, MOON_SPAN_PTR(m, m->src), m->src.n);
    r->src_len = m->src.n;
    r->next    = m->next;
    for (uint32_t i = 0; i < m->travel.n; i++) {
        if (t[i] >= r->n_chunks) {
            fail(self, r, MOON_ERR_INVALID_PARAM, "malformed plan");
            return MOON_OK;
        }
        if (r->state[t[i]] == CH_LOCAL) {
            r->state[t[i]] = CH_TRAVEL;
            r->n_travel++;
        }
    }
    /* CHUNK notices that came before the plan */
    for (uint32_t i = 0; i < r->n_ready; i++) {
        if (r->state[r->ready[i]] == CH_TRAVEL) {
            r->state[r->ready[i]] = CH_READY;
        }
    }
    /* what this rank holds already: copied, and checked like the rest */
    moon_model_image(r->cur_model, &img, &img_len);
    for (uint32_t k = 0; k < r->n_chunks; k++) {
        uint64_t off = (uint64_t)k * r->chunk_bytes, len = chunk_len(r, k);
        if (r->state[k] != CH_LOCAL) {
            continue;
        }
        if (off + len > img_len) {
            fail(self, r, MOON_ERR_INVALID_PARAM, "the plan skips a chunk this rank does not hold");
            return MOON_OK;
        }
        /* its XXH3 is the one this rank told in HAVE, of these bytes: the
         * broadcaster kept it home because it equals the offer's */
        if (stage_holds(r, k)) {
            r->kept_bytes += len;
            continue;
        }
        if (r->cur_hashes == NULL || k >= r->cur_n_hashes || r->cur_hashes[k] != r->hashes[k]) {
            fail(self, r, MOON_ERR_CORRUPT, "a chunk kept from the old weights differs");
            return MOON_OK;
        }
        memcpy((char *)r->stage + off, (const char *)img + off, len);
        r->copied_bytes += len;
    }
    r->planned = 1;
    r->plan_ns = moon_now(moon_actor_runtime(self));
    pump(self, r);
    maybe_done(self, r);
    return MOON_OK;
}

static moon_status_t recv_on_chunk(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    recv_t                     *r = moon_actor_state(self);
    const moon_weights_chunk_t *m = (const void *)msg;

    if (r->push == 0 || m->push != r->push || m->chunk >= r->n_chunks || r->failed ||
        r->n_ready == r->n_chunks) {
        return MOON_OK;
    }
    r->ready[r->n_ready++] = m->chunk;
    if (r->state[m->chunk] == CH_TRAVEL) {
        r->state[m->chunk] = CH_READY;
    }
    pump(self, r);
    return MOON_OK;
}

static moon_status_t recv_on_bulk_done(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    recv_t                      *r = moon_actor_state(self);
    const moon_dist_bulk_done_t *m = (const void *)msg;
    uint32_t                     k = (uint32_t)(m->cookie & 0xffffffffu);
    uint64_t                     off, len;

    if (r->push == 0 || (m->cookie >> 32) != r->push || k >= r->n_chunks ||
        r->state[k] != CH_GETTING) {
        return MOON_OK; /* an aborted push's late completion */
    }
    r->in_flight--;
    off = (uint64_t)k * r->chunk_bytes;
    len = chunk_len(r, k);
    if (m->status != MOON_OK) {
        fail(self, r, m->status, "a chunk could not be got from the previous rank of the chain");
        return MOON_OK;
    }
    if (moon_kv_checksum((char *)r->stage + off, len) != r->hashes[k]) {
        char why[96];
        snprintf(why, sizeof(why), "chunk %u is corrupt: its xxh3 checksum does not match", k);
        fail(self, r, MOON_ERR_CORRUPT, why);
        return MOON_OK;
    }
    r->state[k] = CH_HAVE;
    r->n_got++;
    moon_weights_pace_done(&r->pace, moon_now(moon_actor_runtime(self)));
    r->got_bytes += len;
    if ((r->flags & MOON_WEIGHTS_F_TEST_KILL_LAST) && r->next == MOON_ADDR_NONE) {
        MOON_WARN("weights %s/%u: test hook: this rank kills itself midway through the push",
                  r->a.role ? "decode" : "prefill", r->a.index);
        raise(SIGKILL);
    }
    if (r->next != MOON_ADDR_NONE) {
        moon_weights_chunk_t *c = moon_msg_new(MOON_MSG_WEIGHTS_CHUNK, 0);
        if (c != NULL) {
            c->push  = r->push;
            c->chunk = k;
            moon_tell(self, r->next, &c->hdr);
        }
    }
    pump(self, r);
    maybe_done(self, r);
    return MOON_OK;
}

static moon_status_t recv_on_commit(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    recv_t                      *r = moon_actor_state(self);
    const moon_weights_commit_t *m = (const void *)msg;

    if (m->commit == 0) {
        if (r->push != 0 && m->push == r->push) {
            end_push(r);
        } else if (r->prev_model != NULL && r->committed_push == m->push) {
            /* rolled back after the install: the instance drops it; the
             * weights held before serve again */
            moon_weights_retire_t *q = moon_msg_new(MOON_MSG_WEIGHTS_RETIRE, 0);
            if (q != NULL) {
                q->version = r->cur_version;
                moon_tell(self, r->a.instance, &q->hdr);
            }
            r->cur_model   = r->prev_model;
            r->cur_version = r->prev_version;
            r->prev_model  = NULL;
            moon_free(r->cur_hashes);
            r->cur_hashes = NULL;
        }
        return MOON_OK;
    }
    if (r->push == 0 || m->push != r->push || !r->staged) {
        return MOON_OK;
    }
    moon_weights_install_t *q = moon_msg_new(MOON_MSG_WEIGHTS_INSTALL, 0);
    if (q == NULL) {
        fail(self, r, MOON_ERR_NO_MEMORY, "no memory");
        return MOON_OK;
    }
    q->version    = r->version;
    q->model      = (uint64_t)(uintptr_t)r->staged_model;
    q->region     = (uint64_t)(uintptr_t)r->stage_reg;
    q->ack_to     = r->from;
    q->recycle_to = moon_actor_addr(self);
    if (moon_send(self, r->a.instance, &q->hdr) != MOON_OK) {
        moon_msg_release(&q->hdr);
        fail(self, r, MOON_ERR_NO_ACTOR, "the instance is gone");
        return MOON_OK;
    }
    /* the instance owns them now (it frees them on a failed install too, and
     * hands the region back when the version retires) */
    for (uint32_t i = 0; i < RECV_HANDED; i++) {
        if (r->handed[i].reg == NULL) {
            held_t *h = &r->handed[i];
            *h        = (held_t){.reg         = r->stage_reg,
                                 .base        = r->stage,
                                 .len         = r->stage_len,
                                 .hashes      = moon_malloc((size_t)r->n_chunks * 8),
                                 .chunk_bytes = r->chunk_bytes,
                                 .total       = r->total};
            if (h->hashes != NULL) {
                memcpy(h->hashes, r->hashes, (size_t)r->n_chunks * 8);
                h->n = r->n_chunks;
            }
            break;
        }
    }
    /* every chunk of the staged image was checked against the offer */
    moon_free(r->cur_hashes);
    r->cur_hashes      = r->hashes;
    r->cur_n_hashes    = r->n_chunks;
    r->cur_chunk_bytes = r->chunk_bytes;
    r->hashes          = NULL;
    r->prev_model      = r->cur_model;
    r->prev_version    = r->cur_version;
    r->cur_model       = r->staged_model;
    r->cur_version     = r->version;
    r->committed_push  = r->push;
    r->staged_model    = NULL;
    r->stage_reg       = NULL;
    end_push(r);
    return MOON_OK;
}

/* The instance retired a version: its region comes back for the next push. */
static moon_status_t recv_on_recycle(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    recv_t                      *r = moon_actor_state(self);
    const moon_weights_retire_t *m = (const void *)msg;

    if (m->region == 0) {
        return MOON_OK;
    }
    if (moon_addr_rank(msg->src) != moon_addr_rank(moon_actor_addr(self))) {
        MOON_ERROR("weights: a region handed back from another rank ignored");
        return MOON_OK;
    }
    for (uint32_t i = 0; i < RECV_HANDED; i++) {
        if (r->handed[i].reg != NULL && (uint64_t)(uintptr_t)r->handed[i].reg == m->region) {
            keep_spare(r, &r->handed[i]);
            return MOON_OK;
        }
    }
    /* not one of ours (its table was full): free it all the same */
    moon_dist_region_deregister(r->a.dist, (moon_dist_region_t *)(uintptr_t)m->region);
    return MOON_OK;
}

/* A rest ended: the next chunks go. */
static moon_status_t recv_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    recv_t *r = moon_actor_state(self);

    if (moon_weights_pace_on_timer(&r->pace, msg)) {
        pump(self, r);
    }
    return MOON_OK;
}

static moon_status_t recv_init(moon_actor_t *self, const void *args)
{
    recv_t               *r = moon_actor_state(self);
    moon_weights_hello_t *m;

    r->a         = *(const moon_weights_recv_args_t *)args;
    r->cur_model = r->a.model;
    moon_weights_pace_init(&r->pace, r->a.busy_ns, r->a.busy_share);
    if (r->a.dist == NULL || r->a.model == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    m = moon_msg_new(MOON_MSG_WEIGHTS_HELLO, 0);
    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->role     = r->a.role;
    m->instance = r->a.index;
    m->version  = 0;
    return moon_tell(self, r->a.bcast, &m->hdr) == MOON_OK ? MOON_OK : MOON_OK;
}

static void recv_fini(moon_actor_t *self)
{
    recv_t *r = moon_actor_state(self);

    end_push(r);
    moon_free(r->cur_hashes);
    held_free(r, &r->spare);
    for (uint32_t i = 0; i < RECV_HANDED; i++) {
        /* the instance frees the regions themselves */
        moon_free(r->handed[i].hashes);
    }
}

const moon_actor_ops_t moon_weights_recv_ops = {
    .name        = "weights-recv",
    .state_bytes = sizeof(recv_t),
    .init        = recv_init,
    .fini        = recv_fini,
    .on_msg =
        {
            [MOON_MSG_WEIGHTS_OFFER]  = recv_on_offer,
            [MOON_MSG_WEIGHTS_PLAN]   = recv_on_plan,
            [MOON_MSG_WEIGHTS_CHUNK]  = recv_on_chunk,
            [MOON_MSG_WEIGHTS_COMMIT] = recv_on_commit,
            [MOON_MSG_WEIGHTS_RETIRE] = recv_on_recycle,
            [MOON_MSG_DIST_BULK_DONE] = recv_on_bulk_done,
            [MOON_MSG_SYS_TIMER]      = recv_on_timer,
        },
};
