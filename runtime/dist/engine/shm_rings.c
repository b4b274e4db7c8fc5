/* runtime/dist/engine/shm_rings.c - see shm_rings.h. */
#define _GNU_SOURCE /* ftruncate, shm_open */
#include "shm_rings.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SEG_MAGIC 0x324e495248534d4dull /* "MMSHRIN2": records published by tags */
#define REC_BYTES 16u
#define MAX_FRAME ((uint32_t)64 << 20) /* dist frames stay under 17 MiB */

enum { K_WHOLE = 1, K_FIRST, K_MIDDLE, K_LAST, K_SKIP, K_BAD = 15 /* never written */ };

/* A record's header; its payload follows, padded to 16 bytes. The tag,
 * stored last (release), publishes the record: it is the record's position
 * in the ring's stream (a multiple of 16) mixed with the job's key, and the
 * record's kind in the low 4 bits. The reader polls the tag where the next
 * record goes: what it waits on is the line the record's first bytes come
 * in, so a small frame costs the reader one line from the writer's core
 * (a published `head` beside the data cost two, one after the other). A tag
 * from an earlier lap, or payload bytes, never match: the position differs,
 * and the key is the job's. */
typedef struct {
    uint32_t         len;   /* payload bytes of this record */
    uint32_t         total; /* bytes of the whole frame */
    _Atomic uint64_t tag;
} rec_t;
_Static_assert(sizeof(rec_t) == REC_BYTES, "record header size changed");

typedef struct {
    alignas(64) _Atomic uint64_t tail; /* bytes the reader gave back */
    alignas(64) unsigned char data[];  /* cap bytes */
} ring_t;

/* A receiver's segment: its sleep mark, then one ring per sender of the host
 * (in the order of the host's ranks, the receiver left out). */
typedef struct {
    uint64_t magic, cap;
    uint32_t n_rings, pad;
    alignas(64) _Atomic uint32_t asleep;
    alignas(64) unsigned char rings[];
} seg_t;

/* One end of a ring, as this rank sees it. */
typedef struct {
    ring_t  *ring; /* NULL: the peer is not on this host */
    uint64_t pos;  /* the stream position: writer, of its next record; reader, its tail */
    uint64_t seen; /* writer: the reader's tail as last read */
    seg_t   *seg;  /* writer: the receiver's segment (its sleep mark) */
    char    *frag; /* reader: a fragmented frame being put together */
    uint32_t frag_len, frag_total;
    int      dead;
} end_t;

struct shm_rings {
    uint32_t  rank, size;
    uint64_t  cap;
    uint64_t  key; /* the job's, mixed into every record's tag */
    size_t    seg_bytes;
    seg_t    *own;  /* the rings others write to us */
    seg_t   **segs; /* by rank: a local peer's segment, mapped */
    end_t    *in, *out;
    uint32_t *local; /* ranks of this host, ascending */
    uint32_t  n_local;
};

static uint64_t pad16(uint64_t n)
{
    return (n + 15) & ~(uint64_t)15;
}

static uint64_t rec_tag(const shm_rings_t *s, uint64_t pos, uint16_t kind)
{
    return ((pos ^ s->key) & ~(uint64_t)15) | kind;
}

static size_t ring_stride(uint64_t cap)
{
    return sizeof(ring_t) + cap;
}

/* The ring for sender s in receiver p's segment. */
static ring_t *ring_in(const shm_rings_t *s, seg_t *seg, uint32_t p, uint32_t sender)
{
    uint32_t idx = 0;

    for (uint32_t i = 0; i < s->n_local && s->local[i] != sender; i++) {
        idx += s->local[i] != p;
    }
    return (ring_t *)(seg->rings + (size_t)idx * ring_stride(s->cap));
}

/* The job's token, the rank and its pid: a name left behind by a process
 * that died before unlinking it can be told by its pid (sweep_stale). */
