/* model/kv_internal.h - the paged KV cache's layout, shared by the forward
 * paths (private to model/). See moonlet/kv_cache.h for the block layout. */
#ifndef MOON_MODEL_KV_INTERNAL_H
#define MOON_MODEL_KV_INTERNAL_H

#include "moonlet/kv_cache.h"

#include <string.h>

typedef struct {
    int       used;
    uint32_t  n_tokens;
    uint32_t  n_blocks;
    uint32_t *blocks; /* (max_blocks_per_seq) block table */
} moon_kv_seq_t;

struct moon_kv_cache {
    uint64_t         id; /* unique in the process, never reused (device mirrors key on it) */
    moon_kv_config_t cfg;
    uint32_t         kv_dim;
    uint32_t         max_blocks_per_seq;
    uint32_t         elem_bytes;  /* 4 (F32) or 2 (F16) */
    size_t           block_elems; /* n_layers * layer_elems */
    size_t           layer_elems; /* 2 * block_tokens * kv_dim */
    void            *data;        /* (n_blocks, n_layers, 2, block_tokens, kv_dim) elements */
    int              owns_data;   /* 0: the caller's memory (moon_kv_cache_create_in) */
    /* 1: a block is zeroed when first handed out (the caller's memory, not
     * known to be zero; zeroing it all at create would make the whole pool
     * resident); an own pool's fresh pages read as zero already */
    int zero_fresh;
    /* Block metadata grows on use: blocks [0, n_touched) have been handed out
     * at least once, the rest are free and untouched, and the arrays below
     * hold cap >= n_touched entries. A real pool starts with cap = n_blocks
     * (its bytes are reserved anyway: nothing allocates after create); a
     * virtual one starts small, so a simulation's memory follows the blocks
     * its trace uses, not the modeled capacity. */
    uint32_t  cap;
    uint32_t  n_touched;
    uint32_t *refcount; /* (cap) */
    /* (cap) who wrote each block last: 0 = code on the host (create,
     * import, fork's copy, the CPU backends), else the id of a device mirror
     * that holds the same bytes (backend_cuda.cu), so it uploads only blocks
     * written since by someone else. NULL in a virtual cache (no bytes). */
    uint64_t      *writer;
    uint32_t      *free_stack; /* (cap) freed blocks, the next to hand out on top */
    uint32_t       n_stack;
    uint32_t       n_free;    /* n_stack + the untouched n_blocks - n_touched */
    moon_kv_seq_t *seqs;      /* (max_seqs) */
    uint32_t      *table_mem; /* (max_seqs, max_blocks_per_seq) */
};

/* Block b's bytes. */
static inline uint8_t *moon_kv_block_at(const moon_kv_cache_t *kv, uint32_t b)
{
    return (uint8_t *)kv->data + (size_t)b * kv->block_elems * kv->elem_bytes;
}

/* K (or V with which = 1) vector of layer at position pos of seq, in the
 * cache's element type; pos must be within the reserved blocks. */
static inline void *moon_kv_ptr(const moon_kv_cache_t *kv, const moon_kv_seq_t *s, uint32_t layer,
                                uint32_t which, uint32_t pos)
{
    uint32_t bt = kv->cfg.block_tokens;
    return moon_kv_block_at(kv, s->blocks[pos / bt]) +
           ((size_t)layer * kv->layer_elems + ((size_t)which * bt + pos % bt) * kv->kv_dim) *
               kv->elem_bytes;
}

/* fp16 <-> fp32 rows as the cache stores and reads them (kv_f16.c): round to
 * nearest even, the same bits on every path (F16C where the CPU has it, else
 * moon_f32_to_fp16's), so backends that share a cache agree. */
void moon_kv_f16_from_f32(uint16_t *dst, const float *src, size_t n);
void moon_kv_f16_to_f32(float *dst, const uint16_t *src, size_t n);

/* Writes the kv_dim floats of src as the K (which 0) or V vector of pos. */
static inline void moon_kv_store(const moon_kv_cache_t *kv, const moon_kv_seq_t *s, uint32_t layer,
                                 uint32_t which, uint32_t pos, const float *src)
{
    void *d = moon_kv_ptr(kv, s, layer, which, pos);
    if (kv->elem_bytes == 2) {
        moon_kv_f16_from_f32((uint16_t *)d, src, kv->kv_dim);
    } else {
        memcpy(d, src, kv->kv_dim * sizeof(float));
    }
}

/* Floats [off, off + n) of the K (which 0) or V vector of pos: a pointer into
 * an F32 cache, else those of an F16 cache converted into tmp (n floats). */
static inline const float *moon_kv_load(const moon_kv_cache_t *kv, const moon_kv_seq_t *s,
                                        uint32_t layer, uint32_t which, uint32_t pos, uint32_t off,
                                        uint32_t n, float *tmp)
{
    const void *p = moon_kv_ptr(kv, s, layer, which, pos);
    if (kv->elem_bytes == 2) {
        moon_kv_f16_to_f32(tmp, (const uint16_t *)p + off, n);
        return tmp;
    }
    return (const float *)p + off;
}

/* Tags the blocks holding positions [pos0, pos0 + n) of seq as written on the
 * host (their device copies, if any, are stale). */
void moon_kv_mark_host_written(moon_kv_cache_t *kv, uint32_t seq, uint32_t pos0, uint32_t n);

#endif /* MOON_MODEL_KV_INTERNAL_H */
