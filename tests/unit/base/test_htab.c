/* tests/unit/base/test_htab.c - the open-addressing hash table: lookups,
 * backward-shift deletes against a reference model, growth, fixed tables,
 * element ownership, external keys and allocation failures. */
#include "moonlet/htab.h"

#include "moonlet/alloc.h"
#include "moonlet/hash.h"

#include "moon_test.h"

#include <string.h>

typedef struct {
    uint64_t key;
    uint64_t value;
} kv_t;

static const moon_htab_type_t kv_type = {.elem_bytes = sizeof(kv_t), .key_bytes = sizeof(uint64_t)};

/* A hash that sends every key to one of four homes: long runs, many shifts. */
static uint64_t clumped_hash(const void *key, void *arg)
{
    uint64_t k;

    (void)arg;
    memcpy(&k, key, sizeof(k));
    return k % 4;
}

static const moon_htab_type_t clumped_type = {
    .elem_bytes = sizeof(kv_t), .key_bytes = sizeof(uint64_t), .hash = clumped_hash};

static void test_insert_find_remove(void)
{
    moon_htab_t *h = NULL;
    kv_t         e = {7, 70};
    void        *got;

    CU_ASSERT_EQUAL_FATAL(moon_htab_create(&kv_type, NULL, 0, 0, &h), MOON_OK);
    CU_ASSERT_PTR_NULL(moon_htab_find(h, &e.key));
    CU_ASSERT_EQUAL(moon_htab_insert(h, &e.key, &e, &got), MOON_OK);
    CU_ASSERT_EQUAL(((kv_t *)got)->value, 70);
    e.value = 71;
    CU_ASSERT_EQUAL(moon_htab_insert(h, &e.key, &e, &got), MOON_ERR_EXISTS);
    CU_ASSERT_EQUAL(((kv_t *)got)->value, 70); /* the existing one, unchanged */
    CU_ASSERT_EQUAL(moon_htab_count(h), 1);
    got = moon_htab_find(h, &e.key);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT_EQUAL(((kv_t *)got)->value, 70);
    CU_ASSERT_EQUAL(moon_htab_remove(h, &e.key), MOON_OK);
    CU_ASSERT_EQUAL(moon_htab_remove(h, &e.key), MOON_ERR_NOT_FOUND);
    CU_ASSERT_PTR_NULL(moon_htab_find(h, &e.key));
    CU_ASSERT_EQUAL(moon_htab_count(h), 0);
    moon_htab_destroy(h);
    moon_htab_destroy(NULL);
}

