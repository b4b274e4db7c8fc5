/* launch/bench_trace.c - Mooncake trace -> `moonlet bench` workload: reads
 * the JSONL records, scales their lengths to --block-scale and builds each
 * prompt from the blocks its hash ids name (see bench_trace.h). */
#include "bench_trace.h"

#include "bench_rand.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double    timestamp_ms;
    uint32_t  input_length, output_length;
    uint32_t  n_hash_ids;
    uint64_t *hash_ids;
} trace_rec_t;

uint32_t moon_bench_trace_scale(uint32_t len, uint32_t block_tokens)
{
    uint64_t scaled =
        ((uint64_t)len * block_tokens + MOON_BENCH_TRACE_BLOCK - 1) / MOON_BENCH_TRACE_BLOCK;

    return scaled < 1 ? 1 : (uint32_t)scaled;
}

uint32_t moon_bench_block_id(uint64_t seed, uint64_t hash_id, uint32_t j, uint32_t lo,
                             uint32_t span)
{
    uint64_t h = moon_bench_mix64(moon_bench_mix64(seed ^ 0x7ace0b10c5ull) ^ hash_id);

    return lo + (uint32_t)(moon_bench_mix64(h + j) % span);
}

static int get_count(const cJSON *obj, const char *key, double max, double *v_p)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);

    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble) || item->valuedouble < 0 ||
        item->valuedouble > max) {
        return -1;
    }
    *v_p = item->valuedouble;
    return 0;
}

/* Parses one JSONL record; on error names the field in *why. */
static moon_status_t parse_rec(const char *line, trace_rec_t *rec, const char **why)
{
    cJSON        *obj = cJSON_Parse(line);
    const cJSON  *ids, *id;
    double        ts, in, out;
    uint32_t      n      = 0;
    moon_status_t status = MOON_ERR_CORRUPT;

    *why = "not a JSON object";
    if (!cJSON_IsObject(obj)) {
        goto out;
    }
    *why = "timestamp, input_length or output_length missing or not a count";
    if (get_count(obj, "timestamp", 1e15, &ts) != 0 ||
        get_count(obj, "input_length", UINT32_MAX, &in) != 0 ||
        get_count(obj, "output_length", UINT32_MAX, &out) != 0) {
        goto out;
    }
    *why = "hash_ids is not an array of non-negative integers";
    ids  = cJSON_GetObjectItemCaseSensitive(obj, "hash_ids");
    if (!cJSON_IsArray(ids)) {
        goto out;
    }
    rec->hash_ids = moon_calloc((size_t)cJSON_GetArraySize(ids) + 1, sizeof(uint64_t));
    if (rec->hash_ids == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto out;
    }
    cJSON_ArrayForEach(id, ids)
    {
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 9e15 ||
            id->valuedouble != floor(id->valuedouble)) {
            moon_free(rec->hash_ids);
            rec->hash_ids = NULL;
            goto out;
        }
        rec->hash_ids[n++] = (uint64_t)id->valuedouble;
    }
    rec->timestamp_ms  = ts;
    rec->input_length  = (uint32_t)in;
    rec->output_length = (uint32_t)out;
    rec->n_hash_ids    = n;
    status             = MOON_OK;
out:
    cJSON_Delete(obj);
    return status;
}

static void free_recs(trace_rec_t *recs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        moon_free(recs[i].hash_ids);
    }
    moon_free(recs);
}

