/* tests/unit/actors/test_store_actor.c - the store shard actor and the client
 * library in one process under the deterministic executor (virtual clock):
 * put/get round trips of odd sizes with byte checks, replicas, unknown keys,
 * oversized blocks, a full store, same-key concurrent puts, wrong model or
 * weight version, a client dying mid-put and mid-get (reservation and lease
 * reclaimed), reservation timeout, a shard dying (reads from the surviving
 * replica), events, queries, pins, batches (vector messages: one per shard
 * and verb). No bytes leave the process: grants carry the arena address and
 * the client copies. */
#include "moon_test.h"
#include "store_driver.h"

#include "moonlet/kv_placement.h"
#include "moonlet/kv_shard.h"

#include <stdio.h>
#include <stdlib.h>

#define N_SHARDS 3
#define SLOT_BYTES 8192
#define N_SLOTS 16

static moon_runtime_t  *rt;
static _Atomic uint64_t n_type[MOON_MSG_MAX_TYPES]; /* messages dispatched, by type */

static void count_type(void *arg, uint64_t now_ns, const moon_msg_hdr_t *msg, moon_addr_t dst)
{
    (void)arg, (void)now_ns, (void)dst;
    atomic_fetch_add(&n_type[msg->type % MOON_MSG_MAX_TYPES], 1);
}
static moon_addr_t shards[N_SHARDS];
static moon_addr_t drv;

static void spawn_shards(uint32_t n_slots, uint64_t reserve_timeout_ns)
{
    for (uint32_t i = 0; i < N_SHARDS; i++) {
        moon_store_shard_args_t a = {.shard_id           = i,
                                     .slot_bytes         = SLOT_BYTES,
                                     .n_slots            = n_slots,
                                     .reserve_timeout_ns = reserve_timeout_ns,
                                     .tick_ns            = 10 * 1000 * 1000,
                                     .verify_on_commit   = 1};
        CU_ASSERT_EQUAL_FATAL(moon_spawn(rt, &moon_store_shard_ops, &a, NULL, &shards[i]), MOON_OK);
    }
}

static moon_addr_t spawn_driver(uint32_t n_replicas, uint64_t version)
{
    d_args_t    a;
    moon_addr_t addr;

    memset(&a, 0, sizeof(a));
    a.cfg.n_shards   = n_replicas ? N_SHARDS : 0;
    a.cfg.n_replicas = n_replicas;
    a.cfg.tag        = (moon_kv_tag_t){1, version};
    a.cfg.verify_get = 1;
    memcpy(a.shards, shards, sizeof(shards));
    CU_ASSERT_EQUAL_FATAL(moon_spawn(rt, &d_ops, &a, NULL, &addr), MOON_OK);
    return addr;
}

static void setup(uint32_t n_slots, uint64_t reserve_timeout_ns)
{
    moon_runtime_config_t cfg;

    moon_runtime_config_default(&cfg);
    cfg.deterministic = 1;
    cfg.seed          = 7;
    cfg.max_actors    = 64;
    cfg.trace         = count_type;
    memset(n_type, 0, sizeof(n_type));
    CU_ASSERT_EQUAL_FATAL(moon_runtime_create(&cfg, &rt), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_msg_register(d_msg_descs), MOON_OK);
    memset(d_res, 0, sizeof(d_res));
    for (int i = 0; i < 8; i++) {
        atomic_store(&d_events[i], 0);
    }
    spawn_shards(n_slots, reserve_timeout_ns);
    drv = spawn_driver(2, 1);
}

static void teardown(void)
{
    moon_runtime_destroy(rt);
    rt = NULL;
}

/* Sends a command and runs the executor until its result is in (virtual time
 * advances through timer ticks when nothing else is runnable). */
static moon_status_t run_cmd(moon_addr_t to, d_cmd_t *c)
{
    uint64_t slot = c->slot;

    CU_ASSERT_EQUAL_FATAL(moon_runtime_send(rt, to, &c->hdr), MOON_OK);
    for (int i = 0; i < 100000 && !atomic_load(&d_res[slot].done); i++) {
        moon_runtime_step(rt, 1);
    }
    CU_ASSERT_FATAL(atomic_load(&d_res[slot].done));
    return d_res[slot].status;
}

/* Runs whatever is runnable now (no time passes beyond one timer tick). */
static void settle(void)
{
    moon_runtime_step(rt, 200);
}

