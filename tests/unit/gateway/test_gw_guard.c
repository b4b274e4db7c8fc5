/* tests/unit/gateway/test_gw_guard.c - the connection guard on socket
 * pairs: a head or a body past its deadline is shut down (the peer reads the
 * end of the stream), a busy connection never is, a new phase restarts the
 * deadline, and under pressure the oldest head (or a body slower than the
 * minimum rate) makes room while a fast body stays. Every wait has a
 * deadline; no timing is asserted beyond "not before" checks with wide
 * margins. */
#include "gw_guard.h"
#include "moon_test.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000ull

typedef struct {
    int fd[2]; /* [0]: the server's end (guarded), [1]: the client's */
} pair_t;

static void pair_open(pair_t *p)
{
    CU_ASSERT_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, p->fd) == 0);
}

static void pair_close(pair_t *p)
{
    close(p->fd[0]);
    close(p->fd[1]);
}

/* 1 when the client's end reads the end of the stream within ms. */
static int cut_within(const pair_t *p, int ms)
{
    struct pollfd pf = {p->fd[1], POLLIN, 0};
    char          c;

    return poll(&pf, 1, ms) == 1 && recv(p->fd[1], &c, 1, MSG_DONTWAIT) == 0;
}

static void nap_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static moon_gw_guard_t *make(uint32_t capacity, uint64_t header_ns, uint64_t body_ns,
                             uint32_t pressure, uint64_t evict_age_ns)
{
    moon_gw_guard_config_t cfg = {capacity, header_ns, body_ns, pressure, evict_age_ns, 1024};
    moon_gw_guard_t       *g   = NULL;

    CU_ASSERT_EQUAL(moon_gw_guard_create(&cfg, &g), MOON_OK);
    return g;
}

