/* runtime/msg/msg.c - message registry, allocation pools, spans and references.
 *
 * Pools: size classes of 64 B..8 KiB (envelope included). Each thread keeps a
 * private free list per class (no atomics, no locks on the hot path); a list
 * that grows past CACHE_MAX hands half to a mutex-protected shared list, and an
 * empty one takes a batch back, so producer/consumer pairs on different
 * threads move memory in batches. Larger messages use the heap directly. */
#include "msg_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/hash.h"
#include "moonlet/log.h"

#include <pthread.h>
#include <string.h>

#define N_CLASSES 8 /* 64 << 0 .. 64 << 7 = 8 KiB */
#define CACHE_MAX 512
#define CACHE_BATCH 256

/* ---- registry ------------------------------------------------------------- */
/* Written under registry_lock, read lock-free by the codec on any thread:
 * release stores pair with the acquire loads in moon_msg_desc(). */
static _Atomic(const moon_msg_desc_t *) registry[MOON_MSG_MAX_TYPES];
static uint32_t        layout_hash[MOON_MSG_MAX_TYPES]; /* written before its entry */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

/* A hash of what a message image's bytes mean: the header's and the struct's
 * sizes, and each field's kind and offset. Never 0. */
static uint32_t layout_of(const moon_msg_desc_t *d)
{
    uint64_t h = moon_hash_combine(sizeof(moon_msg_hdr_t), d->struct_bytes);

    h = moon_hash_combine(h, d->n_fields);
    for (uint32_t i = 0; i < d->n_fields; i++) {
        h = moon_hash_combine(moon_hash_combine(h, d->fields[i].kind), d->fields[i].offset);
    }
    return (uint32_t)h != 0 ? (uint32_t)h : 1;
}

moon_status_t moon_msg_register(const moon_msg_desc_t *descs)
{
    moon_status_t status = MOON_OK;

    pthread_mutex_lock(&registry_lock);
    for (const moon_msg_desc_t *d = descs; d->name != NULL; d++) {
        if (d->id >= MOON_MSG_MAX_TYPES) {
            MOON_ERROR("message %s: id %u out of range", d->name, d->id);
            status = MOON_ERR_INVALID_PARAM;
            goto out;
        }
        const moon_msg_desc_t *cur = atomic_load_explicit(&registry[d->id], memory_order_relaxed);
        if (cur != NULL && cur != d) {
            MOON_ERROR("message %s: id %u already taken by %s", d->name, d->id, cur->name);
            status = MOON_ERR_EXISTS;
            goto out;
        }
    }
    for (const moon_msg_desc_t *d = descs; d->name != NULL; d++) {
        if (atomic_load_explicit(&registry[d->id], memory_order_relaxed) != d) {
            layout_hash[d->id] = layout_of(d);
            atomic_store_explicit(&registry[d->id], d, memory_order_release);
        }
    }
out:
    pthread_mutex_unlock(&registry_lock);
    return status;
}

const moon_msg_desc_t *moon_msg_desc(uint32_t type)
{
    return type < MOON_MSG_MAX_TYPES ? atomic_load_explicit(&registry[type], memory_order_acquire)
                                     : NULL;
}

uint32_t moon_msg_layout(uint32_t type)
{
    return moon_msg_desc(type) != NULL ? layout_hash[type] : 0; /* after the acquire */
}

const char *moon_msg_name(uint32_t type)
{
    const moon_msg_desc_t *d = moon_msg_desc(type);

    return d != NULL ? d->name : "?";
}

/* ---- pools ---------------------------------------------------------------- */
typedef struct {
    moon_msg_env_t *head;
    uint32_t        count;
} free_list_t;

static struct {
    pthread_mutex_t lock;
    free_list_t     list;
} shared_pool[N_CLASSES] = {
#define SHARED_INIT                                                                                \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER,                                                                 \
        {                                                                                          \
            NULL, 0                                                                                \
        }                                                                                          \
    }
    SHARED_INIT, SHARED_INIT, SHARED_INIT, SHARED_INIT,
    SHARED_INIT, SHARED_INIT, SHARED_INIT, SHARED_INIT,
};

static _Thread_local free_list_t tls_cache[N_CLASSES];

