/* examples/plugins/audit_log.c - an audit-log actor: one JSON line per
 * finished (or refused) request: id, API key, tokens, timings, finish reason.
 *
 *   moonlet serve --model M.gguf --plugin build/examples/plugins/libaudit_log.so:audit.jsonl
 *
 * ARGS: the file to append to ("-" or none: stderr). The actor "audit" runs on
 * rank 0 (--place audit=RANKS moves it) and observes FIRST_TOKEN (its TTFT),
 * FINISHED and REJECTED. A line:
 *   {"id":7,"client":"0x...","key":"tenant-a","prompt_tokens":5,
 *    "completion_tokens":16,"ttft_ms":3.1,"duration_ms":40.2,"finish":"length"}
 * Handlers write with stdio (a few hundred bytes a request, flushed per line);
 * an audit log that must never slow the cluster would hand lines to a thread. */
#include "moonlet/plugin.h"

#include <stdio.h>
#include <string.h>

#define AUDIT_TTFTS 1024u /* first-token times of requests in flight, by hash */

typedef struct {
    moon_addr_t client;
    uint64_t    request_id;
    uint64_t    ttft_ns;
} audit_ttft_t;

typedef struct {
    FILE        *out;
    int          own; /* out is a file we opened */
    uint64_t     n_lines;
    audit_ttft_t ttft[AUDIT_TTFTS];
} audit_t;

static char audit_path[256];

static uint32_t slot_of(moon_addr_t client, uint64_t id)
{
    return (uint32_t)(((client ^ (id * 0x9e3779b97f4a7c15ull)) >> 17) % AUDIT_TTFTS);
}

/* The key as a JSON string body: printable ASCII kept, the rest dropped. */
static void json_text(FILE *f, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '"' || *s == '\\') {
            fputc('\\', f);
            fputc(*s, f);
        } else if (*s >= 0x20 && *s < 0x7f) {
            fputc(*s, f);
        }
    }
}

static moon_status_t audit_on_event(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    audit_t                   *a       = moon_actor_state(self);
    const moon_plugin_event_t *e       = (const void *)msg;
    audit_ttft_t              *t       = &a->ttft[slot_of(e->client, e->request_id)];
    const char                *key     = e->key.n ? MOON_SPAN_PTR(e, e->key) : "";
    const char                *why     = e->message.n ? MOON_SPAN_PTR(e, e->message) : "";
    double                     ttft_ms = -1.0;

    if (e->kind == MOON_PLUGIN_EV_FIRST_TOKEN) {
        *t = (audit_ttft_t){e->client, e->request_id, e->ttft_ns};
        return MOON_OK;
    }
    if (e->kind != MOON_PLUGIN_EV_FINISHED && e->kind != MOON_PLUGIN_EV_REJECTED) {
        return MOON_OK;
    }
    if (t->client == e->client && t->request_id == e->request_id) {
        ttft_ms   = (double)t->ttft_ns * 1e-6;
        t->client = MOON_ADDR_NONE;
    }
    fprintf(a->out, "{\"id\":%llu,\"client\":\"0x%llx\",\"key\":\"",
            (unsigned long long)e->request_id, (unsigned long long)e->client);
    json_text(a->out, key);
    fprintf(a->out,
            "\",\"prompt_tokens\":%u,\"completion_tokens\":%u,\"ttft_ms\":%.3f,"
            "\"duration_ms\":%.3f,\"finish\":\"",
            e->n_prompt, e->n_completion, ttft_ms,
            e->at_ns >= e->arrival_ns ? (double)(e->at_ns - e->arrival_ns) * 1e-6 : 0.0);
    json_text(a->out, e->kind == MOON_PLUGIN_EV_REJECTED ? "rejected" : why);
    if (e->kind == MOON_PLUGIN_EV_REJECTED) {
        fprintf(a->out, "\",\"http_status\":%u,\"reason\":\"", e->http_status);
        json_text(a->out, why);
    }
    fputs("\"}\n", a->out);
    fflush(a->out);
    a->n_lines++;
    return MOON_OK;
}

static moon_status_t audit_init(moon_actor_t *self, const void *args)
{
    audit_t *a = moon_actor_state(self);

    (void)args;
    a->out = stderr;
    if (audit_path[0] != '\0' && strcmp(audit_path, "-") != 0) {
        a->out = fopen(audit_path, "a");
        if (a->out == NULL) {
            MOON_ERROR("audit: cannot open %s", audit_path);
            return MOON_ERR_IO;
        }
        a->own = 1;
    }
    return MOON_OK;
}

static void audit_fini(moon_actor_t *self)
{
    audit_t *a = moon_actor_state(self);

    if (a->own) {
        fclose(a->out);
    }
}

static const moon_actor_ops_t audit_ops = {
    .name        = "audit",
    .state_bytes = sizeof(audit_t),
    .init        = audit_init,
    .fini        = audit_fini,
    .on_msg      = {[MOON_MSG_PLUGIN_EVENT] = audit_on_event},
};

static moon_status_t audit_plugin_init(moon_plugin_host_t *host, const char *args)
{
    moon_plugin_actor_t    actor = {.name = "audit", .ops = &audit_ops, .place = "0"};
    moon_plugin_observer_t obs   = {.actor  = "audit",
                                    .events = MOON_PLUGIN_EV_FIRST_TOKEN | MOON_PLUGIN_EV_FINISHED |
                                              MOON_PLUGIN_EV_REJECTED};
    moon_status_t          status;

    snprintf(audit_path, sizeof(audit_path), "%s", args);
    status = moon_plugin_register_actor(host, &actor);
    return status == MOON_OK ? moon_plugin_register_observer(host, &obs) : status;
}

MOON_PLUGIN_DEFINE("audit-log", audit_plugin_init, NULL);
