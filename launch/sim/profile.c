/* launch/sim/profile.c - profile files: one table of fields per section drives
 * the strict reader and the writer alike (so they cannot drift apart), and
 * the derived cost model, KV capacity and NIC rate. */
#include "profile.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#ifndef MOON_PROFILE_DIR
#define MOON_PROFILE_DIR "launch/sim/profiles"
#endif

typedef enum {
    F_COUNT,  /* uint32_t >= 1 */
    F_POS,    /* double > 0 */
    F_NONNEG, /* double >= 0 */
    F_SHARE,  /* double in (0, 1] */
    F_STR,    /* char[size] */
} kind_t;

typedef struct {
    const char *key;
    kind_t      kind;
    size_t      off;
    size_t      size; /* F_STR: buffer bytes */
    int         optional;
} field_t;

#define P(m) offsetof(moon_profile_t, m)
#define FIELD(key, kind, m)                                                                        \
    {                                                                                              \
        key, kind, P(m), sizeof(((moon_profile_t *)0)->m), 0                                       \
    }
#define OPTIONAL(key, kind, m)                                                                     \
    {                                                                                              \
        key, kind, P(m), sizeof(((moon_profile_t *)0)->m), 1                                       \
    }

static const field_t model_fields[] = {
    FIELD("dim", F_COUNT, shape.dim),
    FIELD("hidden_dim", F_COUNT, shape.hidden_dim),
    FIELD("n_layers", F_COUNT, shape.n_layers),
    FIELD("n_heads", F_COUNT, shape.n_heads),
    FIELD("n_kv_heads", F_COUNT, shape.n_kv_heads),
    FIELD("head_dim", F_COUNT, shape.head_dim),
    FIELD("vocab_size", F_COUNT, shape.vocab_size),
    FIELD("seq_len", F_COUNT, shape.seq_len),
    FIELD("weight_bytes_per_param", F_POS, weight_bytes_per_param),
    FIELD("kv_bytes_per_elem", F_COUNT, kv_bytes_per_elem),
    {NULL, 0, 0, 0, 0},
};
static const field_t device_fields[] = {
    FIELD("name", F_STR, device.name),
    FIELD("count", F_COUNT, device.count),
    FIELD("flops_per_s", F_POS, device.flops_per_s),
    FIELD("prefill_efficiency", F_SHARE, device.prefill_efficiency),
    FIELD("decode_efficiency", F_SHARE, device.decode_efficiency),
    FIELD("mem_bytes_per_s", F_POS, device.mem_bytes_per_s),
    FIELD("mem_efficiency", F_SHARE, device.mem_efficiency),
    FIELD("mem_bytes", F_POS, device.mem_bytes),
    FIELD("mem_usable", F_SHARE, device.mem_usable),
    FIELD("step_overhead_s", F_NONNEG, device.step_overhead_s),
    {NULL, 0, 0, 0, 0},
};
static const field_t network_fields[] = {
    FIELD("nics_per_node", F_COUNT, network.nics_per_node),
    FIELD("nic_bits_per_s", F_POS, network.nic_bits_per_s),
    FIELD("nic_efficiency", F_SHARE, network.nic_efficiency),
    FIELD("latency_s", F_NONNEG, network.latency_s),
    {NULL, 0, 0, 0, 0},
};
static const field_t store_fields[] = {
    FIELD("dram_bytes", F_POS, store.dram_bytes),
    FIELD("dram_bytes_per_s", F_POS, store.dram_bytes_per_s),
    FIELD("ssd_bytes", F_NONNEG, store.ssd_bytes),
    FIELD("ssd_bytes_per_s", F_NONNEG, store.ssd_bytes_per_s),
    {NULL, 0, 0, 0, 0},
};
static const field_t fit_fields[] = {
    FIELD("a0", F_NONNEG, fit.a0),
    FIELD("a1", F_NONNEG, fit.a1),
    FIELD("a2", F_NONNEG, fit.a2),
    FIELD("d0", F_NONNEG, fit.d0),
    FIELD("d1", F_NONNEG, fit.d1),
    FIELD("d2", F_NONNEG, fit.d2),
    OPTIONAL("handoff_s", F_NONNEG, fit_handoff_s),
    OPTIONAL("request_s", F_NONNEG, fit_request_s),
    OPTIONAL("step_gap_s", F_NONNEG, fit_step_gap_s),
    OPTIONAL("source", F_STR, fit_source),
    {NULL, 0, 0, 0, 0},
};
static const field_t top_fields[] = {
    FIELD("name", F_STR, name),
    OPTIONAL("doc", F_STR, doc),
    {NULL, 0, 0, 0, 0},
};

