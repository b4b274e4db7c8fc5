/* model/gguf/gguf.c - GGUF v3 reader (moonlet/gguf.h). It parses the whole header
 * once at open through the bounds-checked reader, indexes keys (and the
 * elements of string arrays) and tensors, and never reads outside
 * [data, data + size). The writer is gguf_writer.c, element conversions
 * fp16.c, the ggml types and their quantisation quant.c. */
#include "moonlet/gguf.h"

#include "gguf_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAX_ARR_DEPTH 4
#define GGUF_MAX_KEY_BYTES 65535u

typedef struct {
    char            *key; /* owned, NUL-terminated */
    moon_gguf_type_t type;
    moon_gguf_type_t elem_type; /* arrays only */
    uint64_t         n;         /* arrays only: element count */
    const uint8_t   *val;       /* value bytes in the file (after type / array header) */
    uint64_t         val_bytes;
    const uint8_t  **strs; /* string arrays only: n pointers to each u64 length */
} gguf_kv_t;

struct moon_gguf {
    const uint8_t      *base;
    size_t              size;
    int                 mapped;
    uint32_t            version;
    uint32_t            alignment;
    uint64_t            n_kv;
    gguf_kv_t          *kvs; /* (n_kv) */
    uint64_t            n_tensors;
    moon_gguf_tensor_t *tensors; /* (n_tensors) */
};

/* The header is read through moonlet/reader.h, in host byte order (GGUF is
 * little-endian, as are the hosts this builds for). */
static moon_status_t cur_u32(moon_reader_t *c, uint32_t *v)
{
    return moon_reader_copy(c, v, 4);
}

static moon_status_t cur_u64(moon_reader_t *c, uint64_t *v)
{
    return moon_reader_copy(c, v, 8);
}

/* A GGUF string: u64 length then bytes. Returns a pointer into the file. */
static moon_status_t cur_str(moon_reader_t *c, const uint8_t **s, uint64_t *len)
{
    moon_status_t status = cur_u64(c, len);

    return status != MOON_OK ? status : moon_reader_take(c, *len, s);
}