static void test_bad_config(void)
{
    moon_gw_guard_config_t cfg = {0};
    moon_gw_guard_t       *g   = NULL;

    CU_ASSERT_EQUAL(moon_gw_guard_create(&cfg, &g), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NULL(g);
    moon_gw_guard_destroy(NULL);
}

/* Heads and bodies past their deadline are cut; busy ones are not; a new
 * phase restarts the clock. */
static void test_deadlines(void)
{
    moon_gw_guard_t      *g = make(8, 200 * MS, 2000 * MS, 0, 0);
    moon_gw_guard_stats_t st;
    pair_t                head, body, busy;
    uint32_t              ih, ib, iy;

    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    pair_open(&head);
    pair_open(&body);
    pair_open(&busy);
    ih = moon_gw_guard_open(g, head.fd[0]);
    ib = moon_gw_guard_open(g, body.fd[0]);
    iy = moon_gw_guard_open(g, busy.fd[0]);
    CU_ASSERT(ih != 0 && ib != 0 && iy != 0);
    moon_gw_guard_set(g, ib, MOON_GW_GUARD_BODY);
    moon_gw_guard_set(g, iy, MOON_GW_GUARD_BUSY);
    CU_ASSERT_FALSE(cut_within(&body, 100)); /* not before its deadline */
    CU_ASSERT_TRUE(cut_within(&head, 10000));
    CU_ASSERT_TRUE(cut_within(&body, 10000));
    CU_ASSERT_FALSE(cut_within(&busy, 500)); /* past both deadlines: busy stays */
    /* a cut connection stays cut whatever phase it is given */
    moon_gw_guard_set(g, ih, MOON_GW_GUARD_HEADERS);
    moon_gw_guard_stats(g, &st);
    CU_ASSERT_EQUAL(st.n_header_cut, 1);
    CU_ASSERT_EQUAL(st.n_body_cut, 1);
    CU_ASSERT_EQUAL(st.n_evicted, 0);
    CU_ASSERT_EQUAL(st.n_open, 3);
    /* the busy one's next request: its head's deadline runs from now */
    moon_gw_guard_set(g, iy, MOON_GW_GUARD_HEADERS);
    CU_ASSERT_TRUE(cut_within(&busy, 10000));
    moon_gw_guard_close(g, ih);
    moon_gw_guard_close(g, ib);
    moon_gw_guard_close(g, iy);
    moon_gw_guard_stats(g, &st);
    CU_ASSERT_EQUAL(st.n_open, 0);
    moon_gw_guard_destroy(g);
    pair_close(&head);
    pair_close(&body);
    pair_close(&busy);
}

/* A full table guards no more (id 0, a no-op everywhere); a closed slot is
 * reused. */
static void test_full_table(void)
{
    moon_gw_guard_t *g = make(2, 0, 0, 0, 0);
    pair_t           p;
    uint32_t         a, b;

    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    pair_open(&p);
    a = moon_gw_guard_open(g, p.fd[0]);
    b = moon_gw_guard_open(g, p.fd[0]);
    CU_ASSERT(a != 0 && b != 0 && a != b);
    CU_ASSERT_EQUAL(moon_gw_guard_open(g, p.fd[0]), 0);
    moon_gw_guard_set(g, 0, MOON_GW_GUARD_BODY);
    moon_gw_guard_close(g, 0);
    moon_gw_guard_close(g, a);
    CU_ASSERT_EQUAL(moon_gw_guard_open(g, p.fd[0]), a);
    /* no deadlines at all: nothing is cut */
    CU_ASSERT_FALSE(cut_within(&p, 300));
    moon_gw_guard_destroy(g);
    pair_close(&p);
}

/* Pressure at 3 of 4: the oldest head goes first (once old enough), then a
 * slow body, never a fast body or a busy connection. */
static void test_pressure(void)
{
    moon_gw_guard_t      *g = make(4, 0, 0, 3, 200 * MS);
    moon_gw_guard_stats_t st;
    pair_t                old_head, slow_body, fast_body, busy;
    uint32_t              ih, is, ifa, iy;

    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    pair_open(&old_head);
    pair_open(&slow_body);
    pair_open(&fast_body);
    pair_open(&busy);
    ih  = moon_gw_guard_open(g, old_head.fd[0]);
    is  = moon_gw_guard_open(g, slow_body.fd[0]);
    ifa = moon_gw_guard_open(g, fast_body.fd[0]);
    moon_gw_guard_set(g, is, MOON_GW_GUARD_BODY);
    moon_gw_guard_set(g, ifa, MOON_GW_GUARD_BODY);
    moon_gw_guard_progress(g, ifa, 1 << 20); /* 1 MiB: far above 1 KiB/s for seconds */
    /* 3 open: at the mark; the head is cut once 200 ms old */
    CU_ASSERT_TRUE(cut_within(&old_head, 10000));
    moon_gw_guard_close(g, ih);
    /* 2 open: no pressure, the slow body stays */
    CU_ASSERT_FALSE(cut_within(&slow_body, 400));
    iy = moon_gw_guard_open(g, busy.fd[0]);
    moon_gw_guard_set(g, iy, MOON_GW_GUARD_BUSY);
    /* 3 again: no head left, so the body under the minimum rate makes room */
    CU_ASSERT_TRUE(cut_within(&slow_body, 10000));
    CU_ASSERT_FALSE(cut_within(&fast_body, 300));
    CU_ASSERT_FALSE(cut_within(&busy, 10));
    moon_gw_guard_stats(g, &st);
    CU_ASSERT_EQUAL(st.n_evicted, 2);
    CU_ASSERT_EQUAL(st.n_header_cut, 0);
    moon_gw_guard_close(g, is);
    moon_gw_guard_close(g, ifa);
    moon_gw_guard_close(g, iy);
    moon_gw_guard_destroy(g);
    pair_close(&old_head);
    pair_close(&slow_body);
    pair_close(&fast_body);
    pair_close(&busy);
}

/* Many connections cut at one deadline, from a thread that sleeps between
 * deadlines: every one is cut, once. */
static void test_many(void)
{
    enum { N = 200 };
    moon_gw_guard_t      *g = make(N, 100 * MS, 0, 0, 0);
    moon_gw_guard_stats_t st;
    static pair_t         p[N];
    uint32_t              id[N];
    int                   n_cut = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    for (int i = 0; i < N; i++) {
        pair_open(&p[i]);
        id[i] = moon_gw_guard_open(g, p[i].fd[0]);
    }
    for (int i = 0; i < N; i++) {
        n_cut += cut_within(&p[i], 10000);
    }
    CU_ASSERT_EQUAL(n_cut, N);
    nap_ms(50);
    moon_gw_guard_stats(g, &st);
    CU_ASSERT_EQUAL(st.n_header_cut, N);
    for (int i = 0; i < N; i++) {
        moon_gw_guard_close(g, id[i]);
        pair_close(&p[i]);
    }
    moon_gw_guard_destroy(g);
}

int main(void)
{
    return MOON_TEST_RUN("gw_guard", NULL, NULL, test_bad_config, test_deadlines, test_full_table,
                         test_pressure, test_many);
}
