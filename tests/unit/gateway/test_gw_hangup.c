/* tests/unit/gateway/test_gw_hangup.c - the hang-up watcher on socket
 * pairs: a peer that closes or shuts its side down fires the hook once; data
 * from the peer (a pipelined request) does not; an unwatched socket never
 * fires; a full table refuses, and a freed slot is used again. */
#include "gw_hangup.h"
#include "moon_test.h"

#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static moon_gw_hangup_t *g_w;

static void on_hangup(void *arg)
{
    atomic_fetch_add((atomic_int *)arg, 1);
}

/* Waits (bounded: 10 s) until *n reaches want; returns its value. */
static int wait_count(atomic_int *n, int want)
{
    for (double end = moon_test_now_s() + 10; atomic_load(n) < want && moon_test_now_s() < end;) {
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return atomic_load(n);
}

static void nap_ms(long ms)
{
    nanosleep(&(struct timespec){0, ms * 1000000L}, NULL);
}

/* A socket pair, its first end watched (hook: on_hangup(n)). */
static void watched_pair(int sv[2], atomic_int *n, uint32_t *slot_p)
{
    CU_ASSERT_EQUAL_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    CU_ASSERT_EQUAL_FATAL(moon_gw_hangup_watch(g_w, sv[0], on_hangup, n, slot_p), MOON_OK);
}

static void test_close_fires_once(void)
{
    int        sv[2];
    atomic_int n = 0;
    uint32_t   slot;

    watched_pair(sv, &n, &slot);
    CU_ASSERT_EQUAL(write(sv[1], "GET / HTTP/1.1\r\n\r\n", 18), 18); /* pipelined: no hang-up */
    nap_ms(50);
    CU_ASSERT_EQUAL(atomic_load(&n), 0);
    close(sv[1]);
    CU_ASSERT_EQUAL(wait_count(&n, 1), 1);
    nap_ms(50);
    CU_ASSERT_EQUAL(atomic_load(&n), 1); /* once */
    moon_gw_hangup_unwatch(g_w, slot);
    close(sv[0]);
}

static void test_shutdown_fires(void)
{
    int        sv[2];
    atomic_int n = 0;
    uint32_t   slot;

    watched_pair(sv, &n, &slot);
    shutdown(sv[1], SHUT_WR);
    CU_ASSERT_EQUAL(wait_count(&n, 1), 1);
    moon_gw_hangup_unwatch(g_w, slot);
    close(sv[0]);
    close(sv[1]);
}

static void test_unwatched_never_fires(void)
{
    int        sv[2];
    atomic_int n = 0;
    uint32_t   slot;

    watched_pair(sv, &n, &slot);
    moon_gw_hangup_unwatch(g_w, slot);
    moon_gw_hangup_unwatch(g_w, slot);  /* twice: no-op */
    moon_gw_hangup_unwatch(g_w, 99999); /* out of range: no-op */
    close(sv[1]);
    nap_ms(50);
    CU_ASSERT_EQUAL(atomic_load(&n), 0);
    close(sv[0]);
}

/* The table holds 4 (see main): a fifth is refused until one is unwatched;
 * a bad descriptor is refused and takes no slot. */
static void test_capacity(void)
{
    int        sv[5][2];
    atomic_int n = 0;
    uint32_t   slot[5];

    for (int i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i]), 0);
    }
    CU_ASSERT_EQUAL(moon_gw_hangup_watch(g_w, -1, on_hangup, &n, &slot[0]), MOON_ERR_IO);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(moon_gw_hangup_watch(g_w, sv[i][0], on_hangup, &n, &slot[i]), MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_gw_hangup_watch(g_w, sv[4][0], on_hangup, &n, &slot[4]),
                    MOON_ERR_NO_RESOURCE);
    moon_gw_hangup_unwatch(g_w, slot[1]);
    CU_ASSERT_EQUAL(moon_gw_hangup_watch(g_w, sv[4][0], on_hangup, &n, &slot[4]), MOON_OK);
    CU_ASSERT_EQUAL(slot[4], slot[1]);
    close(sv[1][1]); /* unwatched: nothing */
    close(sv[4][1]); /* the slot's new owner: fires */
    CU_ASSERT_EQUAL(wait_count(&n, 1), 1);
    for (int i = 0; i < 5; i++) {
        if (i != 1) {
            moon_gw_hangup_unwatch(g_w, slot[i]);
        }
        close(sv[i][0]);
        if (i != 1 && i != 4) {
            close(sv[i][1]);
        }
    }
    CU_ASSERT_EQUAL(atomic_load(&n), 1);
}

int main(void)
{
    int rc;

    if (moon_gw_hangup_create(0, &g_w) != MOON_ERR_INVALID_PARAM ||
        moon_gw_hangup_create(4, &g_w) != MOON_OK) {
        return 1;
    }
    rc = MOON_TEST_RUN("gw_hangup", NULL, NULL, test_close_fires_once, test_shutdown_fires,
                       test_unwatched_never_fires, test_capacity);
    moon_gw_hangup_destroy(g_w);
    moon_gw_hangup_destroy(NULL);
    return rc;
}
