/* moonlet/gguf.h - GGUF v3 reader (mmap or caller memory, every metadata type,
 * F32/F16/BF16/Q8_0/Q4_0 tensors) and writer. The reader bounds-checks every
 * length, count, offset and size against the file: a malformed, truncated or
 * hostile file gets MOON_ERR_CORRUPT and an error log line, never a crash or an
 * out-of-bounds read. A reader is immutable after open: any number of threads
 * may query it concurrently. A writer is single-threaded. */
#ifndef MOONLET_GGUF_H
#define MOONLET_GGUF_H

#include "moonlet/defs.h"
#include "moonlet/status.h"

#include <stdbool.h>

/* Metadata value types (GGUF spec numbering). */
typedef enum {
    MOON_GGUF_UINT8   = 0,
    MOON_GGUF_INT8    = 1,
    MOON_GGUF_UINT16  = 2,
    MOON_GGUF_INT16   = 3,
    MOON_GGUF_UINT32  = 4,
    MOON_GGUF_INT32   = 5,
    MOON_GGUF_FLOAT32 = 6,
    MOON_GGUF_BOOL    = 7,
    MOON_GGUF_STRING  = 8,
    MOON_GGUF_ARRAY   = 9,
    MOON_GGUF_UINT64  = 10,
    MOON_GGUF_INT64   = 11,
    MOON_GGUF_FLOAT64 = 12,
    MOON_GGUF_TYPE_COUNT
} moon_gguf_type_t;

/* Tensor element types (ggml numbering); the ones Moonlet reads and writes. */
typedef enum {
    MOON_GGML_F32  = 0,
    MOON_GGML_F16  = 1,
    MOON_GGML_Q4_0 = 2,
    MOON_GGML_Q8_0 = 8,
    MOON_GGML_Q4_K = 12, /* 256-element super-blocks, 144 bytes (4.5 bits) */
    MOON_GGML_Q5_K = 13, /* 176 bytes (5.5 bits) */
    MOON_GGML_Q6_K = 14, /* 210 bytes (6.56 bits) */
    MOON_GGML_BF16 = 30,
} moon_ggml_type_t;

#define MOON_GGUF_MAX_DIMS 4
#define MOON_GGUF_DEFAULT_ALIGNMENT 32
#define MOON_GGML_QK 32    /* elements per Q8_0/Q4_0 block */
#define MOON_GGML_QK_K 256 /* elements per Q4_K/Q5_K/Q6_K super-block */

typedef struct moon_gguf moon_gguf_t; /* opaque reader */

/* One tensor as described by the file. data points into the mapping (or the
 * caller's memory) and stays valid until moon_gguf_close(). */
typedef struct {
    const char      *name; /* NUL-terminated copy owned by the reader */
    moon_ggml_type_t type;
    uint32_t         n_dims;
    uint64_t         ne[MOON_GGUF_MAX_DIMS]; /* ne[0] contiguous; unused dims are 1 */
    uint64_t         n_elems;
    uint64_t         offset; /* from the start of the data section */
    uint64_t         bytes;
    const void      *data;
} moon_gguf_tensor_t;

/* Opens and validates path with mmap (read-only, private). MOON_ERR_NOT_FOUND
 * or MOON_ERR_IO when the file cannot be opened or mapped, MOON_ERR_CORRUPT for
 * any format violation, MOON_ERR_NO_MEMORY. *gguf_p set on success only. */
MOON_API moon_status_t moon_gguf_open(const char *path, moon_gguf_t **gguf_p);

/* Same over caller memory: data is borrowed and must outlive the reader. */
MOON_API moon_status_t moon_gguf_open_memory(const void *data, size_t bytes, moon_gguf_t **gguf_p);

/* Unmaps and frees; NULL is a no-op. Every pointer obtained from it dies. */
MOON_API void moon_gguf_close(moon_gguf_t *gguf);

/* The bytes the reader reads (the mapping or the caller's memory), borrowed
 * until moon_gguf_close. */
