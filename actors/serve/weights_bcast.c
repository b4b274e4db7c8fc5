/* actors/weights_bcast.c - the weight-sync broadcaster (weights_bcast.h).
 * A push goes through phases OFFER (receivers open staging copies and tell
 * the hashes they hold), STREAM (the chunks no receiver holds travel down
 * the chain, receiver 0 getting them from the broadcaster's region, each
 * next one from its predecessor's as soon as that one holds it), INSTALL
 * (every instance builds an engine for the new version beside the old one)
 * and FLIP (the conductor stamps new requests with it). A failure or the
 * deadline before FLIP aborts the push everywhere: nothing serves the new
 * version until every instance holds it, so none is left half-switched. */
#define _GNU_SOURCE /* MAP_POPULATE */
#include "weights_bcast.h"

#include "weights_pace.h"

#include "moonlet/alloc.h"
#include "moonlet/kv_key.h"
#include "moonlet/log.h"
#include "moonlet/sys_msgs.h"
#include "moonlet/weights_msgs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define BCAST_MAX_RECV 128u

enum { PH_IDLE = 0, PH_OFFER, PH_STREAM, PH_INSTALL, PH_FLIP, PH_FETCH, PH_READ };

/* The checkpoint is read in turns of at most this many bytes and chunks
 * (at least one chunk): the broadcaster shares its rank with the conductor,
 * which must go on routing requests while a push reads and hashes
 * gigabytes. */
#define BCAST_READ_TURN_BYTES ((uint64_t)4 << 20)
#define BCAST_READ_TURN_CHUNKS 4u
#define BCAST_READ_COOKIE (1ull << 63) /* a timer cookie: the next turn of reading */

typedef struct {
    moon_addr_t addr;
    uint32_t    role, index;
    uint64_t    version;
    int         answered, staged, installed;
    uint64_t   *have; /* hashes it holds (HAVE) */
    uint32_t    n_have;
    void       *desc; /* its staging region */
    uint32_t    desc_len;
} brecv_t;

typedef struct {
    moon_weights_bcast_args_t a;
    brecv_t                   recv[BCAST_MAX_RECV];
    uint32_t                  n_recv;
    uint64_t                  serving; /* version the conductor stamps */
    /* the push under way */
    uint32_t            phase;
    uint64_t            push, version, next_push;
    moon_addr_t         client;
    uint64_t            client_req;
    uint32_t            flags;
    void               *src;
    moon_dist_region_t *src_reg; /* kept from push to push while checkpoints fit */
    uint64_t            src_cap;
    /* what src holds: the XXH3 of each chunk of the last checkpoint read
     * into it (NULL: not known). A file push compares the new file's chunks
     * with them and copies only those that differ. */
    uint64_t *src_hashes;
    uint32_t  src_n;
    uint64_t  src_chunk, src_total;
    /* src holds generation src_gen of the trainer's image src_image (0: not
     * an image's, or not known): that image's next push can send only what
     * changed since */
    uint64_t src_image, src_gen;
    /* the trainer's image being got (PH_FETCH): its name and generation,
     * and the (offset, length) pairs got when only they changed */
    uint64_t  image, image_gen;
    uint64_t *dirty;
    uint32_t  n_dirty;
    uint64_t  read_bytes; /* of the checkpoint, this push */
    /* the file being read (PH_READ): mapped, next chunk, src's hashes usable */
    const char         *map;
    uint32_t            read_next;
    int                 read_known;
    char                path[512];
    uint64_t            total;
    uint32_t            n_chunks, n_travel;
    uint64_t           *hashes;
    uint8_t            *travel;
    uint32_t            n_answered, n_staged, n_installed;
    uint64_t            start_ns, staged_ns, timer;
    uint32_t            n_pushes, n_failed;
    char                last_error[256];
    uint32_t            n_ok;                           /* pushes that went through */
    uint64_t            recent[MOON_WEIGHTS_RECENT][2]; /* by n_ok: stage, switch ns */
    moon_weights_pace_t pace;                           /* reading while the cluster serves */
} bcast_t;

static uint64_t chunk_len(const bcast_t *b, uint32_t k)
{
    uint64_t off = (uint64_t)k * b->a.chunk_bytes;
    return MOON_MIN(b->a.chunk_bytes, b->total - off);
}

