/* model/kv_cache.c - paged KV cache: block pool with a free stack and
 * reference counts, per-sequence block tables. Single owner thread. */
#include "moonlet/kv_cache.h"

#include "kv_internal.h"
#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <stdatomic.h>
#include <string.h>

/* A virtual cache's metadata arrays at create; they double as blocks are used. */
#define VIRT_START_BLOCKS 64

static _Atomic uint64_t last_cache_id;

/* Room in the metadata arrays for blocks [0, n) (n <= n_blocks). */
static moon_status_t ensure_cap(moon_kv_cache_t *kv, uint32_t n)
{
    const moon_grow_table_t tables[] = {MOON_GROW_TABLE(kv->refcount),
                                        MOON_GROW_TABLE(kv->free_stack),
                                        MOON_GROW_TABLE(kv->writer)};

    /* writer last: a virtual cache has none */
    return moon_grow_tables(tables, kv->writer != NULL ? 3 : 2, n, kv->cfg.n_blocks, &kv->cap);
}

moon_status_t moon_kv_cache_reserve_meta(moon_kv_cache_t *kv, uint32_t n)
{
    return kv != NULL ? ensure_cap(kv, MOON_MIN(n, kv->cfg.n_blocks)) : MOON_ERR_INVALID_PARAM;
}

/* Room for n more fresh blocks than the free stack holds (n <= n_free). */
static moon_status_t ensure_fresh(moon_kv_cache_t *kv, uint32_t n)
{
    return n > kv->n_stack ? ensure_cap(kv, kv->n_touched + (n - kv->n_stack)) : MOON_OK;
}

/* A handed-out block: ids past n_touched were never allocated. */
static int block_live(const moon_kv_cache_t *kv, uint32_t block)
{
    return block < kv->n_touched && kv->refcount[block] > 0;
}

static int config_ok(const moon_kv_config_t *cfg)
{
    return cfg != NULL && cfg->n_layers != 0 && cfg->n_kv_heads != 0 && cfg->head_dim != 0 &&
           cfg->block_tokens != 0 && cfg->n_blocks != 0 && cfg->max_seqs != 0 &&
           cfg->max_seq_len != 0 && cfg->n_blocks != MOON_KV_NO_BLOCK &&
           moon_kv_type_bytes(cfg->elem_type) != 0;
}

uint32_t moon_kv_type_bytes(moon_kv_type_t type)
{
    return type == MOON_KV_F32 ? 4 : type == MOON_KV_F16 ? 2 : 0;
}

size_t moon_kv_config_pool_bytes(const moon_kv_config_t *cfg)
{
    if (!config_ok(cfg)) {
        return 0;
    }
    return 2 * (size_t)cfg->block_tokens * cfg->n_kv_heads * cfg->head_dim * cfg->n_layers *
           moon_kv_type_bytes(cfg->elem_type) * cfg->n_blocks;
}

