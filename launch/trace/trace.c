/* launch/trace/trace.c - Mooncake JSONL traces: a strict line parser over cJSON and
 * the helpers that map a trace request onto a deployment (arrivals, block
 * keys, prompt tokens, shrinking). Single-threaded while loading. */
#include "trace.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_EXACT_INT 9007199254740992.0 /* 2^53: larger doubles are not exact integers */

typedef struct {
    moon_trace_t       *t;
    size_t              cap_reqs, cap_ids;
    moon_trace_error_t *err;
    const char         *name; /* file name for messages */
} parser_t;

static moon_status_t fail(parser_t *p, moon_status_t status, uint32_t line, const char *fmt, ...)
    MOON_PRINTF(4, 5);

static moon_status_t fail(parser_t *p, moon_status_t status, uint32_t line, const char *fmt, ...)
{
    moon_trace_error_t e = {.line = line};
    va_list            ap;

    va_start(ap, fmt);
    vsnprintf(e.msg, sizeof(e.msg), fmt, ap);
    va_end(ap);
    if (line > 0) {
        MOON_ERROR("trace %s line %u: %s", p->name, line, e.msg);
    } else {
        MOON_ERROR("trace %s: %s", p->name, e.msg);
    }
    if (p->err != NULL) {
        *p->err = e;
    }
    return status;
}

/* A non-negative integer no larger than max; 0 when it is, -1 otherwise. */
static int get_uint(const cJSON *item, double max, uint64_t *v)
{
    double d;

    if (!cJSON_IsNumber(item)) {
        return -1;
    }
    d = item->valuedouble;
    if (!(d >= 0.0) || d > max || d != floor(d)) {
        return -1;
    }
    *v = (uint64_t)d;
    return 0;
}

static moon_status_t grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    size_t n = *cap ? *cap : 64;
    void  *a;

    if (need <= *cap) {
        return MOON_OK;
    }
    while (n < need) {
        n *= 2;
    }
    a = moon_realloc(*arr, n * elem);
    if (a == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    *arr = a;
    *cap = n;
    return MOON_OK;
}

static moon_status_t parse_line(parser_t *p, const char *s, size_t len, uint32_t line,
                                uint32_t block)
{
    moon_trace_t     *t = p->t;
    moon_trace_req_t *r;
    cJSON            *obj, *ids, *it;
    uint64_t          ts, in, out, id, want;
    size_t            n_ids;
    moon_status_t     status;

    obj = cJSON_ParseWithLength(s, len);
    if (obj == NULL) {
        return fail(p, MOON_ERR_CORRUPT, line, "not valid JSON");
    }
    status = MOON_ERR_CORRUPT;
    if (!cJSON_IsObject(obj)) {
        fail(p, status, line, "not a JSON object");
        goto out;
    }
    if (get_uint(cJSON_GetObjectItemCaseSensitive(obj, "timestamp"), MAX_EXACT_INT, &ts) != 0) {
        fail(p, status, line, "timestamp missing or not a non-negative integer (ms)");
        goto out;
    }
    if (get_uint(cJSON_GetObjectItemCaseSensitive(obj, "input_length"), UINT32_MAX, &in) != 0 ||
        in == 0) {
        fail(p, status, line, "input_length missing or not an integer in [1, 2^32)");
        goto out;
    }
    if (get_uint(cJSON_GetObjectItemCaseSensitive(obj, "output_length"), UINT32_MAX, &out) != 0 ||
        out == 0) {
        fail(p, status, line, "output_length missing or not an integer in [1, 2^32)");
        goto out;
    }
    ids = cJSON_GetObjectItemCaseSensitive(obj, "hash_ids");
    if (!cJSON_IsArray(ids)) {
        fail(p, status, line, "hash_ids missing or not an array");
        goto out;
    }
    n_ids = (size_t)cJSON_GetArraySize(ids);
    want  = (in + block - 1) / block;
    if (n_ids != want) {
        fail(p, status, line,
             "%zu hash_ids for input_length %llu: want ceil(input_length / %u) = %llu", n_ids,
             (unsigned long long)in, block, (unsigned long long)want);
        goto out;
    }
    if (t->n_reqs > 0 && ts < t->reqs[t->n_reqs - 1].timestamp_ms) {
        fail(p, status, line, "timestamp %llu is before the previous line's %llu",
             (unsigned long long)ts, (unsigned long long)t->reqs[t->n_reqs - 1].timestamp_ms);
        goto out;
    }
    status = grow((void **)&t->ids, &p->cap_ids, t->n_ids + n_ids, sizeof(uint64_t));
    if (status == MOON_OK) {
        status = grow((void **)&t->reqs, &p->cap_reqs, t->n_reqs + 1, sizeof(*t->reqs));
    }
    if (status != MOON_OK) {
        fail(p, status, line, "out of memory");
        goto out;
    }
    n_ids = 0;
    cJSON_ArrayForEach(it, ids)
    {
        if (get_uint(it, MAX_EXACT_INT, &id) != 0) {
            status = fail(p, MOON_ERR_CORRUPT, line, "hash_ids[%zu] is not a non-negative integer",
                          n_ids);
            goto out;
        }
        t->ids[t->n_ids + n_ids++] = id;
    }
    r                = &t->reqs[t->n_reqs++];
    r->timestamp_ms  = ts;
    r->input_length  = (uint32_t)in;
    r->output_length = (uint32_t)out;
    r->n_hash_ids    = (uint32_t)n_ids;
    r->hash_ids      = NULL; /* pointed into ids once every line is in (ids may move) */
    r->line          = line;
    t->n_ids += n_ids;
    status = MOON_OK;
out:
    cJSON_Delete(obj);
    return status;
}