static moon_kv_key_t key_of(uint64_t i)
{
    return (moon_kv_key_t){0x1234567800000000ull + i, 0xabcdef00ull ^ (i * 0x9e3779b97f4a7c15ull)};
}

static moon_store_stats_reply_t stats_of(uint32_t shard)
{
    CU_ASSERT_EQUAL(run_cmd(drv, d_cmd(D_STATS, 200 + shard, key_of(0), NULL, 0, 0, shards[shard])),
                    MOON_OK);
    return d_res[200 + shard].stats;
}

static moon_status_t put(uint64_t slot, moon_kv_key_t key, const void *buf, size_t n)
{
    return run_cmd(drv, d_cmd(MOON_STORE_OP_PUT, slot, key, buf, n, 0, 0));
}

static moon_status_t get(uint64_t slot, moon_kv_key_t key, void *buf, size_t cap)
{
    return run_cmd(drv, d_cmd(MOON_STORE_OP_GET, slot, key, buf, cap, 0, 0));
}

static void check_no_leftovers(void)
{
    for (uint32_t s = 0; s < N_SHARDS; s++) {
        moon_store_stats_reply_t st = stats_of(s);
        CU_ASSERT_EQUAL(st.n_reserved, 0);
        CU_ASSERT_EQUAL(st.n_leases, 0);
        CU_ASSERT_EQUAL(st.used_slots, st.n_committed);
    }
}

/* ---- tests ------------------------------------------------------------------ */
static void test_put_get_odd_sizes_two_replicas(void)
{
    static unsigned char src[SLOT_BYTES], dst[SLOT_BYTES];
    const size_t         sizes[] = {1, 7, 4095, 4096, 4097, SLOT_BYTES - 1, SLOT_BYTES};

    setup(N_SLOTS, 0);
    for (uint64_t i = 0; i < MOON_ARRAY_SIZE(sizes); i++) {
        d_fill(src, sizes[i], i);
        CU_ASSERT_EQUAL(put(1, key_of(i), src, sizes[i]), MOON_OK);
        CU_ASSERT_EQUAL(d_res[1].n_replicas, 2);
        memset(dst, 0, sizeof(dst));
        CU_ASSERT_EQUAL(get(2, key_of(i), dst, sizeof(dst)), MOON_OK);
        CU_ASSERT_EQUAL(d_res[2].n_bytes, sizes[i]);
        CU_ASSERT_EQUAL(memcmp(src, dst, sizes[i]), 0);
    }
    {
        uint32_t total = 0;
        for (uint32_t s = 0; s < N_SHARDS; s++) {
            total += stats_of(s).n_committed;
        }
        CU_ASSERT_EQUAL(total, 2 * MOON_ARRAY_SIZE(sizes)); /* R = 2 copies of each */
    }
    check_no_leftovers();
    teardown();
}