typedef struct {
    const char    *key;
    const field_t *fields;
    int            optional;
} section_t;

static const section_t sections[] = {
    {"model", model_fields, 0}, {"device", device_fields, 0}, {"network", network_fields, 0},
    {"store", store_fields, 0}, {"fitted", fit_fields, 1},    {NULL, NULL, 0},
};

typedef struct {
    const char           *name;
    moon_profile_error_t *err;
} ctx_t;

static moon_status_t fail(ctx_t *c, moon_status_t status, const char *fmt, ...) MOON_PRINTF(3, 4);

static moon_status_t fail(ctx_t *c, moon_status_t status, const char *fmt, ...)
{
    char    msg[160];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    MOON_ERROR("profile %s: %s", c->name, msg);
    if (c->err != NULL) {
        snprintf(c->err->msg, sizeof(c->err->msg), "profile %s: %s", c->name, msg);
    }
    return status;
}

static const char *kind_doc(kind_t k)
{
    switch (k) {
    case F_COUNT:
        return "an integer >= 1";
    case F_POS:
        return "a number > 0";
    case F_NONNEG:
        return "a number >= 0";
    case F_SHARE:
        return "a number in (0, 1]";
    default:
        return "a string";
    }
}

static int read_field(const field_t *f, const cJSON *item, moon_profile_t *p)
{
    char  *dst = (char *)p + f->off;
    double d;

    if (f->kind == F_STR) {
        if (!cJSON_IsString(item) || strlen(item->valuestring) >= f->size) {
            return -1;
        }
        memcpy(dst, item->valuestring, strlen(item->valuestring) + 1);
        return 0;
    }
    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble)) {
        return -1;
    }
    d = item->valuedouble;
    switch (f->kind) {
    case F_COUNT:
        if (d < 1.0 || d > UINT32_MAX || d != floor(d)) {
            return -1;
        }
        *(uint32_t *)(void *)dst = (uint32_t)d;
        return 0;
    case F_POS:
        if (!(d > 0.0)) {
            return -1;
        }
        break;
    case F_NONNEG:
        if (!(d >= 0.0)) {
            return -1;
        }
        break;
    default: /* F_SHARE */
        if (!(d > 0.0 && d <= 1.0)) {
            return -1;
        }
        break;
    }
    *(double *)(void *)dst = d;
    return 0;
}

static const field_t *find_field(const field_t *fields, const char *key)
{
    for (; fields->key != NULL; fields++) {
        if (strcmp(fields->key, key) == 0) {
            return fields;
        }
    }
    return NULL;
}

/* Reads obj's keys per fields; where names the object ("" at the top). */
static moon_status_t read_object(ctx_t *c, const cJSON *obj, const field_t *fields,
                                 const char *where, const section_t *subs, moon_profile_t *p)
{
    const cJSON *it;
    const char  *dot = where[0] ? "." : "";

    cJSON_ArrayForEach(it, obj)
    {
        int known = find_field(fields, it->string) != NULL;

        for (const section_t *s = subs; !known && s != NULL && s->key != NULL; s++) {
            known = strcmp(s->key, it->string) == 0;
        }
        if (!known && !(subs != NULL && strcmp(it->string, "format") == 0)) {
            return fail(c, MOON_ERR_CORRUPT, "unknown key %s%s%s", where, dot, it->string);
        }
    }
    for (const field_t *f = fields; f->key != NULL; f++) {
        it = cJSON_GetObjectItemCaseSensitive(obj, f->key);
        if (it == NULL) {
            if (f->optional) {
                continue;
            }
            return fail(c, MOON_ERR_CORRUPT, "missing key %s%s%s (%s)", where, dot, f->key,
                        kind_doc(f->kind));
        }
        if (read_field(f, it, p) != 0) {
            return fail(c, MOON_ERR_CORRUPT, "%s%s%s must be %s%s", where, dot, f->key,
                        kind_doc(f->kind), f->kind == F_STR ? " (short enough)" : "");
        }
    }
    return MOON_OK;
}

