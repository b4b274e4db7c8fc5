/* tests/mpi/test_dist_bulkv.c - vectored one-sided transfers (moon_dist_getv /
 * _putv) between two ranks: many scattered entries of one remote region move
 * with exactly one completion carrying the sum of their bytes; the data of
 * every entry lands where it should and nothing else is touched; bad entries
 * are refused with nothing moved and no completion; the same calls inside one
 * process copy and complete once too. Run over UCX (shm, tcp) and the MPI
 * engine (CTest variants). */
#include "dist_test.h"

#include <string.h>

#define REGION_BYTES (4u << 20)
#define N_ENTRIES 96u

static _Atomic int      g_n_done, g_status;
static _Atomic uint64_t g_bytes, g_cookie;

static moon_status_t waiter_on_done(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    const moon_dist_bulk_done_t *d = (const moon_dist_bulk_done_t *)msg;

    (void)self;
    atomic_store(&g_status, d->status);
    atomic_store(&g_bytes, d->bytes);
    atomic_store(&g_cookie, d->cookie);
    atomic_fetch_add(&g_n_done, 1);
    return MOON_OK;
}
static const moon_actor_ops_t waiter_ops = {.name   = "waiter",
                                            .on_msg = {[MOON_MSG_DIST_BULK_DONE] = waiter_on_done}};

static uint8_t byte_of(size_t i, uint8_t salt)
{
    return (uint8_t)((i * 131u) ^ salt);
}

/* Entry i: len 1..~40 KiB at scattered, non-overlapping places on both sides
 * (remote at 40 KiB * i, local in reverse order), filling n_p bytes. */
static void make_iov(moon_dist_iov_t *iov, char *local, uint64_t *total_p)
{
    *total_p = 0;
    for (uint32_t i = 0; i < N_ENTRIES; i++) {
        size_t len        = 1 + (size_t)i * 419u % (40u << 10);
        iov[i].remote_off = (uint64_t)i * (40u << 10) + 7;
        iov[i].local      = local + (size_t)(N_ENTRIES - 1 - i) * (40u << 10) + 3;
        iov[i].len        = len;
        *total_p += len;
    }
}