size_t moon_gguf_scalar_bytes(moon_gguf_type_t t)
{
    switch (t) {
    case MOON_GGUF_UINT8:
    case MOON_GGUF_INT8:
    case MOON_GGUF_BOOL:
        return 1;
    case MOON_GGUF_UINT16:
    case MOON_GGUF_INT16:
        return 2;
    case MOON_GGUF_UINT32:
    case MOON_GGUF_INT32:
    case MOON_GGUF_FLOAT32:
        return 4;
    case MOON_GGUF_UINT64:
    case MOON_GGUF_INT64:
    case MOON_GGUF_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

/* Skips one value of type t (arrays recursively, depth-limited). */
static moon_status_t skip_value(moon_reader_t *c, uint32_t t, int depth)
{
    size_t sb = moon_gguf_scalar_bytes((moon_gguf_type_t)t);

    if (sb != 0) {
        return moon_reader_skip(c, sb);
    }
    if (t == MOON_GGUF_STRING) {
        const uint8_t *s;
        uint64_t       len;
        return cur_str(c, &s, &len);
    }
    if (t == MOON_GGUF_ARRAY) {
        uint32_t et;
        uint64_t n;
        if (depth >= GGUF_MAX_ARR_DEPTH || cur_u32(c, &et) != MOON_OK ||
            cur_u64(c, &n) != MOON_OK) {
            return MOON_ERR_INVALID_PARAM;
        }
        sb = moon_gguf_scalar_bytes((moon_gguf_type_t)et);
        if (sb != 0) {
            return n <= (uint64_t)moon_reader_left(c) / sb ? moon_reader_skip(c, n * sb)
                                                           : MOON_ERR_INVALID_PARAM;
        }
        if (et != MOON_GGUF_STRING && et != MOON_GGUF_ARRAY) {
            return MOON_ERR_INVALID_PARAM;
        }
        /* each element takes at least 8 bytes: bounds the loop by the file size */
        if (n > (uint64_t)moon_reader_left(c) / 8) {
            return MOON_ERR_INVALID_PARAM;
        }
        for (uint64_t i = 0; i < n; i++) {
            if (skip_value(c, et, depth + 1) != MOON_OK) {
                return MOON_ERR_INVALID_PARAM;
            }
        }
        return MOON_OK;
    }
    return MOON_ERR_INVALID_PARAM;
}

const char *moon_gguf_type_name(moon_gguf_type_t type)
{
    static const char *names[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                  "int32",  "float32", "bool",   "string", "array",
                                  "uint64", "int64",   "float64"};
    return (unsigned)type < MOON_ARRAY_SIZE(names) ? names[type] : "unknown";
}

static void gguf_free(moon_gguf_t *g)
{
    for (uint64_t i = 0; g->kvs != NULL && i < g->n_kv; i++) {
        moon_free(g->kvs[i].key);
        moon_free((void *)g->kvs[i].strs);
    }
    for (uint64_t i = 0; g->tensors != NULL && i < g->n_tensors; i++) {
        moon_free((void *)g->tensors[i].name);
    }
    moon_free(g->kvs);
    moon_free(g->tensors);
    if (g->mapped) {
        munmap((void *)g->base, g->size);
    }
    moon_free(g);
}

static char *dup_bytes(const uint8_t *s, uint64_t len)
{
    char *d = moon_malloc(len + 1);

    if (d != NULL) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

#define CORRUPT(...)                                                                               \
    do {                                                                                           \
        MOON_ERROR("gguf: " __VA_ARGS__);                                                          \
        status = MOON_ERR_CORRUPT;                                                                 \
        goto out;                                                                                  \
    } while (0)
#define NOMEM()                                                                                    \
    do {                                                                                           \
        status = MOON_ERR_NO_MEMORY;                                                               \
        goto out;                                                                                  \
    } while (0)

static moon_status_t parse_kv(moon_gguf_t *g, moon_reader_t *c, gguf_kv_t *kv)
{
    moon_status_t  status = MOON_OK;
    const uint8_t *ks;
    uint64_t       klen;
    uint32_t       t;

    if (cur_str(c, &ks, &klen) != MOON_OK || klen > GGUF_MAX_KEY_BYTES) {
        CORRUPT("truncated or oversized key");
    }
    kv->key = dup_bytes(ks, klen);
    if (kv->key == NULL) {
        NOMEM();
    }
    if (cur_u32(c, &t) != MOON_OK || t >= MOON_GGUF_TYPE_COUNT) {
        CORRUPT("key '%s': bad value type", kv->key);
    }
    kv->type = (moon_gguf_type_t)t;
    if (t == MOON_GGUF_ARRAY) {
        uint32_t et;
        if (cur_u32(c, &et) != MOON_OK || et >= MOON_GGUF_TYPE_COUNT ||
            cur_u64(c, &kv->n) != MOON_OK) {
            CORRUPT("key '%s': truncated array header", kv->key);
        }
        kv->elem_type = (moon_gguf_type_t)et;
        kv->val       = c->p;
        if (et == MOON_GGUF_STRING) {
            if (kv->n > (uint64_t)moon_reader_left(c) / 8) {
                CORRUPT("key '%s': string array count %llu exceeds the file", kv->key,
                        (unsigned long long)kv->n);
            }
            kv->strs = moon_calloc(kv->n ? kv->n : 1, sizeof(*kv->strs));
            if (kv->strs == NULL) {
                NOMEM();
            }
            for (uint64_t i = 0; i < kv->n; i++) {
                const uint8_t *s;
                uint64_t       len;
                kv->strs[i] = c->p;
                if (cur_str(c, &s, &len) != MOON_OK) {
                    CORRUPT("key '%s': truncated string %llu", kv->key, (unsigned long long)i);
                }
            }
        } else {
            c->p -= 12; /* rewind to the array header and skip it as a whole */
            if (skip_value(c, MOON_GGUF_ARRAY, 0) != MOON_OK) {
                CORRUPT("key '%s': truncated or malformed array", kv->key);
            }
        }
    } else {
        kv->val = c->p;
        if (skip_value(c, t, 0) != MOON_OK) {
            CORRUPT("key '%s': truncated value", kv->key);
        }
    }
    kv->val_bytes = (uint64_t)(c->p - kv->val);
    (void)g;
out:
    return status;
}

static moon_status_t parse(moon_gguf_t *g)
{
    moon_status_t status = MOON_OK;
    moon_reader_t c      = {g->base, g->base + g->size};
    uint32_t      magic;
    uint64_t      data_start;
    uint64_t      data_size;

    if (cur_u32(&c, &magic) != MOON_OK || magic != GGUF_MAGIC) {
        CORRUPT("bad magic (not a GGUF file)");
    }
    if (cur_u32(&c, &g->version) != MOON_OK || (g->version != 2 && g->version != 3)) {
        CORRUPT("unsupported version %u (want 3)", g->version);
    }
    if (cur_u64(&c, &g->n_tensors) != MOON_OK || cur_u64(&c, &g->n_kv) != MOON_OK) {
        CORRUPT("truncated header");
    }
    /* minimum encoded sizes: a kv takes >= 13 bytes, a tensor info >= 32 */
    if (g->n_kv > moon_reader_left(&c) / 13 || g->n_tensors > moon_reader_left(&c) / 32) {
        CORRUPT("counts (%llu kv, %llu tensors) exceed the file size", (unsigned long long)g->n_kv,
                (unsigned long long)g->n_tensors);
    }
    g->kvs     = moon_calloc(g->n_kv ? g->n_kv : 1, sizeof(*g->kvs));
    g->tensors = moon_calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*g->tensors));
    if (g->kvs == NULL || g->tensors == NULL) {
        NOMEM();
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        status = parse_kv(g, &c, &g->kvs[i]);
        if (status != MOON_OK) {
            goto out;
        }
    }
    g->alignment = MOON_GGUF_DEFAULT_ALIGNMENT;
    if (moon_gguf_find_key(g, "general.alignment") >= 0) {
        uint32_t a;
        /* the spec wants a multiple of 8: below, tensor data could start at
         * any byte and floats would be read misaligned (UBSan) */
        if (moon_gguf_get_u32(g, "general.alignment", &a) != MOON_OK || a < 8 ||
            (a & (a - 1)) != 0 || a > (1u << 20)) {
            CORRUPT("general.alignment is not a power of two from 8 to 2^20");
        }
        g->alignment = a;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        moon_gguf_tensor_t *t = &g->tensors[i];
        const uint8_t      *ns;
        uint64_t            nlen;
        uint32_t            type;

        if (cur_str(&c, &ns, &nlen) != MOON_OK || nlen > GGUF_MAX_KEY_BYTES) {
            CORRUPT("tensor %llu: truncated name", (unsigned long long)i);
        }
        t->name = dup_bytes(ns, nlen);
        if (t->name == NULL) {
            NOMEM();
        }
        if (cur_u32(&c, &t->n_dims) != MOON_OK || t->n_dims == 0 ||
            t->n_dims > MOON_GGUF_MAX_DIMS) {
            CORRUPT("tensor '%s': bad dimension count", t->name);
        }
        t->n_elems = 1;
        for (uint32_t d = 0; d < MOON_GGUF_MAX_DIMS; d++) {
            t->ne[d] = 1;
        }
        for (uint32_t d = 0; d < t->n_dims; d++) {
            if (cur_u64(&c, &t->ne[d]) != MOON_OK) {
                CORRUPT("tensor '%s': truncated dims", t->name);
            }
            if (t->ne[d] > (1ull << 40) ||
                (t->ne[d] != 0 && t->n_elems > (1ull << 40) / t->ne[d])) {
                CORRUPT("tensor '%s': dimension overflow", t->name);
            }
            t->n_elems *= t->ne[d];
        }
        if (cur_u32(&c, &type) != MOON_OK || cur_u64(&c, &t->offset) != MOON_OK) {
            CORRUPT("tensor '%s': truncated info", t->name);
        }
        t->type = (moon_ggml_type_t)type;
        if (moon_ggml_type_bytes(t->type, moon_ggml_block_size(t->type)) == 0) {
            CORRUPT("tensor '%s': unsupported type %u", t->name, type);
        }
        if (t->ne[0] % moon_ggml_block_size(t->type) != 0) {
            CORRUPT("tensor '%s': row of %llu not a multiple of the block size", t->name,
                    (unsigned long long)t->ne[0]);
        }
        t->bytes = moon_ggml_type_bytes(t->type, t->n_elems);
        if (t->offset % g->alignment != 0) {
            CORRUPT("tensor '%s': offset %llu not aligned", t->name, (unsigned long long)t->offset);
        }
    }
    data_start = ((uint64_t)(c.p - g->base) + g->alignment - 1) / g->alignment * g->alignment;
    data_size  = data_start <= g->size ? g->size - data_start : 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        moon_gguf_tensor_t *t = &g->tensors[i];
        if (t->offset > data_size || t->bytes > data_size - t->offset) {
            CORRUPT("tensor '%s': data [%llu, +%llu) beyond the end of the file", t->name,
                    (unsigned long long)t->offset, (unsigned long long)t->bytes);
        }
        t->data = g->base + data_start + t->offset;
        /* an unaligned buffer given to moon_gguf_open_memory: F32 needs 4
         * bytes, F16, BF16 and the quantised blocks (an fp16 scale first) 2 */
        if ((uintptr_t)t->data % (t->type == MOON_GGML_F32 ? 4u : 2u) != 0) {
            CORRUPT("tensor '%s': data misaligned for its type", t->name);
        }
    }
out:
    return status;
}

