/* model/gguf/gguf_writer.c - the GGUF v3 writer (moonlet/gguf.h): key/values are
 * serialised as they are added, tensors are borrowed until write. One thread
 * at a time. */
#include "moonlet/gguf.h"

#include "gguf_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/vec.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char            *name;
    moon_ggml_type_t type;
    uint32_t         n_dims;
    uint64_t         ne[MOON_GGUF_MAX_DIMS];
    uint64_t         bytes;
    uint64_t         offset;
    const void      *data; /* borrowed */
} wtensor_t;

struct moon_gguf_writer {
    moon_vec_t kv; /* uint8_t: the serialized key/values */
    uint64_t   n_kv;
    moon_vec_t tensors; /* wtensor_t */
};

moon_status_t moon_gguf_writer_create(moon_gguf_writer_t **w_p)
{
    moon_gguf_writer_t *w;

    if (w_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    w = moon_calloc(1, sizeof(*w));
    if (w == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    moon_vec_init(&w->kv, 1);
    moon_vec_init(&w->tensors, sizeof(wtensor_t));
    *w_p = w;
    return MOON_OK;
}

void moon_gguf_writer_destroy(moon_gguf_writer_t *w)
{
    if (w == NULL) {
        return;
    }
    for (size_t i = 0; i < moon_vec_len(&w->tensors); i++) {
        moon_free(((wtensor_t *)moon_vec_at(&w->tensors, i))->name);
    }
    moon_vec_fini(&w->tensors);
    moon_vec_fini(&w->kv);
    moon_free(w);
}

static int wput(moon_gguf_writer_t *w, const void *p, size_t n)
{
    return moon_vec_append(&w->kv, p, n) == MOON_OK;
}

static int wput_u32(moon_gguf_writer_t *w, uint32_t v)
{
    return wput(w, &v, 4);
}

static int wput_str(moon_gguf_writer_t *w, const char *s)
{
    uint64_t len = strlen(s);
    return wput(w, &len, 8) && wput(w, s, len);
}

/* Appends a kv atomically: on failure the buffer is rolled back. */
static moon_status_t wkv_begin(moon_gguf_writer_t *w, const char *key, moon_gguf_type_t t,
                               size_t *mark)
{
    if (w == NULL || key == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    *mark = moon_vec_len(&w->kv);
    if (!wput_str(w, key) || !wput_u32(w, (uint32_t)t)) {
        moon_vec_truncate(&w->kv, *mark);
        return MOON_ERR_NO_MEMORY;
    }
    return MOON_OK;
}

static moon_status_t wkv_end(moon_gguf_writer_t *w, int ok, size_t mark)
{
    if (!ok) {
        moon_vec_truncate(&w->kv, mark);
        return MOON_ERR_NO_MEMORY;
    }
    w->n_kv++;
    return MOON_OK;
}

moon_status_t moon_gguf_writer_kv_raw(moon_gguf_writer_t *w, const char *key, moon_gguf_type_t type,
                                      const void *v)
{
    size_t        mark;
    size_t        sb = moon_gguf_scalar_bytes(type);
    moon_status_t status;

    if (sb == 0 || v == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = wkv_begin(w, key, type, &mark);
    if (status != MOON_OK) {
        return status;
    }
    return wkv_end(w, wput(w, v, sb), mark);
}

moon_status_t moon_gguf_writer_kv_u32(moon_gguf_writer_t *w, const char *key, uint32_t v)
{
    return moon_gguf_writer_kv_raw(w, key, MOON_GGUF_UINT32, &v);
}

moon_status_t moon_gguf_writer_kv_i32(moon_gguf_writer_t *w, const char *key, int32_t v)
{
    return moon_gguf_writer_kv_raw(w, key, MOON_GGUF_INT32, &v);
}

moon_status_t moon_gguf_writer_kv_f32(moon_gguf_writer_t *w, const char *key, float v)
{
    return moon_gguf_writer_kv_raw(w, key, MOON_GGUF_FLOAT32, &v);
}

moon_status_t moon_gguf_writer_kv_bool(moon_gguf_writer_t *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    return moon_gguf_writer_kv_raw(w, key, MOON_GGUF_BOOL, &b);
}

moon_status_t moon_gguf_writer_kv_str(moon_gguf_writer_t *w, const char *key, const char *v)
{
    size_t        mark;
    moon_status_t status;

    if (v == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = wkv_begin(w, key, MOON_GGUF_STRING, &mark);
    if (status != MOON_OK) {
        return status;
    }
    return wkv_end(w, wput_str(w, v), mark);
}

moon_status_t moon_gguf_writer_kv_arr(moon_gguf_writer_t *w, const char *key,
                                      moon_gguf_type_t elem_type, const void *data, uint64_t n)
{
    size_t        mark;
    size_t        sb = moon_gguf_scalar_bytes(elem_type);
    moon_status_t status;

    if (sb == 0 || (data == NULL && n != 0)) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = wkv_begin(w, key, MOON_GGUF_ARRAY, &mark);
    if (status != MOON_OK) {
        return status;
    }
    return wkv_end(w, wput_u32(w, elem_type) && wput(w, &n, 8) && wput(w, data, n * sb), mark);
}

moon_status_t moon_gguf_writer_kv_arr_str(moon_gguf_writer_t *w, const char *key,
                                          const char *const *strs, uint64_t n)
{
    size_t        mark;
    int           ok;
    moon_status_t status;

    if (strs == NULL && n != 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = wkv_begin(w, key, MOON_GGUF_ARRAY, &mark);
    if (status != MOON_OK) {
        return status;
    }
    ok = wput_u32(w, MOON_GGUF_STRING) && wput(w, &n, 8);
    for (uint64_t i = 0; ok && i < n; i++) {
        ok = wput_str(w, strs[i]);
    }
    return wkv_end(w, ok, mark);
}

moon_status_t moon_gguf_writer_tensor(moon_gguf_writer_t *w, const char *name,
                                      moon_ggml_type_t type, uint32_t n_dims, const uint64_t *ne,
                                      const void *data)
{
    wtensor_t *t;
    wtensor_t  added = {0};
    uint64_t   n     = 1;

    if (w == NULL || name == NULL || ne == NULL || data == NULL || n_dims == 0 ||
        n_dims > MOON_GGUF_MAX_DIMS ||
        moon_ggml_type_bytes(type, moon_ggml_block_size(type)) == 0 ||
        ne[0] % moon_ggml_block_size(type) != 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (moon_vec_push(&w->tensors, &added) != MOON_OK) {
        return MOON_ERR_NO_MEMORY;
    }
    t       = moon_vec_at(&w->tensors, moon_vec_len(&w->tensors) - 1);
    t->name = moon_strdup(name);
    if (t->name == NULL) {
        moon_vec_pop(&w->tensors);
        return MOON_ERR_NO_MEMORY;
    }
    t->type   = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < n_dims; d++) {
        t->ne[d] = ne[d];
        n *= ne[d];
    }
    t->bytes = moon_ggml_type_bytes(type, n);
    t->data  = data;
    return MOON_OK;
}

static int fwrite_all(FILE *f, const void *p, size_t n)
{
    return n == 0 || fwrite(p, 1, n, f) == n;
}

static int fpad(FILE *f, uint64_t pos, uint64_t align)
{
    static const uint8_t zeros[MOON_GGUF_DEFAULT_ALIGNMENT];
    uint64_t             pad = (align - pos % align) % align;
    return fwrite_all(f, zeros, pad);
}

moon_status_t moon_gguf_writer_write(moon_gguf_writer_t *w, const char *path)
{
    const uint64_t align  = MOON_GGUF_DEFAULT_ALIGNMENT;
    uint32_t       hdr[2] = {GGUF_MAGIC, 3};
    uint64_t       off    = 0;
    uint64_t       pos, n_tensors;
    wtensor_t     *tensors;
    FILE          *f;
    int            ok;

    if (w == NULL || path == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    n_tensors = moon_vec_len(&w->tensors);
    tensors   = moon_vec_data(&w->tensors);
    f         = fopen(path, "wb");
    if (f == NULL) {
        MOON_ERROR("gguf: create %s: %s", path, strerror(errno));
        return MOON_ERR_IO;
    }
    ok = fwrite_all(f, hdr, 8) && fwrite_all(f, &n_tensors, 8) && fwrite_all(f, &w->n_kv, 8) &&
         fwrite_all(f, moon_vec_data(&w->kv), moon_vec_len(&w->kv));
    pos = 24 + moon_vec_len(&w->kv);
    for (uint64_t i = 0; ok && i < n_tensors; i++) {
        wtensor_t *t   = &tensors[i];
        uint64_t   len = strlen(t->name);
        uint32_t   ty  = t->type;
        t->offset      = off;
        off            = (off + t->bytes + align - 1) / align * align;
        ok             = fwrite_all(f, &len, 8) && fwrite_all(f, t->name, len) &&
             fwrite_all(f, &t->n_dims, 4) && fwrite_all(f, t->ne, 8 * t->n_dims) &&
             fwrite_all(f, &ty, 4) && fwrite_all(f, &t->offset, 8);
        pos += 8 + len + 4 + 8 * t->n_dims + 4 + 8;
    }
    ok = ok && fpad(f, pos, align);
    for (uint64_t i = 0; ok && i < n_tensors; i++) {
        ok = fwrite_all(f, tensors[i].data, tensors[i].bytes) && fpad(f, tensors[i].bytes, align);
    }
    if (fclose(f) != 0) {
        ok = 0;
    }
    if (!ok) {
        MOON_ERROR("gguf: write %s failed: %s", path, strerror(errno));
        remove(path);
        return MOON_ERR_IO;
    }
    return MOON_OK;
}
