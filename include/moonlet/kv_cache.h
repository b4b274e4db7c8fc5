/* moonlet/kv_cache.h - paged KV cache: a pool of fixed-size token blocks, a
 * block table per sequence, and prefix blocks shared between sequences by
 * reference count. A block holds, for every layer, the K then the V vectors of
 * block_tokens consecutive positions, in the cache's element type (fp32, or
 * IEEE fp16 as llama.cpp's default cache: half the bytes kept and moved):
 *     block = (layer, {K,V}, block_tokens, kv_dim)
 * so a block exports whole, or one layer at a time, as one contiguous copy:
 * that is the unit the KV store keeps and transfers move.
 * Not thread-safe: one owner (a prefill or decode instance) drives it; the
 * engine's worker threads only read and write block data during a call. */
#ifndef MOONLET_KV_CACHE_H
#define MOONLET_KV_CACHE_H

#include "moonlet/defs.h"
#include "moonlet/status.h"

/* The KV elements. MOON_KV_AUTO is a request only (moon_backend_kv_type
 * resolves it); a cache holds F32 or F16. Zero: F32, so a config built field
 * by field keeps the fp32 cache. */
typedef enum {
    MOON_KV_F32  = 0,
    MOON_KV_F16  = 1,
    MOON_KV_AUTO = 2, /* F16 where the backend reads it, else F32 */
} moon_kv_type_t;

typedef struct {
    uint32_t       n_layers;
    uint32_t       n_kv_heads;
    uint32_t       head_dim;
    uint32_t       block_tokens; /* tokens per block (e.g. 16) */
    uint32_t       n_blocks;     /* blocks in the pool */
    uint32_t       max_seqs;     /* sequences alive at once */
    uint32_t       max_seq_len;  /* tokens per sequence (the model's context) */
    moon_kv_type_t elem_type;    /* MOON_KV_F32 or MOON_KV_F16 */
} moon_kv_config_t;

typedef struct moon_kv_cache moon_kv_cache_t;

#define MOON_KV_NO_BLOCK UINT32_MAX

/* Bytes per element of a cache type (0: not a cache type). */
MOON_API uint32_t moon_kv_type_bytes(moon_kv_type_t type);

/* Reserves the whole pool up front, zero pages backed as blocks are first
 * written (resident memory follows the tokens cached). MOON_ERR_INVALID_PARAM
 * for a zero field. */
MOON_API moon_status_t moon_kv_cache_create(const moon_kv_config_t *cfg, moon_kv_cache_t **kv_p);
/* The same over caller memory (BORROWED: mem must outlive the cache and be
 * 64-byte aligned, at least moon_kv_config_pool_bytes(cfg) long): a serving
 * instance puts its pool in a region registered for RDMA, so store gets and
 * peers' pulls land in (and read from) the pool itself. mem is zeroed block
 * by block as the cache first hands each block out, so its untouched pages
 * stay unbacked there too. */
MOON_API moon_status_t moon_kv_cache_create_in(const moon_kv_config_t *cfg, void *mem,
                                               size_t mem_bytes, moon_kv_cache_t **kv_p);
/* The bookkeeping without the bytes (a simulation's virtual KV: sizes and
 * block tables, no payload): moon_kv_block_data and moon_kv_pool_data give
 * NULL, export and import MOON_ERR_INVALID_PARAM; only an engine that reads
 * no KV (the COST backend) runs on it. Its per-block metadata grows as blocks
 * are first used (memory follows use, not n_blocks), so alloc, reserve and
 * fork may also return MOON_ERR_NO_MEMORY (nothing changed); the blocks
 * handed out are the same as a real cache's. */
MOON_API moon_status_t moon_kv_cache_create_virtual(const moon_kv_config_t *cfg,
                                                    moon_kv_cache_t       **kv_p);
/* Room in the per-block metadata for n blocks in use at once (clamped to
 * n_blocks; a real cache has it all from create): freed blocks are reused
 * before fresh ones, so afterwards alloc, reserve and fork cannot fail for
 * memory while at most n blocks are in use. MOON_ERR_NO_MEMORY: nothing
 * changed. */
MOON_API moon_status_t           moon_kv_cache_reserve_meta(moon_kv_cache_t *kv, uint32_t n);
MOON_API size_t                  moon_kv_config_pool_bytes(const moon_kv_config_t *cfg);
MOON_API void                    moon_kv_cache_destroy(moon_kv_cache_t *kv); /* NULL: no-op */
MOON_API const moon_kv_config_t *moon_kv_cache_config(const moon_kv_cache_t *kv);

