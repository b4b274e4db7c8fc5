/* tests/unit/kvstore/kv_test_util.h - helpers shared by the kvstore tests:
 * synthetic keys and blocks, an event recorder. Single-threaded. */
#ifndef MOON_KV_TEST_UTIL_H
#define MOON_KV_TEST_UTIL_H

#include "moonlet/kv_shard.h"

#include "moon_test.h"

#include <string.h>

static const moon_kv_tag_t kv_tag = {.model_id = 42, .weight_version = 3};

static inline moon_kv_key_t kv_key(uint64_t i)
{
    uint64_t      s   = i * 2654435761u + 1;
    moon_kv_key_t key = {.lo = moon_test_rand(&s), .hi = moon_test_rand(&s)};

    return key;
}

/* Deterministic block content for key i. */
static inline void kv_fill(void *buf, size_t n, uint64_t i)
{
    uint64_t s = i + 99;

    for (size_t k = 0; k < n; k++) {
        ((unsigned char *)buf)[k] = (unsigned char)moon_test_rand(&s);
    }
}

typedef struct {
    moon_kv_event_t ev[256];
    unsigned        n;
    unsigned        count[8]; /* by kind */
} kv_events_t;

static inline void kv_record(const moon_kv_event_t *event, void *arg)
{
    kv_events_t *r = arg;

    if (r->n < 256) {
        r->ev[r->n] = *event;
    }
    r->n++;
    r->count[event->kind]++;
}

/* The default config but for the slots (n_slots of slot_bytes each). */
static inline moon_kv_shard_config_t kv_shard_config(uint32_t n_slots, size_t slot_bytes)
{
    moon_kv_shard_config_t cfg;

    moon_kv_shard_config_init(&cfg);
    cfg.n_slots    = n_slots;
    cfg.slot_bytes = slot_bytes;
    return cfg;
}

static inline moon_status_t kv_put_i(moon_kv_shard_t *shard, uint64_t i, size_t n_bytes)
{
    unsigned char buf[4096];

    kv_fill(buf, n_bytes, i);
    return moon_kv_shard_put(shard, &kv_tag, kv_key(i), buf, n_bytes, 1, 0);
}

/* 1 when a get of block i returns exactly its bytes (lease released after). */
static inline int kv_check_i(moon_kv_shard_t *shard, uint64_t i, size_t n_bytes)
{
    unsigned char buf[4096];
    moon_kv_get_t get;
    int           ok;

    if (moon_kv_shard_get(shard, &kv_tag, kv_key(i), 1, 0, &get) != MOON_OK) {
        return 0;
    }
    kv_fill(buf, n_bytes, i);
    ok = get.n_bytes == n_bytes && memcmp(get.ptr, buf, n_bytes) == 0;
    return moon_kv_shard_release(shard, get.lease) == MOON_OK && ok;
}

#endif /* MOON_KV_TEST_UTIL_H */