static void reply(moon_actor_t *self, bcast_t *b, moon_status_t status, const char *why)
{
    moon_weights_push_reply_t *m   = moon_msg_new(MOON_MSG_WEIGHTS_PUSH_REPLY, strlen(why) + 2);
    uint64_t                   now = moon_now(moon_actor_runtime(self));

    if (m == NULL || b->client == MOON_ADDR_NONE) {
        moon_msg_release(m ? &m->hdr : NULL);
        return;
    }
    m->req         = b->client_req;
    m->status      = status;
    m->version     = status == MOON_OK ? b->version : b->serving;
    m->old_version = b->serving;
    m->total_bytes = b->total;
    m->n_chunks    = b->n_chunks;
    m->n_moved     = b->n_travel;
    for (uint32_t k = 0; b->travel != NULL && k < b->n_chunks; k++) {
        if (b->travel[k]) {
            m->moved_bytes += chunk_len(b, k);
        }
    }
    m->skipped_bytes = b->total - m->moved_bytes;
    m->read_bytes    = b->read_bytes;
    m->n_instances   = b->n_recv;
    m->stage_s       = b->staged_ns ? (double)(b->staged_ns - b->start_ns) * 1e-9 : 0.0;
    m->switch_s      = b->staged_ns ? (double)(now - b->staged_ns) * 1e-9 : 0.0;
    moon_msg_set_str(m, &m->message, why);
    moon_tell(self, b->client, &m->hdr);
}

static void end_push(moon_actor_t *self, bcast_t *b)
{
    if (b->timer != 0) {
        moon_timer_cancel(self, b->timer);
    }
    for (uint32_t i = 0; i < b->n_recv; i++) {
        brecv_t *r = &b->recv[i];
        moon_free(r->have);
        moon_free(r->desc);
        r->have     = NULL;
        r->desc     = NULL;
        r->answered = r->staged = r->installed = 0;
    }
    if (b->map != NULL) {
        munmap((void *)b->map, b->total);
        b->map = NULL;
    }
    moon_free(b->hashes);
    moon_free(b->travel);
    moon_free(b->dirty);
    b->hashes     = NULL;
    b->travel     = NULL;
    b->dirty      = NULL;
    b->n_dirty    = 0;
    b->timer      = 0;
    b->phase      = PH_IDLE;
    b->client     = MOON_ADDR_NONE;
    b->n_answered = b->n_staged = b->n_installed = 0;
}

/* Rolls the push back everywhere (the conductor never heard of it) and
 * answers the client with the cause. */
static void fail(moon_actor_t *self, bcast_t *b, moon_status_t status, const char *why)
{
    MOON_ERROR("weights: push of version %llu failed: %s (%s); version %llu keeps serving",
               (unsigned long long)b->version, why, moon_status_str(status),
               (unsigned long long)b->serving);
    snprintf(b->last_error, sizeof(b->last_error), "%s", why);
    b->n_failed++;
    for (uint32_t i = 0; b->phase != PH_IDLE && i < b->n_recv; i++) {
        moon_weights_commit_t *c = moon_msg_new(MOON_MSG_WEIGHTS_COMMIT, 0);
        if (c != NULL) {
            c->push   = b->push;
            c->commit = 0;
            moon_tell(self, b->recv[i].addr, &c->hdr);
        }
    }
    reply(self, b, status, why);
    end_push(self, b);
}

/* src's content is not known any more (about to change, or changed). */
static void forget_source(bcast_t *b)
{
    moon_free(b->src_hashes);
    b->src_hashes = NULL;
    b->src_n      = 0;
    b->src_image  = 0;
    b->src_gen    = 0;
}

/* b->hashes describe src from now on (it holds the checkpoint offered). */
static void remember_source(bcast_t *b)
{
    forget_source(b);
    b->src_hashes = moon_malloc((size_t)b->n_chunks * 8 + 8);
    if (b->src_hashes != NULL) {
        memcpy(b->src_hashes, b->hashes, (size_t)b->n_chunks * 8);
        b->src_n     = b->n_chunks;
        b->src_chunk = b->a.chunk_bytes;
        b->src_total = b->total;
    }
}

/* A registered region of b->total bytes for the checkpoint (the one kept
 * from the last push when it fits: its pages are in already). */
static moon_status_t reserve_source(bcast_t *b, char *why, size_t why_len)
{
    moon_status_t status = MOON_OK;

    if (b->src_reg == NULL || b->src_cap < b->total) {
        forget_source(b);
        moon_dist_region_deregister(b->a.dist, b->src_reg);
        b->src_reg = NULL;
        b->src_cap = 0;
        status     = moon_dist_region_alloc(b->a.dist, b->total, &b->src, &b->src_reg);
        b->src_cap = status == MOON_OK ? b->total : 0;
    }
    if (status != MOON_OK) {
        snprintf(why, why_len, "no memory for the %llu-byte checkpoint",
                 (unsigned long long)b->total);
    }
    return status;
}

/* The checkpoint in b->src parses and matches the deployment's model. */
static moon_status_t check_source(bcast_t *b, const char *what, char *why, size_t why_len)
{
    moon_model_t *model = NULL;
    moon_status_t status;

    status = moon_model_load_memory(b->src, b->total, &model);
    if (status != MOON_OK) {
        snprintf(why, why_len, "%s is not a usable gguf model", what);
        return status;
    }
    status = moon_model_check_compatible(b->a.model, model, why, why_len);
    moon_model_destroy(model);
    return status;
}

/* Maps the checkpoint to read it once into a registered region (in turns:
 * read_turn). Mapped, not read(): each chunk is hashed where the page cache
 * holds it, and only the chunks that differ from what the region holds (the
 * last push's) are copied; after one RL step that is a few percent. */
