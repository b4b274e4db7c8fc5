/* tests/mpi/test_shm_rings.c - the shared-memory frame rings (runtime/
 * shm_rings.h) between two ranks of one host, under mpirun -np 2, without
 * the rest of the runtime:
 *   - frames of every size class (tiny, around a ring's half, several times a
 *     ring) cross in order and intact, the ring wrapping many times, while
 *     the writer finds the ring full and waits for room;
 *   - frames written in place (reserve, write, commit a shorter length)
 *     wrap the ring and come out whole and in order;
 *   - the sleep mark: a reader that armed is seen asleep by the writer, and
 *     arming fails when a frame is already waiting;
 *   - a record is read only once its tag publishes it (a header in place
 *     with another lap's tag is not read, nor counted by the sleep mark);
 *   - a corrupt record (the writer scribbles over its ring: a length past
 *     the ring, or a kind it never writes) is logged, the ring is read no
 *     more, and nothing crashes;
 *   - a forgotten peer's frames are dropped at the writer;
 *   - a segment name a dead process left in /dev/shm is swept at set-up.
 * The module's source is compiled in, so the test can scribble on a ring. */
#include "moon_test.h"
#include "shm_rings.c"

#include "moonlet/log.h"

#include <mpi.h>
#include <stdio.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RING_BYTES ((size_t)64 << 10)
#define N_FRAMES 3000

static int  g_rank, g_size;
static char g_stale[96]; /* rank 0: a segment name of a dead process, made before set-up */

static void nap_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}
static shm_rings_t *g_rings;
static dist_proc_t  g_procs[2];

/* A small frame's size, under 4000 bytes. */
static size_t small_frame_len(int i)
{
    return 1 + (size_t)(i * 37) % 4000;
}

/* Frame i's size: mostly small, some around half a ring, some far larger. */
static size_t frame_len(int i)
{
    switch (i % 10) {
    case 3:
        return RING_BYTES / 2 - 16 + (size_t)(i % 7); /* the whole/fragment edge */
    case 7:
        return 3 * RING_BYTES + (size_t)i; /* fragments */
    default:
        return small_frame_len(i);
    }
}

static unsigned char frame_byte(int i, size_t k)
{
    return (unsigned char)(i * 131 + k * 7 + (k >> 9));
}

typedef struct {
    int next, bad;
    size_t (*len_of)(int i); /* frame i's size; NULL: frame_len */
} reader_t;

static void on_frame(void *ctx, uint32_t from, const void *frame, size_t len)
{
    reader_t            *r = ctx;
    const unsigned char *p = frame;

    if (from != 0 || len != (r->len_of != NULL ? r->len_of : frame_len)(r->next)) {
        r->bad++;
    } else {
        for (size_t k = 0; k < len; k += 1 + k / 64) {
            r->bad += p[k] != frame_byte(r->next, k);
        }
    }
    r->next++;
}

static void test_frames_cross_in_order(void)
{
    unsigned char *buf   = malloc(4 * RING_BYTES);
    int            waits = 0;
    reader_t       r     = {0, 0, NULL};

    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    if (g_rank == 0) {
        for (int i = 0; i < N_FRAMES; i++) {
            size_t len = frame_len(i), off = 0;
            for (size_t k = 0; k < len; k++) {
                buf[k] = frame_byte(i, k);
            }
            while (!shm_rings_write(g_rings, 1, buf, len, &off)) {
                waits++; /* full: the reader gives room back */
                nap_us(10);
            }
        }
        CU_ASSERT(waits > 0); /* the writer did wait for room */
    } else {
        while (r.next < N_FRAMES) {
            if (shm_rings_poll(g_rings, on_frame, &r, 16) == 0) {
                nap_us(1);
            }
        }
        CU_ASSERT_EQUAL(r.bad, 0);
    }
    free(buf);
    MPI_Barrier(MPI_COMM_WORLD);
}

