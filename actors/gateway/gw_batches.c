/* actors/gateway/gw_batches.c - the Batch API (see gw_batches.h): batch objects
 * under a mutex, each mirrored in DIR/batches/ID.json, a runner thread that
 * takes the oldest unfinished batch one step at a time (validate, run the
 * engine, finalize), and the HTTP handlers of /v1/files and /v1/batches. */
#define _GNU_SOURCE /* getline */
#include "gw_batches.h"

#include "batch.h"
#include "gw_buf.h"
#include "gw_errors.h"
#include "gw_files.h"
#include "gw_json.h"
#include "gw_multipart.h"
#include "moonlet/alloc.h"
#include "moonlet/hash.h"
#include "moonlet/log.h"
#include "moonlet/msg.h"
#include "moonlet/serve_client.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CFG(_f) MOON_CONFIG_AT(moon_gw_batches_config_t, _f)
static const moon_config_field_t batches_fields[] = {
    {"data-dir", MOON_CONFIG_STRING, CFG(data_dir), .dflt = NULL,
     .doc = "folder of the batch api's files and batches (/v1/files, /v1/batches; unset: off); "
            "a server restarted on it goes on with its batches"},
    {"file-limit", MOON_CONFIG_SIZE, CFG(file_limit_bytes), .dflt = "256m", .min = 1,
     .doc = "largest file uploaded to /v1/files (bigger: 413)"},
    {"batch-inflight", MOON_CONFIG_U32, CFG(max_inflight), .dflt = "16", .min = 1, .max = 65536,
     .doc = "requests of a /v1/batches batch in the cluster at once"},
    {"batch-slo-class", MOON_CONFIG_U32, CFG(slo_class), .dflt = "2", .max = 255,
     .doc = "slo class of batch requests (0 is interactive; higher classes yield to lower)"},
    {"batch-max-requests", MOON_CONFIG_U64, CFG(max_requests), .dflt = "50000", .min = 1,
     .doc = "request lines a batch's input file may have"},
    MOON_CONFIG_END,
};
#undef CFG

const moon_config_table_t moon_gw_batches_config_table = {
    "batches", "openai batch api on the gateway", "MOON_BATCHES_", batches_fields};

moon_status_t moon_gw_batches_config_default(moon_gw_batches_config_t *cfg)
{
    moon_status_t status = moon_config_defaults(&moon_gw_batches_config_table, cfg);

    return status != MOON_OK ? status : moon_config_load_env(&moon_gw_batches_config_table, cfg);
}

/* ---- batch objects --------------------------------------------------------------- */

typedef enum {
    ST_VALIDATING,
    ST_IN_PROGRESS,
    ST_FINALIZING,
    ST_COMPLETED,
    ST_FAILED,
    ST_CANCELLING,
    ST_CANCELLED,
    ST_EXPIRED,
    ST_N
} bstate_t;

static const char *const state_names[ST_N] = {"validating", "in_progress", "finalizing",
                                              "completed",  "failed",      "cancelling",
                                              "cancelled",  "expired"};

#define WINDOW_S 86400 /* completion_window "24h" */

typedef struct {
    char    id[48];
    char    input_file_id[64];
    char    endpoint[32];
    int     state;
    int64_t created_at, in_progress_at, expires_at, finalizing_at, completed_at, failed_at,
        expired_at, cancelling_at, cancelled_at;
    uint64_t total, completed, failed;
    char     output_file_id[64], error_file_id[64];
    char     err_code[48], err_msg[320]; /* the batch's own error ("" none) */
    cJSON   *metadata;                   /* owned; NULL: null */
} batch_t;

struct moon_gw_batches {
    moon_gw_batches_config_t cfg;
    char                    *data_dir, *bdir;
    moon_runtime_t          *rt;
    moon_addr_t              conductor;
    char                    *model_path, *model_name, *fingerprint;
    uint32_t                 n_prefill, n_decode;
    moon_gw_files_t         *files;
    pthread_mutex_t          mu;
    pthread_cond_t           cv;
    batch_t                **items; /* (n), oldest first; never removed */
    size_t                   n, cap;
    uint64_t                 counter;
    pthread_t                thread;
    int                      thread_up;
    int                      stopping;               /* under mu */
    batch_t                 *running;                /* under mu: the batch the engine runs */
    volatile sig_atomic_t    run_stop;               /* the engine's stop flag (cancel or stop) */
    uint64_t                 prior_ok, prior_failed; /* runner: answers of earlier runs */
};

static int64_t now_s(void)
{
    return (int64_t)time(NULL);
}

static void add_time(cJSON *o, const char *name, int64_t t)
{
    if (t != 0) {
        cJSON_AddNumberToObject(o, name, (double)t);
    } else {
        cJSON_AddNullToObject(o, name);
    }
}

static void add_str_or_null(cJSON *o, const char *name, const char *s)
{
    if (s[0] != '\0') {
        cJSON_AddStringToObject(o, name, s);
    } else {
        cJSON_AddNullToObject(o, name);
    }
}

