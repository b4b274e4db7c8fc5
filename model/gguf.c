/* model/gguf.c - GGUF v3 reader and writer. The reader parses the whole header
 * once at open through a bounds-checked cursor, indexes keys (and the elements
 * of string arrays) and tensors, and never reads outside [data, data + size). */
#include "moonlet/gguf.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
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

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} cursor_t;

static size_t cur_left(const cursor_t *c)
{
    return (size_t)(c->end - c->p);
}

static int cur_read(cursor_t *c, void *dst, size_t n)
{
    if (cur_left(c) < n) {
        return 0;
    }
    memcpy(dst, c->p, n);
    c->p += n;
    return 1;
}

static int cur_skip(cursor_t *c, uint64_t n)
{
    if ((uint64_t)cur_left(c) < n) {
        return 0;
    }
    c->p += n;
    return 1;
}

static int cur_u32(cursor_t *c, uint32_t *v)
{
    return cur_read(c, v, 4);
}
static int cur_u64(cursor_t *c, uint64_t *v)
{
    return cur_read(c, v, 8);
}

/* A GGUF string: u64 length then bytes. Returns a pointer into the file. */
static int cur_str(cursor_t *c, const uint8_t **s, uint64_t *len)
{
    if (!cur_u64(c, len) || (uint64_t)cur_left(c) < *len) {
        return 0;
    }
    *s = c->p;
    c->p += *len;
    return 1;
}

static size_t scalar_bytes(moon_gguf_type_t t)
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
static int skip_value(cursor_t *c, uint32_t t, int depth)
{
    size_t sb = scalar_bytes((moon_gguf_type_t)t);

    if (sb != 0) {
        return cur_skip(c, sb);
    }
    if (t == MOON_GGUF_STRING) {
        const uint8_t *s;
        uint64_t       len;
        return cur_str(c, &s, &len);
    }
    if (t == MOON_GGUF_ARRAY) {
        uint32_t et;
        uint64_t n;
        if (depth >= GGUF_MAX_ARR_DEPTH || !cur_u32(c, &et) || !cur_u64(c, &n)) {
            return 0;
        }
        sb = scalar_bytes((moon_gguf_type_t)et);
        if (sb != 0) {
            return n <= (uint64_t)cur_left(c) / sb && cur_skip(c, n * sb);
        }
        if (et != MOON_GGUF_STRING && et != MOON_GGUF_ARRAY) {
            return 0;
        }
        /* each element takes at least 8 bytes: bounds the loop by the file size */
        if (n > (uint64_t)cur_left(c) / 8) {
            return 0;
        }
        for (uint64_t i = 0; i < n; i++) {
            if (!skip_value(c, et, depth + 1)) {
                return 0;
            }
        }
        return 1;
    }
    return 0;
}

uint32_t moon_ggml_block_size(moon_ggml_type_t type)
{
    return (type == MOON_GGML_Q8_0 || type == MOON_GGML_Q4_0) ? MOON_GGML_QK : 1;
}

uint64_t moon_ggml_type_bytes(moon_ggml_type_t type, uint64_t n)
{
    switch (type) {
    case MOON_GGML_F32:
        return n * 4;
    case MOON_GGML_F16:
    case MOON_GGML_BF16:
        return n * 2;
    case MOON_GGML_Q8_0:
        return n / MOON_GGML_QK * 34;
    case MOON_GGML_Q4_0:
        return n / MOON_GGML_QK * 18;
    default:
        return 0;
    }
}