static void test_bad_input_unknown_oversized_small_buffer(void)
{
    static unsigned char buf[2 * SLOT_BYTES];

    setup(N_SLOTS, 0);
    CU_ASSERT_EQUAL(get(1, key_of(99), buf, sizeof(buf)), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(put(2, key_of(1), buf, SLOT_BYTES + 1), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(d_res[2].n_replicas, 0);
    CU_ASSERT_EQUAL(put(3, key_of(1), buf, 0), MOON_ERR_INVALID_PARAM); /* refused at the call */
    d_fill(buf, 5000, 1);
    CU_ASSERT_EQUAL(put(4, key_of(1), buf, 5000), MOON_OK);
    CU_ASSERT_EQUAL(get(5, key_of(1), buf, 100), MOON_ERR_INVALID_PARAM); /* buffer too small */
    CU_ASSERT_EQUAL(d_res[5].n_bytes, 5000);
    /* a malformed query (odd number of u64s) is refused by the shard */
    CU_ASSERT_EQUAL(run_cmd(drv, d_cmd(D_RAW_QUERY, 6, key_of(0), buf, 3, 0, shards[0])),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(run_cmd(drv, d_cmd(D_RAW_QUERY, 7, key_of(0), buf, 2, 9, shards[0])),
                    MOON_ERR_INVALID_PARAM);
    check_no_leftovers();
    teardown();
}

static void test_wrong_model_or_version_never_served(void)
{
    static unsigned char buf[SLOT_BYTES];
    moon_addr_t          v2;

    setup(N_SLOTS, 0);
    d_fill(buf, 1000, 3);
    CU_ASSERT_EQUAL(put(1, key_of(1), buf, 1000), MOON_OK);
    v2 = spawn_driver(2, 2); /* same key, weight version 2 */
    CU_ASSERT_EQUAL(run_cmd(v2, d_cmd(MOON_STORE_OP_GET, 2, key_of(1), buf, sizeof(buf), 0, 0)),
                    MOON_ERR_NOT_FOUND);
    {
        moon_kv_key_t k = key_of(1);
        CU_ASSERT_EQUAL(run_cmd(v2, d_cmd(MOON_STORE_OP_EXISTS, 3, k, &k, 1, 0, 0)), MOON_OK);
        CU_ASSERT_EQUAL(d_res[3].n_hit, 0);
    }
    CU_ASSERT_EQUAL(get(4, key_of(1), buf, sizeof(buf)), MOON_OK);
    teardown();
}

static void test_full_store_says_no_resource(void)
{
    static unsigned char buf[SLOT_BYTES];
    uint64_t             i;

    setup(4, 0);
    /* pin blocks until every slot of some shard is pinned */
    for (i = 0; i < 64; i++) {
        moon_status_t status = put(1, key_of(i), buf, 100);
        if (status == MOON_ERR_NO_RESOURCE) {
            break;
        }
        CU_ASSERT_EQUAL_FATAL(status, MOON_OK);
        CU_ASSERT_EQUAL(run_cmd(drv, d_cmd(MOON_STORE_OP_PIN, 2, key_of(i), NULL, 0, 0, 0)),
                        MOON_OK);
    }
    CU_ASSERT(i < 64);
    CU_ASSERT_EQUAL(d_res[1].status, MOON_ERR_NO_RESOURCE);
    CU_ASSERT(d_res[1].n_replicas < 2); /* the full shard refused its copy */
    /* nothing pinned was evicted */
    for (uint64_t j = 0; j < i; j++) {
        CU_ASSERT_EQUAL(get(3, key_of(j), buf, sizeof(buf)), MOON_OK);
    }
    if (d_res[1].n_replicas == 0) {
        CU_ASSERT_EQUAL(get(3, key_of(i), buf, sizeof(buf)), MOON_ERR_NOT_FOUND);
    }
    /* unpinning makes room again (LRU eviction) */
    for (uint64_t j = 0; j < i; j++) {
        CU_ASSERT_EQUAL(run_cmd(drv, d_cmd(MOON_STORE_OP_UNPIN, 2, key_of(j), NULL, 0, 0, 0)),
                        MOON_OK);
    }
    CU_ASSERT_EQUAL(put(1, key_of(500), buf, 100), MOON_OK);
    CU_ASSERT_EQUAL(d_res[1].n_replicas, 2);
    check_no_leftovers();
    teardown();
}

static void test_same_key_concurrent_puts(void)
{
    static unsigned char a[4000], b[4000], out[SLOT_BYTES];
    moon_addr_t          other;

    setup(N_SLOTS, 0);
    other = spawn_driver(2, 1);
    d_fill(a, sizeof(a), 1);
    d_fill(b, sizeof(b), 2);
    CU_ASSERT_EQUAL(moon_runtime_send(
                        rt, drv, &d_cmd(MOON_STORE_OP_PUT, 1, key_of(5), a, sizeof(a), 0, 0)->hdr),
                    MOON_OK);
    CU_ASSERT_EQUAL(
        moon_runtime_send(rt, other,
                          &d_cmd(MOON_STORE_OP_PUT, 2, key_of(5), b, sizeof(b), 0, 0)->hdr),
        MOON_OK);
    for (int i = 0; i < 10000 && !(d_res[1].done && d_res[2].done); i++) {
        moon_runtime_step(rt, 1);
    }
    CU_ASSERT_FATAL(d_res[1].done && d_res[2].done);
    /* every replica went to exactly one writer; the loser hears EXISTS */
    CU_ASSERT_EQUAL(d_res[1].n_replicas + d_res[2].n_replicas, 2);
    CU_ASSERT(d_res[1].status == MOON_OK || d_res[1].status == MOON_ERR_EXISTS);
    CU_ASSERT(d_res[2].status == MOON_OK || d_res[2].status == MOON_ERR_EXISTS);
    CU_ASSERT(d_res[1].status == MOON_ERR_EXISTS || d_res[2].status == MOON_ERR_EXISTS);
    CU_ASSERT_EQUAL(get(3, key_of(5), out, sizeof(out)), MOON_OK);
    CU_ASSERT(memcmp(out, a, sizeof(a)) == 0 || memcmp(out, b, sizeof(b)) == 0);
    /* the same client twice in a row: the second is refused */
    CU_ASSERT_EQUAL(put(4, key_of(6), a, sizeof(a)), MOON_OK);
    CU_ASSERT_EQUAL(put(5, key_of(6), b, sizeof(b)), MOON_ERR_EXISTS);
    CU_ASSERT_EQUAL(get(6, key_of(6), out, sizeof(out)), MOON_OK);
    CU_ASSERT_EQUAL(memcmp(out, a, sizeof(a)), 0);
    check_no_leftovers();
    teardown();
}

static void test_client_dies_mid_put_and_mid_get(void)
{
    static unsigned char buf[SLOT_BYTES];
    moon_addr_t          raw;
    uint32_t             used_before;

    setup(N_SLOTS, 0);
    /* mid-put: reserved, never committed, writer dies */
    raw = spawn_driver(0, 1);
    CU_ASSERT_EQUAL(run_cmd(raw, d_cmd(D_RAW_RESERVE, 1, key_of(1), NULL, 3000, 1, shards[0])),
                    MOON_OK);
    settle();
    CU_ASSERT_EQUAL(stats_of(0).n_reserved, 0);
    CU_ASSERT_EQUAL(stats_of(0).n_dropped, 1);
    CU_ASSERT_EQUAL(stats_of(0).used_slots, 0);
    /* the key is free for another writer, and nothing half-written is served */
    CU_ASSERT_EQUAL(get(2, key_of(1), buf, sizeof(buf)), MOON_ERR_NOT_FOUND);
    d_fill(buf, 3000, 9);
    CU_ASSERT_EQUAL(put(3, key_of(1), buf, 3000), MOON_OK);

    /* mid-get: a lease granted, the reader dies without releasing */
    raw         = spawn_driver(0, 1);
    used_before = stats_of(0).used_slots;
    {
        /* find a shard that holds key 1 */
        uint32_t s;
        for (s = 0; s < N_SHARDS; s++) {
            if (run_cmd(raw, d_cmd(D_RAW_GET, 4, key_of(1), NULL, 0, 0, shards[s])) == MOON_OK) {
                break;
            }
        }
        CU_ASSERT_FATAL(s < N_SHARDS);
        CU_ASSERT_EQUAL(stats_of(s).n_leases, 1);
        used_before = stats_of(s).used_slots;
        CU_ASSERT_EQUAL(run_cmd(raw, d_cmd(D_RAW_GET, 5, key_of(1), NULL, 0, 1, shards[s])),
                        MOON_OK);
        settle();
        CU_ASSERT_EQUAL(stats_of(s).n_leases, 0); /* both leases dropped with the reader */
        CU_ASSERT_EQUAL(stats_of(s).used_slots, used_before);
    }
    /* removing it now frees its slots at once (no lease left behind) */
    CU_ASSERT_EQUAL(run_cmd(drv, d_cmd(MOON_STORE_OP_REMOVE, 6, key_of(1), NULL, 0, 0, 0)),
                    MOON_OK);
    CU_ASSERT_EQUAL(get(7, key_of(1), buf, sizeof(buf)), MOON_ERR_NOT_FOUND);
    check_no_leftovers();
    teardown();
}

static void test_uncommitted_reservation_expires(void)
{
    static unsigned char buf[SLOT_BYTES];
    moon_addr_t          raw;

    setup(N_SLOTS, 50 * 1000 * 1000); /* 50 ms of virtual time */
    raw = spawn_driver(0, 1);
    CU_ASSERT_EQUAL(run_cmd(raw, d_cmd(D_RAW_RESERVE, 1, key_of(1), NULL, 3000, 0, shards[1])),
                    MOON_OK);
    CU_ASSERT_EQUAL(stats_of(1).n_reserved, 1);
    /* the writer stays alive but silent: after the timeout the slot is reclaimed */
    for (int i = 0; i < 2000 && stats_of(1).n_expired_reservations == 0; i++) {
        moon_runtime_step(rt, 1);
    }
    CU_ASSERT_EQUAL(stats_of(1).n_reserved, 0);
    CU_ASSERT_EQUAL(stats_of(1).n_expired_reservations, 1);
    CU_ASSERT_EQUAL(get(2, key_of(1), buf, sizeof(buf)), MOON_ERR_NOT_FOUND);
    teardown();
}

/* A lease lasts until release (Mooncake #3076: never while the reader's
 * transfer runs): a reader that holds one for minutes of virtual time keeps
 * it, and its block is not evicted however hard the store is pushed. */
static void test_lease_outlives_any_timeout(void)
{
    static unsigned char buf[SLOT_BYTES];
    moon_addr_t          raw;
    uint32_t             s;

    setup(4, 50 * 1000 * 1000);
    d_fill(buf, 2000, 4);
    CU_ASSERT_EQUAL(put(1, key_of(1), buf, 2000), MOON_OK);
    raw = spawn_driver(0, 1);
    for (s = 0; s < N_SHARDS; s++) {
        if (run_cmd(raw, d_cmd(D_RAW_GET, 2, key_of(1), NULL, 0, 0, shards[s])) == MOON_OK) {
            break;
        }
    }
    CU_ASSERT_FATAL(s < N_SHARDS);
    for (int i = 0; i < 200000 && moon_now(rt) < 120ull * 1000 * 1000 * 1000; i++) {
        moon_runtime_step(rt, 1); /* shard ticks of 10 ms: two minutes of virtual time */
    }
    CU_ASSERT(moon_now(rt) >= 120ull * 1000 * 1000 * 1000);
    for (uint64_t k = 0; k < 40; k++) { /* 10x the arena: LRU evicts everything else */
        (void)put(3, key_of(100 + k), buf, 100);
    }
    CU_ASSERT_EQUAL(stats_of(s).n_leases, 1);
    CU_ASSERT_EQUAL(stats_of(s).n_expired_leases, 0);
    CU_ASSERT_EQUAL(run_cmd(raw, d_cmd(D_RAW_GET, 4, key_of(1), NULL, 0, 0, shards[s])), MOON_OK);
    CU_ASSERT_EQUAL(d_res[4].n_bytes, 2000);
    teardown();
}

static void test_shard_dies_reads_from_surviving_replica(void)
{
    static unsigned char src[5000], dst[SLOT_BYTES];
    uint32_t             ids[N_SHARDS] = {0, 1, 2}, home[2];

    setup(N_SLOTS, 0);
    for (uint64_t i = 0; i < 8; i++) {
        d_fill(src, sizeof(src), i);
        CU_ASSERT_EQUAL(put(1, key_of(i), src, sizeof(src)), MOON_OK);
    }
    /* kill the first home replica of key 3 */
    CU_ASSERT_EQUAL(moon_kv_rendezvous(key_of(3), ids, N_SHARDS, home, 2), 2);
    CU_ASSERT_EQUAL(moon_stop(rt, shards[home[0]], MOON_ERR_IO), MOON_OK);
    settle();
    for (uint64_t i = 0; i < 8; i++) {
        d_fill(src, sizeof(src), i);
        memset(dst, 0, sizeof(dst));
        CU_ASSERT_EQUAL(get(2, key_of(i), dst, sizeof(dst)), MOON_OK);
        CU_ASSERT_NOT_EQUAL(d_res[2].shard_id, home[0]);
        CU_ASSERT_EQUAL(memcmp(src, dst, sizeof(src)), 0);
    }
    /* writes go to the two live shards */
    CU_ASSERT_EQUAL(put(3, key_of(100), src, 10), MOON_OK);
    CU_ASSERT_EQUAL(d_res[3].n_replicas, 2);
    CU_ASSERT_EQUAL(get(4, key_of(100), dst, sizeof(dst)), MOON_OK);
    teardown();
}

static void test_events_queries_and_eviction(void)
{
    static unsigned char buf[SLOT_BYTES];
    moon_kv_key_t        keys[32];

    setup(8, 0);
    for (uint32_t s = 0; s < N_SHARDS; s++) {
        CU_ASSERT_EQUAL(run_cmd(drv, d_cmd(D_SUB, 10, key_of(0), NULL, 0, 0, shards[s])), MOON_OK);
    }
    CU_ASSERT_EQUAL(run_cmd(drv, d_cmd(D_SUB, 10, key_of(0), NULL, 0, 0, shards[0])),
                    MOON_ERR_EXISTS);
    for (uint64_t i = 0; i < 32; i++) {
        keys[i] = key_of(1000 + i);
    }
    for (uint64_t i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL(put(1, keys[i], buf, 512), MOON_OK);
    }
    settle();
    CU_ASSERT_EQUAL(atomic_load(&d_events[MOON_KV_EVENT_STORED]), 10); /* 5 keys x R 2 */
    CU_ASSERT_EQUAL(run_cmd(drv, d_cmd(MOON_STORE_OP_PREFIX, 2, key_of(0), keys, 32, 0, 0)),
                    MOON_OK);
    CU_ASSERT_EQUAL(d_res[2].n_hit, 5);
    CU_ASSERT_EQUAL(put(1, keys[7], buf, 512), MOON_OK);
    CU_ASSERT_EQUAL(run_cmd(drv, d_cmd(MOON_STORE_OP_EXISTS, 3, key_of(0), keys, 32, 0, 0)),
                    MOON_OK);
    CU_ASSERT_EQUAL(d_res[3].n_hit, 6);
    CU_ASSERT_EQUAL(run_cmd(drv, d_cmd(MOON_STORE_OP_PREFIX, 4, key_of(0), keys, 32, 0, 0)),
                    MOON_OK);
    CU_ASSERT_EQUAL(d_res[4].n_hit, 5);
    CU_ASSERT_EQUAL(run_cmd(drv, d_cmd(MOON_STORE_OP_REMOVE, 5, keys[0], NULL, 0, 0, 0)), MOON_OK);
    settle();
    CU_ASSERT_EQUAL(atomic_load(&d_events[MOON_KV_EVENT_REMOVED]), 2);
    /* fill well past capacity (3 shards x 8 slots): LRU eviction, EVICTED events */
    for (uint64_t i = 0; i < 40; i++) {
        CU_ASSERT_EQUAL(put(6, key_of(2000 + i), buf, 256), MOON_OK);
    }
    settle();
    CU_ASSERT(atomic_load(&d_events[MOON_KV_EVENT_EVICTED]) > 0);
    check_no_leftovers();
    teardown();
}

/* Regression: two clients fed by one actor used to take each other's replies
 * (their request ids were indistinguishable) and one operation never ended. */
static void test_two_clients_in_one_actor(void)
{
    static unsigned char a[3000], b[5000], out[SLOT_BYTES];
    d_args_t             args;
    moon_addr_t          two;

    setup(N_SLOTS, 0);
    memset(&args, 0, sizeof(args));
    args.cfg.n_shards   = N_SHARDS;
    args.cfg.n_replicas = 2;
    args.cfg.tag        = (moon_kv_tag_t){1, 1};
    args.second_version = 2;
    memcpy(args.shards, shards, sizeof(shards));
    CU_ASSERT_EQUAL_FATAL(moon_spawn(rt, &d_ops, &args, NULL, &two), MOON_OK);
    d_fill(a, sizeof(a), 1);
    d_fill(b, sizeof(b), 2);
    CU_ASSERT_EQUAL(moon_runtime_send(
                        rt, two, &d_cmd(MOON_STORE_OP_PUT, 1, key_of(1), a, sizeof(a), 1, 0)->hdr),
                    MOON_OK);
    CU_ASSERT_EQUAL(moon_runtime_send(
                        rt, two, &d_cmd(MOON_STORE_OP_PUT, 2, key_of(2), b, sizeof(b), 2, 0)->hdr),
                    MOON_OK);
    for (int i = 0; i < 10000 && !(d_res[1].done && d_res[2].done); i++) {
        moon_runtime_step(rt, 1);
    }
    CU_ASSERT_FATAL(d_res[1].done && d_res[2].done);
    CU_ASSERT_EQUAL(d_res[1].status, MOON_OK);
    CU_ASSERT_EQUAL(d_res[2].status, MOON_OK);
    CU_ASSERT_EQUAL(run_cmd(two, d_cmd(MOON_STORE_OP_GET, 3, key_of(2), out, sizeof(out), 2, 0)),
                    MOON_OK);
    CU_ASSERT_EQUAL(memcmp(out, b, sizeof(b)), 0);
    CU_ASSERT_EQUAL(run_cmd(two, d_cmd(MOON_STORE_OP_GET, 4, key_of(2), out, sizeof(out), 1, 0)),
                    MOON_ERR_NOT_FOUND); /* version 1 client: another tag */
    CU_ASSERT_EQUAL(run_cmd(two, d_cmd(MOON_STORE_OP_GET, 5, key_of(1), out, sizeof(out), 1, 0)),
                    MOON_OK);
    CU_ASSERT_EQUAL(memcmp(out, a, sizeof(a)), 0);
    check_no_leftovers();
    teardown();
}

/* A "shard" that takes every request and never answers (alive, so no DOWN). */
static const moon_actor_ops_t silent_ops = {.name = "silent-shard"};

/* Requests to a shard that never answers end with TIMED_OUT through
 * moon_store_client_expire; a healthy shard's operations are not touched. */
static void test_unanswered_requests_time_out(void)
{
    static unsigned char buf[SLOT_BYTES];
    moon_addr_t          silent, drv2;
    d_args_t             a;
    moon_kv_key_t        k = key_of(3);

    setup(N_SLOTS, 0);
    CU_ASSERT_EQUAL_FATAL(moon_spawn(rt, &silent_ops, NULL, NULL, &silent), MOON_OK);
    memset(&a, 0, sizeof(a));
    a.cfg.n_shards   = 1;
    a.cfg.n_replicas = 1;
    a.cfg.tag        = (moon_kv_tag_t){1, 1};
    a.shards[0]      = silent;
    CU_ASSERT_EQUAL_FATAL(moon_spawn(rt, &d_ops, &a, NULL, &drv2), MOON_OK);
    CU_ASSERT_EQUAL(
        moon_runtime_send(rt, drv2, &d_cmd(MOON_STORE_OP_PUT, 1, k, buf, 100, 0, 0)->hdr), MOON_OK);
    CU_ASSERT_EQUAL(
        moon_runtime_send(rt, drv2, &d_cmd(MOON_STORE_OP_GET, 2, k, buf, sizeof(buf), 0, 0)->hdr),
        MOON_OK);
    CU_ASSERT_EQUAL(
        moon_runtime_send(rt, drv2, &d_cmd(MOON_STORE_OP_EXISTS, 3, k, &k, 1, 0, 0)->hdr), MOON_OK);
    settle();
    CU_ASSERT(!d_res[1].done && !d_res[2].done && !d_res[3].done);
    for (int i = 0; i < 1000 && moon_now(rt) < 2000000000ull; i++) {
        moon_runtime_step(rt, 1); /* two seconds of virtual time (shard ticks) */
    }
    CU_ASSERT_EQUAL(run_cmd(drv2, d_cmd(D_EXPIRE, 4, k, NULL, 0, 1000000000ull, 0)), MOON_OK);
    CU_ASSERT_EQUAL(d_res[4].n_hit, 3);
    CU_ASSERT_EQUAL(d_res[1].status, MOON_ERR_TIMED_OUT);
    CU_ASSERT_EQUAL(d_res[2].status, MOON_ERR_TIMED_OUT);
    CU_ASSERT_EQUAL(d_res[3].status, MOON_ERR_TIMED_OUT);
    /* the healthy client is untouched and still works */
    CU_ASSERT_EQUAL(run_cmd(drv, d_cmd(D_EXPIRE, 5, k, NULL, 0, 1000000000ull, 0)), MOON_OK);
    CU_ASSERT_EQUAL(d_res[5].n_hit, 0);
    CU_ASSERT_EQUAL(put(6, k, buf, 100), MOON_OK);
    check_no_leftovers();
    teardown();
}

/* A batch of puts and one of gets (R = 2 over 3 shards): every operation ends
 * on its own as before, but each shard sees one vector per verb; a vector
 * with mismatched spans is dropped and changes nothing. */
static void test_batches_travel_as_vectors(void)
{
    enum { N = 12, LEN = 1000 };
    static unsigned char src[N * LEN], dst[(N + 1) * LEN];
    moon_kv_key_t        k0 = key_of(500);
    d_cmd_t             *c;

    setup(N_SLOTS * 2, 0);
    for (uint32_t i = 0; i < N; i++) {
        d_fill(src + (size_t)i * LEN, LEN, 40 + i);
    }
    c      = d_cmd(D_PUTV, 10, k0, src, LEN, N, 0);
    c->aux = N;
    CU_ASSERT_EQUAL_FATAL(moon_runtime_send(rt, drv, &c->hdr), MOON_OK);
    for (int i = 0; i < 100000 && !atomic_load(&d_res[10 + N - 1].done); i++) {
        moon_runtime_step(rt, 1);
    }
    settle();
    for (uint32_t i = 0; i < N; i++) {
        CU_ASSERT(atomic_load(&d_res[10 + i].done));
        CU_ASSERT_EQUAL(d_res[10 + i].status, MOON_OK);
        CU_ASSERT_EQUAL(d_res[10 + i].n_replicas, 2);
    }
    CU_ASSERT_EQUAL(atomic_load(&n_type[MOON_MSG_STORE_PUT_RESERVE]), 0);
    CU_ASSERT(atomic_load(&n_type[MOON_MSG_STORE_PUT_RESERVEV]) +
                  atomic_load(&n_type[MOON_MSG_STORE_PUT_RESERVE]) <=
              N_SHARDS);
    CU_ASSERT(atomic_load(&n_type[MOON_MSG_STORE_PUT_COMMITV]) +
                  atomic_load(&n_type[MOON_MSG_STORE_PUT_COMMIT]) <=
              N_SHARDS);
    CU_ASSERT_EQUAL(atomic_load(&n_type[MOON_MSG_STORE_PUT_GRANT]), 0);

    /* the N keys and one never stored (NOT_FOUND), in one batch */
    memset(dst, 0, sizeof(dst));
    c      = d_cmd(D_GETV, 40, k0, dst, LEN, N + 1, 0);
    c->aux = N + 1;
    CU_ASSERT_EQUAL_FATAL(moon_runtime_send(rt, drv, &c->hdr), MOON_OK);
    for (int i = 0; i < 100000 && !atomic_load(&d_res[40 + N].done); i++) {
        moon_runtime_step(rt, 1);
    }
    settle();
    for (uint32_t i = 0; i < N; i++) {
        CU_ASSERT_EQUAL(d_res[40 + i].status, MOON_OK);
        CU_ASSERT_EQUAL(d_res[40 + i].n_bytes, LEN);
    }
    CU_ASSERT_EQUAL(memcmp(src, dst, sizeof(src)), 0);
    CU_ASSERT_EQUAL(d_res[40 + N].status, MOON_ERR_NOT_FOUND);
    CU_ASSERT(atomic_load(&n_type[MOON_MSG_STORE_GETV]) +
                  atomic_load(&n_type[MOON_MSG_STORE_GET]) <=
              2 * N_SHARDS); /* the miss tries its second replica alone */
    CU_ASSERT(atomic_load(&n_type[MOON_MSG_STORE_GETV]) >= 1);

    /* malformed: 2 reqs, 1 key: dropped, nothing reserved */
    {
        moon_store_put_reservev_t *m = moon_msg_new(MOON_MSG_STORE_PUT_RESERVEV, 64);
        uint64_t                  *r = moon_msg_span_alloc(m, &m->reqs, 2, 8, 0);
        uint64_t                  *k = moon_msg_span_alloc(m, &m->keys, 2, 8, 0);
        uint64_t                  *b = moon_msg_span_alloc(m, &m->n_bytes, 2, 8, 0);
        r[0] = r[1] = 77;
        k[0] = k[1] = 5;
        b[0] = b[1] = 10;
        CU_ASSERT_EQUAL(moon_runtime_send(rt, shards[0], &m->hdr), MOON_OK);
        settle();
    }
    CU_ASSERT_EQUAL(atomic_load(&n_type[MOON_MSG_STORE_PUT_GRANTV]),
                    atomic_load(&n_type[MOON_MSG_STORE_PUT_RESERVEV]) - 1);
    check_no_leftovers();
    teardown();
}

MOON_TEST_MAIN("store_actor", NULL, NULL, test_batches_travel_as_vectors,
               test_unanswered_requests_time_out, test_two_clients_in_one_actor,
               test_put_get_odd_sizes_two_replicas, test_bad_input_unknown_oversized_small_buffer,
               test_wrong_model_or_version_never_served, test_full_store_says_no_resource,
               test_same_key_concurrent_puts, test_client_dies_mid_put_and_mid_get,
               test_uncommitted_reservation_expires, test_lease_outlives_any_timeout,
               test_shard_dies_reads_from_surviving_replica, test_events_queries_and_eviction)