static moon_status_t open_source(bcast_t *b, const char *path, char *why, size_t why_len)
{
    struct stat   st;
    int           fd = open(path, O_RDONLY | O_CLOEXEC);
    moon_status_t status;
    void         *map;

    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        snprintf(why, why_len, "cannot read %s: %s", path, fd < 0 ? strerror(errno) : "not a file");
        if (fd >= 0) {
            close(fd);
        }
        return fd < 0 && errno == ENOENT ? MOON_ERR_NOT_FOUND : MOON_ERR_IO;
    }
    b->total = (uint64_t)st.st_size;
    status   = reserve_source(b, why, why_len);
    map      = status == MOON_OK ? mmap(NULL, b->total, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (status != MOON_OK) {
        return status;
    }
    if (map == MAP_FAILED) {
        snprintf(why, why_len, "cannot map %s: %s", path, strerror(errno));
        return MOON_ERR_IO;
    }
    b->map        = map;
    b->read_bytes = b->total;
    b->n_chunks   = (uint32_t)((b->total + b->a.chunk_bytes - 1) / b->a.chunk_bytes);
    b->hashes     = moon_malloc((size_t)b->n_chunks * 8 + 8);
    if (b->hashes == NULL) {
        snprintf(why, why_len, "no memory");
        return MOON_ERR_NO_MEMORY;
    }
    b->read_next  = 0;
    b->read_known = b->src_hashes != NULL && b->src_chunk == b->a.chunk_bytes &&
                    b->src_total == b->total && b->src_n == b->n_chunks;
    if (!b->read_known) {
        forget_source(b); /* src is overwritten whole */
    }
    snprintf(b->path, sizeof(b->path), "%s", path);
    return MOON_OK;
}

static void offer(moon_actor_t *self, bcast_t *b);

/* One turn of reading the checkpoint; the next is a timer away (other
 * actors of the rank run between). The last checks it and offers it. */
static void read_turn(moon_actor_t *self, bcast_t *b)
{
    uint64_t      done = 0, t0 = moon_now(moon_actor_runtime(self)), now;
    uint32_t      n = 0;
    char          why[256];
    moon_status_t status;

    while (b->read_next < b->n_chunks && done < BCAST_READ_TURN_BYTES &&
           n++ < BCAST_READ_TURN_CHUNKS) {
        uint32_t k   = b->read_next++;
        uint64_t off = (uint64_t)k * b->a.chunk_bytes, len = chunk_len(b, k);
        b->hashes[k] = moon_kv_checksum(b->map + off, len);
        if (!b->read_known || b->src_hashes[k] != b->hashes[k]) {
            memcpy((char *)b->src + off, b->map + off, len);
            if (b->read_known) {
                b->src_hashes[k] = b->hashes[k]; /* they go on saying what src holds */
            }
        }
        done += len;
    }
    if (b->read_next < b->n_chunks) {
        uint64_t timer;
        now = moon_now(moon_actor_runtime(self));
        if (moon_timer_start(self, moon_weights_pace_rest(&b->pace, now, now - t0), 0,
                             BCAST_READ_COOKIE | b->push, &timer) != MOON_OK) {
            fail(self, b, MOON_ERR_NO_RESOURCE, "no timer to go on reading the checkpoint");
        }
        return;
    }
    munmap((void *)b->map, b->total);
    b->map = NULL;
    remember_source(b);
    status = check_source(b, b->path, why, sizeof(why));
    if (status != MOON_OK) {
        fail(self, b, status, why);
        return;
    }
    offer(self, b);
}

/* src holds the generation of m's image that m's changes are counted from:
 * only the changed bytes need to be got. */
static int image_delta_applies(const bcast_t *b, const moon_weights_push_t *m)
{
    return m->image != 0 && m->base != 0 && b->src_image == m->image && b->src_gen == m->base &&
           b->src_hashes != NULL && b->src_total == b->total && b->src_chunk == b->a.chunk_bytes &&
           m->dirty.n % 2 == 0 && m->dirty.n / 2 <= MOON_DIST_IOV_MAX;
}

/* Gets the changed bytes of the trainer's image into src (the rest is
 * there already); b->hashes start as src's and are redone for the chunks
 * they touch when the bytes are in (bcast_on_bulk_done). */
