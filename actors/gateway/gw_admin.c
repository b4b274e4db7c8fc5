/* actors/gw_admin.c - /v1/admin/weights (gw_admin.h). A push runs on a
 * thread of its own that waits for the broadcaster's outcome in short
 * slices (so a stopping gateway is not held up) and then wakes the
 * connection. */
#include "gw_admin.h"

#include "gw_json.h"
#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/weights_msgs.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define ADMIN_PUSH_TIMEOUT_NS (600ull * 1000000000ull)
#define ADMIN_SLICE_NS 100000000ull

struct moon_gw_admin {
    const char            *key;
    moon_weights_client_t *client;
    atomic_int             busy; /* a push is under way (its thread clears it) */
    atomic_int             stopping;
};

struct moon_gw_admin_job {
    moon_gw_admin_t *admin;
    pthread_t        thread;
    char             path[4096];
    uint64_t         version;
    uint32_t         flags;
    void (*done)(void *arg);
    void      *arg;
    atomic_int ready;
    int        http;
    char      *json;
    size_t     len;
};

moon_status_t moon_gw_admin_create(const char *key, moon_weights_client_t *client,
                                   moon_gw_admin_t **admin_p)
{
    moon_gw_admin_t *a;

    if (key == NULL || key[0] == '\0' || client == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    a = moon_calloc(1, sizeof(*a));
    if (a == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    a->key    = key;
    a->client = client;
    atomic_init(&a->busy, 0);
    atomic_init(&a->stopping, 0);
    *admin_p = a;
    return MOON_OK;
}

void moon_gw_admin_destroy(moon_gw_admin_t *a)
{
    if (a == NULL) {
        return;
    }
    atomic_store(&a->stopping, 1);
    /* a push thread answers within a slice once stopping is set */
    for (int i = 0; i < 500 && atomic_load(&a->busy); i++) {
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    moon_free(a);
}

int moon_gw_admin_authorised(const moon_gw_admin_t *a, const char *got)
{
    size_t   n = strlen(a->key);
    unsigned diff;

    if (got == NULL || strncmp(got, "Bearer ", 7) != 0 || strlen(got + 7) != n) {
        return 0;
    }
    got += 7;
    diff = 0;
    for (size_t i = 0; i < n; i++) {
        diff |= (unsigned)(got[i] ^ a->key[i]); /* the same time whatever matches */
    }
    return diff == 0;
}

static char *print(cJSON *o, size_t *len_p)
{
    char *out = o != NULL ? moon_gw_json_print_wrapped(o, "", "", len_p) : NULL;

    cJSON_Delete(o);
    return out;
}

static char *error_json(moon_gw_error_t *err, size_t *len_p)
{
    char *out = moon_gw_error_json(err);

    *len_p = out != NULL ? strlen(out) : 0;
    return out;
}

static const char *phase_name(uint32_t phase)
{
    static const char *const names[] = {"idle",      "offering", "streaming", "installing",
                                        "switching", "fetching", "reading"};
    return phase < MOON_ARRAY_SIZE(names) ? names[phase] : "?";
}

char *moon_gw_admin_get(moon_gw_admin_t *a, int *http_p, size_t *len_p)
{
    moon_weights_state_info_t *st = moon_malloc(sizeof(*st));
    moon_gw_error_t            err;
    cJSON                     *o, *arr;
    char                      *out;

    if (st == NULL || moon_weights_client_state(a->client, 5000000000ull, st) != MOON_OK) {
        moon_free(st);
        moon_gw_error_set(&err, 503, NULL, NULL, "the weight broadcaster did not answer");
        *http_p = 503;
        return error_json(&err, len_p);
    }
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "weights.state");
    cJSON_AddNumberToObject(o, "version", (double)st->version);
    cJSON_AddStringToObject(o, "phase", phase_name(st->phase));
    cJSON_AddNumberToObject(o, "push_version", (double)st->push_version);
    cJSON_AddNumberToObject(o, "pushes", st->n_pushes);
    cJSON_AddNumberToObject(o, "failed", st->n_failed);
    cJSON_AddStringToObject(o, "last_error", st->last_error);
    arr = cJSON_AddArrayToObject(o, "instances");
    for (uint32_t i = 0; arr != NULL && i < st->n_inst; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "role", st->inst[i].role == 0 ? "prefill" : "decode");
        cJSON_AddNumberToObject(x, "index", st->inst[i].index);
        cJSON_AddNumberToObject(x, "version", (double)st->inst[i].version);
        cJSON_AddItemToArray(arr, x);
    }
    moon_free(st);
    out     = print(o, len_p);
    *http_p = out != NULL ? 200 : 500;
    return out;
}

static int http_of(moon_status_t status)
{
    switch (status) {
    case MOON_ERR_NO_RESOURCE:
        return 409;
    case MOON_ERR_INVALID_PARAM:
    case MOON_ERR_UNSUPPORTED:
    case MOON_ERR_CORRUPT:
        return 400;
    case MOON_ERR_NOT_FOUND:
        return 404;
    case MOON_ERR_TIMED_OUT:
        return 503;
    default:
        return moon_status_is_peer(status) ? 503 : 500;
    }
}

static void answer(moon_gw_admin_job_t *j, const moon_weights_result_t *r, moon_status_t status)
{
    moon_gw_error_t err;
    cJSON          *o;

    if (status != MOON_OK || r->status != MOON_OK) {
        moon_status_t s = status != MOON_OK ? status : r->status;
        j->http         = http_of(s);
        moon_gw_error_set(&err, j->http, s == MOON_ERR_NO_RESOURCE ? "push_in_progress" : NULL,
                          NULL, "weight push failed: %s (%s)",
                          status != MOON_OK ? "no answer from the broadcaster" : r->message,
                          moon_status_str(s));
        j->json = error_json(&err, &j->len);
        return;
    }
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "weights.push");
    cJSON_AddNumberToObject(o, "version", (double)r->version);
    cJSON_AddNumberToObject(o, "old_version", (double)r->old_version);
    cJSON_AddNumberToObject(o, "total_bytes", (double)r->total_bytes);
    cJSON_AddNumberToObject(o, "moved_bytes", (double)r->moved_bytes);
    cJSON_AddNumberToObject(o, "skipped_bytes", (double)r->skipped_bytes);
    cJSON_AddNumberToObject(o, "chunks", r->n_chunks);
    cJSON_AddNumberToObject(o, "chunks_moved", r->n_moved);
    cJSON_AddNumberToObject(o, "instances", r->n_instances);
    cJSON_AddNumberToObject(o, "stage_s", r->stage_s);
    cJSON_AddNumberToObject(o, "switch_s", r->switch_s);
    j->json = print(o, &j->len);
    j->http = j->json != NULL ? 200 : 500;
}