static inline moon_msg_env_t *list_pop(free_list_t *l)
{
    moon_msg_env_t *env = l->head;

    if (env != NULL) {
        l->head = atomic_load_explicit(&env->next, memory_order_relaxed);
        l->count--;
    }
    return env;
}

static inline void list_push(free_list_t *l, moon_msg_env_t *env)
{
    atomic_store_explicit(&env->next, l->head, memory_order_relaxed);
    l->head = env;
    l->count++;
}

static inline int class_of(size_t bytes)
{
    size_t size = 64;

    for (int c = 0; c < N_CLASSES; c++, size <<= 1) {
        if (bytes <= size) {
            return c;
        }
    }
    return -1;
}

static MOON_NOINLINE moon_msg_env_t *pool_refill(int c)
{
    free_list_t    *cache = &tls_cache[c];
    moon_msg_env_t *env;

    pthread_mutex_lock(&shared_pool[c].lock);
    for (int i = 0; i < CACHE_BATCH && shared_pool[c].list.head != NULL; i++) {
        list_push(cache, list_pop(&shared_pool[c].list));
    }
    pthread_mutex_unlock(&shared_pool[c].lock);
    env = list_pop(cache);
    if (env == NULL) {
        env = moon_aligned_alloc(MOON_CACHE_LINE, (size_t)64 << c);
    }
    return env;
}

static MOON_NOINLINE void pool_spill(int c)
{
    free_list_t *cache = &tls_cache[c];
    free_list_t  batch = {NULL, 0};

    while (batch.count < CACHE_BATCH) {
        list_push(&batch, list_pop(cache));
    }
    pthread_mutex_lock(&shared_pool[c].lock);
    while (batch.head != NULL) {
        list_push(&shared_pool[c].list, list_pop(&batch));
    }
    pthread_mutex_unlock(&shared_pool[c].lock);
}

void moon_msg_cache_flush(void)
{
    for (int c = 0; c < N_CLASSES; c++) {
        free_list_t *cache = &tls_cache[c];

        pthread_mutex_lock(&shared_pool[c].lock);
        while (cache->head != NULL) {
            list_push(&shared_pool[c].list, list_pop(cache));
        }
        pthread_mutex_unlock(&shared_pool[c].lock);
    }
}

__attribute__((destructor)) static void pool_trim(void)
{
    /* At exit: give pooled memory back so leak checkers see a clean heap. */
    moon_msg_cache_flush();
    for (int c = 0; c < N_CLASSES; c++) {
        moon_msg_env_t *env;

        while ((env = list_pop(&shared_pool[c].list)) != NULL) {
            moon_free(env);
        }
    }
}

static moon_msg_env_t *env_alloc(size_t bytes)
{
    int             c = class_of(bytes);
    moon_msg_env_t *env;

    if (MOON_LIKELY(c >= 0)) {
        env = list_pop(&tls_cache[c]);
        if (MOON_UNLIKELY(env == NULL)) {
            env = pool_refill(c);
            if (env == NULL) {
                return NULL;
            }
        }
        env->size_class = (uint8_t)c;
    } else {
        env = moon_aligned_alloc(MOON_CACHE_LINE, bytes);
        if (env == NULL) {
            return NULL;
        }
        env->size_class = MSG_CLASS_BIG;
    }
    atomic_store_explicit(&env->next, NULL, memory_order_relaxed);
    atomic_store_explicit(&env->refs, 1, memory_order_relaxed);
    env->dst    = MOON_ADDR_NONE;
    env->mb_seq = 0;
    return env;
}

static void env_free(moon_msg_env_t *env)
{
    int c = env->size_class;

    if (c == MSG_CLASS_STUB) {
        return;
    }
    if (c == MSG_CLASS_BIG) {
        moon_free(env);
        return;
    }
    list_push(&tls_cache[c], env);
    if (MOON_UNLIKELY(tls_cache[c].count > CACHE_MAX)) {
        pool_spill(c);
    }
}