MOON_API size_t   moon_kv_block_bytes(const moon_kv_cache_t *kv);       /* whole block */
MOON_API size_t   moon_kv_block_layer_bytes(const moon_kv_cache_t *kv); /* one layer of it */
MOON_API uint32_t moon_kv_n_free_blocks(const moon_kv_cache_t *kv);
MOON_API size_t   moon_kv_pool_bytes(const moon_kv_cache_t *kv);
/* Start of the pool: block b lies at b * moon_kv_block_bytes from it. */
MOON_API void *moon_kv_pool_data(moon_kv_cache_t *kv);
/* A live block's bytes, for transfers that write it in place (a store get,
 * a peer's pull); then moon_kv_block_mark_written so device mirrors reload it. */
MOON_API void *moon_kv_block_data(moon_kv_cache_t *kv, uint32_t block);
MOON_API void  moon_kv_block_mark_written(moon_kv_cache_t *kv, uint32_t block);

/* Sequences. create: an empty sequence (MOON_ERR_NO_RESOURCE: max_seqs alive).
 * destroy drops the sequence's reference on each of its blocks. */
MOON_API moon_status_t moon_kv_seq_create(moon_kv_cache_t *kv, uint32_t *seq_p);
MOON_API void          moon_kv_seq_destroy(moon_kv_cache_t *kv, uint32_t seq);
MOON_API uint32_t      moon_kv_seq_len(const moon_kv_cache_t *kv, uint32_t seq);
MOON_API uint32_t      moon_kv_seq_n_blocks(const moon_kv_cache_t *kv, uint32_t seq);
MOON_API uint32_t      moon_kv_seq_block(const moon_kv_cache_t *kv, uint32_t seq, uint32_t idx);

/* Makes room for n more tokens (allocating blocks); does not change the
 * length. MOON_ERR_NO_RESOURCE: pool empty or past max_seq_len (nothing
 * changed). moon_kv_seq_advance() then adds n to the length (after the
 * engine wrote their K/V). */
MOON_API moon_status_t moon_kv_seq_reserve(moon_kv_cache_t *kv, uint32_t seq, uint32_t n);
MOON_API void          moon_kv_seq_advance(moon_kv_cache_t *kv, uint32_t seq, uint32_t n);
/* Shortens the sequence to n_tokens, releasing whole blocks past it. */
MOON_API moon_status_t moon_kv_seq_truncate(moon_kv_cache_t *kv, uint32_t seq, uint32_t n_tokens);

/* New sequence sharing src's first n_tokens: full blocks are shared by
 * reference; a partial last block is copied (the new sequence will write into
 * it). MOON_ERR_NO_RESOURCE when no sequence slot or block is free. */
MOON_API moon_status_t moon_kv_seq_fork(moon_kv_cache_t *kv, uint32_t src, uint32_t n_tokens,
                                        uint32_t *seq_p);
/* Appends a full block (e.g. imported from the store) to a sequence whose
 * length is a multiple of block_tokens; the sequence takes its own reference. */
MOON_API moon_status_t moon_kv_seq_append_block(moon_kv_cache_t *kv, uint32_t seq, uint32_t block);

/* Blocks: alloc returns a block with refcount 1 (MOON_ERR_NO_RESOURCE: empty
 * pool); unref frees it at 0. The next block handed out is the last freed
 * one, else the lowest never used. */
MOON_API moon_status_t moon_kv_block_alloc(moon_kv_cache_t *kv, uint32_t *block_p);
MOON_API void          moon_kv_block_ref(moon_kv_cache_t *kv, uint32_t block);
MOON_API void          moon_kv_block_unref(moon_kv_cache_t *kv, uint32_t block);
MOON_API uint32_t      moon_kv_block_refcount(const moon_kv_cache_t *kv, uint32_t block);

/* Copies a block (layer < 0: whole, else that layer only) to/from a caller
 * buffer of exactly moon_kv_block_bytes / moon_kv_block_layer_bytes bytes.
 * Import into a block shared by several sequences is refused
 * (MOON_ERR_INVALID_PARAM): shared blocks are immutable. */
MOON_API moon_status_t moon_kv_block_export(const moon_kv_cache_t *kv, uint32_t block,
                                            int32_t layer, void *buf, size_t bytes);
MOON_API moon_status_t moon_kv_block_import(moon_kv_cache_t *kv, uint32_t block, int32_t layer,
                                            const void *buf, size_t bytes);

#endif /* MOONLET_KV_CACHE_H */