static void test_sleep_mark(void)
{
    char     one = 1;
    size_t   off = 0;
    reader_t r   = {0, 0, NULL};

    if (g_rank == 1) {
        CU_ASSERT_EQUAL(shm_rings_arm(g_rings), 1); /* nothing waits: it may sleep */
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
        CU_ASSERT_EQUAL(shm_rings_write(g_rings, 1, &one, 1, &off), 1);
        CU_ASSERT_EQUAL(shm_rings_peer_asleep(g_rings, 1), 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 1) {
        shm_rings_awake(g_rings);
        CU_ASSERT_EQUAL(shm_rings_arm(g_rings), 0); /* a frame waits: no sleep */
        r.next = -1;                                /* not one of the numbered frames */
        CU_ASSERT_EQUAL(shm_rings_poll(g_rings, on_frame, &r, 16), 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
        CU_ASSERT_EQUAL(shm_rings_peer_asleep(g_rings, 1), 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Overwrites the header of the last record written to peer (a frame of
 * `len` bytes) with a published one of `kind` that claims `claim` bytes. */
static void scribble_last(shm_rings_t *s, uint32_t peer, size_t len, uint32_t claim, uint16_t kind)
{
    end_t   *e   = &s->out[peer];
    uint64_t pos = e->pos - (REC_BYTES + pad16(len));
    rec_t   *h   = (rec_t *)(e->ring->data + (pos & (s->cap - 1)));

    h->len   = claim;
    h->total = claim;
    atomic_store(&h->tag, rec_tag(s, pos, kind));
}

/* Rank `writer` writes a 256-byte frame to `reader` and overwrites its
 * record header with one of `kind` claiming `claim` bytes; the reader must
 * deliver nothing, then and later (the ring is read no more), and not crash. */
static void corrupt_frame_is_refused(shm_rings_t *rings, int writer, int reader, uint32_t claim,
                                     uint16_t kind)
{
    unsigned char junk[256];
    size_t        off = 0;
    reader_t      r   = {0, 0, NULL};

    memset(junk, 0xa5, sizeof(junk));
    if (g_rank == writer) {
        CU_ASSERT_EQUAL(shm_rings_write(rings, (uint32_t)reader, junk, sizeof(junk), &off), 1);
        scribble_last(rings, (uint32_t)reader, sizeof(junk), claim, kind);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == reader) {
        int saved = moon_log_level;
        moon_log_set_level(0); /* the error is expected */
        CU_ASSERT_EQUAL(shm_rings_poll(rings, on_frame, &r, 16), 0);
        CU_ASSERT_EQUAL(shm_rings_poll(rings, on_frame, &r, 16), 0); /* read no more */
        CU_ASSERT_EQUAL(r.next, 0);
        CU_ASSERT(rings->in[writer].dead); /* marked corrupt, not waited on */
        moon_log_set_level(saved);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A record is read only once its tag says so: a header and payload in
 * place (a writer between its stores), or a tag of another lap of the
 * ring, is not a record yet; the frame the writer then publishes there is. */
static void test_unpublished_record_is_not_read(void)
{
    reader_t r = {0, 0, NULL};

    if (g_rank == 0) {
        end_t *e = &g_rings->out[1];
        rec_t *h = (rec_t *)(e->ring->data + (e->pos & (g_rings->cap - 1)));

        h->len   = 1;
        h->total = 1;
        atomic_store(&h->tag, rec_tag(g_rings, e->pos - g_rings->cap, K_WHOLE)); /* last lap's */
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 1) {
        CU_ASSERT_EQUAL(shm_rings_poll(g_rings, on_frame, &r, 16), 0);
        CU_ASSERT_EQUAL(shm_rings_arm(g_rings), 1); /* nothing waits: it may sleep */
        shm_rings_awake(g_rings);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
        unsigned char one = 7;
        size_t        off = 0;
        CU_ASSERT_EQUAL(shm_rings_write(g_rings, 1, &one, 1, &off), 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 1) {
        r.next = -1; /* not one of the numbered frames */
        CU_ASSERT_EQUAL(shm_rings_poll(g_rings, on_frame, &r, 16), 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A frame written in place: reserve room for more than it takes, write it
 * there, commit its length. Many of them wrap the ring (reserve writes the
 * skip record), each comes out whole and in order; room larger than half
 * the ring is refused. */
static void test_frames_written_in_place(void)
{
    reader_t r = {0, 0, small_frame_len};

    if (g_rank == 0) {
        int sent = 0;

        CU_ASSERT_PTR_NULL(shm_rings_reserve(g_rings, 1, RING_BYTES / 2));
        CU_ASSERT_PTR_NULL(shm_rings_reserve(g_rings, 0, 64)); /* no ring to itself */
        while (sent < N_FRAMES) {
            size_t         len = small_frame_len(sent);
            unsigned char *f   = shm_rings_reserve(g_rings, 1, len + 100);

            if (f == NULL) {
                nap_us(50); /* full: the reader makes room */
                continue;
            }
            for (size_t k = 0; k < len + 100; k++) {
                f[k] = k < len ? frame_byte(sent, k) : 0xee; /* junk past the frame */
            }
            shm_rings_commit(g_rings, 1, len);
            sent++;
        }
    } else {
        while (r.next < N_FRAMES) {
            if (shm_rings_poll(g_rings, on_frame, &r, 16) == 0) {
                nap_us(20);
            }
        }
        CU_ASSERT_EQUAL(r.bad, 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A record of no kind the writer uses (rank 1 to rank 0): refused, never
 * delivered. Kind 0, which a reader could take for "not yet published", and
 * (on rings of their own: a refused ring is read no more) kind 9. */
static void test_record_of_bad_kind_is_refused(void)
{
    shm_rings_t *fresh;

    corrupt_frame_is_refused(g_rings, 1, 0, 256, 0);
    fresh = shm_rings_open(MPI_COMM_WORLD, (uint32_t)g_rank, 2, g_procs, RING_BYTES);
    CU_ASSERT_PTR_NOT_NULL(fresh);
    if (all_ok(MPI_COMM_WORLD, fresh != NULL)) {
        corrupt_frame_is_refused(fresh, 1, 0, 256, 9);
    }
    shm_rings_close(fresh);
}

/* A record longer than the ring (rank 0 to rank 1); then rank 0 forgets
 * rank 1, and its frames to it are dropped. */
static void test_corrupt_ring_is_dropped(void)
{
    unsigned char junk[256] = {0};
    size_t        off       = 0;

    corrupt_frame_is_refused(g_rings, 0, 1, (uint32_t)RING_BYTES, K_WHOLE);
    if (g_rank == 0) {
        shm_rings_forget(g_rings, 1);
        CU_ASSERT_EQUAL(shm_rings_write(g_rings, 1, junk, sizeof(junk), &off), 1); /* dropped */
        CU_ASSERT_EQUAL(off, sizeof(junk));
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void test_stale_segment_is_swept(void)
{
    int fd;

    if (g_rank != 0) {
        return;
    }
    fd = shm_open(g_stale, O_RDONLY, 0);
    CU_ASSERT(fd < 0 && errno == ENOENT);
    if (fd >= 0) {
        close(fd);
        shm_unlink(g_stale);
    }
}

/* A name as a rank of a job would leave it, with the pid of a child that
 * has exited. */
static void make_stale_segment(void)
{
    pid_t child = fork();
    int   fd;

    if (child == 0) {
        _exit(0);
    }
    waitpid(child, NULL, 0);
    snprintf(g_stale, sizeof(g_stale), "/moonlet.%016llx.%u.%lld", 0xdeadull, 0u, (long long)child);
    if ((fd = shm_open(g_stale, O_CREAT | O_RDWR, 0600)) >= 0) {
        close(fd);
    }
}

int main(int argc, char **argv)
{
    dist_proc_t me       = {(int64_t)getpid(), 42, 0}; /* one host */
    int         failures = 0, all = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (g_size != 2) {
        fprintf(stderr, "test_shm_rings: run under mpirun -np 2\n");
        MPI_Finalize();
        return 1;
    }
    MPI_Allgather(&me, (int)sizeof(me), MPI_BYTE, g_procs, (int)sizeof(me), MPI_BYTE,
                  MPI_COMM_WORLD);
    if (g_rank == 0) {
        make_stale_segment();
    }
    g_rings = shm_rings_open(MPI_COMM_WORLD, (uint32_t)g_rank, 2, g_procs, RING_BYTES);
    if (g_rings == NULL || !shm_rings_reaches(g_rings, (uint32_t)(1 - g_rank))) {
        fprintf(stderr, "rank %d: no rings\n", g_rank);
        failures = 1;
    } else {
        /* record_of_bad_kind_is_refused runs before the forget */
        failures =
            MOON_TEST_RUN("shm_rings", NULL, NULL, test_frames_cross_in_order, test_sleep_mark,
                          test_frames_written_in_place, test_unpublished_record_is_not_read,
                          test_record_of_bad_kind_is_refused, test_corrupt_ring_is_dropped,
                          test_stale_segment_is_swept);
    }
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    shm_rings_close(g_rings);
    MPI_Finalize();
    return all != 0;
}