/* ---- messages ------------------------------------------------------------- */
static void *msg_alloc_raw(uint32_t type, size_t struct_bytes, size_t tail_bytes)
{
    size_t          msg_bytes = (struct_bytes + tail_bytes + 7) & ~(size_t)7;
    moon_msg_env_t *env;
    moon_msg_hdr_t *msg;

    if (msg_bytes > UINT32_MAX - sizeof(moon_msg_env_t)) {
        return NULL;
    }
    env = env_alloc(sizeof(moon_msg_env_t) + msg_bytes);
    if (env == NULL) {
        return NULL;
    }
    env->tail_used = (uint32_t)struct_bytes;
    msg            = moon_env_msg(env);
    memset(msg, 0, struct_bytes);
    msg->type       = (uint16_t)type;
    msg->size_bytes = (uint32_t)msg_bytes;
    return msg;
}

void *moon_msg_new(uint32_t type, size_t tail_bytes)
{
    const moon_msg_desc_t *d = moon_msg_desc(type);

    if (MOON_UNLIKELY(d == NULL)) {
        MOON_ERROR("moon_msg_new: message type %u is not registered", type);
        return NULL;
    }
    return msg_alloc_raw(type, d->struct_bytes, tail_bytes);
}

void *moon_msg_span_alloc(void *msg, moon_span_t *span, uint32_t n, uint32_t elem_bytes, int is_str)
{
    moon_msg_hdr_t *hdr   = msg;
    moon_msg_env_t *env   = moon_msg_env(hdr);
    uint32_t        align = elem_bytes >= 8 ? 8 : (elem_bytes >= 4 ? 4 : 1);
    uint64_t        off   = ((uint64_t)env->tail_used + align - 1) & ~(uint64_t)(align - 1);
    uint64_t        bytes = (uint64_t)n * elem_bytes + (is_str ? 1 : 0);
    char           *p;

    if (off + bytes > hdr->size_bytes) {
        return NULL;
    }
    p = (char *)msg + off;
    /* the alignment gap zeroed: a message image carries it to a peer, which
     * should not get a previous message's bytes */
    memset((char *)msg + env->tail_used, 0, (size_t)(off - env->tail_used));
    if (is_str) {
        p[bytes - 1] = '\0';
    }
    env->tail_used = (uint32_t)(off + bytes);
    span->off      = (uint32_t)off;
    span->n        = n;
    return p;
}

moon_status_t moon_msg_set_str(void *msg, moon_span_t *span, const char *text)
{
    size_t len = strlen(text);
    char  *p;

    if (len > UINT32_MAX - 1) {
        return MOON_ERR_INVALID_PARAM;
    }
    p = moon_msg_span_alloc(msg, span, (uint32_t)len, 1, 1);
    if (p == NULL) {
        return MOON_ERR_NO_RESOURCE;
    }
    memcpy(p, text, len);
    return MOON_OK;
}

void moon_msg_retain(const moon_msg_hdr_t *msg)
{
    /* relaxed: the caller already holds a reference, so nothing to order. */
    atomic_fetch_add_explicit(&moon_msg_env(msg)->refs, 1, memory_order_relaxed);
}

void moon_msg_release(const moon_msg_hdr_t *msg)
{
    moon_msg_env_t *env;

    if (msg == NULL) {
        return;
    }
    env = moon_msg_env(msg);
    /* The sole holder frees without a locked decrement: nobody else can take
     * a reference, and the acquire pairs with the other holders' releasing
     * decrements, so their writes are seen before the memory is reused. */
    if (atomic_load_explicit(&env->refs, memory_order_acquire) == 1) {
        env_free(env);
        return;
    }
    /* acq_rel: the last release must see every other holder's writes before freeing. */
    if (atomic_fetch_sub_explicit(&env->refs, 1, memory_order_acq_rel) == 1) {
        env_free(env);
    }
}

void *moon_msg_dup(const moon_msg_hdr_t *msg)
{
    moon_msg_hdr_t *copy = msg_alloc_raw(msg->type, msg->size_bytes, 0);

    if (copy != NULL) {
        memcpy(copy, msg, msg->size_bytes);
        moon_msg_env(copy)->tail_used = moon_msg_env(msg)->tail_used;
    }
    return copy;
}

void *moon_msg_new_for_decode(const moon_msg_desc_t *d, size_t tail_bytes)
{
    return msg_alloc_raw(d->id, d->struct_bytes, tail_bytes);
}