static void bind_ids(moon_trace_t *t)
{
    size_t off = 0;

    for (size_t i = 0; i < t->n_reqs; i++) {
        t->reqs[i].hash_ids = t->ids + off;
        off += t->reqs[i].n_hash_ids;
    }
}

static moon_status_t parse(const char *name, const char *text, size_t len,
                           const moon_trace_opts_t *opts, moon_trace_t **trace_p,
                           moon_trace_error_t *err_p)
{
    moon_trace_opts_t o      = {0};
    parser_t          p      = {.err = err_p, .name = name};
    moon_status_t     status = MOON_OK;
    uint32_t          line   = 0;
    size_t            pos    = 0;

    if (opts != NULL) {
        o = *opts;
    }
    if (o.block_tokens == 0) {
        o.block_tokens = MOON_TRACE_BLOCK_TOKENS;
    }
    if (err_p != NULL) {
        memset(err_p, 0, sizeof(*err_p));
    }
    p.t = moon_calloc(1, sizeof(*p.t));
    if (p.t == NULL) {
        return fail(&p, MOON_ERR_NO_MEMORY, 0, "out of memory");
    }
    p.t->block_tokens = o.block_tokens;
    while (pos < len && (o.max_reqs == 0 || p.t->n_reqs < o.max_reqs)) {
        const char *s  = text + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t      n  = nl ? (size_t)(nl - s) : len - pos;
        size_t      k  = 0;

        pos += n + (nl != NULL);
        line++;
        while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) {
            k++;
        }
        if (k == n) {
            continue; /* blank */
        }
        status = parse_line(&p, s, n, line, o.block_tokens);
        if (status != MOON_OK) {
            moon_trace_destroy(p.t);
            return status;
        }
    }
    if (p.t->n_reqs == 0) {
        moon_trace_destroy(p.t);
        return fail(&p, MOON_ERR_INVALID_PARAM, 0, "no requests");
    }
    bind_ids(p.t);
    *trace_p = p.t;
    return MOON_OK;
}

