/* actors/batch/batch.c - the batch engine (see batch.h): reads the input line by
 * line, answers the lines that are no request at once, submits the others
 * through the serve client with at most max_inflight in the cluster, and
 * appends each answer to the output as one write. Single-threaded (the
 * caller's). */
#define _GNU_SOURCE /* getline */
#include "batch.h"

#include "gw_answer.h"
#include "gw_buf.h"
#include "gw_format.h"
#include "gw_json.h"
#include "gw_model.h"
#include "gw_openai.h"
#include "moonlet/alloc.h"
#include "moonlet/hash.h"
#include "moonlet/htab.h"
#include "moonlet/log.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CFG(_f) MOON_CONFIG_AT(moon_batch_config_t, _f)
static const moon_config_field_t batch_fields[] = {
    {"input", MOON_CONFIG_STRING, CFG(input_path), .dflt = NULL,
     .doc = "the requests: openai batch jsonl (custom_id, method, url, body)"},
    {"output", MOON_CONFIG_STRING, CFG(output_path), .dflt = NULL,
     .doc = "the answers, openai batch output jsonl (appended to: a rerun resumes)"},
    {"line-limit", MOON_CONFIG_SIZE, CFG(line_limit_bytes), .dflt = "4m", .min = 1,
     .doc = "longest input line (longer: an error line)"},
    {"slo-class", MOON_CONFIG_U32, CFG(slo_class), .dflt = "0", .max = 255,
     .doc = "slo class of the batch's requests"},
    {"fsync-ms", MOON_CONFIG_U32, CFG(fsync_ms), .dflt = "1000", .min = 1,
     .doc = "answers reach the disk at least this often (milliseconds)"},
    {"stall-timeout", MOON_CONFIG_U32, CFG(stall_timeout_s), .dflt = "300", .min = 1,
     .doc = "seconds without an event before requests in flight fail"},
    {"drain-timeout", MOON_CONFIG_U32, CFG(drain_timeout_s), .dflt = "30",
     .doc = "seconds requests in flight may finish after a stop (sigterm)"},
    MOON_CONFIG_END,
};
#undef CFG

const moon_config_table_t moon_batch_config_table = {"batch", "batch engine (moonlet batch)",
                                                     "MOON_BATCH_", batch_fields};

moon_status_t moon_batch_config_default(moon_batch_config_t *cfg)
{
    moon_status_t status = moon_config_defaults(&moon_batch_config_table, cfg);

    cfg->model_name   = NULL;
    cfg->max_inflight = 64;
    return status != MOON_OK ? status : moon_config_load_env(&moon_batch_config_table, cfg);
}

/* ---- small pieces -------------------------------------------------------------- */
static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') {
            return 0;
        }
    }
    return 1;
}

/* The hash an answered line's custom_id is known by: never 0 (0: not
 * answered); 1 for a line without one. */
static uint64_t cid_hash(const char *cid)
{
    uint64_t h;

    if (cid == NULL) {
        return 1;
    }
    h = moon_hash_str(cid);
    return h > 1 ? h : 2;
}

/* custom_ids seen: a set of strings (the element owns its copy). */
typedef struct {
    char *s;
} cid_elem_t;

static uint64_t cid_key_hash(const void *key, void *arg)
{
    (void)arg;
    return moon_hash_str(*(const char *const *)key);
}

static int cid_key_eq(const void *key, const void *elem, void *arg)
{
    (void)arg;
    return strcmp(*(const char *const *)key, ((const cid_elem_t *)elem)->s) == 0;
}

static void cid_free(void *elem, void *arg)
{
    (void)arg;
    moon_free(((cid_elem_t *)elem)->s);
}

static const moon_htab_type_t cid_type = {
    .elem_bytes = sizeof(cid_elem_t),
    .key_bytes  = sizeof(char *),
    .hash       = cid_key_hash,
    .key_eq     = cid_key_eq,
    .elem_free  = cid_free,
};

/* A request in the cluster. */
typedef struct {
    uint64_t          rid;  /* the serve client's request id; 0: free */
    uint64_t          line; /* its input line */
    char             *custom_id;
    int               chat, details;
    moon_gw_buf_t     text; /* TOKEN pieces so far */
    moon_gw_request_t req;  /* keeps what params point into until DONE */
} slot_t;

typedef struct {
    uint64_t rid;
    uint32_t slot;
} rid_elem_t;

static const moon_htab_type_t rid_type = {.elem_bytes = sizeof(rid_elem_t),
                                          .key_bytes  = sizeof(uint64_t)};