moon_status_t moon_profile_parse(const char *text, const char *name, moon_profile_t *profile_p,
                                 moon_profile_error_t *err_p)
{
    ctx_t          c = {.name = name ? name : "(text)", .err = err_p};
    moon_profile_t p;
    cJSON         *root, *fmt;
    moon_status_t  status = MOON_OK;

    if (text == NULL || profile_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    memset(&p, 0, sizeof(p));
    p.shape.norm_eps   = 1e-5f;
    p.shape.rope_theta = 500000.0f;
    root               = cJSON_Parse(text);
    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return fail(&c, MOON_ERR_CORRUPT, "not a JSON object");
    }
    fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, MOON_PROFILE_FORMAT) != 0) {
        status = fail(&c, MOON_ERR_CORRUPT, "format must be \"%s\"", MOON_PROFILE_FORMAT);
    }
    if (status == MOON_OK) {
        status = read_object(&c, root, top_fields, "", sections, &p);
    }
    for (const section_t *s = sections; status == MOON_OK && s->key != NULL; s++) {
        const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, s->key);

        if (obj == NULL && s->optional) {
            continue;
        }
        if (!cJSON_IsObject(obj)) {
            status = fail(&c, MOON_ERR_CORRUPT, "%s must be an object", s->key);
            break;
        }
        status = read_object(&c, obj, s->fields, s->key, NULL, &p);
        if (s->fields == fit_fields) {
            p.fit.enabled = 1;
        }
    }
    /* heads need not split dim (Qwen 3 0.6B: dim 1024, 16 heads of 128) */
    if (status == MOON_OK && p.shape.head_dim % 2 != 0) {
        status = fail(&c, MOON_ERR_CORRUPT, "model: head_dim (%u) must be even (RoPE pairs)",
                      p.shape.head_dim);
    }
    if (status == MOON_OK && p.shape.n_heads % p.shape.n_kv_heads != 0) {
        status = fail(&c, MOON_ERR_CORRUPT, "model: n_kv_heads must divide n_heads");
    }
    cJSON_Delete(root);
    if (status == MOON_OK) {
        *profile_p = p;
    }
    return status;
}

static moon_status_t read_file(ctx_t *c, const char *path, char **text_p)
{
    FILE  *f = fopen(path, "rb");
    char  *buf;
    long   n;
    size_t got;

    if (f == NULL) {
        return fail(c, errno == ENOENT ? MOON_ERR_NOT_FOUND : MOON_ERR_IO, "cannot open: %s",
                    strerror(errno));
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return fail(c, MOON_ERR_IO, "cannot size the file");
    }
    buf = moon_malloc((size_t)n + 1);
    if (buf == NULL) {
        fclose(f);
        return fail(c, MOON_ERR_NO_MEMORY, "out of memory");
    }
    got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    if (got != (size_t)n) {
        moon_free(buf);
        return fail(c, MOON_ERR_IO, "short read");
    }
    buf[n]  = '\0';
    *text_p = buf;
    return MOON_OK;
}

moon_status_t moon_profile_load(const char *spec, const char *dir, moon_profile_t *profile_p,
                                moon_profile_error_t *err_p)
{
    char          path[1024];
    ctx_t         c;
    char         *text = NULL;
    size_t        n;
    moon_status_t status;

    if (spec == NULL || profile_p == NULL || spec[0] == '\0') {
        return MOON_ERR_INVALID_PARAM;
    }
    n = strlen(spec);
    if (strchr(spec, '/') != NULL || (n > 5 && strcmp(spec + n - 5, ".json") == 0)) {
        snprintf(path, sizeof(path), "%s", spec);
    } else {
        snprintf(path, sizeof(path), "%s/%s.json", dir ? dir : MOON_PROFILE_DIR, spec);
    }
    c.name = path;
    c.err  = err_p;
    status = read_file(&c, path, &text);
    if (status != MOON_OK) {
        return status;
    }
    status = moon_profile_parse(text, path, profile_p, err_p);
    moon_free(text);
    return status;
}