moon_status_t moon_trace_parse(const char *text, size_t len, const moon_trace_opts_t *opts,
                               moon_trace_t **trace_p, moon_trace_error_t *err_p)
{
    if ((text == NULL && len > 0) || trace_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    return parse("(text)", text, len, opts, trace_p, err_p);
}

moon_status_t moon_trace_load(const char *path, const moon_trace_opts_t *opts,
                              moon_trace_t **trace_p, moon_trace_error_t *err_p)
{
    parser_t      p = {.err = err_p, .name = path};
    FILE         *f;
    char         *buf = NULL;
    size_t        len = 0, cap = 0, got;
    moon_status_t status;

    if (path == NULL || trace_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (err_p != NULL) {
        memset(err_p, 0, sizeof(*err_p));
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        return fail(&p, errno == ENOENT ? MOON_ERR_NOT_FOUND : MOON_ERR_IO, 0, "cannot open: %s",
                    strerror(errno));
    }
    do {
        status = grow((void **)&buf, &cap, len + 65536, 1);
        if (status != MOON_OK) {
            fclose(f);
            moon_free(buf);
            return fail(&p, status, 0, "out of memory");
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    if (ferror(f)) {
        fclose(f);
        moon_free(buf);
        return fail(&p, MOON_ERR_IO, 0, "read failed");
    }
    fclose(f);
    status = parse(path, buf, len, opts, trace_p, err_p);
    moon_free(buf);
    return status;
}

void moon_trace_destroy(moon_trace_t *t)
{
    if (t == NULL) {
        return;
    }
    moon_free(t->reqs);
    moon_free(t->ids);
    moon_free(t);
}

uint64_t moon_trace_arrival_ns(const moon_trace_req_t *req, double time_scale)
{
    return (uint64_t)llround((double)req->timestamp_ms * 1e6 * time_scale);
}

double moon_trace_rate_rps(const moon_trace_t *t, double time_scale)
{
    double span_s;

    if (t->n_reqs < 2) {
        return 0.0;
    }
    span_s = (double)(moon_trace_arrival_ns(&t->reqs[t->n_reqs - 1], time_scale) -
                      moon_trace_arrival_ns(&t->reqs[0], time_scale)) *
             1e-9;
    return span_s > 0.0 ? (double)(t->n_reqs - 1) / span_s : 0.0;
}

uint32_t moon_trace_n_blocks(const moon_trace_req_t *req, uint32_t block_tokens)
{
    return block_tokens ? req->input_length / block_tokens : 0;
}

/* splitmix64's finaliser: a well-mixed 64-bit function of x. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void moon_trace_block_keys(const moon_trace_req_t *req, uint32_t trace_block, uint32_t block,
                           uint64_t *keys, uint32_t max_keys, uint32_t *n_keys_p)
{
    uint32_t n = moon_trace_n_blocks(req, block);

    if (n > max_keys) {
        n = max_keys;
    }
    for (uint32_t k = 0; k < n; k++) {
        uint64_t end = (uint64_t)(k + 1) * block; /* tokens the key covers */
        uint64_t i   = (end - 1) / trace_block;   /* trace block of its last token */
        uint64_t off = end - i * trace_block;     /* 1..trace_block */

        keys[k] = mix64(req->hash_ids[i] ^ mix64(off));
    }
    *n_keys_p = n;
}

moon_status_t moon_trace_fill_tokens(const moon_trace_req_t *req, uint32_t trace_block,
                                     uint32_t first_id, uint32_t vocab_size, uint64_t seed,
                                     int32_t *tokens)
{
    uint64_t range;

    if (tokens == NULL || trace_block == 0 || first_id >= vocab_size) {
        return MOON_ERR_INVALID_PARAM;
    }
    range = vocab_size - first_id;
    for (uint32_t p = 0; p < req->input_length; p++) {
        uint64_t id = req->hash_ids[p / trace_block];
        uint64_t h  = mix64(mix64(id ^ seed) + p % trace_block);

        tokens[p] = (int32_t)(first_id + h % range);
    }
    return MOON_OK;
}

moon_status_t moon_trace_shrink(const moon_trace_t *t, uint32_t new_block, uint32_t max_input,
                                uint32_t max_output, moon_trace_t **out_p)
{
    moon_trace_t *o;
    uint64_t      old = t->block_tokens;
    size_t        off = 0;

    if (new_block == 0 || new_block > old || out_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    o = moon_calloc(1, sizeof(*o));
    if (o == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    o->reqs = moon_malloc(t->n_reqs * sizeof(*o->reqs));
    o->ids  = moon_malloc((t->n_ids ? t->n_ids : 1) * sizeof(*o->ids));
    if (o->reqs == NULL || o->ids == NULL) {
        moon_trace_destroy(o);
        return MOON_ERR_NO_MEMORY;
    }
    o->block_tokens = new_block;
    o->n_reqs       = t->n_reqs;
    for (size_t i = 0; i < t->n_reqs; i++) {
        const moon_trace_req_t *r    = &t->reqs[i];
        moon_trace_req_t       *s    = &o->reqs[i];
        uint64_t                last = r->input_length - (uint64_t)(r->n_hash_ids - 1) * old;
        uint64_t                in =
            (uint64_t)(r->n_hash_ids - 1) * new_block + (last * new_block + old - 1) / old;

        if (max_input > 0 && in > max_input) {
            in = max_input;
        }
        *s              = *r;
        s->input_length = (uint32_t)in;
        s->n_hash_ids   = (uint32_t)((in + new_block - 1) / new_block);
        s->output_length =
            max_output > 0 && r->output_length > max_output ? max_output : r->output_length;
        memcpy(o->ids + off, r->hash_ids, s->n_hash_ids * sizeof(uint64_t));
        off += s->n_hash_ids;
    }
    o->n_ids = off;
    bind_ids(o);
    *out_p = o;
    return MOON_OK;
}

moon_status_t moon_trace_scale(const moon_trace_t *t, uint32_t n, uint32_t max_context,
                               moon_trace_t **out_p)
{
    moon_trace_t *o;
    moon_status_t status = moon_trace_shrink(t, n, 0, 0, &o);

    if (status != MOON_OK) {
        return status;
    }
    for (size_t i = 0; i < o->n_reqs; i++) {
        moon_trace_req_t *r = &o->reqs[i];
        uint64_t out = ((uint64_t)r->output_length * n + t->block_tokens - 1) / t->block_tokens;

        r->output_length = (uint32_t)(out < 1 ? 1 : out);
        if (max_context >= 2) {
            if (r->output_length > max_context - 1) {
                r->output_length = max_context - 1;
            }
            if (r->input_length > max_context - r->output_length) {
                r->input_length = max_context - r->output_length;
                r->n_hash_ids   = (r->input_length + n - 1) / n; /* the ids stay in place */
            }
        }
    }
    *out_p = o;
    return MOON_OK;
}