static void test_invalid_type_rejected(void)
{
    moon_htab_t           *h        = NULL;
    const moon_htab_type_t no_elem  = {.elem_bytes = 0, .key_bytes = 8};
    const moon_htab_type_t long_key = {.elem_bytes = 8, .key_bytes = 9};

    CU_ASSERT_EQUAL(moon_htab_create(NULL, NULL, 0, 0, &h), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_htab_create(&no_elem, NULL, 0, 0, &h), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_htab_create(&long_key, NULL, 0, 0, &h), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_htab_create(&kv_type, NULL, MOON_HTAB_MAX_CAPACITY + 1, 0, &h),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NULL(h);
}

#define MODEL_KEYS 64

/* Every key of the model is where it must be (present or absent), and the
 * count agrees. */
static void check_against(moon_htab_t *h, const int *present, const uint64_t *values)
{
    size_t n = 0;

    for (uint64_t k = 0; k < MODEL_KEYS; k++) {
        kv_t *e = moon_htab_find(h, &k);

        if (present[k]) {
            n++;
            CU_ASSERT_PTR_NOT_NULL_FATAL(e);
            CU_ASSERT_EQUAL(e->key, k);
            CU_ASSERT_EQUAL(e->value, values[k]);
        } else {
            CU_ASSERT_PTR_NULL(e);
        }
    }
    CU_ASSERT_EQUAL(moon_htab_count(h), n);
}

/* Random inserts and removes (clumped hashes: long runs that wrap around the
 * end) checked after each step against an array of what must be there. */
static void test_random_ops_match_model(void)
{
    int          present[MODEL_KEYS] = {0};
    uint64_t     values[MODEL_KEYS]  = {0};
    uint64_t     seed                = 42;
    moon_htab_t *h                   = NULL;

    CU_ASSERT_EQUAL_FATAL(moon_htab_create(&clumped_type, NULL, 40, MOON_HTAB_FIXED, &h), MOON_OK);
    for (int step = 0; step < 4000; step++) {
        uint64_t k = moon_test_rand(&seed) % MODEL_KEYS;

        if (present[k]) {
            CU_ASSERT_EQUAL(moon_htab_remove(h, &k), MOON_OK);
            present[k] = 0;
        } else {
            kv_t          e      = {k, moon_test_rand(&seed)};
            size_t        before = moon_htab_count(h);
            moon_status_t status = moon_htab_insert(h, &k, &e, NULL);

            if (before == 40) {
                CU_ASSERT_EQUAL(status, MOON_ERR_NO_RESOURCE);
            } else {
                CU_ASSERT_EQUAL_FATAL(status, MOON_OK);
                present[k] = 1;
                values[k]  = e.value;
            }
        }
        check_against(h, present, values);
    }
    moon_htab_destroy(h);
}

static void test_growth_keeps_every_element(void)
{
    moon_htab_t *h   = NULL;
    size_t       pos = 0, seen = 0;
    kv_t        *e;

    CU_ASSERT_EQUAL_FATAL(moon_htab_create(&kv_type, NULL, 2, 0, &h), MOON_OK);
    for (uint64_t k = 0; k < 10000; k++) {
        kv_t in = {k * 3, k};
        CU_ASSERT_EQUAL_FATAL(moon_htab_insert(h, &in.key, &in, NULL), MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_htab_count(h), 10000);
    for (uint64_t k = 0; k < 10000; k++) {
        uint64_t key = k * 3, miss = k * 3 + 1;
        e = moon_htab_find(h, &key);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        CU_ASSERT_EQUAL(e->value, k);
        CU_ASSERT_PTR_NULL(moon_htab_find(h, &miss));
    }
    while ((e = moon_htab_next(h, &pos)) != NULL) {
        CU_ASSERT_EQUAL(e->key, e->value * 3);
        seen++;
    }
    CU_ASSERT_EQUAL(seen, 10000);
    CU_ASSERT(moon_htab_longest_probe(h) < 10000);
    moon_htab_destroy(h);
}

/* A fixed table allocates nothing after create and refuses past its capacity. */
static void test_fixed_table_refuses_past_capacity(void)
{
    moon_htab_t *h = NULL;

    CU_ASSERT_EQUAL_FATAL(moon_htab_create(&kv_type, NULL, 100, MOON_HTAB_FIXED, &h), MOON_OK);
    moon_fault_fail_after(1);
    for (uint64_t k = 0; k < 100; k++) {
        kv_t in = {k, k};
        CU_ASSERT_EQUAL(moon_htab_insert(h, &in.key, &in, NULL), MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_fault_count(), 0);
    moon_fault_reset();
    {
        kv_t in = {100, 100};
        CU_ASSERT_EQUAL(moon_htab_insert(h, &in.key, &in, NULL), MOON_ERR_NO_RESOURCE);
        CU_ASSERT_PTR_NULL(moon_htab_find(h, &in.key));
    }
    CU_ASSERT_EQUAL(moon_htab_count(h), 100);
    moon_htab_destroy(h);
}

/* ---- ownership: elements are freed only through elem_free ---- */
typedef struct {
    char *name; /* owned by the element */
} named_t;

static int n_freed;

static uint64_t name_hash(const void *key, void *arg)
{
    (void)arg;
    return moon_hash_str(key);
}

static int name_eq(const void *key, const void *elem, void *arg)
{
    (void)arg;
    return strcmp(key, ((const named_t *)elem)->name) == 0;
}

static void name_free(void *elem, void *arg)
{
    (void)arg;
    moon_free(((named_t *)elem)->name);
    n_freed++;
}

static const moon_htab_type_t named_type = {
    .elem_bytes = sizeof(named_t), .hash = name_hash, .key_eq = name_eq, .elem_free = name_free};

static void test_elem_free_on_remove_clear_destroy(void)
{
    moon_htab_t *h       = NULL;
    const char  *names[] = {"alpha", "beta", "gamma", "delta", "epsilon"};

    n_freed = 0;
    CU_ASSERT_EQUAL_FATAL(moon_htab_create(&named_type, NULL, 0, 0, &h), MOON_OK);
    for (int i = 0; i < 5; i++) {
        named_t e = {moon_strdup(names[i])};
        CU_ASSERT_EQUAL_FATAL(moon_htab_insert(h, names[i], &e, NULL), MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_htab_remove(h, "beta"), MOON_OK);
    CU_ASSERT_EQUAL(n_freed, 1);
    CU_ASSERT_PTR_NOT_NULL(moon_htab_find(h, "gamma"));
    CU_ASSERT_PTR_NULL(moon_htab_find(h, "beta"));
    moon_htab_clear(h);
    CU_ASSERT_EQUAL(n_freed, 5);
    CU_ASSERT_EQUAL(moon_htab_count(h), 0);
    {
        named_t e = {moon_strdup("zeta")};
        CU_ASSERT_EQUAL_FATAL(moon_htab_insert(h, "zeta", &e, NULL), MOON_OK);
    }
    moon_htab_destroy(h); /* frees zeta: the leak checker would see it otherwise */
    CU_ASSERT_EQUAL(n_freed, 6);
}

static void test_no_elem_free_frees_nothing(void)
{
    moon_htab_t *h   = NULL;
    uint64_t     key = 5;
    kv_t         e   = {5, 1};

    n_freed = 0;
    CU_ASSERT_EQUAL_FATAL(moon_htab_create(&kv_type, NULL, 0, 0, &h), MOON_OK);
    CU_ASSERT_EQUAL(moon_htab_insert(h, &key, &e, NULL), MOON_OK);
    moon_htab_destroy(h);
    CU_ASSERT_EQUAL(n_freed, 0);
}

/* ---- an index: elements are positions in an array that holds the keys ---- */
typedef struct {
    uint64_t keys[16];
} table_t;

static uint64_t ext_hash(const void *key, void *arg)
{
    uint64_t k;

    (void)arg;
    memcpy(&k, key, sizeof(k));
    return moon_hash_mix64(k);
}

static int ext_eq(const void *key, const void *elem, void *arg)
{
    const table_t *t = arg;
    uint32_t       i;

    memcpy(&i, elem, sizeof(i));
    return memcmp(key, &t->keys[i], sizeof(uint64_t)) == 0;
}

static const moon_htab_type_t index_type = {
    .elem_bytes = sizeof(uint32_t), .hash = ext_hash, .key_eq = ext_eq};

static void test_external_keys(void)
{
    table_t      t;
    moon_htab_t *h = NULL;

    CU_ASSERT_EQUAL_FATAL(moon_htab_create(&index_type, &t, 16, MOON_HTAB_FIXED, &h), MOON_OK);
    for (uint32_t i = 0; i < 16; i++) {
        t.keys[i] = 1000 + i * 17;
        CU_ASSERT_EQUAL(moon_htab_insert(h, &t.keys[i], &i, NULL), MOON_OK);
    }
    for (uint32_t i = 0; i < 16; i++) {
        uint32_t *at = moon_htab_find_hashed(h, &t.keys[i], moon_htab_hash(h, &t.keys[i]));
        CU_ASSERT_PTR_NOT_NULL_FATAL(at);
        CU_ASSERT_EQUAL(*at, i);
    }
    moon_htab_remove_at(h, moon_htab_find(h, &t.keys[3]));
    CU_ASSERT_PTR_NULL(moon_htab_find(h, &t.keys[3]));
    CU_ASSERT_EQUAL(moon_htab_count(h), 15);
    moon_htab_destroy(h);
}

/* ---- allocation failures ---- */
static void test_create_fails_cleanly(void)
{
    for (uint64_t n = 1; n <= 2; n++) {
        moon_htab_t *h = NULL;

        moon_fault_fail_after(n);
        CU_ASSERT_EQUAL(moon_htab_create(&kv_type, NULL, 100, 0, &h), MOON_ERR_NO_MEMORY);
        moon_fault_reset();
        CU_ASSERT_PTR_NULL(h);
    }
}

/* A growth that cannot allocate leaves the table as it was. */
static void test_failed_growth_changes_nothing(void)
{
    moon_htab_t *h = NULL;
    uint64_t     k = 0;
    kv_t         e;

    CU_ASSERT_EQUAL_FATAL(moon_htab_create(&kv_type, NULL, 4, 0, &h), MOON_OK);
    moon_fault_fail_after(1);
    for (;; k++) {
        moon_status_t status;

        e      = (kv_t){k, k + 1};
        status = moon_htab_insert(h, &k, &e, NULL);
        if (status != MOON_OK) {
            CU_ASSERT_EQUAL(status, MOON_ERR_NO_MEMORY);
            break;
        }
    }
    moon_fault_reset();
    CU_ASSERT_EQUAL(moon_htab_count(h), k);
    CU_ASSERT_PTR_NULL(moon_htab_find(h, &k));
    for (uint64_t i = 0; i < k; i++) {
        kv_t *got = moon_htab_find(h, &i);
        CU_ASSERT_PTR_NOT_NULL_FATAL(got);
        CU_ASSERT_EQUAL(got->value, i + 1);
    }
    CU_ASSERT_EQUAL(moon_htab_insert(h, &k, &e, NULL), MOON_OK); /* and grows once it can */
    moon_htab_destroy(h);
}

/* reserve: room made once, then inserts up to it allocate nothing; a FIXED
 * table only says whether it fits; a failed growth keeps every element. */
static void test_reserve_makes_room_up_front(void)
{
    moon_htab_t *h = NULL, *f = NULL;
    kv_t         in;

    CU_ASSERT_EQUAL_FATAL(moon_htab_create(&kv_type, NULL, 0, 0, &h), MOON_OK);
    in = (kv_t){7, 70};
    CU_ASSERT_EQUAL(moon_htab_insert(h, &in.key, &in, NULL), MOON_OK);
    moon_fault_fail_after(1);
    CU_ASSERT_EQUAL(moon_htab_reserve(h, 5000), MOON_ERR_NO_MEMORY);
    moon_fault_reset();
    CU_ASSERT_EQUAL(moon_htab_count(h), 1);
    CU_ASSERT_PTR_NOT_NULL(moon_htab_find(h, &in.key));
    CU_ASSERT_EQUAL(moon_htab_reserve(h, 5000), MOON_OK);
    moon_fault_fail_after(1);
    for (uint64_t k = 100; k < 100 + 4999; k++) {
        in = (kv_t){k, k};
        CU_ASSERT_EQUAL(moon_htab_insert(h, &in.key, &in, NULL), MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_fault_count(), 0);
    moon_fault_reset();
    CU_ASSERT_EQUAL(moon_htab_count(h), 5000);
    CU_ASSERT_EQUAL_FATAL(moon_htab_create(&kv_type, NULL, 100, MOON_HTAB_FIXED, &f), MOON_OK);
    CU_ASSERT_EQUAL(moon_htab_reserve(f, 100), MOON_OK);
    CU_ASSERT_EQUAL(moon_htab_reserve(f, 101), MOON_ERR_NO_RESOURCE);
    moon_htab_destroy(f);
    moon_htab_destroy(h);
}

MOON_TEST_MAIN("htab", NULL, NULL, test_insert_find_remove, test_invalid_type_rejected,
               test_random_ops_match_model, test_growth_keeps_every_element,
               test_fixed_table_refuses_past_capacity, test_elem_free_on_remove_clear_destroy,
               test_no_elem_free_frees_nothing, test_external_keys, test_create_fails_cleanly,
               test_failed_growth_changes_nothing, test_reserve_makes_room_up_front)