static moon_status_t open_common(const uint8_t *base, size_t size, int mapped, moon_gguf_t **gguf_p)
{
    moon_gguf_t  *g = moon_calloc(1, sizeof(*g));
    moon_status_t status;

    if (g == NULL) {
        if (mapped) {
            munmap((void *)base, size);
        }
        return MOON_ERR_NO_MEMORY;
    }
    g->base   = base;
    g->size   = size;
    g->mapped = mapped;
    status    = parse(g);
    if (status != MOON_OK) {
        gguf_free(g);
        return status;
    }
    *gguf_p = g;
    return MOON_OK;
}

moon_status_t moon_gguf_open_memory(const void *data, size_t bytes, moon_gguf_t **gguf_p)
{
    if ((data == NULL && bytes != 0) || gguf_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    return open_common(data, bytes, 0, gguf_p);
}

moon_status_t moon_gguf_open(const char *path, moon_gguf_t **gguf_p)
{
    struct stat st;
    void       *base;
    int         fd;

    if (path == NULL || gguf_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    /* O_NONBLOCK: a FIFO (or a device) given as a model must not block in
     * open(); fstat then refuses anything but a regular file */
    fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        MOON_ERROR("gguf: open %s: %s", path, strerror(errno));
        return errno == ENOENT ? MOON_ERR_NOT_FOUND : MOON_ERR_IO;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        MOON_ERROR("gguf: %s is not a regular file", path);
        close(fd);
        return MOON_ERR_IO;
    }
    if (st.st_size == 0) {
        close(fd);
        MOON_ERROR("gguf: %s is empty", path);
        return MOON_ERR_CORRUPT;
    }
    base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        MOON_ERROR("gguf: mmap %s: %s", path, strerror(errno));
        return MOON_ERR_IO;
    }
    return open_common(base, (size_t)st.st_size, 1, gguf_p);
}

