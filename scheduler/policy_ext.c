/* scheduler/policy_ext.c - policies of one's own (moon_sched_policy_register):
 * a small registry filled at start-up (main thread) and read by the
 * conductor's thread after, and the frame's placement for them: the pick
 * function chooses the instances, the shared predictors do the rest. */
#include "moonlet/sched_policy.h"
#include "moonlet/log.h"
#include "sched_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    sched_policy_ops_t      ops; /* first: policy->ops points here */
    moon_sched_policy_def_t def;
    char                    name[32];
    char                    doc[160];
} ext_t;

static ext_t    exts[MOON_SCHED_POLICY_EXT_MAX];
static uint32_t n_exts;

const sched_policy_ops_t *sched_ext_at(uint32_t i)
{
    return i < n_exts ? &exts[i].ops : NULL;
}

const sched_policy_ops_t *sched_ext_lookup(const char *name, size_t len)
{
    for (uint32_t i = 0; i < n_exts; i++) {
        if (strlen(exts[i].name) == len && strncmp(exts[i].name, name, len) == 0) {
            return &exts[i].ops;
        }
    }
    return NULL;
}

static int pick_ok(const sched_ctx_t *c, const moon_sched_pick_t *p)
{
    return p->prefill >= 0 && p->decode >= 0 && (uint32_t)p->prefill < c->view->n_inst &&
           (uint32_t)p->decode < c->view->n_inst && sched_is_prefill(c, (uint32_t)p->prefill) &&
           sched_is_decode(c, (uint32_t)p->decode) && (!c->colocated || p->prefill == p->decode);
}

static void ext_place(moon_sched_policy_t *policy, const sched_ctx_t *c, moon_sched_decision_t *d)
{
    const ext_t      *e = (const ext_t *)policy->ops;
    moon_sched_pick_t p = {-1, -1};
    moon_status_t     status;
    uint32_t          local;

    status = e->def.pick(e->def.arg, c->view, c->req, &p);
    if (status != MOON_OK || !pick_ok(c, &p)) {
        MOON_LOG_LIMITED(MOON_LOG_WARN,
                         "sched policy %s: pick %s (prefill %d, decode %d): placed as "
                         "least-loaded",
                         e->name, status != MOON_OK ? moon_status_str(status) : "not a candidate",
                         p.prefill, p.decode);
        sched_least_loaded_ops.place(policy, c, d);
        return;
    }
    local = sched_local_blocks(c, (uint32_t)p.prefill);
    sched_predict_prefill(c, (uint32_t)p.prefill, local,
                          c->req->store_blocks > local ? c->req->store_blocks - local : 0, -1, d);
    sched_set_decode(c, (uint32_t)p.decode, d);
}

static int name_ok(const char *name)
{
    size_t n = strlen(name);

    if (n == 0 || n >= sizeof(exts[0].name)) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_')) {
            return 0;
        }
    }
    return 1;
}

moon_status_t moon_sched_policy_register(const moon_sched_policy_def_t *def)
{
    ext_t *e;

    if (def == NULL || def->pick == NULL || def->name == NULL || !name_ok(def->name)) {
        MOON_ERROR("sched policy register: %s", def == NULL || def->name == NULL ? "no name"
                                                : def->pick == NULL
                                                    ? "no pick function"
                                                    : "a name is 1-31 of [a-z0-9_-]");
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; moon_sched_policy_name_at(i) != NULL; i++) {
        if (strcmp(moon_sched_policy_name_at(i), def->name) == 0) {
            MOON_ERROR("sched policy register: a policy called '%s' exists", def->name);
            return MOON_ERR_EXISTS;
        }
    }
    if (n_exts == MOON_SCHED_POLICY_EXT_MAX) {
        MOON_ERROR("sched policy register: %s: %u policies registered already", def->name,
                   MOON_SCHED_POLICY_EXT_MAX);
        return MOON_ERR_NO_RESOURCE;
    }
    e = &exts[n_exts];
    memset(e, 0, sizeof(*e));
    strcpy(e->name, def->name);
    snprintf(e->doc, sizeof(e->doc), "%s", def->doc != NULL ? def->doc : "");
    e->def       = *def;
    e->ops.name  = e->name;
    e->ops.doc   = e->doc;
    e->ops.place = ext_place;
    n_exts++;
    return MOON_OK;
}