static void seg_name(char *buf, size_t n, uint64_t token, uint32_t rank, int64_t pid)
{
    snprintf(buf, n, "/moonlet.%016llx.%u.%lld", (unsigned long long)token, rank, (long long)pid);
}

/* Unlinks the segments of dead processes: a rank that died during set-up,
 * before its name went, leaves one in /dev/shm. */
static void sweep_stale(void)
{
    DIR           *dir = opendir("/dev/shm");
    struct dirent *ent;

    while (dir != NULL && (ent = readdir(dir)) != NULL) {
        unsigned long long token;
        unsigned           rank;
        long long          pid;
        char               path[300];

        if (sscanf(ent->d_name, "moonlet.%llx.%u.%lld", &token, &rank, &pid) == 3 && pid > 0 &&
            kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
            snprintf(path, sizeof(path), "/%s", ent->d_name);
            (void)shm_unlink(path);
        }
    }
    if (dir != NULL) {
        closedir(dir);
    }
}

static seg_t *seg_map(const char *name, size_t bytes, int create)
{
    int   fd = shm_open(name, create ? O_CREAT | O_EXCL | O_RDWR : O_RDWR, 0600);
    void *p  = MAP_FAILED;

    if (fd < 0) {
        MOON_ERROR("shm_open %s: %s", name, strerror(errno));
        return NULL;
    }
    /* the pages reserved now: on a full /dev/shm a sparse segment would
     * raise SIGBUS at the first write that needs a page */
    if (!create ||
        (ftruncate(fd, (off_t)bytes) == 0 && posix_fallocate(fd, 0, (off_t)bytes) == 0)) {
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    close(fd);
    if (p == MAP_FAILED) {
        MOON_ERROR("mapping %s (%zu bytes) failed: %s", name, bytes, strerror(errno));
        return NULL;
    }
    return p;
}

static int all_ok(MPI_Comm comm, int ok)
{
    int all = 0;

    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
    return all;
}

void shm_rings_close(shm_rings_t *s)
{
    if (s == NULL) {
        return;
    }
    for (uint32_t r = 0; r < s->size; r++) {
        if (s->segs[r] != NULL) {
            munmap(s->segs[r], s->seg_bytes);
        }
        if (s->in[r].frag != NULL) {
            moon_free(s->in[r].frag);
        }
    }
    if (s->own != NULL) {
        munmap(s->own, s->seg_bytes);
    }
    moon_free(s->segs);
    moon_free(s->in);
    moon_free(s->out);
    moon_free(s->local);
    moon_free(s);
}

shm_rings_t *shm_rings_open(MPI_Comm comm, uint32_t rank, uint32_t size, const dist_proc_t *procs,
                            size_t ring_bytes)
{
    shm_rings_t *s     = moon_calloc(1, sizeof(*s));
    uint64_t     token = 0;
    char         name[64];
    int          ok = s != NULL && procs != NULL && ring_bytes >= (64u << 10) &&
             (ring_bytes & (ring_bytes - 1)) == 0;

    if (ok) {
        s->rank  = rank;
        s->size  = size;
        s->cap   = ring_bytes;
        s->segs  = moon_calloc(size, sizeof(*s->segs));
        s->in    = moon_calloc(size, sizeof(*s->in));
        s->out   = moon_calloc(size, sizeof(*s->out));
        s->local = moon_calloc(size, sizeof(*s->local));
        ok       = s->segs != NULL && s->in != NULL && s->out != NULL && s->local != NULL;
    }
    for (uint32_t r = 0; ok && r < size; r++) {
        if (procs[r].host == procs[rank].host) {
            s->local[s->n_local++] = r;
        }
    }
    if (rank == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        token = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    }
    MPI_Bcast(&token, 1, MPI_UINT64_T, 0, comm);
    if (s != NULL) {
        /* spread over every bit; the top one set, so no tag is 0 (a fresh ring) */
        s->key = (token * 0x9e3779b97f4a7c15ull) | (1ull << 63);
    }
    /* 1. each rank with peers on its host creates its segment */
    if (ok && s->n_local > 1) {
        s->seg_bytes = sizeof(seg_t) + (size_t)(s->n_local - 1) * ring_stride(s->cap);
        sweep_stale();
        seg_name(name, sizeof(name), token, rank, procs[rank].pid);
        if ((s->own = seg_map(name, s->seg_bytes, 1)) != NULL) {
            s->own->cap     = s->cap;
            s->own->n_rings = s->n_local - 1;
            atomic_store(&s->own->asleep, 0);
            s->own->magic = SEG_MAGIC;
        } else {
            ok = 0;
        }
    }
    /* 2. once every segment exists, map the host's others (a rank alone on
     * its host has nothing to map, and keeps the others' rings) */
    if (!all_ok(comm, ok)) {
        ok = 0;
    } else if (s->n_local > 1) {
        for (uint32_t i = 0; i < s->n_local && ok; i++) {
            uint32_t p = s->local[i];
            if (p == rank) {
                continue;
            }
            seg_name(name, sizeof(name), token, p, procs[p].pid);
            s->segs[p] = seg_map(name, s->seg_bytes, 0);
            ok         = s->segs[p] != NULL && s->segs[p]->magic == SEG_MAGIC &&
                 s->segs[p]->cap == s->cap && s->segs[p]->n_rings == s->n_local - 1;
            if (ok) {
                s->out[p] = (end_t){.ring = ring_in(s, s->segs[p], p, rank), .seg = s->segs[p]};
                s->in[p]  = (end_t){.ring = ring_in(s, s->own, rank, p)};
            }
        }
    }
    /* 3. once every rank mapped them, the names go: nothing outlives the job */
    ok = all_ok(comm, ok);
    if (s != NULL && s->own != NULL) {
        seg_name(name, sizeof(name), token, rank, procs[rank].pid);
        shm_unlink(name);
    }
    if (!ok || s->n_local < 2) {
        if (s != NULL && s->n_local > 1) {
            MOON_WARN("shared-memory frame rings unavailable: frames go through UCX");
        }
        shm_rings_close(s);
        return NULL;
    }
    return s;
}

int shm_rings_reaches(const shm_rings_t *s, uint32_t peer)
{
    return s != NULL && peer < s->size && s->out[peer].ring != NULL;
}

/* Room for `need` more bytes in the ring to a reader (its tail reread when short). */
static int has_room(const shm_rings_t *s, end_t *e, uint64_t need)
{
    if (e->pos + need - e->seen <= s->cap) {
        return 1;
    }
    e->seen = atomic_load_explicit(&e->ring->tail, memory_order_acquire);
    return e->pos + need - e->seen <= s->cap;
}

static void put_record(const shm_rings_t *s, end_t *e, uint16_t kind, const void *src, uint32_t len,
                       uint32_t total)
{
    uint64_t cap = s->cap, off = e->pos & (cap - 1);
    rec_t   *h = (rec_t *)(e->ring->data + off);

    h->len   = len;
    h->total = total;
    if (src != NULL && len > 0) { /* NULL: the payload is in place already */
        memcpy(e->ring->data + off + REC_BYTES, src, len);
    }
    atomic_store_explicit(&h->tag, rec_tag(s, e->pos, kind), memory_order_release);
    e->pos += kind == K_SKIP ? cap - off : REC_BYTES + pad16(len);
}

int shm_rings_write(shm_rings_t *s, uint32_t peer, const void *frame, size_t len, size_t *off)
{
    end_t   *e     = &s->out[peer];
    uint64_t cap   = s->cap;
    int      whole = len + REC_BYTES <= cap / 2; /* small frames never split */

    if (e->dead || len > MAX_FRAME) {
        if (!e->dead) {
            MOON_ERROR("a %zu-byte frame to rank %u: too large, dropped", len, peer);
        }
        *off = len;
        return 1;
    }
    while (*off < len) {
        uint64_t room = cap - (e->pos & (cap - 1)); /* to the ring's end */
        uint64_t left = len - *off, chunk;
        uint16_t kind;

        if (room < REC_BYTES + (whole ? pad16(len) : 16)) {
            if (!has_room(s, e, room)) {
                return 0;
            }
            put_record(s, e, K_SKIP, NULL, 0, 0); /* to the start */
            continue;
        }
        chunk = whole ? len : MOON_MIN(left, MOON_MIN(room, cap / 2) - REC_BYTES);
        if (!has_room(s, e, REC_BYTES + pad16(chunk))) {
            uint64_t free = cap - (e->pos - e->seen);

            if (whole || free < REC_BYTES + 16) {
                return 0;
            }
            chunk = MOON_MIN(chunk, (free - REC_BYTES) & ~(uint64_t)15); /* what fits now */
        }
        kind = whole ? K_WHOLE : *off == 0 ? K_FIRST : *off + chunk == len ? K_LAST : K_MIDDLE;
        put_record(s, e, kind, (const char *)frame + *off, (uint32_t)chunk, (uint32_t)len);
        *off += chunk;
    }
    return 1;
}

void *shm_rings_reserve(shm_rings_t *s, uint32_t peer, size_t max)
{
    uint64_t need = REC_BYTES + pad16(max), room;
    end_t   *e;

    if (peer >= s->size || (e = &s->out[peer])->ring == NULL || e->dead || need > s->cap / 2) {
        return NULL;
    }
    room = s->cap - (e->pos & (s->cap - 1)); /* to the ring's end */
    if (room < need) {
        if (!has_room(s, e, room)) {
            return NULL;
        }
        put_record(s, e, K_SKIP, NULL, 0, 0); /* to the start */
    }
    if (!has_room(s, e, need)) {
        return NULL;
    }
    return e->ring->data + (e->pos & (s->cap - 1)) + REC_BYTES;
}

void shm_rings_commit(shm_rings_t *s, uint32_t peer, size_t len)
{
    put_record(s, &s->out[peer], K_WHOLE, NULL, (uint32_t)len, (uint32_t)len);
}

int shm_rings_peer_asleep(shm_rings_t *s, uint32_t peer)
{
    /* pairs with the fence in shm_rings_arm: our tag store, then its mark */
    atomic_thread_fence(memory_order_seq_cst);
    return atomic_load_explicit(&s->out[peer].seg->asleep, memory_order_relaxed) != 0;
}

static void ring_corrupt(end_t *e, uint32_t from, const char *why)
{
    MOON_ERROR("frame ring from rank %u: %s; it is read no more", from, why);
    e->dead = 1;
    moon_free(e->frag);
    e->frag = NULL;
}

/* The kind of the record published at e->pos, 0 if none is yet. A tag of
 * this position with kind 0 (only a corrupt writer writes one) reads as
 * K_BAD: refused, instead of stalling the ring as "not yet" for ever. */
static uint16_t published(const shm_rings_t *s, const end_t *e)
{
    const rec_t *h   = (const rec_t *)(e->ring->data + (e->pos & (s->cap - 1)));
    uint64_t     tag = atomic_load_explicit(&h->tag, memory_order_acquire);

    if (((tag ^ rec_tag(s, e->pos, 0)) & ~(uint64_t)15) != 0) {
        return 0;
    }
    return (tag & 15) != 0 ? (uint16_t)(tag & 15) : K_BAD;
}

/* One record of the ring from `from`, published as `kind`: 1 delivered a
 * frame, 0 consumed something else, -1 stop reading this ring for now.
 * Nothing the writer put there is trusted: a record must lie inside the
 * ring, and fragments must come in order. */
static int take_record(shm_rings_t *s, end_t *e, uint32_t from, uint16_t kind, shm_deliver_fn fn,
                       void *ctx)
{
    uint64_t             cap = s->cap, off = e->pos & (cap - 1);
    const unsigned char *at  = e->ring->data + off;
    const rec_t         *rec = (const rec_t *)at;
    uint32_t             len = rec->len, total = rec->total;
    int                  delivered = 0;
    char                *whole;

    if (kind == K_SKIP) {
        if (off == 0) {
            ring_corrupt(e, from, "bad skip record");
            return -1;
        }
        e->pos += cap - off;
        atomic_store_explicit(&e->ring->tail, e->pos, memory_order_release);
        return 0;
    }
    if (len > cap - off - REC_BYTES || len > cap / 2 || total > MAX_FRAME || len > total) {
        ring_corrupt(e, from, "record out of bounds");
        return -1;
    }
    switch (kind) {
    case K_WHOLE:
        if (len != total) {
            ring_corrupt(e, from, "bad record");
            return -1;
        }
        fn(ctx, from, at + REC_BYTES, len); /* in place: the room goes back after */
        delivered = 1;
        break;
    case K_FIRST:
        if (e->frag != NULL) {
            ring_corrupt(e, from, "fragments out of order");
            return -1;
        }
        if ((e->frag = moon_malloc(total)) == NULL) {
            return -1; /* left in the ring: tried again at the next poll */
        }
        memcpy(e->frag, at + REC_BYTES, len);
        e->frag_len   = len;
        e->frag_total = total;
        break;
    case K_MIDDLE:
    case K_LAST:
        if (e->frag == NULL || total != e->frag_total || e->frag_len + len > total ||
            (kind == K_LAST && e->frag_len + len != total)) {
            ring_corrupt(e, from, "fragments out of order");
            return -1;
        }
        memcpy(e->frag + e->frag_len, at + REC_BYTES, len);
        e->frag_len += len;
        if (kind == K_LAST) {
            whole   = e->frag; /* ours now: delivering may forget the ring */
            e->frag = NULL;
            fn(ctx, from, whole, e->frag_total);
            moon_free(whole);
            delivered = 1;
        }
        break;
    default:
        ring_corrupt(e, from, "bad record");
        return -1;
    }
    e->pos += REC_BYTES + pad16(len);
    atomic_store_explicit(&e->ring->tail, e->pos, memory_order_release);
    return delivered;
}

int shm_rings_poll(shm_rings_t *s, shm_deliver_fn fn, void *ctx, int budget)
{
    int n = 0;

    for (uint32_t i = 0; i < s->n_local; i++) {
        uint32_t from  = s->local[i];
        end_t   *e     = &s->in[from];
        int      taken = 0; /* a budget per ring: a busy one does not keep the others waiting */
        uint16_t kind;

        if (e->ring == NULL || e->dead) {
            continue;
        }
        for (int records = 0;
             taken < budget && records < 4 * budget && !e->dead && (kind = published(s, e)) != 0;
             records++) {
            int got = take_record(s, e, from, kind, fn, ctx);
            if (got < 0) {
                break;
            }
            taken += got;
        }
        n += taken;
    }
    return n;
}

int shm_rings_arm(shm_rings_t *s)
{
    atomic_store(&s->own->asleep, 1);
    atomic_thread_fence(memory_order_seq_cst); /* the mark, then a last look at the rings */
    for (uint32_t i = 0; i < s->n_local; i++) {
        end_t *e = &s->in[s->local[i]];
        if (e->ring != NULL && !e->dead && published(s, e) != 0) {
            atomic_store(&s->own->asleep, 0);
            return 0;
        }
    }
    return 1;
}

void shm_rings_awake(shm_rings_t *s)
{
    if (atomic_load_explicit(&s->own->asleep, memory_order_relaxed)) {
        atomic_store_explicit(&s->own->asleep, 0, memory_order_relaxed);
    }
}

void shm_rings_forget(shm_rings_t *s, uint32_t peer)
{
    if (s == NULL || peer >= s->size) {
        return;
    }
    s->in[peer].dead  = 1;
    s->out[peer].dead = 1;
    moon_free(s->in[peer].frag);
    s->in[peer].frag = NULL;
}