void moon_gguf_close(moon_gguf_t *gguf)
{
    if (gguf != NULL) {
        gguf_free(gguf);
    }
}

uint32_t moon_gguf_version(const moon_gguf_t *g)
{
    return g->version;
}
uint32_t moon_gguf_alignment(const moon_gguf_t *g)
{
    return g->alignment;
}
uint64_t moon_gguf_n_kv(const moon_gguf_t *g)
{
    return g->n_kv;
}
uint64_t moon_gguf_n_tensors(const moon_gguf_t *g)
{
    return g->n_tensors;
}

int64_t moon_gguf_find_key(const moon_gguf_t *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++) {
        if (g->kvs[i].key != NULL && strcmp(g->kvs[i].key, key) == 0) {
            return (int64_t)i;
        }
    }
    return -1;
}

const char *moon_gguf_key_name(const moon_gguf_t *g, uint64_t idx)
{
    return idx < g->n_kv ? g->kvs[idx].key : NULL;
}

void moon_gguf_image(const moon_gguf_t *g, const void **data_p, size_t *bytes_p)
{
    *data_p  = g->base;
    *bytes_p = g->size;
}

/* Keys of a with prefix that b lacks or holds with another value. */
static const char *first_key_missing(const moon_gguf_t *a, const moon_gguf_t *b, const char *prefix)
{
    size_t plen = strlen(prefix);

    for (uint64_t i = 0; i < a->n_kv; i++) {
        const gguf_kv_t *x = &a->kvs[i];
        int64_t          j;
        if (strncmp(x->key, prefix, plen) != 0) {
            continue;
        }
        j = moon_gguf_find_key(b, x->key);
        if (j < 0 || b->kvs[j].type != x->type || b->kvs[j].elem_type != x->elem_type ||
            b->kvs[j].n != x->n || b->kvs[j].val_bytes != x->val_bytes ||
            memcmp(b->kvs[j].val, x->val, x->val_bytes) != 0) {
            return x->key;
        }
    }
    return NULL;
}