/* The batch object (OpenAI's fields). Under mu. */
static cJSON *batch_json(const batch_t *bt)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *rc, *errs, *list, *e;

    if (o == NULL) {
        return NULL;
    }
    cJSON_AddStringToObject(o, "id", bt->id);
    cJSON_AddStringToObject(o, "object", "batch");
    cJSON_AddStringToObject(o, "endpoint", bt->endpoint);
    if (bt->err_code[0] != '\0' && (errs = cJSON_AddObjectToObject(o, "errors")) != NULL) {
        cJSON_AddStringToObject(errs, "object", "list");
        list = cJSON_AddArrayToObject(errs, "data");
        if (list != NULL && (e = cJSON_CreateObject()) != NULL) {
            cJSON_AddStringToObject(e, "code", bt->err_code);
            cJSON_AddStringToObject(e, "message", bt->err_msg);
            cJSON_AddNullToObject(e, "param");
            cJSON_AddNullToObject(e, "line");
            cJSON_AddItemToArray(list, e);
        }
    } else {
        cJSON_AddNullToObject(o, "errors");
    }
    cJSON_AddStringToObject(o, "input_file_id", bt->input_file_id);
    cJSON_AddStringToObject(o, "completion_window", "24h");
    cJSON_AddStringToObject(o, "status", state_names[bt->state]);
    add_str_or_null(o, "output_file_id", bt->output_file_id);
    add_str_or_null(o, "error_file_id", bt->error_file_id);
    add_time(o, "created_at", bt->created_at);
    add_time(o, "in_progress_at", bt->in_progress_at);
    add_time(o, "expires_at", bt->expires_at);
    add_time(o, "finalizing_at", bt->finalizing_at);
    add_time(o, "completed_at", bt->completed_at);
    add_time(o, "failed_at", bt->failed_at);
    add_time(o, "expired_at", bt->expired_at);
    add_time(o, "cancelling_at", bt->cancelling_at);
    add_time(o, "cancelled_at", bt->cancelled_at);
    rc = cJSON_AddObjectToObject(o, "request_counts");
    if (rc != NULL) {
        cJSON_AddNumberToObject(rc, "total", (double)bt->total);
        cJSON_AddNumberToObject(rc, "completed", (double)bt->completed);
        cJSON_AddNumberToObject(rc, "failed", (double)bt->failed);
    }
    if (bt->metadata != NULL) {
        cJSON_AddItemToObject(o, "metadata", cJSON_Duplicate(bt->metadata, 1));
    } else {
        cJSON_AddNullToObject(o, "metadata");
    }
    return o;
}

static char *batch_text(const batch_t *bt, size_t *len_p)
{
    cJSON *o = batch_json(bt);
    char  *text;

    if (o == NULL) {
        return NULL;
    }
    text = moon_gw_json_print(o, len_p);
    cJSON_Delete(o);
    return text;
}

static char *bpath(const moon_gw_batches_t *s, const char *id, const char *ext)
{
    size_t n = strlen(s->bdir) + strlen(id) + strlen(ext) + 2;
    char  *p = moon_malloc(n);

    if (p != NULL) {
        snprintf(p, n, "%s/%s%s", s->bdir, id, ext);
    }
    return p;
}

/* Writes ID.json (through ID.json.tmp and a rename). Under mu. */
static moon_status_t persist(moon_gw_batches_t *s, const batch_t *bt)
{
    size_t        len  = 0;
    char         *text = batch_text(bt, &len);
    char         *path = bpath(s, bt->id, ".json");
    char         *tmp  = bpath(s, bt->id, ".json.tmp");
    FILE         *out;
    moon_status_t status = MOON_ERR_IO;

    if (text == NULL || path == NULL || tmp == NULL) {
        status = MOON_ERR_NO_MEMORY;
    } else if ((out = fopen(tmp, "w")) != NULL) {
        int ok = fwrite(text, 1, len, out) == len && fflush(out) == 0 && fsync(fileno(out)) == 0;
        ok     = (fclose(out) == 0) && ok;
        if (ok && rename(tmp, path) == 0) {
            status = MOON_OK;
        } else {
            unlink(tmp);
        }
    }
    if (status == MOON_ERR_IO) {
        MOON_ERROR("batches: saving batch %s failed: %s", bt->id, strerror(errno));
    }
    moon_free(text);
    moon_free(path);
    moon_free(tmp);
    return status;
}

static int64_t time_of(const cJSON *o, const char *name)
{
    double v = 0;

    return moon_gw_json_num(o, name, &v) == 1 ? (int64_t)v : 0;
}

static void str_of(const cJSON *o, const char *name, char *dst, size_t cap)
{
    const char *v = NULL;

    if (moon_gw_json_str(o, name, &v) == 1) {
        moon_gw_utf8_copy(dst, cap, v);
    }
}

/* A batch object read back from ID.json. */
static batch_t *batch_load(const char *path)
{
    FILE       *in   = fopen(path, "r");
    char       *text = NULL;
    size_t      cap  = 0;
    ssize_t     n;
    cJSON      *o  = NULL, *rc, *md, *errs, *e;
    batch_t    *bt = NULL;
    const char *st = NULL;
    long long   v;

    if (in == NULL) {
        return NULL;
    }
    n = getdelim(&text, &cap, '\0', in);
    fclose(in);
    if (n > 0) {
        o = cJSON_ParseWithLength(text, (size_t)n);
    }
    free(text);
    if (o == NULL || moon_gw_json_str(o, "status", &st) != 1 ||
        (bt = moon_calloc(1, sizeof(*bt))) == NULL) {
        cJSON_Delete(o);
        return NULL;
    }
    bt->state = -1;
    for (int i = 0; i < ST_N; i++) {
        if (strcmp(st, state_names[i]) == 0) {
            bt->state = i;
        }
    }
    str_of(o, "id", bt->id, sizeof(bt->id));
    str_of(o, "input_file_id", bt->input_file_id, sizeof(bt->input_file_id));
    str_of(o, "endpoint", bt->endpoint, sizeof(bt->endpoint));
    str_of(o, "output_file_id", bt->output_file_id, sizeof(bt->output_file_id));
    str_of(o, "error_file_id", bt->error_file_id, sizeof(bt->error_file_id));
    bt->created_at     = time_of(o, "created_at");
    bt->in_progress_at = time_of(o, "in_progress_at");
    bt->expires_at     = time_of(o, "expires_at");
    bt->finalizing_at  = time_of(o, "finalizing_at");
    bt->completed_at   = time_of(o, "completed_at");
    bt->failed_at      = time_of(o, "failed_at");
    bt->expired_at     = time_of(o, "expired_at");
    bt->cancelling_at  = time_of(o, "cancelling_at");
    bt->cancelled_at   = time_of(o, "cancelled_at");
    rc                 = cJSON_GetObjectItemCaseSensitive(o, "request_counts");
    if (moon_gw_json_int(rc, "total", 0, 1e15, &v) == 1) {
        bt->total = (uint64_t)v;
    }
    if (moon_gw_json_int(rc, "completed", 0, 1e15, &v) == 1) {
        bt->completed = (uint64_t)v;
    }
    if (moon_gw_json_int(rc, "failed", 0, 1e15, &v) == 1) {
        bt->failed = (uint64_t)v;
    }
    errs = cJSON_GetObjectItemCaseSensitive(o, "errors");
    e    = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(errs, "data"), 0);
    if (e != NULL) {
        str_of(e, "code", bt->err_code, sizeof(bt->err_code));
        str_of(e, "message", bt->err_msg, sizeof(bt->err_msg));
    }
    md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
    if (cJSON_IsObject(md)) {
        bt->metadata = cJSON_Duplicate(md, 1);
    }
    cJSON_Delete(o);
    if (bt->state < 0 || bt->id[0] == '\0') {
        cJSON_Delete(bt->metadata);
        moon_free(bt);
        return NULL;
    }
    return bt;
}