static moon_status_t fetch_image_changes(moon_actor_t *self, bcast_t *b,
                                         const moon_weights_push_t *m, char *why, size_t why_len)
{
    const uint64_t  *d = MOON_SPAN_PTR(m, m->dirty);
    uint32_t         n = m->dirty.n / 2;
    moon_dist_iov_t *iov;
    moon_status_t    status;

    for (uint32_t i = 0; i < n; i++) {
        if (d[2 * i + 1] == 0 || d[2 * i] > b->total || d[2 * i + 1] > b->total - d[2 * i]) {
            snprintf(why, why_len, "malformed changes: bytes %llu+%llu of a %llu-byte image",
                     (unsigned long long)d[2 * i], (unsigned long long)d[2 * i + 1],
                     (unsigned long long)b->total);
            return MOON_ERR_INVALID_PARAM;
        }
    }
    b->n_chunks = b->src_n;
    b->hashes   = moon_malloc((size_t)b->n_chunks * 8 + 8);
    b->dirty    = moon_malloc((size_t)n * 16 + 16);
    iov         = moon_malloc((size_t)n * sizeof(*iov) + 1);
    if (b->hashes == NULL || b->dirty == NULL || iov == NULL) {
        moon_free(iov);
        snprintf(why, why_len, "no memory");
        return MOON_ERR_NO_MEMORY;
    }
    memcpy(b->hashes, b->src_hashes, (size_t)b->n_chunks * 8);
    memcpy(b->dirty, d, (size_t)n * 16);
    b->n_dirty = n;
    for (uint32_t i = 0; i < n; i++) {
        iov[i] = (moon_dist_iov_t){
            .local = (char *)b->src + d[2 * i], .remote_off = d[2 * i], .len = d[2 * i + 1]};
        b->read_bytes += d[2 * i + 1];
    }
    forget_source(b); /* src changes from here on */
    status = n == 0 ? MOON_OK
                    : moon_dist_getv(b->a.dist, iov, n, b->src_reg, MOON_SPAN_PTR(m, m->src),
                                     m->src.n, moon_actor_addr(self), b->push);
    moon_free(iov);
    return status;
}

static moon_status_t image_fetched(moon_actor_t *self, bcast_t *b);

/* The trainer's image (m->src) into src: what changed since the generation
 * src holds, or all of it. */
static moon_status_t fetch_image(moon_actor_t *self, bcast_t *b, const moon_weights_push_t *m,
                                 char *why, size_t why_len)
{
    moon_status_t status;

    b->image     = m->image;
    b->image_gen = m->gen;
    b->phase     = PH_FETCH;
    if (image_delta_applies(b, m)) {
        status = fetch_image_changes(self, b, m, why, why_len);
        if (status == MOON_OK && b->n_dirty == 0) {
            return image_fetched(self, b); /* nothing changed */
        }
    } else {
        forget_source(b);
        b->read_bytes = b->total;
        status = moon_dist_get(b->a.dist, b->src, b->src_reg, MOON_SPAN_PTR(m, m->src), m->src.n, 0,
                               b->total, moon_actor_addr(self), b->push);
    }
    if (status != MOON_OK && why[0] == '\0') {
        snprintf(why, why_len, "the trainer's image could not be read: %s",
                 moon_status_str(status));
    }
    return status;
}

static moon_status_t bcast_on_push(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bcast_t                   *b        = moon_actor_state(self);
    const moon_weights_push_t *m        = (const void *)msg;
    char                       why[256] = "";
    moon_status_t              status;

    if (b->phase != PH_IDLE) {
        /* answered here: the push under way goes on untouched */
        moon_weights_push_reply_t *r;
        snprintf(why, sizeof(why), "a push of version %llu is already under way",
                 (unsigned long long)b->version);
        MOON_WARN("weights: push refused: %s", why);
        r = moon_msg_new(MOON_MSG_WEIGHTS_PUSH_REPLY, strlen(why) + 2);
        if (r != NULL) {
            r->req     = m->req;
            r->status  = MOON_ERR_NO_RESOURCE;
            r->version = b->serving;
            moon_msg_set_str(r, &r->message, why);
            moon_tell(self, msg->src, &r->hdr);
        }
        return MOON_OK;
    }
    b->client     = msg->src;
    b->client_req = m->req;
    b->flags      = m->flags;
    b->push       = ++b->next_push;
    b->version    = m->version ? m->version : b->serving + 1;
    b->start_ns   = moon_now(moon_actor_runtime(self));
    b->staged_ns  = 0;
    b->total      = 0;
    b->n_chunks   = 0;
    b->n_travel   = 0;
    b->read_bytes = 0;
    b->n_pushes++;
    if (b->version <= b->serving) {
        snprintf(why, sizeof(why), "version %llu is not above the serving version %llu",
                 (unsigned long long)b->version, (unsigned long long)b->serving);
        fail(self, b, MOON_ERR_INVALID_PARAM, why);
        return MOON_OK;
    }
    if (b->n_recv < b->a.n_receivers) {
        fail(self, b, MOON_ERR_NO_RESOURCE, "not every instance is up yet");
        return MOON_OK;
    }
    moon_timer_start(self, b->a.timeout_ns, 0, b->push, &b->timer);
    if (m->src.n > 0) {
        /* a trainer's image: got one-sided, then offered like a file */
        b->total = m->src_bytes;
        status   = b->total > 0 ? reserve_source(b, why, sizeof(why)) : MOON_ERR_INVALID_PARAM;
        if (status == MOON_OK) {
            status = fetch_image(self, b, m, why, sizeof(why));
        }
        if (status != MOON_OK) {
            fail(self, b, status, why[0] ? why : "empty image");
        }
        return MOON_OK;
    }
    status = open_source(b, m->path.n ? MOON_SPAN_PTR(m, m->path) : "", why, sizeof(why));
    if (status != MOON_OK) {
        fail(self, b, status, why);
        return MOON_OK;
    }
    b->phase = PH_READ;
    read_turn(self, b);
    return MOON_OK;
}