static int add_fields(cJSON *obj, const field_t *fields, const moon_profile_t *p)
{
    for (const field_t *f = fields; f->key != NULL; f++) {
        const char *src = (const char *)p + f->off;
        cJSON      *v;

        if (f->kind == F_STR) {
            if (f->optional && src[0] == '\0') {
                continue;
            }
            v = cJSON_AddStringToObject(obj, f->key, src);
        } else if (f->kind == F_COUNT) {
            v = cJSON_AddNumberToObject(obj, f->key, *(const uint32_t *)(const void *)src);
        } else {
            v = cJSON_AddNumberToObject(obj, f->key, *(const double *)(const void *)src);
        }
        if (v == NULL) {
            return -1;
        }
    }
    return 0;
}

moon_status_t moon_profile_write(const moon_profile_t *p, const char *path)
{
    cJSON *root = cJSON_CreateObject();
    char  *text = NULL;
    FILE  *f;
    int bad = root == NULL || cJSON_AddStringToObject(root, "format", MOON_PROFILE_FORMAT) == NULL;
    moon_status_t status = MOON_OK;

    bad = bad || add_fields(root, top_fields, p) != 0;
    for (const section_t *s = sections; !bad && s->key != NULL; s++) {
        cJSON *obj;

        if (s->fields == fit_fields && !p->fit.enabled) {
            continue;
        }
        obj = cJSON_AddObjectToObject(root, s->key);
        bad = obj == NULL || add_fields(obj, s->fields, p) != 0;
    }
    if (!bad) {
        text = cJSON_Print(root);
    }
    cJSON_Delete(root);
    if (text == NULL) {
        MOON_ERROR("profile %s: out of memory", path);
        return MOON_ERR_NO_MEMORY;
    }
    f = fopen(path, "w");
    if (f == NULL || fputs(text, f) < 0 || fputc('\n', f) == EOF) {
        MOON_ERROR("profile %s: cannot write: %s", path, strerror(errno));
        status = MOON_ERR_IO;
    }
    if (f != NULL && fclose(f) != 0 && status == MOON_OK) {
        MOON_ERROR("profile %s: cannot write: %s", path, strerror(errno));
        status = MOON_ERR_IO;
    }
    cJSON_free(text);
    return status;
}

moon_status_t moon_profile_set_fit(moon_profile_t *p, const moon_cost_fit_t *fit,
                                   const char *source)
{
    const double c[] = {fit->a0, fit->a1, fit->a2, fit->d0, fit->d1, fit->d2};

    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        if (!isfinite(c[i]) || c[i] < 0.0) {
            return MOON_ERR_INVALID_PARAM;
        }
    }
    p->fit         = *fit;
    p->fit.enabled = 1;
    snprintf(p->fit_source, sizeof(p->fit_source), "%s", source ? source : "");
    return MOON_OK;
}

moon_cost_config_t moon_profile_cost(const moon_profile_t *p)
{
    moon_cost_config_t c;
    double             n = p->device.count;

    memset(&c, 0, sizeof(c));
    c.shape              = p->shape;
    c.flops_per_s        = n * p->device.flops_per_s * p->device.prefill_efficiency;
    c.decode_flops_per_s = n * p->device.flops_per_s * p->device.decode_efficiency;
    c.mem_bytes_per_s    = n * p->device.mem_bytes_per_s * p->device.mem_efficiency;
    c.weight_bytes       = moon_cost_params(&p->shape) * p->weight_bytes_per_param;
    c.kv_bytes_per_elem  = p->kv_bytes_per_elem;
    c.step_overhead_s    = p->device.step_overhead_s;
    c.fit                = p->fit;
    if (c.fit.enabled) {
        c.fit.a0 += p->fit_handoff_s; /* a real instance's every call pays it */
        c.fit.d0 += p->fit_handoff_s + p->fit_step_gap_s;
    }
    return c;
}

double moon_profile_kv_capacity_bytes(const moon_profile_t *p)
{
    double total = p->device.count * p->device.mem_bytes * p->device.mem_usable;
    double w     = moon_cost_params(&p->shape) * p->weight_bytes_per_param;

    return total > w ? total - w : 0.0;
}

double moon_profile_nic_bytes_per_s(const moon_profile_t *p)
{
    return p->network.nic_bits_per_s / 8.0 * p->network.nic_efficiency;
}