MOON_API void moon_gguf_image(const moon_gguf_t *gguf, const void **data_p, size_t *bytes_p);

/* 1 when a and b hold the same keys starting with prefix, each with the same
 * type and value bytes (order aside); 0 otherwise, with the first key that
 * differs copied into why (why_len bytes, may be 0). */
MOON_API int moon_gguf_keys_equal(const moon_gguf_t *a, const moon_gguf_t *b, const char *prefix,
                                  char *why, size_t why_len);

MOON_API uint32_t moon_gguf_version(const moon_gguf_t *gguf);
MOON_API uint32_t moon_gguf_alignment(const moon_gguf_t *gguf);
MOON_API uint64_t moon_gguf_n_kv(const moon_gguf_t *gguf);
MOON_API uint64_t moon_gguf_n_tensors(const moon_gguf_t *gguf);

/* Index of key, or -1. Linear in the number of keys. */
MOON_API int64_t     moon_gguf_find_key(const moon_gguf_t *gguf, const char *key);
MOON_API const char *moon_gguf_key_name(const moon_gguf_t *gguf, uint64_t idx); /* NULL: range */
MOON_API moon_gguf_type_t moon_gguf_key_type(const moon_gguf_t *gguf, uint64_t idx);

/* Typed getters by key. Integer getters accept any integer type (and bool)
 * whose value fits; the float getter accepts FLOAT32/FLOAT64 and integers.
 * MOON_ERR_NOT_FOUND: no such key; MOON_ERR_INVALID_PARAM: wrong type or out of
 * range. Outputs set on success only. */
MOON_API moon_status_t moon_gguf_get_u64(const moon_gguf_t *gguf, const char *key, uint64_t *v_p);
MOON_API moon_status_t moon_gguf_get_i64(const moon_gguf_t *gguf, const char *key, int64_t *v_p);
MOON_API moon_status_t moon_gguf_get_u32(const moon_gguf_t *gguf, const char *key, uint32_t *v_p);
MOON_API moon_status_t moon_gguf_get_f64(const moon_gguf_t *gguf, const char *key, double *v_p);
MOON_API moon_status_t moon_gguf_get_f32(const moon_gguf_t *gguf, const char *key, float *v_p);
MOON_API moon_status_t moon_gguf_get_bool(const moon_gguf_t *gguf, const char *key, bool *v_p);
/* String value: *str_p points into the file (NOT NUL-terminated), *len_p bytes. */
MOON_API moon_status_t moon_gguf_get_str(const moon_gguf_t *gguf, const char *key,
                                         const char **str_p, uint64_t *len_p);

/* Array value: element type and count. For arrays of fixed-size scalars *data_p
 * points at the packed little-endian elements in the file (may be unaligned:
 * copy with memcpy); for string and nested arrays *data_p is NULL. */
MOON_API moon_status_t moon_gguf_get_arr(const moon_gguf_t *gguf, const char *key,
                                         moon_gguf_type_t *elem_type_p, uint64_t *n_p,
                                         const void **data_p);
/* Element idx of a string array (O(1): offsets are indexed at open). */
MOON_API moon_status_t moon_gguf_get_arr_str(const moon_gguf_t *gguf, const char *key, uint64_t idx,
                                             const char **str_p, uint64_t *len_p);
/* Element idx of a scalar array converted to double (integers, floats, bool). */
MOON_API moon_status_t moon_gguf_get_arr_f64(const moon_gguf_t *gguf, const char *key, uint64_t idx,
                                             double *v_p);

/* Tensors: by index (NULL when out of range) or by name (NULL when absent). */
MOON_API const moon_gguf_tensor_t *moon_gguf_tensor(const moon_gguf_t *gguf, uint64_t idx);
MOON_API const moon_gguf_tensor_t *moon_gguf_find_tensor(const moon_gguf_t *gguf, const char *name);

