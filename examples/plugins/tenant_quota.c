/* examples/plugins/tenant_quota.c - a request filter: at most N tokens per
 * minute per API key (prompt + max_tokens, counted when a request is let
 * through). Past the quota the request gets 429 with Retry-After: the
 * seconds until its key's minute ends.
 *
 *   moonlet serve --model M.gguf --api-key ... \
 *       --plugin build/examples/plugins/libtenant_quota.so:tokens_per_min=2000
 *
 * ARGS: tokens_per_min=N[,window_s=S][,fail=open|closed] (defaults 10000,
 * 60, closed). The actor "quota" runs on rank 0, beside the conductor; time
 * is the conductor's clock (virtual under moonlet replay --sim). Keys past
 * QUOTA_KEYS share the last slot's budget. */
#include "moonlet/plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUOTA_KEYS 256u

typedef struct {
    char     key[64];
    uint64_t window_start_ns;
    uint64_t used;
} quota_key_t;

typedef struct {
    uint64_t tokens_per_min;
    uint64_t window_ns;
} quota_args_t;

typedef struct {
    quota_args_t a;
    quota_key_t  keys[QUOTA_KEYS];
    uint32_t     n_keys;
} quota_t;

static quota_key_t *find(quota_t *q, const char *key)
{
    for (uint32_t i = 0; i < q->n_keys; i++) {
        if (strncmp(q->keys[i].key, key, sizeof(q->keys[i].key) - 1) == 0) {
            return &q->keys[i];
        }
    }
    if (q->n_keys < QUOTA_KEYS) {
        quota_key_t *k = &q->keys[q->n_keys++];
        snprintf(k->key, sizeof(k->key), "%s", key);
        return k;
    }
    return &q->keys[QUOTA_KEYS - 1];
}

static moon_status_t quota_on_filter(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    quota_t                        *q    = moon_actor_state(self);
    const moon_plugin_filter_req_t *r    = (const void *)msg;
    const char                     *key  = r->key.n ? MOON_SPAN_PTR(r, r->key) : "";
    quota_key_t                    *k    = find(q, key);
    uint64_t                        cost = (uint64_t)r->n_prompt + r->max_tokens;
    char                            why[160];

    if (r->now_ns - k->window_start_ns >= q->a.window_ns || k->window_start_ns == 0) {
        k->window_start_ns = r->now_ns;
        k->used            = 0;
    }
    if (k->used + cost > q->a.tokens_per_min) {
        uint64_t left_ns = k->window_start_ns + q->a.window_ns - r->now_ns;
        uint32_t retry   = (uint32_t)((left_ns + 999999999ull) / 1000000000ull);
        snprintf(why, sizeof(why),
                 "tenant quota: %llu of %llu tokens per minute used, this request needs %llu",
                 (unsigned long long)k->used, (unsigned long long)q->a.tokens_per_min,
                 (unsigned long long)cost);
        return moon_plugin_answer(self, r, MOON_PLUGIN_REJECT, 429, retry ? retry : 1, why);
    }
    k->used += cost;
    return moon_plugin_answer(self, r, MOON_PLUGIN_ACCEPT, 0, 0, NULL);
}

static moon_status_t quota_init(moon_actor_t *self, const void *args)
{
    quota_t *q = moon_actor_state(self);

    q->a = *(const quota_args_t *)args;
    return MOON_OK;
}

static const moon_actor_ops_t quota_ops = {
    .name        = "quota",
    .state_bytes = sizeof(quota_t),
    .init        = quota_init,
    .on_msg      = {[MOON_MSG_PLUGIN_FILTER] = quota_on_filter},
};

static moon_status_t quota_plugin_init(moon_plugin_host_t *host, const char *args)
{
    quota_args_t         qa    = {.tokens_per_min = 10000, .window_ns = 60000000000ull};
    moon_plugin_filter_t f     = {.actor = "quota", .deadline_ms = 200, .fail_open = 0};
    moon_plugin_actor_t  actor = {
         .name = "quota", .ops = &quota_ops, .args = &qa, .args_bytes = sizeof(qa), .place = "0"};
    char          copy[256], *save = NULL;
    moon_status_t status;

    snprintf(copy, sizeof(copy), "%s", args);
    for (char *opt = strtok_r(copy, ",", &save); opt != NULL; opt = strtok_r(NULL, ",", &save)) {
        if (strncmp(opt, "tokens_per_min=", 15) == 0) {
            qa.tokens_per_min = strtoull(opt + 15, NULL, 10);
        } else if (strncmp(opt, "window_s=", 9) == 0) {
            qa.window_ns = strtoull(opt + 9, NULL, 10) * 1000000000ull;
        } else if (strcmp(opt, "fail=open") == 0 || strcmp(opt, "fail=closed") == 0) {
            f.fail_open = strcmp(opt, "fail=open") == 0;
        } else {
            MOON_ERROR("tenant quota: unknown option '%s' (tokens_per_min=N, window_s=S, "
                       "fail=open|closed)",
                       opt);
            return MOON_ERR_INVALID_PARAM;
        }
    }
    if (qa.tokens_per_min == 0 || qa.window_ns == 0) {
        MOON_ERROR("tenant quota: tokens_per_min and window_s must be > 0");
        return MOON_ERR_INVALID_PARAM;
    }
    status = moon_plugin_register_actor(host, &actor);
    return status == MOON_OK ? moon_plugin_register_filter(host, &f) : status;
}

MOON_PLUGIN_DEFINE("tenant-quota", quota_plugin_init, NULL);