int moon_gguf_keys_equal(const moon_gguf_t *a, const moon_gguf_t *b, const char *prefix, char *why,
                         size_t why_len)
{
    const char *k = first_key_missing(a, b, prefix);

    if (k == NULL) {
        k = first_key_missing(b, a, prefix);
    }
    if (k != NULL && why_len > 0) {
        snprintf(why, why_len, "%s", k);
    }
    return k == NULL;
}

moon_gguf_type_t moon_gguf_key_type(const moon_gguf_t *g, uint64_t idx)
{
    return idx < g->n_kv ? g->kvs[idx].type : MOON_GGUF_TYPE_COUNT;
}

/* Reads a scalar of type t at p into integer/float forms; 0 when not a number. */
static int scalar_value(moon_gguf_type_t t, const uint8_t *p, int64_t *i, uint64_t *u, double *f,
                        int *is_signed)
{
    union {
        uint8_t  u8;
        int8_t   i8;
        uint16_t u16;
        int16_t  i16;
        uint32_t u32;
        int32_t  i32;
        float    f32;
        uint64_t u64;
        int64_t  i64;
        double   f64;
    } v;
    size_t sb = moon_gguf_scalar_bytes(t);

    if (sb == 0) {
        return 0;
    }
    memcpy(&v, p, sb);
    *is_signed = 1;
    switch (t) {
    case MOON_GGUF_UINT8:
        *i = v.u8;
        break;
    case MOON_GGUF_BOOL:
        *i = v.u8 != 0;
        break;
    case MOON_GGUF_INT8:
        *i = v.i8;
        break;
    case MOON_GGUF_UINT16:
        *i = v.u16;
        break;
    case MOON_GGUF_INT16:
        *i = v.i16;
        break;
    case MOON_GGUF_UINT32:
        *i = v.u32;
        break;
    case MOON_GGUF_INT32:
        *i = v.i32;
        break;
    case MOON_GGUF_INT64:
        *i = v.i64;
        break;
    case MOON_GGUF_UINT64:
        *u         = v.u64;
        *f         = (double)v.u64;
        *is_signed = 0;
        return 1;
    case MOON_GGUF_FLOAT32:
        *f         = v.f32;
        *is_signed = -1;
        return 1;
    case MOON_GGUF_FLOAT64:
        *f         = v.f64;
        *is_signed = -1;
        return 1;
    default:
        return 0;
    }
    *f = (double)*i;
    return 1;
}