const char *moon_ggml_type_name(moon_ggml_type_t type)
{
    switch (type) {
    case MOON_GGML_F32:
        return "f32";
    case MOON_GGML_F16:
        return "f16";
    case MOON_GGML_BF16:
        return "bf16";
    case MOON_GGML_Q8_0:
        return "q8_0";
    case MOON_GGML_Q4_0:
        return "q4_0";
    default:
        return "unknown";
    }
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

static moon_status_t parse_kv(moon_gguf_t *g, cursor_t *c, gguf_kv_t *kv)
{
    moon_status_t  status = MOON_OK;
    const uint8_t *ks;
    uint64_t       klen;
    uint32_t       t;

    if (!cur_str(c, &ks, &klen) || klen > GGUF_MAX_KEY_BYTES) {
        CORRUPT("truncated or oversized key");
    }
    kv->key = dup_bytes(ks, klen);
    if (kv->key == NULL) {
        NOMEM();
    }
    if (!cur_u32(c, &t) || t >= MOON_GGUF_TYPE_COUNT) {
        CORRUPT("key '%s': bad value type", kv->key);
    }
    kv->type = (moon_gguf_type_t)t;
    if (t == MOON_GGUF_ARRAY) {
        uint32_t et;
        if (!cur_u32(c, &et) || et >= MOON_GGUF_TYPE_COUNT || !cur_u64(c, &kv->n)) {
            CORRUPT("key '%s': truncated array header", kv->key);
        }
        kv->elem_type = (moon_gguf_type_t)et;
        kv->val       = c->p;
        if (et == MOON_GGUF_STRING) {
            if (kv->n > (uint64_t)cur_left(c) / 8) {
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
                if (!cur_str(c, &s, &len)) {
                    CORRUPT("key '%s': truncated string %llu", kv->key, (unsigned long long)i);
                }
            }
        } else {
            c->p -= 12; /* rewind to the array header and skip it as a whole */
            if (!skip_value(c, MOON_GGUF_ARRAY, 0)) {
                CORRUPT("key '%s': truncated or malformed array", kv->key);
            }
        }
    } else {
        kv->val = c->p;
        if (!skip_value(c, t, 0)) {
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
    cursor_t      c      = {g->base, g->base + g->size};
    uint32_t      magic;
    uint64_t      data_start;
    uint64_t      data_size;

    if (!cur_u32(&c, &magic) || magic != GGUF_MAGIC) {
        CORRUPT("bad magic (not a GGUF file)");
    }
    if (!cur_u32(&c, &g->version) || (g->version != 2 && g->version != 3)) {
        CORRUPT("unsupported version %u (want 3)", g->version);
    }
    if (!cur_u64(&c, &g->n_tensors) || !cur_u64(&c, &g->n_kv)) {
        CORRUPT("truncated header");
    }
    /* minimum encoded sizes: a kv takes >= 13 bytes, a tensor info >= 32 */
    if (g->n_kv > cur_left(&c) / 13 || g->n_tensors > cur_left(&c) / 32) {
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

        if (!cur_str(&c, &ns, &nlen) || nlen > GGUF_MAX_KEY_BYTES) {
            CORRUPT("tensor %llu: truncated name", (unsigned long long)i);
        }
        t->name = dup_bytes(ns, nlen);
        if (t->name == NULL) {
            NOMEM();
        }
        if (!cur_u32(&c, &t->n_dims) || t->n_dims == 0 || t->n_dims > MOON_GGUF_MAX_DIMS) {
            CORRUPT("tensor '%s': bad dimension count", t->name);
        }
        t->n_elems = 1;
        for (uint32_t d = 0; d < MOON_GGUF_MAX_DIMS; d++) {
            t->ne[d] = 1;
        }
        for (uint32_t d = 0; d < t->n_dims; d++) {
            if (!cur_u64(&c, &t->ne[d])) {
                CORRUPT("tensor '%s': truncated dims", t->name);
            }
            if (t->ne[d] > (1ull << 40) ||
                (t->ne[d] != 0 && t->n_elems > (1ull << 40) / t->ne[d])) {
                CORRUPT("tensor '%s': dimension overflow", t->name);
            }
            t->n_elems *= t->ne[d];
        }
        if (!cur_u32(&c, &type) || !cur_u64(&c, &t->offset)) {
            CORRUPT("tensor '%s': truncated info", t->name);
        }
        t->type = (moon_ggml_type_t)type;
        if (moon_ggml_type_bytes(t->type, MOON_GGML_QK) == 0) {
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
    size_t sb = scalar_bytes(t);

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

moon_status_t moon_gguf_get_u64(const moon_gguf_t *g, const char *key, uint64_t *v_p)
{
    const gguf_kv_t *kv = get_kv(g, key);
    int64_t          i;
    uint64_t         u;
    double           f;
    int              sgn;

    if (kv == NULL) {
        return MOON_ERR_NOT_FOUND;
    }
    if (!scalar_value(kv->type, kv->val, &i, &u, &f, &sgn) || sgn < 0 || (sgn && i < 0)) {
        return MOON_ERR_INVALID_PARAM;
    }
    *v_p = sgn ? (uint64_t)i : u;
    return MOON_OK;
}

moon_status_t moon_gguf_get_i64(const moon_gguf_t *g, const char *key, int64_t *v_p)
{
    const gguf_kv_t *kv = get_kv(g, key);
    int64_t          i;
    uint64_t         u;
    double           f;
    int              sgn;

    if (kv == NULL) {
        return MOON_ERR_NOT_FOUND;
    }
    if (!scalar_value(kv->type, kv->val, &i, &u, &f, &sgn) || sgn < 0 ||
        (!sgn && u > (uint64_t)INT64_MAX)) {
        return MOON_ERR_INVALID_PARAM;
    }
    *v_p = sgn ? i : (int64_t)u;
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
    const gguf_kv_t *kv = get_kv(g, key);
    int64_t          i;
    uint64_t         u;
    double           f;
    int              sgn;

    if (kv == NULL) {
        return MOON_ERR_NOT_FOUND;
    }
    if (kv->type == MOON_GGUF_BOOL || !scalar_value(kv->type, kv->val, &i, &u, &f, &sgn)) {
        return MOON_ERR_INVALID_PARAM;
    }
    *v_p = f;
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
    const gguf_kv_t *kv = get_kv(g, key);

    if (kv == NULL) {
        return MOON_ERR_NOT_FOUND;
    }
    if (kv->type != MOON_GGUF_BOOL) {
        return MOON_ERR_INVALID_PARAM;
    }
    *v_p = kv->val[0] != 0;
    return MOON_OK;
}

moon_status_t moon_gguf_get_str(const moon_gguf_t *g, const char *key, const char **str_p,
                                uint64_t *len_p)
{
    const gguf_kv_t *kv = get_kv(g, key);

    if (kv == NULL) {
        return MOON_ERR_NOT_FOUND;
    }
    if (kv->type != MOON_GGUF_STRING) {
        return MOON_ERR_INVALID_PARAM;
    }
    memcpy(len_p, kv->val, 8);
    *str_p = (const char *)kv->val + 8;
    return MOON_OK;
}

moon_status_t moon_gguf_get_arr(const moon_gguf_t *g, const char *key,
                                moon_gguf_type_t *elem_type_p, uint64_t *n_p, const void **data_p)
{
    const gguf_kv_t *kv = get_kv(g, key);

    if (kv == NULL) {
        return MOON_ERR_NOT_FOUND;
    }
    if (kv->type != MOON_GGUF_ARRAY) {
        return MOON_ERR_INVALID_PARAM;
    }
    *elem_type_p = kv->elem_type;
    *n_p         = kv->n;
    if (data_p != NULL) {
        *data_p = scalar_bytes(kv->elem_type) ? (const void *)kv->val : NULL;
    }
    return MOON_OK;
}

moon_status_t moon_gguf_get_arr_str(const moon_gguf_t *g, const char *key, uint64_t idx,
                                    const char **str_p, uint64_t *len_p)
{
    const gguf_kv_t *kv = get_kv(g, key);

    if (kv == NULL) {
        return MOON_ERR_NOT_FOUND;
    }
    if (kv->type != MOON_GGUF_ARRAY || kv->elem_type != MOON_GGUF_STRING || idx >= kv->n) {
        return MOON_ERR_INVALID_PARAM;
    }
    memcpy(len_p, kv->strs[idx], 8);
    *str_p = (const char *)kv->strs[idx] + 8;
    return MOON_OK;
}

moon_status_t moon_gguf_get_arr_f64(const moon_gguf_t *g, const char *key, uint64_t idx,
                                    double *v_p)
{
    const gguf_kv_t *kv = get_kv(g, key);
    size_t           sb;
    int64_t          i;
    uint64_t         u;
    double           f;
    int              sgn;

    if (kv == NULL) {
        return MOON_ERR_NOT_FOUND;
    }
    if (kv->type != MOON_GGUF_ARRAY || idx >= kv->n) {
        return MOON_ERR_INVALID_PARAM;
    }
    sb = scalar_bytes(kv->elem_type);
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

/* ---- element conversion --------------------------------------------------- */

float moon_fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp  = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    union {
        uint32_t u;
        float    f;
    } v;

    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 */
        float f = (float)mant * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (exp == 31) {
        v.u = sign | 0x7f800000u | (mant << 13);
        return v.f;
    }
    v.u = sign | ((exp + 112) << 23) | (mant << 13);
    return v.f;
}

uint16_t moon_f32_to_fp16(float f)
{
    union {
        float    f;
        uint32_t u;
    } v           = {.f = f};
    uint32_t sign = (v.u >> 16) & 0x8000u;
    float    a    = fabsf(f);

    if (isnan(f)) {
        return (uint16_t)(sign | 0x7e00u);
    }
    if (a >= 65520.0f) {
        return (uint16_t)(sign | 0x7c00u);
    }
    if (a < 6.103515625e-05f) {
        /* subnormal: round(a / 2^-24) */
        return (uint16_t)(sign | (uint32_t)lrintf(a * 16777216.0f));
    }
    {
        union {
            float    f;
            uint32_t u;
        } w           = {.f = a};
        uint32_t e    = (w.u >> 23) - 112;
        uint32_t m    = w.u & 0x7fffffu;
        uint32_t r    = (e << 10) | (m >> 13);
        uint32_t rest = m & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) {
            r++;
        }
        return (uint16_t)(sign | r);
    }
}

uint16_t moon_f32_to_bf16(float f)
{
    union {
        float    f;
        uint32_t u;
    } v = {.f = f};

    if (isnan(f)) {
        return (uint16_t)((v.u >> 16) | 0x40u);
    }
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

void moon_ggml_dequantize(moon_ggml_type_t type, const void *src, float *dst, uint64_t n)
{
    const uint8_t *s = src;

    switch (type) {
    case MOON_GGML_F32:
        memcpy(dst, src, n * 4);
        break;
    case MOON_GGML_F16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = moon_fp16_to_f32(h);
        }
        break;
    case MOON_GGML_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = moon_bf16_to_f32(h);
        }
        break;
    case MOON_GGML_Q8_0:
        for (uint64_t b = 0; b < n / MOON_GGML_QK; b++) {
            const uint8_t *blk = s + b * 34;
            uint16_t       h;
            float          d;
            memcpy(&h, blk, 2);
            d = moon_fp16_to_f32(h);
            for (int j = 0; j < MOON_GGML_QK; j++) {
                dst[b * MOON_GGML_QK + j] = d * (float)(int8_t)blk[2 + j];
            }
        }
        break;
    case MOON_GGML_Q4_0:
        for (uint64_t b = 0; b < n / MOON_GGML_QK; b++) {
            const uint8_t *blk = s + b * 18;
            uint16_t       h;
            float          d;
            memcpy(&h, blk, 2);
            d = moon_fp16_to_f32(h);
            for (int j = 0; j < MOON_GGML_QK / 2; j++) {
                dst[b * MOON_GGML_QK + j]      = d * (float)((blk[2 + j] & 0x0f) - 8);
                dst[b * MOON_GGML_QK + j + 16] = d * (float)((blk[2 + j] >> 4) - 8);
            }
        }
        break;
    default:
        MOON_CHECK(!"unsupported ggml type");
    }
}

void moon_ggml_quantize(moon_ggml_type_t type, const float *src, void *dst, uint64_t n)
{
    uint8_t *d = dst;

    switch (type) {
    case MOON_GGML_F32:
        memcpy(dst, src, n * 4);
        break;
    case MOON_GGML_F16:
    case MOON_GGML_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h =
                type == MOON_GGML_F16 ? moon_f32_to_fp16(src[i]) : moon_f32_to_bf16(src[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    case MOON_GGML_Q8_0:
    case MOON_GGML_Q4_0:
        for (uint64_t b = 0; b < n / MOON_GGML_QK; b++) {
            const float *x    = src + b * MOON_GGML_QK;
            float        amax = 0.0f, maxv = 0.0f;
            for (int j = 0; j < MOON_GGML_QK; j++) {
                if (fabsf(x[j]) > amax) {
                    amax = fabsf(x[j]);
                    maxv = x[j];
                }
            }
            if (type == MOON_GGML_Q8_0) {
                uint8_t *blk = d + b * 34;
                float    sc  = amax / 127.0f;
                float    inv = sc != 0.0f ? 1.0f / sc : 0.0f;
                uint16_t h   = moon_f32_to_fp16(sc);
                memcpy(blk, &h, 2);
                for (int j = 0; j < MOON_GGML_QK; j++) {
                    blk[2 + j] = (uint8_t)(int8_t)lrintf(x[j] * inv);
                }
            } else {
                uint8_t *blk = d + b * 18;
                float    sc  = maxv / -8.0f;
                float    inv = sc != 0.0f ? 1.0f / sc : 0.0f;
                uint16_t h   = moon_f32_to_fp16(sc);
                memcpy(blk, &h, 2);
                for (int j = 0; j < MOON_GGML_QK / 2; j++) {
                    int q0     = (int)(x[j] * inv + 8.5f);
                    int q1     = (int)(x[j + 16] * inv + 8.5f);
                    q0         = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
                    q1         = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
                    blk[2 + j] = (uint8_t)(q0 | (q1 << 4));
                }
            }
        }
        break;
    default:
        MOON_CHECK(!"unsupported ggml type");
    }
}

/* ---- writer ----------------------------------------------------------------- */

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
    uint8_t   *kv; /* serialized key/values */
    size_t     kv_len, kv_cap;
    uint64_t   n_kv;
    wtensor_t *tensors;
    uint64_t   n_tensors, cap_tensors;
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
    *w_p = w;
    return MOON_OK;
}

void moon_gguf_writer_destroy(moon_gguf_writer_t *w)
{
    if (w == NULL) {
        return;
    }
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        moon_free(w->tensors[i].name);
    }
    moon_free(w->tensors);
    moon_free(w->kv);
    moon_free(w);
}

static int wput(moon_gguf_writer_t *w, const void *p, size_t n)
{
    if (w->kv_len + n > w->kv_cap) {
        size_t   cap = MOON_MAX(w->kv_cap * 2, w->kv_len + n + 256);
        uint8_t *nb  = moon_realloc(w->kv, cap);
        if (nb == NULL) {
            return 0;
        }
        w->kv     = nb;
        w->kv_cap = cap;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return 1;
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
    *mark = w->kv_len;
    if (!wput_str(w, key) || !wput_u32(w, (uint32_t)t)) {
        w->kv_len = *mark;
        return MOON_ERR_NO_MEMORY;
    }
    return MOON_OK;
}

static moon_status_t wkv_end(moon_gguf_writer_t *w, int ok, size_t mark)
{
    if (!ok) {
        w->kv_len = mark;
        return MOON_ERR_NO_MEMORY;
    }
    w->n_kv++;
    return MOON_OK;
}

moon_status_t moon_gguf_writer_kv_raw(moon_gguf_writer_t *w, const char *key, moon_gguf_type_t type,
                                      const void *v)
{
    size_t        mark;
    size_t        sb = scalar_bytes(type);
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
    size_t        sb = scalar_bytes(elem_type);
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
    uint64_t   n = 1;

    if (w == NULL || name == NULL || ne == NULL || data == NULL || n_dims == 0 ||
        n_dims > MOON_GGUF_MAX_DIMS || moon_ggml_type_bytes(type, MOON_GGML_QK) == 0 ||
        ne[0] % moon_ggml_block_size(type) != 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (w->n_tensors == w->cap_tensors) {
        uint64_t   cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        wtensor_t *nt  = moon_realloc(w->tensors, cap * sizeof(*nt));
        if (nt == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        w->tensors     = nt;
        w->cap_tensors = cap;
    }
    t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof(*t));
    t->name = moon_strdup(name);
    if (t->name == NULL) {
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
    w->n_tensors++;
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
    uint64_t       pos;
    FILE          *f;
    int            ok;

    if (w == NULL || path == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    f = fopen(path, "wb");
    if (f == NULL) {
        MOON_ERROR("gguf: create %s: %s", path, strerror(errno));
        return MOON_ERR_IO;
    }
    ok = fwrite_all(f, hdr, 8) && fwrite_all(f, &w->n_tensors, 8) && fwrite_all(f, &w->n_kv, 8) &&
         fwrite_all(f, w->kv, w->kv_len);
    pos = 24 + w->kv_len;
    for (uint64_t i = 0; ok && i < w->n_tensors; i++) {
        wtensor_t *t   = &w->tensors[i];
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
    for (uint64_t i = 0; ok && i < w->n_tensors; i++) {
        ok = fwrite_all(f, w->tensors[i].data, w->tensors[i].bytes) &&
             fpad(f, w->tensors[i].bytes, align);
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