static void *push_thread(void *arg)
{
    moon_gw_admin_job_t  *j = arg;
    moon_gw_admin_t      *a = j->admin;
    moon_weights_result_t r;
    uint64_t              req = 0, waited = 0;
    moon_status_t         status;

    memset(&r, 0, sizeof(r));
    status = moon_weights_push_file(a->client, j->path, j->version, j->flags, &req);
    while (status == MOON_OK) {
        status = moon_weights_client_next(a->client, ADMIN_SLICE_NS, &r);
        if (status == MOON_OK && r.req == req) {
            break;
        }
        if (status == MOON_OK) {
            continue; /* an outcome nobody waits for any more */
        }
        waited += ADMIN_SLICE_NS;
        status = atomic_load(&a->stopping) || waited >= ADMIN_PUSH_TIMEOUT_NS ? MOON_ERR_TIMED_OUT
                                                                              : MOON_OK;
    }
    answer(j, &r, status);
    MOON_INFO("gateway: weight push of %s: %d %s", j->path, j->http,
              status == MOON_OK && r.status == MOON_OK ? "served" : r.message);
    atomic_store(&j->ready, 1);
    j->done(j->arg);
    /* release: the job is answered; pairs with the acquire in destroy */
    atomic_store(&a->busy, 0);
    return NULL;
}

moon_gw_admin_job_t *moon_gw_admin_post(moon_gw_admin_t *a, const char *body, size_t len,
                                        void (*done)(void *arg), void *arg, moon_gw_error_t *err)
{
    cJSON               *o = cJSON_ParseWithLength(body, len);
    cJSON               *model, *version, *full;
    moon_gw_admin_job_t *j;

    model   = cJSON_GetObjectItemCaseSensitive(o, "model");
    version = cJSON_GetObjectItemCaseSensitive(o, "version");
    full    = cJSON_GetObjectItemCaseSensitive(o, "full");
    if (!cJSON_IsObject(o) || !cJSON_IsString(model) || model->valuestring[0] == '\0' ||
        strlen(model->valuestring) >= sizeof(j->path) ||
        (version != NULL && (!cJSON_IsNumber(version) || version->valuedouble < 0)) ||
        (full != NULL && !cJSON_IsBool(full))) {
        cJSON_Delete(o);
        moon_gw_error_set(err, 400, NULL, "model",
                          "the body must be {\"model\": \"NEW.gguf\"} with an optional "
                          "\"version\" (a number) and \"full\" (a boolean)");
        return NULL;
    }
    j = moon_calloc(1, sizeof(*j));
    if (j == NULL) {
        cJSON_Delete(o);
        moon_gw_error_set(err, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    snprintf(j->path, sizeof(j->path), "%s", model->valuestring);
    j->version = version != NULL ? (uint64_t)version->valuedouble : 0;
    j->flags   = cJSON_IsTrue(full) ? MOON_WEIGHTS_F_FULL : 0;
    j->admin   = a;
    j->done    = done;
    j->arg     = arg;
    atomic_init(&j->ready, 0);
    cJSON_Delete(o);
    int idle = 0;
    if (atomic_load(&a->stopping) || !atomic_compare_exchange_strong(&a->busy, &idle, 1)) {
        moon_free(j);
        moon_gw_error_set(err, 409, "push_in_progress", NULL,
                          "a weight push is already under way: retry when it is done");
        return NULL;
    }
    if (pthread_create(&j->thread, NULL, push_thread, j) != 0) {
        atomic_store(&a->busy, 0);
        moon_free(j);
        moon_gw_error_set(err, 500, NULL, NULL, "no thread for the push");
        return NULL;
    }
    return j;
}

int moon_gw_admin_job_ready(moon_gw_admin_job_t *j)
{
    return atomic_load(&j->ready);
}

char *moon_gw_admin_job_take(moon_gw_admin_job_t *j, int *http_p, size_t *len_p)
{
    char *out;

    pthread_join(j->thread, NULL);
    out     = j->json;
    *http_p = j->http;
    *len_p  = j->len;
    moon_free(j);
    return out;
}