static const gguf_kv_t *get_kv(const moon_gguf_t *g, const char *key)
{
    int64_t idx;

    if (g == NULL || key == NULL) {
        return NULL;
    }
    idx = moon_gguf_find_key(g, key);
    return idx < 0 ? NULL : &g->kvs[idx];
}

/* The key's entry when it has type t. NOT_FOUND: no such key; INVALID_PARAM:
 * another type. */
static moon_status_t get_typed(const moon_gguf_t *g, const char *key, moon_gguf_type_t t,
                               const gguf_kv_t **kv_p)
{
    const gguf_kv_t *kv = get_kv(g, key);

    if (kv == NULL) {
        return MOON_ERR_NOT_FOUND;
    }
    if (kv->type != t) {
        return MOON_ERR_INVALID_PARAM;
    }
    *kv_p = kv;
    return MOON_OK;
}

/* A scalar key's value in integer/float forms (scalar_value's). NOT_FOUND: no
 * such key; INVALID_PARAM: not a number. */
typedef struct {
    moon_gguf_type_t type;
    int64_t          i;
    uint64_t         u;
    double           f;
    int              sgn;
} scalar_t;

static moon_status_t get_scalar(const moon_gguf_t *g, const char *key, scalar_t *v)
{
    const gguf_kv_t *kv = get_kv(g, key);

    if (kv == NULL) {
        return MOON_ERR_NOT_FOUND;
    }
    v->type = kv->type;
    return scalar_value(kv->type, kv->val, &v->i, &v->u, &v->f, &v->sgn) ? MOON_OK
                                                                         : MOON_ERR_INVALID_PARAM;
}

moon_status_t moon_gguf_get_u64(const moon_gguf_t *g, const char *key, uint64_t *v_p)
{
    scalar_t      v;
    moon_status_t status = get_scalar(g, key, &v);

    if (status != MOON_OK) {
        return status;
    }
    if (v.sgn < 0 || (v.sgn && v.i < 0)) {
        return MOON_ERR_INVALID_PARAM;
    }
    *v_p = v.sgn ? (uint64_t)v.i : v.u;
    return MOON_OK;
}

moon_status_t moon_gguf_get_i64(const moon_gguf_t *g, const char *key, int64_t *v_p)
{
    scalar_t      v;
    moon_status_t status = get_scalar(g, key, &v);

    if (status != MOON_OK) {
        return status;
    }
    if (v.sgn < 0 || (!v.sgn && v.u > (uint64_t)INT64_MAX)) {
        return MOON_ERR_INVALID_PARAM;
    }
    *v_p = v.sgn ? v.i : (int64_t)v.u;
    return MOON_OK;
}

moon_status_t moon_gguf_get_u32(const moon_gguf_t *g, const char *key, uint32_t *v_p)
{
    uint64_t      v;
    moon_status_t status = moon_gguf_get_u64(g, key, &v);

    if (status != MOON_OK) {
        return status;
    }
    if (v > UINT32_MAX) {
        return MOON_ERR_INVALID_PARAM;
    }
    *v_p = (uint32_t)v;
    return MOON_OK;
}

moon_status_t moon_gguf_get_f64(const moon_gguf_t *g, const char *key, double *v_p)
{
    scalar_t      v;
    moon_status_t status = get_scalar(g, key, &v);

    if (status != MOON_OK) {
        return status;
    }
    if (v.type == MOON_GGUF_BOOL) {
        return MOON_ERR_INVALID_PARAM;
    }
    *v_p = v.f;
    return MOON_OK;
}