/* The checkpoint is in b->src and checked: hashes, then OFFER to all. */
static void offer(moon_actor_t *self, bcast_t *b)
{
    if (b->hashes == NULL) {
        /* a trainer's image, got whole: hashed here */
        b->n_chunks = (uint32_t)((b->total + b->a.chunk_bytes - 1) / b->a.chunk_bytes);
        b->hashes   = moon_malloc((size_t)b->n_chunks * 8 + 8);
        for (uint32_t k = 0; b->hashes != NULL && k < b->n_chunks; k++) {
            b->hashes[k] =
                moon_kv_checksum((char *)b->src + (uint64_t)k * b->a.chunk_bytes, chunk_len(b, k));
        }
        remember_source(b);
        b->src_image = b->image;
        b->src_gen   = b->image_gen;
    }
    b->travel = moon_calloc(b->n_chunks, 1);
    if (b->hashes == NULL || b->travel == NULL) {
        fail(self, b, MOON_ERR_NO_MEMORY, "no memory");
        return;
    }
    b->phase = PH_OFFER;
    for (uint32_t i = 0; i < b->n_recv; i++) {
        moon_weights_offer_t *o = moon_msg_new(MOON_MSG_WEIGHTS_OFFER, (size_t)b->n_chunks * 8 + 8);
        if (o == NULL) {
            fail(self, b, MOON_ERR_NO_MEMORY, "no memory");
            return;
        }
        o->push        = b->push;
        o->version     = b->version;
        o->total_bytes = b->total;
        o->chunk_bytes = b->a.chunk_bytes;
        o->flags       = b->flags;
        memcpy(moon_msg_span_alloc(o, &o->hashes, b->n_chunks, 8, 0), b->hashes,
               (size_t)b->n_chunks * 8);
        moon_tell(self, b->recv[i].addr, &o->hdr);
    }
    MOON_INFO("weights: push of version %llu: %llu bytes in %u chunks to %u instances (read and "
              "checked in %.3f s)",
              (unsigned long long)b->version, (unsigned long long)b->total, b->n_chunks, b->n_recv,
              (double)(moon_now(moon_actor_runtime(self)) - b->start_ns) * 1e-9);
}

/* The trainer's image is here: checked like a file, then offered. */
static moon_status_t bcast_on_bulk_done(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bcast_t                     *b        = moon_actor_state(self);
    const moon_dist_bulk_done_t *m        = (const void *)msg;
    char                         why[256] = "";

    if (b->phase != PH_FETCH || m->cookie != b->push) {
        return MOON_OK; /* a failed push's late completion */
    }
    if (m->status != MOON_OK) {
        snprintf(why, sizeof(why), "the trainer's image could not be read (rank %u): %s",
                 moon_addr_rank(b->client), moon_status_str(m->status));
        fail(self, b, m->status, why);
        return MOON_OK;
    }
    return image_fetched(self, b);
}

/* The trainer's image is in src: the chunks its changes touched hashed
 * again (a whole image is hashed by offer), checked like a file, offered. */
static moon_status_t image_fetched(moon_actor_t *self, bcast_t *b)
{
    char          why[256] = "";
    moon_status_t status;

    if (b->dirty != NULL) {
        for (uint32_t i = 0; i < b->n_dirty; i++) {
            uint64_t first = b->dirty[2 * i] / b->a.chunk_bytes;
            uint64_t last  = (b->dirty[2 * i] + b->dirty[2 * i + 1] - 1) / b->a.chunk_bytes;
            for (uint64_t k = first; k <= last; k++) {
                b->hashes[k] = moon_kv_checksum((char *)b->src + k * b->a.chunk_bytes,
                                                chunk_len(b, (uint32_t)k));
            }
        }
        remember_source(b);
        b->src_image = b->image;
        b->src_gen   = b->image_gen;
    }
    status = check_source(b, "the trainer's image", why, sizeof(why));
    if (status != MOON_OK) {
        fail(self, b, status, why);
        return MOON_OK;
    }
    offer(self, b);
    return MOON_OK;
}

static brecv_t *recv_of(bcast_t *b, moon_addr_t a)
{
    for (uint32_t i = 0; i < b->n_recv; i++) {
        if (b->recv[i].addr == a) {
            return &b->recv[i];
        }
    }
    return NULL;
}