/* Lines an earlier run answered: per line, its custom_id's hash (0: not answered). */
typedef struct {
    uint64_t *cid; /* (n) */
    uint64_t  n;
} answered_t;

typedef struct {
    const moon_batch_config_t *cfg;
    const moon_batch_env_t    *env;
    moon_tokenizer_t          *tok;
    moon_gw_template_t         tpl;
    moon_gw_model_info_t       info;
    char                      *model_name;
    char                      *fingerprint;
    uint64_t                   nonce;
    int                        fd;
    uint64_t                   t0_ns, last_sync_ns, last_event_ns, last_progress_ns;
    int                        dirty; /* written since the last fsync */
    moon_htab_t               *cids;
    moon_htab_t               *rids;
    slot_t                    *slots; /* (max_inflight) */
    uint32_t                  *free_slots;
    uint32_t                   n_free;
    answered_t                 ans;
    moon_batch_progress_t      prog;
} batch_t;

static void report(batch_t *b, int force)
{
    uint64_t now = now_ns();

    if (b->env->progress == NULL || (!force && now - b->last_progress_ns < 100000000ull)) {
        return;
    }
    b->last_progress_ns = now;
    b->prog.elapsed_s   = (double)(now - b->t0_ns) * 1e-9;
    b->prog.in_flight   = b->cfg->max_inflight - b->n_free;
    b->env->progress(b->env->arg, &b->prog);
}

static moon_status_t sync_out(batch_t *b)
{
    b->last_sync_ns = now_ns();
    if (b->dirty && fsync(b->fd) != 0) {
        MOON_ERROR("batch: fsync of %s failed: %s", b->cfg->output_path, strerror(errno));
        return MOON_ERR_IO;
    }
    b->dirty = 0;
    return MOON_OK;
}

/* Appends one whole line (one write: a kill leaves it whole or partial, never
 * interleaved; a partial one is dropped by the next run). */
static moon_status_t write_line(batch_t *b, const char *text, size_t len)
{
    size_t off = 0;

    while (off < len) {
        ssize_t n = write(b->fd, text + off, len - off);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            MOON_ERROR("batch: writing %s failed: %s", b->cfg->output_path,
                       n < 0 ? strerror(errno) : "nothing written");
            return MOON_ERR_IO;
        }
        off += (size_t)n;
    }
    b->dirty = 1;
    if (now_ns() - b->last_sync_ns >= (uint64_t)b->cfg->fsync_ms * 1000000ull) {
        return sync_out(b);
    }
    return MOON_OK;
}

/* JSON text of a string (or null). moon_malloc'd. */
static char *json_str(const char *s)
{
    cJSON *item = s != NULL ? cJSON_CreateString(s) : cJSON_CreateNull();
    char  *out;

    if (item == NULL) {
        return NULL;
    }
    out = moon_gw_json_print(item, NULL);
    cJSON_Delete(item);
    return out;
}