static moon_status_t items_add(moon_gw_batches_t *s, batch_t *bt)
{
    if (s->n == s->cap) {
        size_t    cap   = s->cap ? s->cap * 2 : 16;
        batch_t **items = moon_realloc(s->items, cap * sizeof(*items));
        if (items == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        s->items = items;
        s->cap   = cap;
    }
    s->items[s->n++] = bt;
    return MOON_OK;
}

static int by_created(const void *a, const void *b)
{
    const batch_t *x = *(batch_t *const *)a, *y = *(batch_t *const *)b;

    if (x->created_at != y->created_at) {
        return x->created_at < y->created_at ? -1 : 1;
    }
    return strcmp(x->id, y->id);
}

static moon_status_t scan(moon_gw_batches_t *s)
{
    DIR           *d = opendir(s->bdir);
    struct dirent *e;
    moon_status_t  status = MOON_OK;

    if (d == NULL) {
        MOON_ERROR("batches: cannot read %s: %s", s->bdir, strerror(errno));
        return MOON_ERR_IO;
    }
    while (status == MOON_OK && (e = readdir(d)) != NULL) {
        size_t   n = strlen(e->d_name);
        char    *p;
        batch_t *bt;

        if (n <= 5 || strcmp(e->d_name + n - 5, ".json") != 0) {
            continue;
        }
        p  = bpath(s, e->d_name, "");
        bt = p != NULL ? batch_load(p) : NULL;
        if (bt == NULL) {
            MOON_WARN("batches: %s/%s is not a batch object: skipped", s->bdir, e->d_name);
        } else {
            status = items_add(s, bt);
        }
        moon_free(p);
    }
    closedir(d);
    if (s->n > 1) { /* an empty folder has no array yet (NULL) */
        qsort(s->items, s->n, sizeof(*s->items), by_created);
    }
    return status;
}

static batch_t *find_batch(moon_gw_batches_t *s, const char *id)
{
    for (size_t i = 0; i < s->n; i++) {
        if (strcmp(s->items[i]->id, id) == 0) {
            return s->items[i];
        }
    }
    return NULL;
}

/* Sets the state (and its time) and saves. Under mu. */
static void set_state(moon_gw_batches_t *s, batch_t *bt, int state)
{
    int64_t t = now_s();

    bt->state = state;
    switch (state) {
    case ST_IN_PROGRESS:
        bt->in_progress_at = t;
        break;
    case ST_FINALIZING:
        bt->finalizing_at = t;
        break;
    case ST_COMPLETED:
        bt->completed_at = t;
        break;
    case ST_FAILED:
        bt->failed_at = t;
        break;
    case ST_CANCELLING:
        bt->cancelling_at = t;
        break;
    case ST_CANCELLED:
        bt->cancelled_at = t;
        break;
    case ST_EXPIRED:
        bt->expired_at = t;
        break;
    default:
        break;
    }
    MOON_INFO("batches: %s is %s (%llu of %llu answered, %llu failed)", bt->id, state_names[state],
              (unsigned long long)(bt->completed + bt->failed), (unsigned long long)bt->total,
              (unsigned long long)bt->failed);
    persist(s, bt);
}

static void fail_batch(moon_gw_batches_t *s, batch_t *bt, const char *code, const char *fmt, ...)
    MOON_PRINTF(4, 5);

static void fail_batch(moon_gw_batches_t *s, batch_t *bt, const char *code, const char *fmt, ...)
{
    va_list ap;
    char    msg[sizeof(bt->err_msg)];

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    moon_gw_utf8_copy(bt->err_code, sizeof(bt->err_code), code);
    moon_gw_utf8_copy(bt->err_msg, sizeof(bt->err_msg), msg);
    MOON_WARN("batches: %s failed: %s", bt->id, msg);
    set_state(s, bt, ST_FAILED);
}

/* ---- the runner -------------------------------------------------------------------- */

static int blank(const char *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (t[i] != ' ' && t[i] != '\t' && t[i] != '\r' && t[i] != '\n') {
            return 0;
        }
    }
    return 1;
}

/* Request lines in path (-1: cannot read). */
static int64_t count_requests(const char *path)
{
    FILE   *in   = fopen(path, "r");
    char   *text = NULL;
    size_t  cap  = 0;
    ssize_t n;
    int64_t count = 0;

    if (in == NULL) {
        return -1;
    }
    while ((n = getline(&text, &cap, in)) > 0) {
        count += !blank(text, (size_t)n);
    }
    free(text);
    fclose(in);
    return count;
}

/* 1: an answer line with status 200 (the output file's), 0 another (the
 * error file's). */
static int answer_ok(const char *text, size_t n)
{
    cJSON       *o    = cJSON_ParseWithLength(text, n);
    const cJSON *resp = cJSON_GetObjectItemCaseSensitive(o, "response");
    long long    code = 0;
    int          ok;

    ok = cJSON_IsObject(resp) && moon_gw_json_int(resp, "status_code", 0, 999, &code) == 1 &&
         code == 200;
    cJSON_Delete(o);
    return ok;
}

/* Counts the whole answer lines of path (a partial last line is the engine's
 * to drop) and, with out/err, copies them there by kind. */
