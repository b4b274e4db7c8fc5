/* cap_filter.c - an out-of-tree plugin: a filter that refuses requests
 * asking for more than CAP tokens (ARGS, default 32) with 400, and lowers
 * the temperature of the others to 0 (a changed parameter). */
#include "moonlet/plugin.h"

#include <stdlib.h>

static uint32_t cap = 32;

static moon_status_t cap_on_filter(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    const moon_plugin_filter_req_t *q = (const void *)msg;
    moon_plugin_verdict_t          *v;

    if (q->max_tokens > cap) {
        return moon_plugin_answer(self, q, MOON_PLUGIN_REJECT, 400, 0,
                                  "max_tokens over the deployment's cap");
    }
    v = moon_msg_new(MOON_MSG_PLUGIN_VERDICT, 8);
    if (v == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    v->token       = q->token;
    v->verdict     = MOON_PLUGIN_ACCEPT;
    v->temperature = 0.0f;
    moon_msg_set_str(v, &v->message, "");
    if (moon_send(self, msg->src, &v->hdr) != MOON_OK) {
        moon_msg_release(&v->hdr);
    }
    return MOON_OK;
}

static const moon_actor_ops_t cap_ops = {
    .name   = "cap",
    .on_msg = {[MOON_MSG_PLUGIN_FILTER] = cap_on_filter},
};

static moon_status_t cap_init(moon_plugin_host_t *host, const char *args)
{
    moon_plugin_actor_t  a = {.name = "cap", .ops = &cap_ops};
    moon_plugin_filter_t f = {.actor = "cap", .deadline_ms = 1000};
    moon_status_t        status;

    if (args[0] != '\0') {
        cap = (uint32_t)strtoul(args, NULL, 10);
    }
    status = moon_plugin_register_actor(host, &a);
    return status == MOON_OK ? moon_plugin_register_filter(host, &f) : status;
}

MOON_PLUGIN_DEFINE("cap", cap_init, NULL);