/* Bytes of n elements of type (n must be a multiple of the block size for
 * quantized types); 0 for an unknown type. Block size of a type (1 or 32). */
MOON_API uint64_t    moon_ggml_type_bytes(moon_ggml_type_t type, uint64_t n);
MOON_API uint32_t    moon_ggml_block_size(moon_ggml_type_t type);
MOON_API const char *moon_ggml_type_name(moon_ggml_type_t type); /* never NULL */
MOON_API const char *moon_gguf_type_name(moon_gguf_type_t type); /* never NULL */

/* ---- writer ---------------------------------------------------------------- */

typedef struct moon_gguf_writer moon_gguf_writer_t;

MOON_API moon_status_t moon_gguf_writer_create(moon_gguf_writer_t **w_p);
MOON_API void          moon_gguf_writer_destroy(moon_gguf_writer_t *w); /* NULL: no-op */

/* Metadata: keys and strings are copied. Arrays of scalars copy n elements of
 * elem_type from data; string arrays copy n NUL-terminated strings. */
MOON_API moon_status_t moon_gguf_writer_kv_u32(moon_gguf_writer_t *w, const char *key, uint32_t v);
MOON_API moon_status_t moon_gguf_writer_kv_i32(moon_gguf_writer_t *w, const char *key, int32_t v);
MOON_API moon_status_t moon_gguf_writer_kv_f32(moon_gguf_writer_t *w, const char *key, float v);
MOON_API moon_status_t moon_gguf_writer_kv_bool(moon_gguf_writer_t *w, const char *key, bool v);
MOON_API moon_status_t moon_gguf_writer_kv_str(moon_gguf_writer_t *w, const char *key,
                                               const char *v);
/* Any scalar type given as raw little-endian bytes (used by tests to cover every type). */
MOON_API moon_status_t moon_gguf_writer_kv_raw(moon_gguf_writer_t *w, const char *key,
                                               moon_gguf_type_t type, const void *v);
MOON_API moon_status_t moon_gguf_writer_kv_arr(moon_gguf_writer_t *w, const char *key,
                                               moon_gguf_type_t elem_type, const void *data,
                                               uint64_t n);
MOON_API moon_status_t moon_gguf_writer_kv_arr_str(moon_gguf_writer_t *w, const char *key,
                                                   const char *const *strs, uint64_t n);

/* Adds a tensor. data is BORROWED: it must stay valid and unchanged until
 * moon_gguf_writer_write() returns. ne[0] is the contiguous dimension. */
MOON_API moon_status_t moon_gguf_writer_tensor(moon_gguf_writer_t *w, const char *name,
                                               moon_ggml_type_t type, uint32_t n_dims,
                                               const uint64_t *ne, const void *data);

/* Writes the whole file (alignment 32). MOON_ERR_IO on any write failure (the
 * partial file is removed). */
MOON_API moon_status_t moon_gguf_writer_write(moon_gguf_writer_t *w, const char *path);

/* ---- element conversion helpers ------------------------------------------- */
MOON_API float      moon_fp16_to_f32(uint16_t h);
MOON_API uint16_t   moon_f32_to_fp16(float f);
static inline float moon_bf16_to_f32(uint16_t b)
{
    union {
        uint32_t u;
        float    f;
    } v = {.u = (uint32_t)b << 16};
    return v.f;
}
MOON_API uint16_t moon_f32_to_bf16(float f); /* round to nearest even, NaN kept */

/* Dequantizes n elements (a multiple of the block size) of type from src. */
MOON_API void moon_ggml_dequantize(moon_ggml_type_t type, const void *src, float *dst, uint64_t n);
/* Quantizes n floats into type (F32/F16/BF16/Q8_0/Q4_0); dst holds
 * moon_ggml_type_bytes(type, n) bytes. */
MOON_API void moon_ggml_quantize(moon_ggml_type_t type, const float *src, void *dst, uint64_t n);

#endif /* MOONLET_GGUF_H */