static moon_status_t split_answers(const char *path, FILE *out, FILE *err, uint64_t *n_ok_p,
                                   uint64_t *n_failed_p)
{
    FILE   *in   = fopen(path, "r");
    char   *text = NULL;
    size_t  cap  = 0;
    ssize_t n;

    *n_ok_p = *n_failed_p = 0;
    if (in == NULL) {
        return errno == ENOENT ? MOON_OK : MOON_ERR_IO;
    }
    while ((n = getline(&text, &cap, in)) > 0 && text[n - 1] == '\n') {
        int ok;
        if (blank(text, (size_t)n)) {
            continue;
        }
        ok = answer_ok(text, (size_t)n);
        *(ok ? n_ok_p : n_failed_p) += 1;
        if (ok ? out != NULL : err != NULL) {
            fwrite(text, 1, (size_t)n, ok ? out : err);
        }
    }
    free(text);
    fclose(in);
    return MOON_OK;
}

static void on_progress(void *arg, const moon_batch_progress_t *p)
{
    moon_gw_batches_t *s = arg;

    pthread_mutex_lock(&s->mu);
    if (s->running != NULL) {
        s->running->total     = p->total;
        s->running->completed = s->prior_ok + p->n_ok;
        s->running->failed    = s->prior_failed + p->n_failed;
    }
    pthread_mutex_unlock(&s->mu);
}

/* validating: the input file is there, has requests and not too many. */
static void step_validate(moon_gw_batches_t *s, batch_t *bt)
{
    char   *path = NULL;
    int64_t n    = -1;

    if (moon_gw_files_path(s->files, bt->input_file_id, &path) == MOON_OK) {
        n = count_requests(path);
    }
    moon_free(path);
    pthread_mutex_lock(&s->mu);
    if (bt->state != ST_VALIDATING) {
        /* cancelled meanwhile */
    } else if (n < 0) {
        fail_batch(s, bt, "invalid_file", "the input file %s cannot be read (deleted?)",
                   bt->input_file_id);
    } else if (n == 0) {
        fail_batch(s, bt, "empty_file", "the input file %s has no request line", bt->input_file_id);
    } else if ((uint64_t)n > s->cfg.max_requests) {
        fail_batch(s, bt, "too_many_requests",
                   "the input file %s has %lld requests, over the limit of %llu", bt->input_file_id,
                   (long long)n, (unsigned long long)s->cfg.max_requests);
    } else {
        bt->total = (uint64_t)n;
        set_state(s, bt, ST_IN_PROGRESS);
    }
    pthread_mutex_unlock(&s->mu);
}

/* The runner's client, made on first use; waits (checking the stop flag)
 * until the cluster is up. MOON_ERR_CANCELED: stopped meanwhile. */
static moon_status_t ensure_client(moon_gw_batches_t *s, moon_serve_client_t **client_p)
{
    moon_serve_client_config_t ccfg = {.conductor = s->conductor};
    moon_status_t              status;

    if (*client_p == NULL) {
        status = moon_serve_client_create(s->rt, &ccfg, client_p);
        if (status != MOON_OK) {
            MOON_ERROR("batches: no serve client: %s", moon_status_str(status));
            return status;
        }
    }
    for (;;) {
        status = moon_serve_client_wait_ready(*client_p, s->n_prefill, s->n_decode, 500000000ull);
        if (status != MOON_ERR_TIMED_OUT) {
            return status;
        }
        if (s->run_stop) {
            return MOON_ERR_CANCELED;
        }
    }
}

/* in_progress: the engine answers what is not answered yet. */
static void step_run(moon_gw_batches_t *s, batch_t *bt, moon_serve_client_t **client_p)
{
    moon_batch_config_t   cfg;
    moon_batch_env_t      env;
    moon_batch_progress_t res;
    char                 *in  = NULL;
    char                 *out = bpath(s, bt->id, ".jsonl");
    moon_status_t         status;

    memset(&res, 0, sizeof(res));
    status =
        out == NULL ? MOON_ERR_NO_MEMORY : moon_gw_files_path(s->files, bt->input_file_id, &in);
    if (status == MOON_OK) {
        status = split_answers(out, NULL, NULL, &s->prior_ok, &s->prior_failed);
    }
    if (status == MOON_OK) {
        status = ensure_client(s, client_p);
    }
    if (status == MOON_OK) {
        status = moon_batch_config_default(&cfg);
    }
    if (status == MOON_OK) {
        cfg.input_path   = in;
        cfg.output_path  = out;
        cfg.model_name   = s->model_name;
        cfg.max_inflight = s->cfg.max_inflight;
        cfg.slo_class    = s->cfg.slo_class;
        memset(&env, 0, sizeof(env));
        env.client      = *client_p;
        env.model_path  = s->model_path;
        env.fingerprint = s->fingerprint;
        env.progress    = on_progress;
        env.arg         = s;
        env.stop        = &s->run_stop;
        MOON_INFO("batches: %s runs (%llu of %llu answered before)", bt->id,
                  (unsigned long long)(s->prior_ok + s->prior_failed),
                  (unsigned long long)bt->total);
        status = moon_batch_run(&cfg, &env, &res);
    }
    pthread_mutex_lock(&s->mu);
    if (status == MOON_OK) {
        if (bt->state == ST_IN_PROGRESS) {
            set_state(s, bt, ST_FINALIZING);
        }
    } else if (status == MOON_ERR_CANCELED) {
        /* cancelling: the next step finalizes; stopping: it goes on at the next start */
        if (bt->state == ST_IN_PROGRESS) {
            persist(s, bt);
        }
    } else if (status == MOON_ERR_NOT_FOUND) {
        fail_batch(s, bt, "invalid_file", "the input file %s is gone", bt->input_file_id);
    } else {
        fail_batch(s, bt, "batch_failed", "the batch engine stopped: %s (see the server's log)",
                   moon_status_str(status));
    }
    pthread_mutex_unlock(&s->mu);
    moon_free(in);
    moon_free(out);
}

/* Writes the lines of one kind to a temporary file and moves it into the
 * store as id; id[0] = '\0' when there is none of that kind. */