/* virt: no block bytes at all (kv->data NULL), the bookkeeping only. */
static moon_status_t cache_create(const moon_kv_config_t *cfg, void *mem, int virt,
                                  moon_kv_cache_t **kv_p)
{
    moon_kv_cache_t *kv;
    size_t           bytes;

    kv = moon_calloc(1, sizeof(*kv));
    if (kv == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    kv->id                 = atomic_fetch_add(&last_cache_id, 1) + 1;
    kv->cfg                = *cfg;
    kv->kv_dim             = cfg->n_kv_heads * cfg->head_dim;
    kv->max_blocks_per_seq = (cfg->max_seq_len + cfg->block_tokens - 1) / cfg->block_tokens;
    kv->elem_bytes         = moon_kv_type_bytes(cfg->elem_type);
    kv->layer_elems        = 2 * (size_t)cfg->block_tokens * kv->kv_dim;
    kv->block_elems        = kv->layer_elems * cfg->n_layers;
    bytes                  = moon_kv_config_pool_bytes(cfg);
    kv->owns_data          = mem == NULL && !virt;
    /* An own pool: zero pages backed as blocks are first written, so the
     * memory follows the tokens cached, not the capacity (a pool sized for
     * full contexts), and start-up pays no zeroing; on 2 MiB pages where
     * the kernel gives them (a step's KV reads miss the TLB less). */
    kv->data       = mem != NULL || virt ? mem : moon_pages_alloc(bytes);
    kv->cap        = virt ? (uint32_t)MOON_MIN(cfg->n_blocks, VIRT_START_BLOCKS) : cfg->n_blocks;
    kv->refcount   = moon_calloc(kv->cap, sizeof(*kv->refcount));
    kv->writer     = virt ? NULL : moon_calloc(kv->cap, sizeof(*kv->writer)); /* no mirrors */
    kv->free_stack = moon_malloc(kv->cap * sizeof(*kv->free_stack));
    kv->seqs       = moon_calloc(cfg->max_seqs, sizeof(*kv->seqs));
    kv->table_mem  = moon_malloc((size_t)cfg->max_seqs * kv->max_blocks_per_seq * sizeof(uint32_t));
    if ((!kv->data && !virt) || !kv->refcount || (!kv->writer && !virt) || !kv->free_stack ||
        !kv->seqs || !kv->table_mem) {
        moon_kv_cache_destroy(kv);
        return MOON_ERR_NO_MEMORY;
    }
    kv->zero_fresh = mem != NULL;   /* the caller's bytes: zeroed block by block */
    kv->n_free     = cfg->n_blocks; /* all untouched: block 0 comes out first */
    for (uint32_t s = 0; s < cfg->max_seqs; s++) {
        kv->seqs[s].blocks = kv->table_mem + (size_t)s * kv->max_blocks_per_seq;
    }
    *kv_p = kv;
    return MOON_OK;
}

moon_status_t moon_kv_cache_create(const moon_kv_config_t *cfg, moon_kv_cache_t **kv_p)
{
    if (!config_ok(cfg) || kv_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    return cache_create(cfg, NULL, 0, kv_p);
}

moon_status_t moon_kv_cache_create_virtual(const moon_kv_config_t *cfg, moon_kv_cache_t **kv_p)
{
    if (!config_ok(cfg) || kv_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    return cache_create(cfg, NULL, 1, kv_p);
}

moon_status_t moon_kv_cache_create_in(const moon_kv_config_t *cfg, void *mem, size_t mem_bytes,
                                      moon_kv_cache_t **kv_p)
{
    if (!config_ok(cfg) || kv_p == NULL || mem == NULL || ((uintptr_t)mem & 63) != 0 ||
        mem_bytes < moon_kv_config_pool_bytes(cfg)) {
        return MOON_ERR_INVALID_PARAM;
    }
    return cache_create(cfg, mem, 0, kv_p);
}

void moon_kv_cache_destroy(moon_kv_cache_t *kv)
{
    if (kv == NULL) {
        return;
    }
    if (kv->owns_data) {
        moon_pages_free(kv->data, moon_kv_pool_bytes(kv));
    }
    moon_free(kv->refcount);
    moon_free(kv->writer);
    moon_free(kv->free_stack);
    moon_free(kv->seqs);
    moon_free(kv->table_mem);
    moon_free(kv);
}

const moon_kv_config_t *moon_kv_cache_config(const moon_kv_cache_t *kv)
{
    return &kv->cfg;
}
size_t moon_kv_block_bytes(const moon_kv_cache_t *kv)
{
    return kv->block_elems * kv->elem_bytes;
}
size_t moon_kv_block_layer_bytes(const moon_kv_cache_t *kv)
{
    return kv->layer_elems * kv->elem_bytes;
}
uint32_t moon_kv_n_free_blocks(const moon_kv_cache_t *kv)
{
    return kv->n_free;
}
size_t moon_kv_pool_bytes(const moon_kv_cache_t *kv)
{
    return moon_kv_block_bytes(kv) * kv->cfg.n_blocks;
}

void *moon_kv_pool_data(moon_kv_cache_t *kv)
{
    return kv->data;
}

void *moon_kv_block_data(moon_kv_cache_t *kv, uint32_t block)
{
    MOON_CHECK(block_live(kv, block));
    return kv->data != NULL ? moon_kv_block_at(kv, block) : NULL;
}

void moon_kv_block_mark_written(moon_kv_cache_t *kv, uint32_t block)
{
    MOON_CHECK(block < kv->cfg.n_blocks);
    if (kv->writer != NULL && block < kv->cap) { /* past cap: untouched, 0 already */
        kv->writer[block] = 0;
    }
}

static moon_kv_seq_t *get_seq(const moon_kv_cache_t *kv, uint32_t seq)
{
    if (kv == NULL || seq >= kv->cfg.max_seqs || !kv->seqs[seq].used) {
        return NULL;
    }
    return &kv->seqs[seq];
}

moon_status_t moon_kv_block_alloc(moon_kv_cache_t *kv, uint32_t *block_p)
{
    uint32_t b;

    if (kv == NULL || block_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (kv->n_free == 0) {
        return MOON_ERR_NO_RESOURCE;
    }
    /* freed blocks first, newest on top, then untouched ones in order: the
     * order a stack of every block (0 on top) gave */
    if (kv->n_stack > 0) {
        b = kv->free_stack[--kv->n_stack];
    } else {
        if (ensure_cap(kv, kv->n_touched + 1) != MOON_OK) {
            return MOON_ERR_NO_MEMORY;
        }
        b = kv->n_touched++;
        if (kv->zero_fresh) {
            memset(moon_kv_block_at(kv, b), 0, moon_kv_block_bytes(kv));
        }
    }
    kv->n_free--;
    kv->refcount[b] = 1;
    *block_p        = b;
    return MOON_OK;
}

void moon_kv_block_ref(moon_kv_cache_t *kv, uint32_t block)
{
    MOON_CHECK(block_live(kv, block));
    kv->refcount[block]++;
}

void moon_kv_block_unref(moon_kv_cache_t *kv, uint32_t block)
{
    MOON_CHECK(block_live(kv, block));
    if (--kv->refcount[block] == 0) {
        kv->free_stack[kv->n_stack++] = block; /* cannot overflow: cap >= n_touched */
        kv->n_free++;
    }
}

uint32_t moon_kv_block_refcount(const moon_kv_cache_t *kv, uint32_t block)
{
    return block < kv->n_touched ? kv->refcount[block] : 0;
}

moon_status_t moon_kv_seq_create(moon_kv_cache_t *kv, uint32_t *seq_p)
{
    if (kv == NULL || seq_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t s = 0; s < kv->cfg.max_seqs; s++) {
        if (!kv->seqs[s].used) {
            kv->seqs[s].used     = 1;
            kv->seqs[s].n_tokens = 0;
            kv->seqs[s].n_blocks = 0;
            *seq_p               = s;
            return MOON_OK;
        }
    }
    return MOON_ERR_NO_RESOURCE;
}

void moon_kv_seq_destroy(moon_kv_cache_t *kv, uint32_t seq)
{
    moon_kv_seq_t *s = get_seq(kv, seq);

    if (s == NULL) {
        return;
    }
    for (uint32_t i = 0; i < s->n_blocks; i++) {
        moon_kv_block_unref(kv, s->blocks[i]);
    }
    s->used     = 0;
    s->n_blocks = 0;
    s->n_tokens = 0;
}

uint32_t moon_kv_seq_len(const moon_kv_cache_t *kv, uint32_t seq)
{
    moon_kv_seq_t *s = get_seq(kv, seq);
    return s ? s->n_tokens : 0;
}

uint32_t moon_kv_seq_n_blocks(const moon_kv_cache_t *kv, uint32_t seq)
{
    moon_kv_seq_t *s = get_seq(kv, seq);
    return s ? s->n_blocks : 0;
}

uint32_t moon_kv_seq_block(const moon_kv_cache_t *kv, uint32_t seq, uint32_t idx)
{
    moon_kv_seq_t *s = get_seq(kv, seq);
    return (s && idx < s->n_blocks) ? s->blocks[idx] : MOON_KV_NO_BLOCK;
}

moon_status_t moon_kv_seq_reserve(moon_kv_cache_t *kv, uint32_t seq, uint32_t n)
{
    moon_kv_seq_t *s = get_seq(kv, seq);
    uint64_t       want;
    uint32_t       need;

    if (s == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    want = (uint64_t)s->n_tokens + n;
    if (want > kv->cfg.max_seq_len) {
        return MOON_ERR_NO_RESOURCE;
    }
    need = (uint32_t)((want + kv->cfg.block_tokens - 1) / kv->cfg.block_tokens);
    if (need > s->n_blocks && need - s->n_blocks > kv->n_free) {
        return MOON_ERR_NO_RESOURCE;
    }
    if (need > s->n_blocks && ensure_fresh(kv, need - s->n_blocks) != MOON_OK) {
        return MOON_ERR_NO_MEMORY;
    }
    while (s->n_blocks < need) {
        uint32_t b;
        moon_kv_block_alloc(kv, &b); /* cannot fail: counted and made room above */
        s->blocks[s->n_blocks++] = b;
    }
    return MOON_OK;
}

void moon_kv_seq_advance(moon_kv_cache_t *kv, uint32_t seq, uint32_t n)
{
    moon_kv_seq_t *s = get_seq(kv, seq);

    MOON_CHECK(s != NULL &&
               (uint64_t)s->n_tokens + n <= (uint64_t)s->n_blocks * kv->cfg.block_tokens);
    s->n_tokens += n;
}

moon_status_t moon_kv_seq_truncate(moon_kv_cache_t *kv, uint32_t seq, uint32_t n_tokens)
{
    moon_kv_seq_t *s = get_seq(kv, seq);
    uint32_t       keep;

    if (s == NULL || n_tokens > s->n_tokens) {
        return MOON_ERR_INVALID_PARAM;
    }
    keep = (n_tokens + kv->cfg.block_tokens - 1) / kv->cfg.block_tokens;
    while (s->n_blocks > keep) {
        moon_kv_block_unref(kv, s->blocks[--s->n_blocks]);
    }
    s->n_tokens = n_tokens;
    return MOON_OK;
}

moon_status_t moon_kv_seq_fork(moon_kv_cache_t *kv, uint32_t src, uint32_t n_tokens,
                               uint32_t *seq_p)
{
    moon_kv_seq_t *s = get_seq(kv, src);
    moon_kv_seq_t *d;
    uint32_t       dst, n_full, partial;
    moon_status_t  status;

    if (s == NULL || seq_p == NULL || n_tokens > s->n_tokens) {
        return MOON_ERR_INVALID_PARAM;
    }
    n_full  = n_tokens / kv->cfg.block_tokens;
    partial = n_tokens % kv->cfg.block_tokens != 0;
    if (partial && kv->n_free == 0) {
        return MOON_ERR_NO_RESOURCE;
    }
    if (partial && ensure_fresh(kv, 1) != MOON_OK) {
        return MOON_ERR_NO_MEMORY;
    }
    status = moon_kv_seq_create(kv, &dst);
    if (status != MOON_OK) {
        return status;
    }
    d = &kv->seqs[dst];
    for (uint32_t i = 0; i < n_full; i++) {
        moon_kv_block_ref(kv, s->blocks[i]);
        d->blocks[d->n_blocks++] = s->blocks[i];
    }
    if (partial) {
        uint32_t b;
        moon_kv_block_alloc(kv, &b); /* cannot fail: checked and made room above */
        if (kv->data != NULL) {
            memcpy(moon_kv_block_at(kv, b), moon_kv_block_at(kv, s->blocks[n_full]),
                   moon_kv_block_bytes(kv));
        }
        if (kv->writer != NULL) {
            kv->writer[b] = 0;
        }
        d->blocks[d->n_blocks++] = b;
    }
    d->n_tokens = n_tokens;
    *seq_p      = dst;
    return MOON_OK;
}

moon_status_t moon_kv_seq_append_block(moon_kv_cache_t *kv, uint32_t seq, uint32_t block)
{
    moon_kv_seq_t *s = get_seq(kv, seq);

    if (s == NULL || !block_live(kv, block) || s->n_tokens % kv->cfg.block_tokens != 0 ||
        s->n_blocks * kv->cfg.block_tokens != s->n_tokens ||
        (uint64_t)s->n_tokens + kv->cfg.block_tokens > kv->cfg.max_seq_len) {
        return MOON_ERR_INVALID_PARAM;
    }
    moon_kv_block_ref(kv, block);
    s->blocks[s->n_blocks++] = block;
    s->n_tokens += kv->cfg.block_tokens;
    return MOON_OK;
}

static moon_status_t block_span(const moon_kv_cache_t *kv, uint32_t block, int32_t layer,
                                size_t bytes, size_t *off_p)
{
    if (kv == NULL || !block_live(kv, block) || layer >= (int32_t)kv->cfg.n_layers ||
        kv->data == NULL) {
        return MOON_ERR_INVALID_PARAM; /* a virtual cache has no bytes to move */
    }
    if (layer < 0) {
        if (bytes != moon_kv_block_bytes(kv)) {
            return MOON_ERR_INVALID_PARAM;
        }
        *off_p = (size_t)block * moon_kv_block_bytes(kv);
    } else {
        if (bytes != moon_kv_block_layer_bytes(kv)) {
            return MOON_ERR_INVALID_PARAM;
        }
        *off_p = (size_t)block * moon_kv_block_bytes(kv) + (size_t)layer * bytes;
    }
    return MOON_OK;
}

moon_status_t moon_kv_block_export(const moon_kv_cache_t *kv, uint32_t block, int32_t layer,
                                   void *buf, size_t bytes)
{
    size_t        off;
    moon_status_t status = block_span(kv, block, layer, bytes, &off);

    if (status != MOON_OK || buf == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    memcpy(buf, (const uint8_t *)kv->data + off, bytes);
    return MOON_OK;
}

moon_status_t moon_kv_block_import(moon_kv_cache_t *kv, uint32_t block, int32_t layer,
                                   const void *buf, size_t bytes)
{
    size_t        off;
    moon_status_t status = block_span(kv, block, layer, bytes, &off);

    if (status != MOON_OK || buf == NULL || kv->refcount[block] > 1) {
        return MOON_ERR_INVALID_PARAM;
    }
    memcpy((uint8_t *)kv->data + off, buf, bytes);
    if (kv->writer != NULL) {
        kv->writer[block] = 0;
    }
    return MOON_OK;
}

void moon_kv_mark_host_written(moon_kv_cache_t *kv, uint32_t seq, uint32_t pos0, uint32_t n)
{
    const moon_kv_seq_t *s  = &kv->seqs[seq];
    uint32_t             bt = kv->cfg.block_tokens;

    if (kv->writer == NULL) {
        return; /* virtual: no bytes, no device mirrors */
    }
    for (uint32_t i = pos0 / bt; n > 0 && i <= (pos0 + n - 1) / bt && i < s->n_blocks; i++) {
        kv->writer[s->blocks[i]] = 0;
    }
}