/* Waits for one completion, then a little longer to see that no second one comes. */
static int one_completion(int before)
{
    double end = moon_test_now_s() + 60;

    while (atomic_load(&g_n_done) == before && moon_test_now_s() < end) {
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    nanosleep(&(struct timespec){0, 100000000}, NULL);
    return atomic_load(&g_n_done) == before + 1;
}

static void test_getv_putv(void)
{
    char               *mem = NULL;
    moon_dist_region_t *reg = NULL;
    moon_dist_iov_t     iov[N_ENTRIES];
    char                desc[512];
    uint64_t            desc_len = 0, total;
    moon_addr_t         waiter;
    int                 ok = 1;

    CU_ASSERT_FATAL(g_size == 2);
    CU_ASSERT_EQUAL_FATAL(moon_dist_region_alloc(g_dist, REGION_BYTES, (void **)&mem, &reg),
                          MOON_OK);
    for (size_t i = 0; i < REGION_BYTES; i++) {
        mem[i] = g_rank == 0 ? (char)byte_of(i, 1) : 0;
    }
    if (g_rank == 0) {
        moon_dist_bulk_done_t *m = moon_msg_new(MOON_MSG_DIST_BULK_DONE, 512);
        moon_span_t            span;
        CU_ASSERT_EQUAL_FATAL(moon_dist_region_desc(reg, m, &span), MOON_OK);
        desc_len = span.n;
        memcpy(desc, MOON_SPAN_PTR(m, span), desc_len);
        moon_msg_release(&m->hdr);
    }
    MPI_Bcast(&desc_len, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    MPI_Bcast(desc, (int)desc_len, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (g_rank == 1) {
        CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &waiter_ops, NULL, NULL, &waiter), MOON_OK);
        make_iov(iov, mem, &total);
        /* refused: no entries, too many, one entry past the region's end */
        CU_ASSERT_EQUAL(moon_dist_getv(g_dist, iov, 0, reg, desc, desc_len, waiter, 9),
                        MOON_ERR_INVALID_PARAM);
        CU_ASSERT_EQUAL(
            moon_dist_getv(g_dist, iov, MOON_DIST_IOV_MAX + 1, reg, desc, desc_len, waiter, 9),
            MOON_ERR_INVALID_PARAM);
        iov[N_ENTRIES / 2].remote_off = REGION_BYTES;
        CU_ASSERT_EQUAL(moon_dist_getv(g_dist, iov, N_ENTRIES, reg, desc, desc_len, waiter, 9),
                        MOON_ERR_INVALID_PARAM);
        CU_ASSERT_EQUAL(moon_dist_getv(g_dist, iov, N_ENTRIES, reg, desc, desc_len - 1, waiter, 9),
                        MOON_ERR_INVALID_PARAM);
        make_iov(iov, mem, &total);

        /* get: every entry's bytes, one completion with their sum */
        CU_ASSERT_EQUAL(moon_dist_getv(g_dist, iov, N_ENTRIES, reg, desc, desc_len, waiter, 41),
                        MOON_OK);
        CU_ASSERT(one_completion(0));
        CU_ASSERT_EQUAL(atomic_load(&g_status), MOON_OK);
        CU_ASSERT_EQUAL(atomic_load(&g_bytes), total);
        CU_ASSERT_EQUAL(atomic_load(&g_cookie), 41);
        for (uint32_t i = 0; i < N_ENTRIES; i++) {
            const uint8_t *l = iov[i].local;
            for (size_t k = 0; k < iov[i].len; k++) {
                ok &= l[k] == byte_of(iov[i].remote_off + k, 1);
            }
            ok &= ((const uint8_t *)iov[i].local)[iov[i].len] == 0; /* nothing past it */
        }
        CU_ASSERT(ok);

        /* put: changed bytes back to the same places */
        for (uint32_t i = 0; i < N_ENTRIES; i++) {
            for (size_t k = 0; k < iov[i].len; k++) {
                ((uint8_t *)iov[i].local)[k] = byte_of(iov[i].remote_off + k, 2);
            }
        }
        CU_ASSERT_EQUAL(moon_dist_putv(g_dist, iov, N_ENTRIES, reg, desc, desc_len, waiter, 42),
                        MOON_OK);
        CU_ASSERT(one_completion(1));
        CU_ASSERT_EQUAL(atomic_load(&g_status), MOON_OK);
        CU_ASSERT_EQUAL(atomic_load(&g_bytes), total);
        CU_ASSERT_EQUAL(atomic_load(&g_cookie), 42);
    }
    moon_dist_barrier(g_dist);
    if (g_rank == 0) { /* the entries changed, the gaps between them did not */
        for (uint32_t i = 0; i < N_ENTRIES; i++) {
            size_t   len = 1 + (size_t)i * 419u % (40u << 10);
            uint64_t off = (uint64_t)i * (40u << 10) + 7;
            for (size_t k = 0; k < len; k++) {
                ok &= (uint8_t)mem[off + k] == byte_of(off + k, 2);
            }
            ok &= (uint8_t)mem[off + len] == byte_of(off + len, 1);
            ok &= (uint8_t)mem[off - 1] == byte_of(off - 1, 1);
        }
        CU_ASSERT(ok);
    }
    CU_ASSERT(dist_test_all(ok));
    moon_dist_barrier(g_dist);
    moon_dist_region_deregister(g_dist, reg);
}

/* Inside one process (this rank's own region): plain copies, one completion. */
static void test_getv_same_process(void)
{
    char                  *mem = NULL;
    moon_dist_region_t    *reg = NULL;
    moon_dist_iov_t        iov[2];
    moon_dist_bulk_done_t *m;
    moon_span_t            span;
    moon_addr_t            waiter;
    int                    before = atomic_load(&g_n_done);

    CU_ASSERT_EQUAL_FATAL(moon_dist_region_alloc(g_dist, 1 << 16, (void **)&mem, &reg), MOON_OK);
    memset(mem, 0, 1 << 16);
    memset(mem, 'a', 100);
    memset(mem + 1000, 'b', 50);
    m = moon_msg_new(MOON_MSG_DIST_BULK_DONE, 512);
    CU_ASSERT_EQUAL_FATAL(moon_dist_region_desc(reg, m, &span), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &waiter_ops, NULL, NULL, &waiter), MOON_OK);
    iov[0] = (moon_dist_iov_t){mem + 5000, 0, 100};
    iov[1] = (moon_dist_iov_t){mem + 6000, 1000, 50};
    CU_ASSERT_EQUAL(moon_dist_getv(g_dist, iov, 2, reg, MOON_SPAN_PTR(m, span), span.n, waiter, 7),
                    MOON_OK);
    CU_ASSERT(one_completion(before));
    CU_ASSERT_EQUAL(atomic_load(&g_bytes), 150);
    CU_ASSERT(mem[5000] == 'a' && mem[5099] == 'a' && mem[5100] == 0);
    CU_ASSERT(mem[6000] == 'b' && mem[6049] == 'b' && mem[6050] == 0);
    moon_msg_release(&m->hdr);
    moon_dist_barrier(g_dist);
    moon_dist_region_deregister(g_dist, reg);
}

int main(int argc, char **argv)
{
    if (dist_test_setup(&argc, &argv, NULL, 0) != 0) {
        return 1;
    }
    return dist_test_teardown(
        MOON_TEST_RUN("dist_bulkv", NULL, NULL, test_getv_putv, test_getv_same_process));
}