static moon_status_t finalize_files(moon_gw_batches_t *s, batch_t *bt, uint64_t *n_ok_p,
                                    uint64_t *n_failed_p, char *out_id, char *err_id)
{
    char         *ans  = bpath(s, bt->id, ".jsonl");
    char         *outp = bpath(s, bt->id, ".output.tmp");
    char         *errp = bpath(s, bt->id, ".errors.tmp");
    FILE         *out = NULL, *err = NULL;
    char          name[96];
    moon_status_t status = MOON_ERR_NO_MEMORY;

    out_id[0] = err_id[0] = '\0';
    if (ans != NULL && outp != NULL && errp != NULL) {
        out    = fopen(outp, "w");
        err    = fopen(errp, "w");
        status = out != NULL && err != NULL ? split_answers(ans, out, err, n_ok_p, n_failed_p)
                                            : MOON_ERR_IO;
    }
    if (out != NULL && (fflush(out) != 0 || fsync(fileno(out)) != 0 || fclose(out) != 0)) {
        status = MOON_ERR_IO;
    }
    if (err != NULL && (fflush(err) != 0 || fsync(fileno(err)) != 0 || fclose(err) != 0)) {
        status = MOON_ERR_IO;
    }
    if (status == MOON_OK && *n_ok_p > 0) {
        snprintf(out_id, 64, "file-%.40s-output", bt->id + 6);
        snprintf(name, sizeof(name), "%s_output.jsonl", bt->id);
        status = moon_gw_files_adopt(s->files, out_id, name, "batch_output", outp, NULL);
    }
    if (status == MOON_OK && *n_failed_p > 0) {
        snprintf(err_id, 64, "file-%.40s-errors", bt->id + 6);
        snprintf(name, sizeof(name), "%s_errors.jsonl", bt->id);
        status = moon_gw_files_adopt(s->files, err_id, name, "batch_output", errp, NULL);
    }
    if (status != MOON_OK) {
        MOON_ERROR("batches: finalizing %s failed: %s", bt->id, strerror(errno));
        out_id[0] = err_id[0] = '\0';
    }
    if (outp != NULL) {
        unlink(outp);
    }
    if (errp != NULL) {
        unlink(errp);
    }
    moon_free(ans);
    moon_free(outp);
    moon_free(errp);
    return status;
}

/* finalizing, cancelling or expiring: the answers so far become the output
 * and error files. */
static void step_finalize(moon_gw_batches_t *s, batch_t *bt, int final_state)
{
    uint64_t      n_ok = 0, n_failed = 0;
    char          out_id[64], err_id[64];
    moon_status_t status = finalize_files(s, bt, &n_ok, &n_failed, out_id, err_id);

    pthread_mutex_lock(&s->mu);
    if (status != MOON_OK) {
        fail_batch(s, bt, "finalize_failed",
                   "the output files could not be written: %s (disk full?)",
                   moon_status_str(status));
    } else {
        memcpy(bt->output_file_id, out_id, sizeof(out_id));
        memcpy(bt->error_file_id, err_id, sizeof(err_id));
        bt->completed = n_ok;
        bt->failed    = n_failed;
        set_state(s, bt, final_state);
    }
    pthread_mutex_unlock(&s->mu);
}

/* The oldest batch with a step to take. Under mu. */
static batch_t *next_job(moon_gw_batches_t *s)
{
    for (size_t i = 0; i < s->n; i++) {
        int st = s->items[i]->state;
        if (st == ST_VALIDATING || st == ST_IN_PROGRESS || st == ST_FINALIZING ||
            st == ST_CANCELLING) {
            return s->items[i];
        }
    }
    return NULL;
}

static void *runner(void *arg)
{
    moon_gw_batches_t   *s      = arg;
    moon_serve_client_t *client = NULL;

    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        batch_t *bt = next_job(s);
        int      st;

        if (bt == NULL) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
            continue;
        }
        st = bt->state;
        if ((st == ST_VALIDATING || st == ST_IN_PROGRESS) && now_s() >= bt->expires_at) {
            st = ST_EXPIRED;
        }
        s->running  = bt;
        s->run_stop = 0;
        pthread_mutex_unlock(&s->mu);
        switch (st) {
        case ST_VALIDATING:
            step_validate(s, bt);
            break;
        case ST_IN_PROGRESS:
            step_run(s, bt, &client);
            break;
        case ST_FINALIZING:
            step_finalize(s, bt, ST_COMPLETED);
            break;
        case ST_CANCELLING:
            step_finalize(s, bt, ST_CANCELLED);
            break;
        default:
            step_finalize(s, bt, ST_EXPIRED);
            break;
        }
        pthread_mutex_lock(&s->mu);
        s->running = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    moon_serve_client_destroy(client);
    moon_msg_cache_flush(); /* the events it released: back to the shared pool */
    return NULL;
}

/* ---- life ---------------------------------------------------------------------------- */

