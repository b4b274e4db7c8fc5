/* model/convert/safetensors.c - the safetensors reader: an 8-byte
 * little-endian header length, a JSON header {"name": {"dtype", "shape",
 * "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data.
 * Every offset, shape and byte count is checked against the image before a
 * tensor is handed out. */
#include "moonlet/hf.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u << 20) /* the format's own limit on the header */

struct moon_st {
    moon_st_tensor_t *tensors;
    uint64_t          n_tensors;
    void             *map; /* NULL: caller's memory */
    size_t            map_bytes;
};

static int st_dtype(const char *s, moon_ggml_type_t *type_p)
{
    if (strcmp(s, "F32") == 0) {
        *type_p = MOON_GGML_F32;
    } else if (strcmp(s, "F16") == 0) {
        *type_p = MOON_GGML_F16;
    } else if (strcmp(s, "BF16") == 0) {
        *type_p = MOON_GGML_BF16;
    } else {
        return 0;
    }
    return 1;
}

/* An exact non-negative integer below 2^53 (JSON numbers are doubles). */
static int st_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740992.0 ||
        v->valuedouble != (double)(uint64_t)v->valuedouble) {
        return 0;
    }
    *out = (uint64_t)v->valuedouble;
    return 1;
}

/* Fills t from one header entry; data_len is the size of the data section. */
static moon_status_t st_entry(const cJSON *e, const uint8_t *data, uint64_t data_len,
                              const char *what, moon_st_tensor_t *t)
{
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs  = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    uint64_t     begin, end, n = 1;

    if (!cJSON_IsObject(e) || !cJSON_IsString(dtype) || !cJSON_IsArray(shape) ||
        !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !st_uint(cJSON_GetArrayItem(offs, 0), &begin) ||
        !st_uint(cJSON_GetArrayItem(offs, 1), &end)) {
        MOON_ERROR("safetensors %s: tensor '%s' lacks dtype, shape or data_offsets", what,
                   e->string);
        return MOON_ERR_CORRUPT;
    }
    if (!st_dtype(dtype->valuestring, &t->type)) {
        MOON_ERROR("safetensors %s: tensor '%s' has dtype %s (supported: F32, F16, BF16)", what,
                   e->string, dtype->valuestring);
        return MOON_ERR_UNSUPPORTED;
    }
    if (cJSON_GetArraySize(shape) > MOON_GGUF_MAX_DIMS) {
        MOON_ERROR("safetensors %s: tensor '%s' has %d dimensions (at most %d)", what, e->string,
                   cJSON_GetArraySize(shape), MOON_GGUF_MAX_DIMS);
        return MOON_ERR_UNSUPPORTED;
    }
    t->n_dims = (uint32_t)cJSON_GetArraySize(shape);
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (!st_uint(cJSON_GetArrayItem(shape, (int)d), &t->shape[d]) ||
            (t->shape[d] != 0 && n > (UINT64_MAX / 4) / t->shape[d])) {
            MOON_ERROR("safetensors %s: tensor '%s' has a bad shape", what, e->string);
            return MOON_ERR_CORRUPT;
        }
        n *= t->shape[d];
    }
    for (uint32_t d = t->n_dims; d < MOON_GGUF_MAX_DIMS; d++) {
        t->shape[d] = 1;
    }
    t->n_elems = n;
    t->bytes   = moon_ggml_type_bytes(t->type, n);
    if (begin > end || end > data_len || end - begin != t->bytes) {
        MOON_ERROR("safetensors %s: tensor '%s' data_offsets [%llu, %llu) do not hold %llu bytes "
                   "within %llu (truncated?)",
                   what, e->string, (unsigned long long)begin, (unsigned long long)end,
                   (unsigned long long)t->bytes, (unsigned long long)data_len);
        return MOON_ERR_CORRUPT;
    }
    t->data = data + begin;
    t->name = moon_strdup(e->string);
    return t->name != NULL ? MOON_OK : MOON_ERR_NO_MEMORY;
}

