/* tests/unit/runtime/test_mailbox.c - the MPSC mailbox: FIFO, the
 * empty/scheduled protocol, depth counting, and a multi-producer stress test
 * that runs under ThreadSanitizer (MOON_TSAN=ON). */
#include "mailbox.h"

#include "moonlet/moonlet.h"

#include "moon_test.h"

#include <pthread.h>
#include <sched.h>

#define T_ITEM_FIELDS(F, T) F(T, u32, producer) F(T, u32, n)
#define T_MSGS(X) X(T_MSG_ITEM, t_item_t, T_ITEM_FIELDS)
MOON_MSG_DECLARE(T_MSGS, 210, T_MSG_END)
MOON_MSG_DEFINE(T_MSGS, t_msg_descs)

static t_item_t *item(uint32_t producer, uint32_t n)
{
    t_item_t *m = moon_msg_new(T_MSG_ITEM, 0);

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    m->producer = producer;
    m->n        = n;
    return m;
}

static moon_msg_env_t *env_of(t_item_t *m)
{
    return moon_msg_env(&m->hdr);
}

static void test_fifo_and_empty_protocol(void)
{
    moon_mailbox_t *mb = moon_aligned_alloc(MOON_CACHE_LINE, sizeof(*mb));

    if (mb == NULL) {
        CU_FAIL_FATAL("out of memory");
        return;
    }
    moon_mailbox_init(mb);
    CU_ASSERT_PTR_NULL(moon_mailbox_pop(mb));
    CU_ASSERT_EQUAL(moon_mailbox_push(mb, env_of(item(0, 1))), 1); /* found it empty */
    CU_ASSERT_EQUAL(moon_mailbox_push(mb, env_of(item(0, 2))), 0);
    CU_ASSERT_EQUAL(moon_mailbox_push(mb, env_of(item(0, 3))), 0);
    CU_ASSERT_EQUAL(moon_mailbox_depth(mb, 100), 3);
    for (uint32_t n = 1; n <= 3; n++) {
        moon_msg_env_t *env = moon_mailbox_pop(mb);
        CU_ASSERT_PTR_NOT_NULL_FATAL(env);
        CU_ASSERT_EQUAL(((t_item_t *)moon_env_msg(env))->n, n);
        CU_ASSERT_EQUAL(moon_mailbox_depth(mb, 100), 3 - n);
    }
    CU_ASSERT_PTR_NULL(moon_mailbox_pop(mb));
    CU_ASSERT_EQUAL(moon_mailbox_claim(mb), 0); /* scheduled: not claimable */
    CU_ASSERT_EQUAL(moon_mailbox_mark_empty(mb), 1);
    CU_ASSERT_EQUAL(moon_mailbox_push(mb, env_of(item(0, 4))), 1); /* schedules again */
    CU_ASSERT_EQUAL(moon_mailbox_mark_empty(mb), 0); /* a push came in: stays scheduled */
    CU_ASSERT_PTR_NOT_NULL(moon_mailbox_pop(mb));
    CU_ASSERT_EQUAL(moon_mailbox_mark_empty(mb), 1);
    CU_ASSERT_EQUAL(moon_mailbox_claim(mb), 1);
    CU_ASSERT_EQUAL(moon_mailbox_push(mb, env_of(item(0, 5))), 0); /* claimed = scheduled */
    moon_mailbox_drain(mb);
    moon_free(mb);
}

static void test_depth_scan_is_bounded(void)
{
    moon_mailbox_t *mb = moon_aligned_alloc(MOON_CACHE_LINE, sizeof(*mb));

    if (mb == NULL) {
        CU_FAIL_FATAL("out of memory");
        return;
    }
    moon_mailbox_init(mb);
    for (uint32_t n = 0; n < 1000; n++) {
        moon_mailbox_push(mb, env_of(item(0, n)));
    }
    CU_ASSERT_EQUAL(moon_mailbox_depth(mb, 100), 100);    /* a lower bound... */
    CU_ASSERT_EQUAL(moon_mailbox_depth(mb, 10000), 1000); /* ...that catches up */
    moon_mailbox_drain(mb);
    moon_free(mb);
}

/* Stress: producers push; whoever gets "was empty" schedules the consumer by
 * bumping `scheduled`; the consumer runs only when scheduled, drains, and
 * marks empty. Checks: every message exactly once, FIFO per producer, and
 * never two schedules of a running consumer. */
#define N_PRODUCERS 4
#define N_PER 200000

static struct {
    moon_mailbox_t *mb;
    _Atomic int     scheduled; /* outstanding schedule tokens (0 or 1) */
    _Atomic int     double_schedule;
    _Atomic int     done_producers;
} st;

static void *producer(void *arg)
{
    uint32_t p = (uint32_t)(uintptr_t)arg;

    for (uint32_t n = 0; n < N_PER; n++) {
        t_item_t *m = moon_msg_new(T_MSG_ITEM, 0);
        m->producer = p;
        m->n        = n;
        if (moon_mailbox_push(st.mb, moon_msg_env(&m->hdr))) {
            if (atomic_fetch_add(&st.scheduled, 1) != 0) {
                atomic_store(&st.double_schedule, 1);
            }
        }
    }
    moon_msg_cache_flush();
    atomic_fetch_add(&st.done_producers, 1);
    return NULL;
}

static void test_multi_producer_stress(void)
{
    pthread_t tid[N_PRODUCERS];
    uint32_t  next[N_PRODUCERS] = {0};
    uint64_t  received          = 0;
    int       order_ok          = 1;

    st.mb = moon_aligned_alloc(MOON_CACHE_LINE, sizeof(*st.mb));
    if (st.mb == NULL) {
        CU_FAIL_FATAL("out of memory");
        return;
    }
    moon_mailbox_init(st.mb);
    for (uintptr_t p = 0; p < N_PRODUCERS; p++) {
        pthread_create(&tid[p], NULL, producer, (void *)p);
    }
    while (received < (uint64_t)N_PRODUCERS * N_PER) {
        moon_msg_env_t *env;

        if (atomic_load(&st.scheduled) == 0) {
            sched_yield();
            continue;
        }
        while ((env = moon_mailbox_pop(st.mb)) != NULL) {
            t_item_t *m = (t_item_t *)moon_env_msg(env);
            order_ok &= m->n == next[m->producer];
            next[m->producer] = m->n + 1;
            received++;
        }
        /* Give the token back before marking empty: the next push that finds
         * the mark takes a new one. */
        atomic_fetch_sub(&st.scheduled, 1);
        if (!moon_mailbox_mark_empty(st.mb)) {
            atomic_fetch_add(&st.scheduled, 1); /* a push raced in: still ours */
        }
    }
    for (int p = 0; p < N_PRODUCERS; p++) {
        pthread_join(tid[p], NULL);
    }
    CU_ASSERT_EQUAL(received, (uint64_t)N_PRODUCERS * N_PER);
    CU_ASSERT(order_ok);
    CU_ASSERT_EQUAL(atomic_load(&st.double_schedule), 0);
    CU_ASSERT_PTR_NULL(moon_mailbox_pop(st.mb));
    moon_mailbox_drain(st.mb);
    moon_free(st.mb);
}

static int setup(void)
{
    return moon_msg_register(t_msg_descs) != MOON_OK;
}

MOON_TEST_MAIN("mailbox", setup, NULL, test_fifo_and_empty_protocol, test_depth_scan_is_bounded,
               test_multi_producer_stress)