moon_status_t moon_gw_batches_open(const moon_gw_batches_config_t *cfg,
                                   const moon_gw_batches_args_t   *args,
                                   moon_gw_batches_t             **batches_p)
{
    moon_gw_batches_t *s;
    moon_status_t      status = MOON_ERR_NO_MEMORY;
    size_t             n;

    if (cfg == NULL || cfg->data_dir == NULL || cfg->data_dir[0] == '\0' || args == NULL ||
        args->rt == NULL || args->model_path == NULL || cfg->max_inflight == 0) {
        MOON_ERROR("batches: needs a data dir, a runtime, a model and batch-inflight > 0");
        return MOON_ERR_INVALID_PARAM;
    }
    s = moon_calloc(1, sizeof(*s));
    if (s == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->cfg         = *cfg;
    s->rt          = args->rt;
    s->conductor   = args->conductor;
    s->n_prefill   = args->n_prefill;
    s->n_decode    = args->n_decode;
    s->data_dir    = moon_strdup(cfg->data_dir);
    s->model_path  = moon_strdup(args->model_path);
    s->model_name  = args->model_name != NULL ? moon_strdup(args->model_name) : NULL;
    s->fingerprint = args->fingerprint != NULL ? moon_strdup(args->fingerprint) : NULL;
    n              = strlen(cfg->data_dir) + 10;
    s->bdir        = moon_malloc(n);
    if (s->data_dir == NULL || s->model_path == NULL || s->bdir == NULL ||
        (args->model_name != NULL && s->model_name == NULL) ||
        (args->fingerprint != NULL && s->fingerprint == NULL)) {
        goto err;
    }
    s->cfg.data_dir = s->data_dir;
    snprintf(s->bdir, n, "%s/batches", cfg->data_dir);
    status = moon_gw_files_open(cfg->data_dir, &s->files);
    if (status != MOON_OK) {
        goto err;
    }
    if (mkdir(s->bdir, 0755) != 0 && errno != EEXIST) {
        MOON_ERROR("batches: cannot make %s: %s", s->bdir, strerror(errno));
        status = MOON_ERR_IO;
        goto err;
    }
    status = scan(s);
    if (status != MOON_OK) {
        goto err;
    }
    if (pthread_create(&s->thread, NULL, runner, s) != 0) {
        MOON_ERROR("batches: cannot start the runner thread");
        status = MOON_ERR_NO_RESOURCE;
        goto err;
    }
    s->thread_up = 1;
    MOON_INFO("batches: %zu batch(es) in %s", s->n, s->bdir);
    *batches_p = s;
    return MOON_OK;

err:
    moon_gw_batches_close(s);
    return status;
}

void moon_gw_batches_stop(moon_gw_batches_t *b)
{
    if (b == NULL) {
        return;
    }
    pthread_mutex_lock(&b->mu);
    b->stopping = 1;
    b->run_stop = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    if (b->thread_up) {
        pthread_join(b->thread, NULL);
        b->thread_up = 0;
    }
}

void moon_gw_batches_close(moon_gw_batches_t *b)
{
    if (b == NULL) {
        return;
    }
    moon_gw_batches_stop(b);
    for (size_t i = 0; i < b->n; i++) {
        cJSON_Delete(b->items[i]->metadata);
        moon_free(b->items[i]);
    }
    moon_free(b->items);
    moon_gw_files_close(b->files);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    moon_free(b->data_dir);
    moon_free(b->bdir);
    moon_free(b->model_path);
    moon_free(b->model_name);
    moon_free(b->fingerprint);
    moon_free(b);
}

/* ---- HTTP ------------------------------------------------------------------------------ */

int moon_gw_batches_route(const char *url)
{
    return strcmp(url, "/v1/files") == 0 || strncmp(url, "/v1/files/", 10) == 0 ||
           strcmp(url, "/v1/batches") == 0 || strncmp(url, "/v1/batches/", 12) == 0;
}

uint64_t moon_gw_batches_body_limit(const moon_gw_batches_t *b, const char *url,
                                    uint64_t dflt_bytes)
{
    return b != NULL && strcmp(url, "/v1/files") == 0 ? b->cfg.file_limit_bytes : dflt_bytes;
}

static const char *const JSON_TYPE = "application/json";

static char *error_out(int http, const char *code, const char *param, int *http_p,
                       const char **type_p, size_t *len_p, const char *fmt, ...) MOON_PRINTF(7, 8);

/* An OpenAI error object, logged. */
static char *error_out(int http, const char *code, const char *param, int *http_p,
                       const char **type_p, size_t *len_p, const char *fmt, ...)
{
    moon_gw_error_t err;
    va_list         ap;
    char            msg[sizeof(err.message)];
    char           *json;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    moon_gw_error_set(&err, http, code, param, "%s", msg);
    MOON_LOG_LIMITED(MOON_LOG_INFO, "batches: %d: %s", http, err.message);
    json    = moon_gw_error_json(&err);
    *http_p = http;
    *type_p = JSON_TYPE;
    *len_p  = json != NULL ? strlen(json) : 0;
    return json;
}

static char *ok_json(char *json, size_t len, int *http_p, const char **type_p, size_t *len_p)
{
    *http_p = 200;
    *type_p = JSON_TYPE;
    *len_p  = len;
    return json;
}

/* An id in a path: letters, digits, '-' and '_', under 64 bytes. */
static int id_ok(const char *id, size_t n)
{
    if (n == 0 || n >= 64) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_')) {
            return 0;
        }
    }
    return 1;
}

static char *files_upload(moon_gw_batches_t *s, const char *ctype, const char *body, size_t len,
                          int *http_p, const char **type_p, size_t *len_p)
{
    moon_gw_part_t        parts[MOON_GW_MULTIPART_MAX];
    unsigned              n = 0;
    const char           *why;
    const moon_gw_part_t *file = NULL, *purpose = NULL;
    moon_gw_file_info_t   info;
    char                  purp[32];
    int                   e = 0;
    moon_status_t         status;
    size_t                jl = 0;
    char                 *json;

    if (moon_gw_multipart_parse(ctype, body, len, parts, MOON_GW_MULTIPART_MAX, &n, &why) !=
        MOON_OK) {
        return error_out(400, NULL, NULL, http_p, type_p, len_p, "%s", why);
    }
    for (unsigned i = 0; i < n; i++) {
        if (strcmp(parts[i].name, "file") == 0) {
            file = &parts[i];
        } else if (strcmp(parts[i].name, "purpose") == 0) {
            purpose = &parts[i];
        }
    }
    if (purpose == NULL) {
        return error_out(400, NULL, "purpose", http_p, type_p, len_p, "%s",
                         "Missing required parameter: 'purpose'.");
    }
    snprintf(purp, sizeof(purp), "%.*s", (int)MOON_MIN(purpose->len, sizeof(purp) - 1),
             purpose->data);
    if (strcmp(purp, "batch") != 0) {
        return error_out(400, NULL, "purpose", http_p, type_p, len_p,
                         "'purpose' must be 'batch' here (got '%.31s')", purp);
    }
    if (file == NULL || !file->has_filename) {
        return error_out(400, NULL, "file", http_p, type_p, len_p, "%s",
                         "Missing required parameter: 'file' (a file part with a filename).");
    }
    if (moon_gw_utf8_valid_len(file->data, file->len) != file->len) {
        return error_out(400, "invalid_file", "file", http_p, type_p, len_p, "%s",
                         "the file is not valid UTF-8 (a batch input is JSON Lines)");
    }
    status = moon_gw_files_put(s->files, file->filename, purp, file->data, file->len, &info, &e);
    if (status != MOON_OK) {
        int full = e == ENOSPC || e == EDQUOT || e == EFBIG; /* the disk, a quota, a limit */
        return error_out(full ? 507 : 500, full ? "storage_full" : NULL, NULL, http_p, type_p,
                         len_p, "the file could not be stored: %s",
                         e != 0 ? strerror(e) : moon_status_str(status));
    }
    MOON_INFO("batches: file %s stored (%s, %llu bytes)", info.id, info.filename,
              (unsigned long long)info.bytes);
    json = moon_gw_file_json(&info, &jl);
    return json != NULL ? ok_json(json, jl, http_p, type_p, len_p) : NULL;
}