/* Every receiver answered: the chunks some receiver lacks travel. */
static void start_stream(moon_actor_t *self, bcast_t *b)
{
    size_t   my_len = moon_dist_region_desc_bytes(b->src_reg);
    uint32_t first  = UINT32_MAX;

    for (uint32_t k = 0; k < b->n_chunks; k++) {
        for (uint32_t i = 0; i < b->n_recv && !b->travel[k]; i++) {
            const brecv_t *r = &b->recv[i];
            b->travel[k] =
                (b->flags & MOON_WEIGHTS_F_FULL) || k >= r->n_have || r->have[k] != b->hashes[k];
        }
        if (b->travel[k]) {
            b->n_travel++;
            first = MOON_MIN(first, k);
        }
    }
    if ((b->flags & MOON_WEIGHTS_F_TEST_CORRUPT) && first != UINT32_MAX) {
        /* the test hook: damage on the way, after the checksum was taken */
        ((uint8_t *)b->src)[(uint64_t)first * b->a.chunk_bytes] ^= 0x5a;
        forget_source(b);
    }
    b->phase = PH_STREAM;
    /* the last receiver first: a plan is there before its first CHUNK */
    for (uint32_t i = b->n_recv; i-- > 0;) {
        const brecv_t       *r    = &b->recv[i];
        size_t               slen = i == 0 ? my_len : b->recv[i - 1].desc_len;
        moon_weights_plan_t *p =
            moon_msg_new(MOON_MSG_WEIGHTS_PLAN, (size_t)b->n_travel * 4 + slen + 16);
        uint32_t *t;
        if (p == NULL) {
            fail(self, b, MOON_ERR_NO_MEMORY, "no memory");
            return;
        }
        p->push = b->push;
        p->next = i + 1 < b->n_recv ? b->recv[i + 1].addr : MOON_ADDR_NONE;
        t       = moon_msg_span_alloc(p, &p->travel, b->n_travel, 4, 0);
        for (uint32_t k = 0, j = 0; k < b->n_chunks; k++) {
            if (b->travel[k]) {
                t[j++] = k;
            }
        }
        if (i == 0) {
            moon_dist_region_desc(b->src_reg, p, &p->src);
        } else {
            memcpy(moon_msg_span_alloc(p, &p->src, b->recv[i - 1].desc_len, 1, 0),
                   b->recv[i - 1].desc, b->recv[i - 1].desc_len);
        }
        moon_tell(self, r->addr, &p->hdr);
    }
    for (uint32_t k = 0; k < b->n_chunks; k++) {
        if (b->travel[k]) {
            moon_weights_chunk_t *c = moon_msg_new(MOON_MSG_WEIGHTS_CHUNK, 0);
            if (c == NULL) {
                fail(self, b, MOON_ERR_NO_MEMORY, "no memory");
                return;
            }
            c->push  = b->push;
            c->chunk = k;
            moon_tell(self, b->recv[0].addr, &c->hdr);
        }
    }
}

static moon_status_t bcast_on_have(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bcast_t                   *b = moon_actor_state(self);
    const moon_weights_have_t *m = (const void *)msg;
    brecv_t                   *r = recv_of(b, msg->src);

    if (b->phase != PH_OFFER || m->push != b->push || r == NULL || r->answered) {
        return MOON_OK;
    }
    if (m->status != MOON_OK) {
        char why[320];
        snprintf(why, sizeof(why), "%s instance %u refused the offer: %s",
                 r->role ? "decode" : "prefill", r->index,
                 (const char *)MOON_SPAN_PTR(m, m->message));
        fail(self, b, m->status, why);
        return MOON_OK;
    }
    r->answered = 1;
    r->version  = m->version;
    r->n_have   = m->hashes.n;
    r->have     = moon_malloc((size_t)m->hashes.n * 8 + 8);
    r->desc     = moon_malloc(m->desc.n + 1);
    if (r->have == NULL || r->desc == NULL) {
        fail(self, b, MOON_ERR_NO_MEMORY, "no memory");
        return MOON_OK;
    }
    memcpy(r->have, MOON_SPAN_PTR(m, m->hashes), (size_t)m->hashes.n * 8);
    memcpy(r->desc, MOON_SPAN_PTR(m, m->desc), m->desc.n);
    r->desc_len = m->desc.n;
    if (++b->n_answered == b->n_recv) {
        start_stream(self, b);
    }
    return MOON_OK;
}

static moon_status_t bcast_on_staged(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bcast_t                     *b = moon_actor_state(self);
    const moon_weights_staged_t *m = (const void *)msg;
    brecv_t                     *r = recv_of(b, msg->src);

    if (b->phase != PH_STREAM || m->push != b->push || r == NULL || r->staged) {
        return MOON_OK;
    }
    if (m->status != MOON_OK) {
        char why[320];
        snprintf(why, sizeof(why), "%s instance %u: %s", r->role ? "decode" : "prefill", r->index,
                 (const char *)MOON_SPAN_PTR(m, m->message));
        fail(self, b, m->status, why);
        return MOON_OK;
    }
    r->staged = 1;
    if (++b->n_staged < b->n_recv) {
        return MOON_OK;
    }
    b->staged_ns = moon_now(moon_actor_runtime(self));
    b->phase     = PH_INSTALL;
    for (uint32_t i = 0; i < b->n_recv; i++) {
        moon_weights_commit_t *c = moon_msg_new(MOON_MSG_WEIGHTS_COMMIT, 0);
        if (c == NULL) {
            fail(self, b, MOON_ERR_NO_MEMORY, "no memory");
            return MOON_OK;
        }
        c->push   = b->push;
        c->commit = 1;
        moon_tell(self, b->recv[i].addr, &c->hdr);
    }
    return MOON_OK;
}