/* Reads up to max records (0: all) of path into a new array. */
static moon_status_t read_trace(const char *path, uint32_t max, trace_rec_t **recs_p, uint32_t *n_p)
{
    FILE         *f    = fopen(path, "r");
    char         *line = NULL;
    size_t        cap  = 0;
    ssize_t       len;
    trace_rec_t  *recs = NULL;
    uint32_t      n = 0, room = 0, lineno = 0;
    moon_status_t status = MOON_OK;

    if (f == NULL) {
        MOON_ERROR("trace %s: %s", path, strerror(errno));
        return errno == ENOENT ? MOON_ERR_NOT_FOUND : MOON_ERR_IO;
    }
    while ((max == 0 || n < max) && (len = getline(&line, &cap, f)) >= 0) {
        const char *why;
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' ||
                           line[len - 1] == '\t')) {
            line[--len] = '\0';
        }
        if (len == 0) {
            continue;
        }
        if (n == room) {
            uint32_t     grown  = room ? room * 2 : 256;
            trace_rec_t *bigger = moon_realloc(recs, (size_t)grown * sizeof(*recs));
            if (bigger == NULL) {
                status = MOON_ERR_NO_MEMORY;
                break;
            }
            recs = bigger;
            room = grown;
        }
        status = parse_rec(line, &recs[n], &why);
        if (status == MOON_ERR_CORRUPT) {
            MOON_ERROR("trace %s:%u: %s", path, lineno, why);
        }
        if (status != MOON_OK) {
            break;
        }
        n++;
    }
    if (status == MOON_OK && ferror(f)) {
        MOON_ERROR("trace %s: read failed: %s", path, strerror(errno));
        status = MOON_ERR_IO;
    }
    if (status == MOON_OK && n == 0) {
        MOON_ERROR("trace %s: no records", path);
        status = MOON_ERR_INVALID_PARAM;
    }
    free(line);
    fclose(f);
    if (status != MOON_OK) {
        free_recs(recs, n);
        return status;
    }
    *recs_p = recs;
    *n_p    = n;
    return MOON_OK;
}

/* Builds request i from its record. */
static moon_status_t make_req(const moon_bench_opts_t *opts, const trace_rec_t *rec, uint32_t i,
                              uint32_t lo, uint32_t span, moon_bench_req_t *req)
{
    uint32_t      bt    = opts->block_scale;
    uint32_t      n_in  = moon_bench_trace_scale(rec->input_length, bt);
    uint32_t      n_out = moon_bench_trace_scale(rec->output_length, bt);
    moon_status_t status;

    moon_bench_clamp(opts->max_context, &n_in, &n_out);
    status = moon_bench_req_alloc(req, n_in, 1);
    if (status != MOON_OK) {
        return status;
    }
    req->max_tokens = n_out;
    req->msgs[0]    = (moon_bench_msg_t){MOON_BENCH_ROLE_USER, 0, n_in};
    for (uint32_t pos = 0; pos < n_in; pos++) {
        uint32_t b = pos / bt;
        /* past the hash ids: a block no other request has (top bit set) */
        uint64_t h =
            b < rec->n_hash_ids ? rec->hash_ids[b] : (1ull << 63) | ((uint64_t)i << 24) | b;
        req->ids[pos] = moon_bench_block_id(opts->seed, h, pos % bt, lo, span);
    }
    return MOON_OK;
}

moon_status_t moon_bench_trace_workload(const moon_bench_opts_t *opts, moon_bench_workload_t **wl_p)
{
    trace_rec_t           *recs = NULL;
    uint32_t               n    = 0, lo, span;
    moon_bench_workload_t *wl;
    moon_status_t          status;

    status = read_trace(opts->trace_path, opts->num_prompts, &recs, &n);
    if (status != MOON_OK) {
        return status;
    }
    wl = moon_bench_workload_alloc(n);
    if (wl == NULL) {
        free_recs(recs, n);
        return MOON_ERR_NO_MEMORY;
    }
    wl->words        = !moon_bench_opts_tokens(opts);
    wl->block_tokens = opts->block_scale;
    lo               = wl->words ? 0 : 3;
    span             = wl->words ? moon_bench_n_words() : opts->vocab - 3;
    for (uint32_t i = 0; i < n && status == MOON_OK; i++) {
        double t = (recs[i].timestamp_ms - recs[0].timestamp_ms) / 1000.0 * opts->time_scale;

        status = make_req(opts, &recs[i], i, lo, span, &wl->reqs[i]);
        /* a trace whose clock steps back sends that record at once after the one before */
        wl->reqs[i].arrival_s =
            i > 0 && t < wl->reqs[i - 1].arrival_s ? wl->reqs[i - 1].arrival_s : (t < 0 ? 0 : t);
    }
    free_recs(recs, n);
    if (status != MOON_OK) {
        moon_bench_workload_destroy(wl);
        return status;
    }
    *wl_p = wl;
    return MOON_OK;
}