static char *files_route(moon_gw_batches_t *s, const char *method, const char *url,
                         const char *ctype, const char *body, size_t len, int *http_p,
                         const char **type_p, size_t *len_p)
{
    const char         *rest = url + 9; /* after /v1/files */
    const char         *slash;
    char                id[64];
    size_t              idn, jl = 0;
    moon_gw_file_info_t info;
    char               *json;
    int                 get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;

    if (*rest == '\0') {
        if (strcmp(method, "POST") == 0) {
            return files_upload(s, ctype, body, len, http_p, type_p, len_p);
        }
        if (get) {
            json = moon_gw_files_list_json(s->files, NULL, &jl);
            return json != NULL ? ok_json(json, jl, http_p, type_p, len_p) : NULL;
        }
        return error_out(405, NULL, NULL, http_p, type_p, len_p, "method %s is not allowed here",
                         method);
    }
    rest++;
    slash = strchr(rest, '/');
    idn   = slash != NULL ? (size_t)(slash - rest) : strlen(rest);
    if (!id_ok(rest, idn) || (slash != NULL && strcmp(slash, "/content") != 0)) {
        return error_out(404, NULL, NULL, http_p, type_p, len_p, "no route %.100s", url);
    }
    memcpy(id, rest, idn);
    id[idn] = '\0';
    if (moon_gw_files_get(s->files, id, &info) != MOON_OK) {
        return error_out(404, NULL, "id", http_p, type_p, len_p, "No such File object: %s", id);
    }
    if (slash != NULL) {
        char  *data = NULL;
        size_t n    = 0;
        if (!get) {
            return error_out(405, NULL, NULL, http_p, type_p, len_p,
                             "method %s is not allowed here", method);
        }
        if (moon_gw_files_read(s->files, id, &data, &n) != MOON_OK) {
            return error_out(500, NULL, NULL, http_p, type_p, len_p,
                             "the file %s could not be read", id);
        }
        *http_p = 200;
        *type_p = "application/octet-stream";
        *len_p  = n;
        return data;
    }
    if (get) {
        json = moon_gw_file_json(&info, &jl);
        return json != NULL ? ok_json(json, jl, http_p, type_p, len_p) : NULL;
    }
    if (strcmp(method, "DELETE") == 0) {
        moon_gw_files_delete(s->files, id);
        MOON_INFO("batches: file %s deleted", id);
        json = moon_malloc(128);
        if (json != NULL) {
            jl = (size_t)snprintf(json, 128, "{\"id\":\"%s\",\"object\":\"file\",\"deleted\":true}",
                                  id);
        }
        return json != NULL ? ok_json(json, jl, http_p, type_p, len_p) : NULL;
    }
    return error_out(405, NULL, NULL, http_p, type_p, len_p, "method %s is not allowed here",
                     method);
}

static char *batch_create(moon_gw_batches_t *s, const char *body, size_t len, int *http_p,
                          const char **type_p, size_t *len_p)
{
    cJSON              *root = NULL;
    const char         *why = NULL, *fid = NULL, *ep = NULL, *win = NULL;
    char                param[64];
    const cJSON        *md;
    moon_gw_file_info_t info;
    batch_t            *bt;
    struct timespec     ts;
    uint64_t            seed[2];
    char               *json;
    size_t              jl = 0;

    if (moon_gw_json_parse_strict(body, len, &root, &why, param, sizeof(param)) != MOON_OK ||
        !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return error_out(400, NULL, NULL, http_p, type_p, len_p,
                         "the body must be a JSON object (%s)", why != NULL ? why : "not one");
    }
    if (moon_gw_json_str(root, "input_file_id", &fid) != 1) {
        cJSON_Delete(root);
        return error_out(400, NULL, "input_file_id", http_p, type_p, len_p, "%s",
                         "Missing required parameter: 'input_file_id' (a string).");
    }
    if (moon_gw_json_str(root, "endpoint", &ep) != 1 ||
        (strcmp(ep, "/v1/completions") != 0 && strcmp(ep, "/v1/chat/completions") != 0)) {
        cJSON_Delete(root);
        return error_out(400, NULL, "endpoint", http_p, type_p, len_p, "%s",
                         "'endpoint' must be '/v1/completions' or '/v1/chat/completions'.");
    }
    if (moon_gw_json_str(root, "completion_window", &win) != 1 || strcmp(win, "24h") != 0) {
        cJSON_Delete(root);
        return error_out(400, NULL, "completion_window", http_p, type_p, len_p, "%s",
                         "'completion_window' must be '24h'.");
    }
    md = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    if (md != NULL && !cJSON_IsNull(md) && (!cJSON_IsObject(md) || cJSON_GetArraySize(md) > 16)) {
        cJSON_Delete(root);
        return error_out(400, NULL, "metadata", http_p, type_p, len_p, "%s",
                         "'metadata' must be an object of at most 16 keys.");
    }
    if (moon_gw_files_get(s->files, fid, &info) != MOON_OK) {
        json = error_out(404, NULL, "input_file_id", http_p, type_p, len_p,
                         "No such File object: %.64s", fid);
        cJSON_Delete(root);
        return json;
    }
    if (strcmp(info.purpose, "batch") != 0) {
        json = error_out(400, NULL, "input_file_id", http_p, type_p, len_p,
                         "the file %s has purpose '%s', not 'batch'", info.id, info.purpose);
        cJSON_Delete(root);
        return json;
    }
    bt = moon_calloc(1, sizeof(*bt));
    if (bt == NULL) {
        cJSON_Delete(root);
        return NULL;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&s->mu);
    seed[0] = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    seed[1] = ++s->counter ^ ((uint64_t)getpid() << 32);
    snprintf(bt->id, sizeof(bt->id), "batch_%016llx%08llx",
             (unsigned long long)moon_hash_bytes(seed, sizeof(seed)),
             (unsigned long long)(moon_hash_bytes_seeded(seed, sizeof(seed), 3) & 0xffffffffu));
    memcpy(bt->input_file_id, info.id, sizeof(info.id));
    moon_gw_utf8_copy(bt->endpoint, sizeof(bt->endpoint), ep);
    bt->state      = ST_VALIDATING;
    bt->created_at = (int64_t)ts.tv_sec;
    bt->expires_at = bt->created_at + WINDOW_S;
    bt->metadata   = md != NULL && cJSON_IsObject(md) ? cJSON_Duplicate(md, 1) : NULL;
    if (persist(s, bt) != MOON_OK || items_add(s, bt) != MOON_OK) {
        pthread_mutex_unlock(&s->mu);
        cJSON_Delete(bt->metadata);
        moon_free(bt);
        cJSON_Delete(root);
        return error_out(500, NULL, NULL, http_p, type_p, len_p, "%s",
                         "the batch could not be saved (disk full?)");
    }
    MOON_INFO("batches: %s created on %s (%s)", bt->id, bt->input_file_id, bt->endpoint);
    json = batch_text(bt, &jl);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    cJSON_Delete(root);
    return json != NULL ? ok_json(json, jl, http_p, type_p, len_p) : NULL;
}