/* {"id":..,"custom_id":..,"response":{"status_code":S,"request_id":R,"body":BODY},"error":null} */
static moon_status_t put_response(batch_t *b, uint64_t line, const char *custom_id, int status_code,
                                  const char *request_id, const char *body)
{
    moon_gw_buf_t buf;
    char         *cid = json_str(custom_id);
    char         *text;
    size_t        len;
    moon_status_t status;

    if (cid == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    moon_gw_buf_init(&buf);
    moon_gw_buf_printf(&buf,
                       "{\"id\":\"batch_req_%llu\",\"custom_id\":%s,\"response\":{\"status_code\":"
                       "%d,\"request_id\":\"%s\",\"body\":",
                       (unsigned long long)line, cid, status_code, request_id);
    moon_gw_buf_puts(&buf, body);
    moon_gw_buf_puts(&buf, "},\"error\":null}\n");
    moon_free(cid);
    status = moon_gw_buf_take(&buf, &text, &len);
    if (status != MOON_OK) {
        return status;
    }
    status = write_line(b, text, len);
    moon_free(text);
    if (status == MOON_OK) {
        b->prog.done++;
        if (status_code == 200) {
            b->prog.n_ok++;
        } else {
            b->prog.n_failed++;
        }
    }
    return status;
}

/* A request the gateway would refuse: its status and error body. */
static moon_status_t put_request_error(batch_t *b, uint64_t line, const char *custom_id,
                                       const moon_gw_error_t *err)
{
    char         *body = moon_gw_error_json(err);
    char          rid[40];
    moon_status_t status;

    if (body == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    snprintf(rid, sizeof(rid), "req_%08llx%08llx", (unsigned long long)(b->nonce & 0xffffffffull),
             (unsigned long long)line);
    status = put_response(b, line, custom_id, err->http, rid, body);
    moon_free(body);
    return status;
}

/* A line that is no request: "response":null, "error":{"code","message"}. */
static moon_status_t put_line_error(batch_t *b, uint64_t line, const char *custom_id,
                                    const char *code, const char *fmt, ...) MOON_PRINTF(5, 6);
static moon_status_t put_line_error(batch_t *b, uint64_t line, const char *custom_id,
                                    const char *code, const char *fmt, ...)
{
    char          msg[320];
    char         *cid = json_str(custom_id);
    char         *m;
    char         *text;
    size_t        len;
    moon_gw_buf_t buf;
    va_list       ap;
    moon_status_t status;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    m = json_str(msg);
    if (cid == NULL || m == NULL) {
        moon_free(cid);
        moon_free(m);
        return MOON_ERR_NO_MEMORY;
    }
    moon_gw_buf_init(&buf);
    moon_gw_buf_printf(&buf,
                       "{\"id\":\"batch_req_%llu\",\"custom_id\":%s,\"response\":null,\"error\":{"
                       "\"code\":\"%s\",\"message\":%s}}\n",
                       (unsigned long long)line, cid, code, m);
    moon_free(cid);
    moon_free(m);
    status = moon_gw_buf_take(&buf, &text, &len);
    if (status == MOON_OK) {
        status = write_line(b, text, len);
        moon_free(text);
    }
    if (status == MOON_OK) {
        b->prog.done++;
        b->prog.n_failed++;
        MOON_DEBUG_LOG("batch: line %llu: %s", (unsigned long long)line, msg);
    }
    return status;
}

/* ---- answers of the cluster ------------------------------------------------------ */
static void slot_free(batch_t *b, slot_t *s)
{
    uint32_t i = (uint32_t)(s - b->slots);

    moon_htab_remove(b->rids, &s->rid);
    moon_free(s->custom_id);
    moon_gw_buf_fini(&s->text);
    moon_gw_request_fini(&s->req);
    memset(s, 0, sizeof(*s));
    b->free_slots[b->n_free++] = i;
}

static moon_status_t on_done(batch_t *b, slot_t *s, const moon_serve_event_t *ev)
{
    moon_gw_resp_meta_t meta;
    moon_gw_error_t     err;
    moon_gw_usage_t     u;
    char                id[64];
    char                rid[40];
    char               *body;
    size_t              len = 0;
    moon_status_t       status;

    if (moon_gw_done_error(ev->finish, ev->status, ev->message, &err)) {
        status = put_request_error(b, s->line, s->custom_id, &err);
        slot_free(b, s);
        return status;
    }
    moon_gw_buf_puts(&s->text, ev->text);
    snprintf(id, sizeof(id), "%s-%llx%08llx", s->chat ? "chatcmpl" : "cmpl",
             (unsigned long long)(b->nonce & 0xffffffffull), (unsigned long long)s->rid);
    snprintf(rid, sizeof(rid), "req_%llx%08llx", (unsigned long long)(b->nonce & 0xffffffffull),
             (unsigned long long)s->rid);
    meta = (moon_gw_resp_meta_t){
        .id          = id,
        .model       = b->model_name,
        .fingerprint = b->fingerprint,
        .created     = (int64_t)time(NULL),
        .chat        = s->chat,
    };
    moon_gw_usage_of_done(ev, s->details, &u);
    body = moon_gw_format_response(&meta, s->text.failed ? "" : (s->text.data ? s->text.data : ""),
                                   moon_finish_str(ev->finish), &u, &len);
    if (body == NULL) {
        slot_free(b, s);
        return MOON_ERR_NO_MEMORY;
    }
    b->prog.completion_tokens += ev->n_completion;
    b->prog.prompt_tokens += ev->n_prompt;
    status = put_response(b, s->line, s->custom_id, 200, rid, body);
    moon_free(body);
    slot_free(b, s);
    return status;
}

/* Reads the cluster's events for at most wait_ns (at least one pass). */
static moon_status_t pump(batch_t *b, uint64_t wait_ns)
{
    moon_serve_event_t ev;
    moon_status_t      status;

    for (;;) {
        rid_elem_t *e;

        status = moon_serve_client_next(b->env->client, wait_ns, &ev);
        if (status == MOON_ERR_TIMED_OUT) {
            return MOON_OK;
        }
        if (status != MOON_OK) {
            return status;
        }
        wait_ns          = 0; /* then only what is queued */
        b->last_event_ns = now_ns();
        e                = moon_htab_find(b->rids, &ev.request_id);
        if (e == NULL) {
            moon_serve_event_fini(&ev);
            continue; /* a request given up on (stall) */
        }
        if (ev.kind == MOON_SERVE_EV_TOKEN) {
            moon_gw_buf_puts(&b->slots[e->slot].text, ev.text);
            moon_serve_event_fini(&ev);
            continue;
        }
        status = on_done(b, &b->slots[e->slot], &ev);
        moon_serve_event_fini(&ev);
        report(b, 1);
        if (status != MOON_OK) {
            return status;
        }
    }
}

/* Requests in flight and silent for stall_timeout_s: cancelled, answered 500. */
static moon_status_t fail_stalled(batch_t *b)
{
    moon_gw_error_t err;
    moon_status_t   status = MOON_OK;

    MOON_ERROR("batch: no event from the cluster in %u s: %u request(s) in flight fail",
               b->cfg->stall_timeout_s, b->cfg->max_inflight - b->n_free);
    moon_gw_error_set(&err, 500, NULL, NULL, "no progress from the serving cluster in %u s",
                      b->cfg->stall_timeout_s);
    for (uint32_t i = 0; i < b->cfg->max_inflight && status == MOON_OK; i++) {
        slot_t *s = &b->slots[i];
        if (s->rid != 0) {
            moon_serve_client_cancel(b->env->client, s->rid);
            status = put_request_error(b, s->line, s->custom_id, &err);
            slot_free(b, s);
        }
    }
    b->last_event_ns = now_ns();
    return status;
}

/* Waits until a slot is free (or the stop flag rises: returns with none). */
static moon_status_t wait_slot(batch_t *b)
{
    while (b->n_free == 0) {
        moon_status_t status = pump(b, 100000000ull);
        if (status != MOON_OK) {
            return status;
        }
        if (b->n_free == 0 &&
            now_ns() - b->last_event_ns > (uint64_t)b->cfg->stall_timeout_s * 1000000000ull) {
            status = fail_stalled(b);
            if (status != MOON_OK) {
                return status;
            }
        }
        report(b, 0);
        if (b->env->stop != NULL && *b->env->stop) {
            return MOON_OK;
        }
    }
    return MOON_OK;
}

/* ---- one input line ------------------------------------------------------------- */
static int stopping(const batch_t *b)
{
    return b->env->stop != NULL && *b->env->stop;
}

static moon_status_t submit(batch_t *b, uint64_t line, const char *custom_id, int chat,
                            const cJSON *body)
{
    moon_gw_request_t req;
    moon_gw_error_t   err;
    moon_status_t     status;
    char             *text;
    size_t            len = 0;
    slot_t           *s;
    uint64_t          rid = 0;
    rid_elem_t        e;

    text = moon_gw_json_print(body, &len);
    if (text == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    status = moon_gw_openai_parse(text, len, chat, &req, &err);
    moon_free(text);
    if (status == MOON_OK && req.params.logprobs > 0) {
        /* answered by the HTTP gateway only: refused here rather than dropped */
        moon_gw_error_set(&err, 400, NULL, "logprobs", "'logprobs' is not supported in batches");
        status = MOON_ERR_INVALID_PARAM;
    }
    if (status == MOON_OK && (req.best_of > 1 || req.echo || req.n_prompts > 1)) {
        /* one sequence per line: n, best_of and echo are the HTTP gateway's */
        const char *what = req.echo ? "echo" : req.n_prompts > 1 ? "prompt" : "n";
        moon_gw_error_set(&err, 400, NULL, what, "'%s' is not supported in batches (%s)", what,
                          req.n_prompts > 1 ? "one prompt per line" : "one sequence per line");
        status = MOON_ERR_INVALID_PARAM;
    }
    if (status == MOON_OK) {
        status =
            moon_gw_openai_prepare(&req, &b->info, b->nonce ^ (line * 0x9e3779b97f4a7c15ull), &err);
    }
    if (status == MOON_ERR_INVALID_PARAM) {
        moon_gw_request_fini(&req);
        return put_request_error(b, line, custom_id, &err);
    }
    if (status != MOON_OK) {
        moon_gw_request_fini(&req);
        return status;
    }
    req.params.slo_class = b->cfg->slo_class;
    status               = wait_slot(b);
    if (status != MOON_OK || b->n_free == 0) {
        moon_gw_request_fini(&req);
        return status != MOON_OK ? status : MOON_ERR_CANCELED;
    }
    status = moon_serve_client_submit(b->env->client, &req.params, &rid);
    if (status == MOON_ERR_INVALID_PARAM) {
        moon_gw_request_fini(&req);
        moon_gw_error_set(&err, 400, NULL, NULL, "the request's parameters were refused");
        return put_request_error(b, line, custom_id, &err);
    }
    if (status != MOON_OK) {
        moon_gw_request_fini(&req);
        MOON_ERROR("batch: submitting line %llu failed: %s", (unsigned long long)line,
                   moon_status_str(status));
        return status;
    }
    s            = &b->slots[b->free_slots[--b->n_free]];
    s->rid       = rid;
    s->line      = line;
    s->chat      = chat;
    s->details   = req.details;
    s->req       = req;
    s->custom_id = moon_strdup(custom_id);
    moon_gw_buf_init(&s->text);
    e.rid  = rid;
    e.slot = (uint32_t)(s - b->slots);
    if (s->custom_id == NULL || moon_htab_insert(b->rids, &rid, &e, NULL) != MOON_OK) {
        moon_serve_client_cancel(b->env->client, rid);
        slot_free(b, s);
        return MOON_ERR_NO_MEMORY;
    }
    if (b->last_event_ns < b->t0_ns || b->n_free + 1 == b->cfg->max_inflight) {
        b->last_event_ns = now_ns(); /* the stall clock starts with the first in flight */
    }
    return MOON_OK;
}

/* The custom_id of a parsed line: 1 a string (*cid_p), 0 none, -1 another type. */
static int custom_id_of(const cJSON *root, const char **cid_p)
{
    *cid_p = NULL;
    if (root == NULL || !cJSON_IsObject(root)) {
        return 0;
    }
    return moon_gw_json_str(root, "custom_id", cid_p);
}

static moon_status_t do_line(batch_t *b, uint64_t line, const char *text, size_t len)
{
    cJSON        *root   = cJSON_ParseWithLength(text, len);
    const char   *cid    = NULL;
    const char   *method = NULL;
    const char   *url    = NULL;
    const cJSON  *body;
    cid_elem_t    elem;
    moon_status_t status;
    int           chat;

    if (root == NULL || !cJSON_IsObject(root)) {
        status = put_line_error(b, line, NULL, "invalid_json_line",
                                "line %llu is not a JSON object", (unsigned long long)line);
        goto out;
    }
    if (custom_id_of(root, &cid) != 1) {
        status = put_line_error(b, line, NULL, "invalid_custom_id",
                                "line %llu has no string 'custom_id'", (unsigned long long)line);
        goto out;
    }
    elem.s = moon_strdup(cid);
    if (elem.s == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto out;
    }
    status = moon_htab_insert(b->cids, &elem.s, &elem, NULL);
    if (status == MOON_ERR_EXISTS) {
        moon_free(elem.s);
        status = put_line_error(b, line, cid, "duplicate_custom_id",
                                "line %llu: custom_id '%.200s' is used by an earlier line",
                                (unsigned long long)line, cid);
        goto out;
    }
    if (status != MOON_OK) {
        moon_free(elem.s);
        goto out;
    }
    if (len > b->cfg->line_limit_bytes) {
        status = put_line_error(
            b, line, cid, "request_too_large", "line %llu has %zu bytes, over the limit of %llu",
            (unsigned long long)line, len, (unsigned long long)b->cfg->line_limit_bytes);
        goto out;
    }
    if (moon_gw_json_str(root, "method", &method) != 1 || strcmp(method, "POST") != 0) {
        status = put_line_error(b, line, cid, "invalid_method",
                                "line %llu: 'method' must be \"POST\"", (unsigned long long)line);
        goto out;
    }
    if (moon_gw_json_str(root, "url", &url) != 1 ||
        (strcmp(url, "/v1/completions") != 0 && strcmp(url, "/v1/chat/completions") != 0)) {
        status = put_line_error(b, line, cid, "invalid_url",
                                "line %llu: 'url' must be /v1/completions or "
                                "/v1/chat/completions (got %.100s)",
                                (unsigned long long)line, url != NULL ? url : "none");
        goto out;
    }
    chat = strcmp(url, "/v1/chat/completions") == 0;
    body = cJSON_GetObjectItemCaseSensitive(root, "body");
    if (body == NULL || !cJSON_IsObject(body)) {
        status = put_line_error(b, line, cid, "invalid_body", "line %llu: 'body' must be an object",
                                (unsigned long long)line);
        goto out;
    }
    status = submit(b, line, cid, chat, body);
out:
    cJSON_Delete(root);
    return status;
}

/* A line an earlier run answered: its custom_id joins the seen ones (a later
 * duplicate stays a duplicate) and must be the one the answer names. */
static moon_status_t note_answered(batch_t *b, uint64_t line, const char *text, size_t len)
{
    cJSON        *root   = cJSON_ParseWithLength(text, len);
    const char   *cid    = NULL;
    moon_status_t status = MOON_OK;
    cid_elem_t    elem;

    custom_id_of(root, &cid);
    if (cid_hash(cid) != b->ans.cid[line]) {
        MOON_ERROR("batch: %s answers line %llu with another custom_id than %s has there: it "
                   "is not this input's output",
                   b->cfg->output_path, (unsigned long long)line, b->cfg->input_path);
        status = MOON_ERR_INVALID_PARAM;
    } else if (cid != NULL) {
        elem.s = moon_strdup(cid);
        status =
            elem.s == NULL ? MOON_ERR_NO_MEMORY : moon_htab_insert(b->cids, &elem.s, &elem, NULL);
        if (status == MOON_ERR_EXISTS) {
            status = MOON_OK; /* the duplicate's own error line */
        }
        if (status != MOON_OK) {
            moon_free(elem.s);
        }
    }
    cJSON_Delete(root);
    return status;
}

/* ---- the output of earlier runs ------------------------------------------------- */
/* Reads what path answers already into b->ans; drops a partial last line. */
static moon_status_t load_answered(batch_t *b)
{
    FILE         *f    = fopen(b->cfg->output_path, "r+");
    char         *text = NULL;
    size_t        cap  = 0;
    ssize_t       n;
    off_t         good   = 0;
    uint64_t      lineno = 0;
    moon_status_t status = MOON_OK;

    if (f == NULL) {
        if (errno == ENOENT) {
            return MOON_OK;
        }
        MOON_ERROR("batch: cannot open %s: %s", b->cfg->output_path, strerror(errno));
        return MOON_ERR_IO;
    }
    while ((n = getline(&text, &cap, f)) > 0) {
        cJSON             *root;
        const char        *id  = NULL;
        const char        *cid = NULL;
        char              *end = NULL;
        unsigned long long line;

        if (text[n - 1] != '\n') {
            MOON_WARN("batch: %s ends in a partial line (an earlier run stopped while writing "
                      "it): dropped, its request is sent again",
                      b->cfg->output_path);
            break;
        }
        lineno++;
        good += n;
        if (blank(text, (size_t)n)) {
            continue;
        }
        root = cJSON_ParseWithLength(text, (size_t)n);
        if (root == NULL || moon_gw_json_str(root, "id", &id) != 1 ||
            strncmp(id, "batch_req_", 10) != 0 ||
            (line = strtoull(id + 10, &end, 10), end == id + 10 || *end != '\0') || line == 0 ||
            moon_gw_json_str(root, "custom_id", &cid) < 0) {
            MOON_ERROR("batch: line %llu of %s is not an answer line of moonlet batch: not "
                       "resuming into it",
                       (unsigned long long)lineno, b->cfg->output_path);
            cJSON_Delete(root);
            status = MOON_ERR_INVALID_PARAM;
            break;
        }
        if (line >= b->ans.n) {
            uint64_t  n_new = MOON_MAX(line + 1, b->ans.n * 2);
            uint64_t *grown = moon_realloc(b->ans.cid, n_new * sizeof(uint64_t));
            if (grown == NULL) {
                cJSON_Delete(root);
                status = MOON_ERR_NO_MEMORY;
                break;
            }
            memset(grown + b->ans.n, 0, (n_new - b->ans.n) * sizeof(uint64_t));
            b->ans.cid = grown;
            b->ans.n   = n_new;
        }
        b->ans.cid[line] = cid_hash(cid);
        cJSON_Delete(root);
    }
    free(text);
    if (status == MOON_OK && ftruncate(fileno(f), good) != 0) {
        MOON_ERROR("batch: cannot truncate %s: %s", b->cfg->output_path, strerror(errno));
        status = MOON_ERR_IO;
    }
    fclose(f);
    return status;
}

/* Counts the request lines and checks the answered ones against the input. */
static moon_status_t scan_input(batch_t *b, FILE *in)
{
    char         *text = NULL;
    size_t        cap  = 0;
    ssize_t       n;
    uint64_t      line   = 0;
    moon_status_t status = MOON_OK;

    while (status == MOON_OK && (n = getline(&text, &cap, in)) > 0) {
        line++;
        if (blank(text, (size_t)n)) {
            continue;
        }
        b->prog.total++;
        if (line < b->ans.n && b->ans.cid[line] != 0) {
            b->prog.resumed++;
            /* the check parses what fits the limit; a longer line was answered
             * request_too_large: its custom_id is checked the same way */
            status = note_answered(b, line, text, (size_t)n);
        }
    }
    for (uint64_t i = line + 1; status == MOON_OK && i < b->ans.n; i++) {
        if (b->ans.cid[i] != 0) {
            MOON_ERROR("batch: %s answers line %llu, past the end of %s: it is not this input's "
                       "output",
                       b->cfg->output_path, (unsigned long long)i, b->cfg->input_path);
            status = MOON_ERR_INVALID_PARAM;
        }
    }
    free(text);
    if (status == MOON_OK && ferror(in)) {
        MOON_ERROR("batch: reading %s failed", b->cfg->input_path);
        status = MOON_ERR_IO;
    }
    return status;
}

static moon_status_t run_lines(batch_t *b, FILE *in)
{
    char         *text = NULL;
    size_t        cap  = 0;
    ssize_t       n;
    uint64_t      line   = 0;
    moon_status_t status = MOON_OK;

    rewind(in);
    while (status == MOON_OK && !stopping(b) && (n = getline(&text, &cap, in)) > 0) {
        line++;
        if (blank(text, (size_t)n) || (line < b->ans.n && b->ans.cid[line] != 0)) {
            continue;
        }
        status = do_line(b, line, text, (size_t)n);
        report(b, 0);
    }
    free(text);
    if (status == MOON_ERR_CANCELED) {
        status = MOON_OK; /* stopped while waiting for a slot: drained below */
    }
    return status;
}

/* Waits for what is in flight: until done, or (stopping) drain_timeout_s,
 * then cancels the rest (left unanswered for the next run). */
static moon_status_t drain(batch_t *b)
{
    uint64_t      stop_ns = 0;
    moon_status_t status  = MOON_OK;

    while (status == MOON_OK && b->n_free < b->cfg->max_inflight) {
        if (stopping(b) && stop_ns == 0) {
            stop_ns = now_ns();
            MOON_INFO("batch: stopping: %u request(s) in flight get %u s to finish",
                      b->cfg->max_inflight - b->n_free, b->cfg->drain_timeout_s);
        }
        if (stop_ns != 0 &&
            now_ns() - stop_ns >= (uint64_t)b->cfg->drain_timeout_s * 1000000000ull) {
            for (uint32_t i = 0; i < b->cfg->max_inflight; i++) {
                if (b->slots[i].rid != 0) {
                    moon_serve_client_cancel(b->env->client, b->slots[i].rid);
                    slot_free(b, &b->slots[i]);
                }
            }
            break;
        }
        status = pump(b, 100000000ull);
        if (status == MOON_OK && b->n_free < b->cfg->max_inflight &&
            now_ns() - b->last_event_ns > (uint64_t)b->cfg->stall_timeout_s * 1000000000ull) {
            status = fail_stalled(b);
        }
        report(b, 0);
    }
    return status;
}

static moon_status_t setup(batch_t *b)
{
    moon_status_t status;
    uint32_t      h = 2166136261u;
    char          fp[16];

    b->info.n_ctx = 0;
    status = moon_gw_model_load(b->env->model_path, &b->tok, &b->tpl, &b->info.n_ctx, &b->info.dim);
    if (status != MOON_OK) {
        return status;
    }
    b->model_name = b->cfg->model_name != NULL ? moon_strdup(b->cfg->model_name)
                                               : moon_gw_model_stem(b->env->model_path);
    if (b->model_name == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    for (const char *c = b->model_name; *c; c++) {
        h = (h ^ (uint8_t)*c) * 16777619u;
    }
    snprintf(fp, sizeof(fp), "fp_%08x", h);
    b->fingerprint = moon_strdup(b->env->fingerprint != NULL ? b->env->fingerprint : fp);
    if (b->fingerprint == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    b->info.model_name = b->model_name;
    b->info.tpl        = &b->tpl;
    b->info.tok        = b->tok;
    b->info.n_vocab    = moon_tokenizer_n_vocab(b->tok);
    b->slots           = moon_calloc(b->cfg->max_inflight, sizeof(*b->slots));
    b->free_slots      = moon_calloc(b->cfg->max_inflight, sizeof(*b->free_slots));
    if (b->slots == NULL || b->free_slots == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < b->cfg->max_inflight; i++) {
        b->free_slots[b->n_free++] = b->cfg->max_inflight - 1 - i;
    }
    status = moon_htab_create(&cid_type, NULL, 0, 0, &b->cids);
    if (status == MOON_OK) {
        status = moon_htab_create(&rid_type, NULL, b->cfg->max_inflight, 0, &b->rids);
    }
    return status;
}

static void teardown(batch_t *b)
{
    for (uint32_t i = 0; b->slots != NULL && i < b->cfg->max_inflight; i++) {
        if (b->slots[i].rid != 0) {
            moon_serve_client_cancel(b->env->client, b->slots[i].rid);
            slot_free(b, &b->slots[i]);
        }
    }
    moon_htab_destroy(b->rids);
    moon_htab_destroy(b->cids);
    moon_free(b->slots);
    moon_free(b->free_slots);
    moon_free(b->ans.cid);
    moon_free(b->model_name);
    moon_free(b->fingerprint);
    moon_tokenizer_destroy(b->tok);
    moon_gw_template_fini(&b->tpl);
    if (b->fd >= 0) {
        close(b->fd);
    }
}

moon_status_t moon_batch_run(const moon_batch_config_t *cfg, const moon_batch_env_t *env,
                             moon_batch_progress_t *result_p)
{
    batch_t       b;
    FILE         *in = NULL;
    moon_status_t status;

    if (cfg == NULL || env == NULL || env->client == NULL || env->model_path == NULL ||
        cfg->input_path == NULL || cfg->output_path == NULL || cfg->max_inflight == 0) {
        MOON_ERROR("batch: needs an input, an output, a model, a client and max_inflight > 0");
        return MOON_ERR_INVALID_PARAM;
    }
    memset(&b, 0, sizeof(b));
    b.cfg   = cfg;
    b.env   = env;
    b.fd    = -1;
    b.t0_ns = now_ns();
    b.nonce = moon_hash_bytes(&b.t0_ns, sizeof(b.t0_ns)) ^ (uint64_t)time(NULL);
    in      = fopen(cfg->input_path, "r");
    if (in == NULL) {
        MOON_ERROR("batch: cannot open %s: %s", cfg->input_path, strerror(errno));
        return errno == ENOENT ? MOON_ERR_NOT_FOUND : MOON_ERR_IO;
    }
    status = setup(&b);
    if (status == MOON_OK) {
        status = load_answered(&b);
    }
    if (status == MOON_OK) {
        status = scan_input(&b, in);
    }
    if (status == MOON_OK) {
        b.prog.done = b.prog.resumed;
        b.fd        = open(cfg->output_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (b.fd < 0) {
            MOON_ERROR("batch: cannot open %s: %s", cfg->output_path, strerror(errno));
            status = MOON_ERR_IO;
        }
    }
    if (status == MOON_OK) {
        MOON_INFO("batch: %llu request(s) in %s, %llu answered already in %s",
                  (unsigned long long)b.prog.total, cfg->input_path,
                  (unsigned long long)b.prog.resumed, cfg->output_path);
        b.last_sync_ns = now_ns();
        report(&b, 1);
        status = run_lines(&b, in);
        if (status == MOON_OK) {
            status = drain(&b);
        }
        if (b.fd >= 0) {
            moon_status_t s2 = sync_out(&b);
            status           = status == MOON_OK ? s2 : status;
        }
        if (status == MOON_OK && b.prog.done < b.prog.total) {
            MOON_INFO("batch: stopped with %llu of %llu answered: run again to go on",
                      (unsigned long long)b.prog.done, (unsigned long long)b.prog.total);
            status = MOON_ERR_CANCELED;
        }
        report(&b, 1);
    }
    if (result_p != NULL) {
        b.prog.elapsed_s = (double)(now_ns() - b.t0_ns) * 1e-9;
        b.prog.in_flight = 0;
        *result_p        = b.prog;
    }
    teardown(&b);
    fclose(in);
    return status;
}