moon_status_t moon_gguf_get_f32(const moon_gguf_t *g, const char *key, float *v_p)
{
    double        v;
    moon_status_t status = moon_gguf_get_f64(g, key, &v);

    if (status == MOON_OK) {
        *v_p = (float)v;
    }
    return status;
}

moon_status_t moon_gguf_get_bool(const moon_gguf_t *g, const char *key, bool *v_p)
{
    const gguf_kv_t *kv;
    moon_status_t    status = get_typed(g, key, MOON_GGUF_BOOL, &kv);

    if (status != MOON_OK) {
        return status;
    }
    *v_p = kv->val[0] != 0;
    return MOON_OK;
}

moon_status_t moon_gguf_get_str(const moon_gguf_t *g, const char *key, const char **str_p,
                                uint64_t *len_p)
{
    const gguf_kv_t *kv;
    moon_status_t    status = get_typed(g, key, MOON_GGUF_STRING, &kv);

    if (status != MOON_OK) {
        return status;
    }
    memcpy(len_p, kv->val, 8);
    *str_p = (const char *)kv->val + 8;
    return MOON_OK;
}

moon_status_t moon_gguf_get_arr(const moon_gguf_t *g, const char *key,
                                moon_gguf_type_t *elem_type_p, uint64_t *n_p, const void **data_p)
{
    const gguf_kv_t *kv;
    moon_status_t    status = get_typed(g, key, MOON_GGUF_ARRAY, &kv);

    if (status != MOON_OK) {
        return status;
    }
    *elem_type_p = kv->elem_type;
    *n_p         = kv->n;
    if (data_p != NULL) {
        *data_p = moon_gguf_scalar_bytes(kv->elem_type) ? (const void *)kv->val : NULL;
    }
    return MOON_OK;
}

moon_status_t moon_gguf_get_arr_str(const moon_gguf_t *g, const char *key, uint64_t idx,
                                    const char **str_p, uint64_t *len_p)
{
    const gguf_kv_t *kv;
    moon_status_t    status = get_typed(g, key, MOON_GGUF_ARRAY, &kv);

    if (status != MOON_OK) {
        return status;
    }
    if (kv->elem_type != MOON_GGUF_STRING || idx >= kv->n) {
        return MOON_ERR_INVALID_PARAM;
    }
    memcpy(len_p, kv->strs[idx], 8);
    *str_p = (const char *)kv->strs[idx] + 8;
    return MOON_OK;
}

moon_status_t moon_gguf_get_arr_f64(const moon_gguf_t *g, const char *key, uint64_t idx,
                                    double *v_p)
{
    const gguf_kv_t *kv;
    size_t           sb;
    int64_t          i;
    uint64_t         u;
    double           f;
    int              sgn;
    moon_status_t    status = get_typed(g, key, MOON_GGUF_ARRAY, &kv);

    if (status != MOON_OK) {
        return status;
    }
    if (idx >= kv->n) {
        return MOON_ERR_INVALID_PARAM;
    }
    sb = moon_gguf_scalar_bytes(kv->elem_type);
    if (sb == 0 || !scalar_value(kv->elem_type, kv->val + idx * sb, &i, &u, &f, &sgn)) {
        return MOON_ERR_INVALID_PARAM;
    }
    *v_p = f;
    return MOON_OK;
}

const moon_gguf_tensor_t *moon_gguf_tensor(const moon_gguf_t *g, uint64_t idx)
{
    return idx < g->n_tensors ? &g->tensors[idx] : NULL;
}

const moon_gguf_tensor_t *moon_gguf_find_tensor(const moon_gguf_t *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if (strcmp(g->tensors[i].name, name) == 0) {
            return &g->tensors[i];
        }
    }
    return NULL;
}