static char *batch_list(moon_gw_batches_t *s, int *http_p, const char **type_p, size_t *len_p)
{
    moon_gw_buf_t buf;
    char         *text = NULL;
    size_t        jl   = 0;

    moon_gw_buf_init(&buf);
    moon_gw_buf_puts(&buf, "{\"object\":\"list\",\"data\":[");
    pthread_mutex_lock(&s->mu);
    for (size_t i = s->n; i-- > 0;) {
        char *one = batch_text(s->items[i], NULL);
        if (one == NULL) {
            buf.failed = 1;
            break;
        }
        moon_gw_buf_puts(&buf, i + 1 == s->n ? "" : ",");
        moon_gw_buf_puts(&buf, one);
        moon_free(one);
    }
    if (s->n > 0) {
        moon_gw_buf_printf(&buf, "],\"first_id\":\"%s\",\"last_id\":\"%s\",\"has_more\":false}",
                           s->items[s->n - 1]->id, s->items[0]->id);
    } else {
        moon_gw_buf_puts(&buf, "],\"first_id\":null,\"last_id\":null,\"has_more\":false}");
    }
    pthread_mutex_unlock(&s->mu);
    if (moon_gw_buf_take(&buf, &text, &jl) != MOON_OK) {
        return NULL;
    }
    return ok_json(text, jl, http_p, type_p, len_p);
}

static char *batches_route(moon_gw_batches_t *s, const char *method, const char *url,
                           const char *body, size_t len, int *http_p, const char **type_p,
                           size_t *len_p)
{
    const char *rest = url + 11; /* after /v1/batches */
    const char *slash;
    char        id[64];
    size_t      idn, jl = 0;
    batch_t    *bt;
    char       *json;
    int         get  = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    int         post = strcmp(method, "POST") == 0;

    if (*rest == '\0') {
        if (post) {
            return batch_create(s, body, len, http_p, type_p, len_p);
        }
        if (get) {
            return batch_list(s, http_p, type_p, len_p);
        }
        return error_out(405, NULL, NULL, http_p, type_p, len_p, "method %s is not allowed here",
                         method);
    }
    rest++;
    slash = strchr(rest, '/');
    idn   = slash != NULL ? (size_t)(slash - rest) : strlen(rest);
    if (!id_ok(rest, idn) || (slash != NULL && strcmp(slash, "/cancel") != 0)) {
        return error_out(404, NULL, NULL, http_p, type_p, len_p, "no route %.100s", url);
    }
    if (slash != NULL ? !post : !get) {
        return error_out(405, NULL, NULL, http_p, type_p, len_p, "method %s is not allowed here",
                         method);
    }
    memcpy(id, rest, idn);
    id[idn] = '\0';
    pthread_mutex_lock(&s->mu);
    bt = find_batch(s, id);
    if (bt == NULL) {
        pthread_mutex_unlock(&s->mu);
        return error_out(404, NULL, "batch_id", http_p, type_p, len_p, "No such Batch object: %s",
                         id);
    }
    if (slash != NULL) {
        if (bt->state == ST_VALIDATING || bt->state == ST_IN_PROGRESS) {
            set_state(s, bt, ST_CANCELLING);
            if (s->running == bt) {
                s->run_stop = 1; /* the engine stops sending; its requests in flight finish */
            }
            pthread_cond_broadcast(&s->cv);
        } else if (bt->state != ST_CANCELLING && bt->state != ST_CANCELLED) {
            char st[16];
            snprintf(st, sizeof(st), "%s", state_names[bt->state]);
            pthread_mutex_unlock(&s->mu);
            return error_out(400, NULL, NULL, http_p, type_p, len_p,
                             "Cannot cancel a batch with status '%s'.", st);
        }
    }
    json = batch_text(bt, &jl);
    pthread_mutex_unlock(&s->mu);
    return json != NULL ? ok_json(json, jl, http_p, type_p, len_p) : NULL;
}

char *moon_gw_batches_handle(moon_gw_batches_t *b, const char *method, const char *url,
                             const char *content_type, const char *body, size_t len, int *http_p,
                             const char **type_p, size_t *len_p)
{
    if (body == NULL) {
        body = "";
        len  = 0;
    }
    if (strncmp(url, "/v1/files", 9) == 0) {
        return files_route(b, method, url, content_type, body, len, http_p, type_p, len_p);
    }
    return batches_route(b, method, url, body, len, http_p, type_p, len_p);
}
