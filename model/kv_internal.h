/* model/kv_internal.h - the paged KV cache's layout, shared by the forward
 * paths (private to model/). See moonlet/kv_cache.h for the block layout. */
#ifndef MOON_MODEL_KV_INTERNAL_H
#define MOON_MODEL_KV_INTERNAL_H

#include "moonlet/kv_cache.h"

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
    size_t           block_floats;
    size_t           layer_floats; /* 2 * block_tokens * kv_dim */
    float           *data;         /* (n_blocks, n_layers, 2, block_tokens, kv_dim) */
    int              owns_data;    /* 0: the caller's memory (moon_kv_cache_create_in) */
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

/* K (or V with which = 1) vector of layer at position pos of seq; pos must be
 * within the reserved blocks. */
static inline float *moon_kv_vec(const moon_kv_cache_t *kv, const moon_kv_seq_t *s, uint32_t layer,
                                 uint32_t which, uint32_t pos)
{
    uint32_t bt  = kv->cfg.block_tokens;
    uint32_t blk = s->blocks[pos / bt];
    return kv->data + (size_t)blk * kv->block_floats + (size_t)layer * kv->layer_floats +
           ((size_t)which * bt + pos % bt) * kv->kv_dim;
}

/* Tags the blocks holding positions [pos0, pos0 + n) of seq as written on the
 * host (their device copies, if any, are stale). */
void moon_kv_mark_host_written(moon_kv_cache_t *kv, uint32_t seq, uint32_t pos0, uint32_t n);

#endif /* MOON_MODEL_KV_INTERNAL_H */