moon_status_t moon_st_open_memory(const void *data, size_t bytes, const char *what,
                                  moon_st_t **st_p)
{
    const uint8_t *p    = data;
    uint64_t       hlen = 0;
    cJSON         *root;
    moon_st_t     *st;
    moon_status_t  status = MOON_OK;
    uint64_t       n      = 0;
    const cJSON   *e;

    what = what != NULL ? what : "(memory)";
    if (bytes < 8) {
        MOON_ERROR("safetensors %s: %zu bytes, shorter than the header length", what, bytes);
        return MOON_ERR_CORRUPT;
    }
    for (int i = 7; i >= 0; i--) {
        hlen = (hlen << 8) | p[i];
    }
    if (hlen < 2 || hlen > ST_MAX_HEADER || hlen > bytes - 8) {
        MOON_ERROR("safetensors %s: header length %llu does not fit the %zu-byte file", what,
                   (unsigned long long)hlen, bytes);
        return MOON_ERR_CORRUPT;
    }
    root = cJSON_ParseWithLength((const char *)p + 8, (size_t)hlen);
    if (!cJSON_IsObject(root)) {
        MOON_ERROR("safetensors %s: the header is not a JSON object", what);
        cJSON_Delete(root);
        return MOON_ERR_CORRUPT;
    }
    st = moon_calloc(1, sizeof(*st));
    if (st == NULL) {
        cJSON_Delete(root);
        return MOON_ERR_NO_MEMORY;
    }
    cJSON_ArrayForEach(e, root)
    {
        n++;
    }
    st->tensors = moon_calloc(n + 1, sizeof(*st->tensors));
    if (st->tensors == NULL) {
        status = MOON_ERR_NO_MEMORY;
    }
    cJSON_ArrayForEach(e, root)
    {
        if (status != MOON_OK) {
            break;
        }
        if (strcmp(e->string, "__metadata__") == 0) {
            continue;
        }
        if (moon_st_find(st, e->string) != NULL) {
            MOON_ERROR("safetensors %s: tensor '%s' appears twice", what, e->string);
            status = MOON_ERR_CORRUPT;
            break;
        }
        status = st_entry(e, p + 8 + hlen, bytes - 8 - hlen, what, &st->tensors[st->n_tensors]);
        if (status == MOON_OK) {
            st->n_tensors++;
        }
    }
    cJSON_Delete(root);
    if (status != MOON_OK) {
        moon_st_close(st);
        return status;
    }
    *st_p = st;
    return MOON_OK;
}

moon_status_t moon_st_open(const char *path, moon_st_t **st_p)
{
    struct stat   sb;
    void         *map;
    moon_st_t    *st = NULL;
    moon_status_t status;
    int           fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        MOON_ERROR("safetensors %s: %s", path, strerror(errno));
        return errno == ENOENT ? MOON_ERR_NOT_FOUND : MOON_ERR_IO;
    }
    if (fstat(fd, &sb) != 0 || sb.st_size < 8) {
        MOON_ERROR("safetensors %s: %s", path, sb.st_size < 8 ? "too short" : strerror(errno));
        close(fd);
        return MOON_ERR_CORRUPT;
    }
    map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        MOON_ERROR("safetensors %s: mmap: %s", path, strerror(errno));
        return MOON_ERR_IO;
    }
    status = moon_st_open_memory(map, (size_t)sb.st_size, path, &st);
    if (status != MOON_OK) {
        munmap(map, (size_t)sb.st_size);
        return status;
    }
    st->map       = map;
    st->map_bytes = (size_t)sb.st_size;
    *st_p         = st;
    return MOON_OK;
}

void moon_st_close(moon_st_t *st)
{
    if (st == NULL) {
        return;
    }
    for (uint64_t i = 0; i < st->n_tensors; i++) {
        moon_free((char *)st->tensors[i].name);
    }
    moon_free(st->tensors);
    if (st->map != NULL) {
        munmap(st->map, st->map_bytes);
    }
    moon_free(st);
}

uint64_t moon_st_n_tensors(const moon_st_t *st)
{
    return st->n_tensors;
}

const moon_st_tensor_t *moon_st_tensor(const moon_st_t *st, uint64_t idx)
{
    return idx < st->n_tensors ? &st->tensors[idx] : NULL;
}

const moon_st_tensor_t *moon_st_find(const moon_st_t *st, const char *name)
{
    for (uint64_t i = 0; i < st->n_tensors; i++) {
        if (strcmp(st->tensors[i].name, name) == 0) {
            return &st->tensors[i];
        }
    }
    return NULL;
}