static moon_status_t bcast_on_installed(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bcast_t                        *b = moon_actor_state(self);
    const moon_weights_installed_t *m = (const void *)msg;
    moon_weights_flip_t            *f;

    if (b->phase != PH_INSTALL || m->version != b->version) {
        return MOON_OK;
    }
    if (m->status != MOON_OK) {
        char why[320];
        snprintf(why, sizeof(why), "an instance could not install it: %s",
                 (const char *)MOON_SPAN_PTR(m, m->message));
        fail(self, b, m->status, why);
        return MOON_OK;
    }
    /* INSTALLED comes from the instance, not its receiver: count them */
    if (++b->n_installed < b->n_recv) {
        return MOON_OK;
    }
    f = moon_msg_new(MOON_MSG_WEIGHTS_FLIP, 0);
    if (f == NULL) {
        fail(self, b, MOON_ERR_NO_MEMORY, "no memory");
        return MOON_OK;
    }
    f->version = b->version;
    b->phase   = PH_FLIP;
    moon_tell(self, b->a.conductor, &f->hdr);
    return MOON_OK;
}

static moon_status_t bcast_on_flipped(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bcast_t                      *b = moon_actor_state(self);
    const moon_weights_flipped_t *m = (const void *)msg;

    if (b->phase != PH_FLIP || m->version != b->version) {
        return MOON_OK;
    }
    for (uint32_t i = 0; i < b->n_recv; i++) {
        b->recv[i].version = b->version;
    }
    MOON_INFO("weights: version %llu serves (was %llu): %u of %u chunks moved; staged after "
              "%.3f s, serving after %.3f s",
              (unsigned long long)b->version, (unsigned long long)b->serving, b->n_travel,
              b->n_chunks, (double)(b->staged_ns - b->start_ns) * 1e-9,
              (double)(moon_now(moon_actor_runtime(self)) - b->start_ns) * 1e-9);
    reply(self, b, MOON_OK, "");
    b->recent[b->n_ok % MOON_WEIGHTS_RECENT][0] = b->staged_ns - b->start_ns;
    b->recent[b->n_ok % MOON_WEIGHTS_RECENT][1] = moon_now(moon_actor_runtime(self)) - b->staged_ns;
    b->n_ok++;
    b->serving = b->version;
    end_push(self, b);
    return MOON_OK;
}

static moon_status_t bcast_on_hello(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bcast_t                    *b = moon_actor_state(self);
    const moon_weights_hello_t *m = (const void *)msg;
    uint32_t                    i = 0;

    if (recv_of(b, msg->src) != NULL || b->n_recv == BCAST_MAX_RECV) {
        return MOON_OK;
    }
    /* chain order: prefill instances, then decode ones, by index */
    while (i < b->n_recv && (b->recv[i].role < m->role ||
                             (b->recv[i].role == m->role && b->recv[i].index < m->instance))) {
        i++;
    }
    memmove(&b->recv[i + 1], &b->recv[i], (b->n_recv - i) * sizeof(brecv_t));
    memset(&b->recv[i], 0, sizeof(brecv_t));
    b->recv[i].addr    = msg->src;
    b->recv[i].role    = m->role;
    b->recv[i].index   = m->instance;
    b->recv[i].version = m->version;
    b->n_recv++;
    moon_monitor(self, msg->src, 0);
    return MOON_OK;
}

static moon_status_t bcast_on_state(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bcast_t                    *b = moon_actor_state(self);
    const moon_weights_state_t *m = (const void *)msg;
    moon_weights_state_reply_t *q =
        moon_msg_new(MOON_MSG_WEIGHTS_STATE_REPLY,
                     (size_t)b->n_recv * 24 + sizeof(b->last_error) + sizeof(b->recent) + 24);
    uint32_t  n_recent = MOON_MIN(b->n_ok, MOON_WEIGHTS_RECENT);
    uint64_t *v;

    if (q == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    q->req          = m->req;
    q->version      = b->serving;
    q->phase        = b->phase;
    q->push_version = b->phase != PH_IDLE ? b->version : 0;
    q->n_staged     = b->n_staged;
    q->n_pushes     = b->n_pushes;
    q->n_failed     = b->n_failed;
    v               = moon_msg_span_alloc(q, &q->inst, b->n_recv * 3, 8, 0);
    for (uint32_t i = 0; v != NULL && i < b->n_recv; i++) {
        v[3 * i]     = b->recv[i].role;
        v[3 * i + 1] = b->recv[i].index;
        v[3 * i + 2] = b->recv[i].version;
    }
    moon_msg_set_str(q, &q->message, b->last_error);
    q->n_ok = b->n_ok;
    v       = moon_msg_span_alloc(q, &q->recent, n_recent * 2, 8, 0);
    for (uint32_t i = 0; v != NULL && i < n_recent; i++) {
        const uint64_t *d = b->recent[(b->n_ok - n_recent + i) % MOON_WEIGHTS_RECENT];
        v[2 * i]          = d[0];
        v[2 * i + 1]      = d[1];
    }
    moon_tell(self, msg->src, &q->hdr);
    return MOON_OK;
}

static moon_status_t bcast_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bcast_t                *b = moon_actor_state(self);
    const moon_sys_timer_t *t = (const void *)msg;

    if (b->phase == PH_READ && t->cookie == (BCAST_READ_COOKIE | b->push)) {
        read_turn(self, b);
        return MOON_OK;
    }
    if (b->phase != PH_IDLE && t->cookie == b->push) {
        b->timer = 0;
        fail(self, b, MOON_ERR_TIMED_OUT, "the push did not finish in time (a rank lost or stuck)");
    }
    return MOON_OK;
}

/* A receiver (or its rank) is gone: a push under way cannot finish (rolled
 * back everywhere); later pushes go to the instances left. */
static moon_status_t bcast_on_down(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bcast_t               *b = moon_actor_state(self);
    const moon_sys_down_t *d = (const void *)msg;
    brecv_t               *r = recv_of(b, d->actor);
    char                   why[160];
    uint32_t               i;

    if (r == NULL) {
        return MOON_OK;
    }
    snprintf(why, sizeof(why), "%s instance %u (rank %u) was lost during the push",
             r->role ? "decode" : "prefill", r->index, moon_addr_rank(d->actor));
    if (b->phase != PH_IDLE && b->phase != PH_FLIP) {
        fail(self, b, MOON_ERR_PEER_LOST, why);
    } else {
        MOON_WARN("weights: %s instance %u (rank %u) is gone: pushes go to the %u left",
                  r->role ? "decode" : "prefill", r->index, moon_addr_rank(d->actor),
                  b->n_recv - 1);
    }
    i = (uint32_t)(r - b->recv);
    moon_free(r->have);
    moon_free(r->desc);
    memmove(&b->recv[i], &b->recv[i + 1], (b->n_recv - i - 1) * sizeof(brecv_t));
    b->n_recv--;
    b->a.n_receivers -= b->a.n_receivers > 0;
    return MOON_OK;
}

static moon_status_t bcast_init(moon_actor_t *self, const void *args)
{
    bcast_t *b = moon_actor_state(self);

    b->a = *(const moon_weights_bcast_args_t *)args;
    moon_weights_pace_init(&b->pace, b->a.busy_ns, b->a.busy_share);
    if (b->a.dist == NULL || b->a.model == NULL || b->a.n_receivers > BCAST_MAX_RECV) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (b->a.chunk_bytes == 0) {
        b->a.chunk_bytes = 4u << 20;
    }
    if (b->a.timeout_ns == 0) {
        b->a.timeout_ns = 120000000000ull;
    }
    return MOON_OK;
}

static void bcast_fini(moon_actor_t *self)
{
    bcast_t *b = moon_actor_state(self);

    if (b->src_reg != NULL) {
        moon_dist_region_deregister(b->a.dist, b->src_reg);
    }
    for (uint32_t i = 0; i < b->n_recv; i++) {
        moon_free(b->recv[i].have);
        moon_free(b->recv[i].desc);
    }
    moon_free(b->hashes);
    moon_free(b->travel);
    moon_free(b->src_hashes);
}

const moon_actor_ops_t moon_weights_bcast_ops = {
    .name        = "weights",
    .state_bytes = sizeof(bcast_t),
    .init        = bcast_init,
    .fini        = bcast_fini,
    .on_msg =
        {
            [MOON_MSG_SYS_TIMER]         = bcast_on_timer,
            [MOON_MSG_SYS_DOWN]          = bcast_on_down,
            [MOON_MSG_WEIGHTS_PUSH]      = bcast_on_push,
            [MOON_MSG_WEIGHTS_STATE]     = bcast_on_state,
            [MOON_MSG_WEIGHTS_HELLO]     = bcast_on_hello,
            [MOON_MSG_WEIGHTS_HAVE]      = bcast_on_have,
            [MOON_MSG_WEIGHTS_STAGED]    = bcast_on_staged,
            [MOON_MSG_WEIGHTS_INSTALLED] = bcast_on_installed,
            [MOON_MSG_WEIGHTS_FLIPPED]   = bcast_on_flipped,
            [MOON_MSG_DIST_BULK_DONE]    = bcast_on_bulk_done,
        },
};
