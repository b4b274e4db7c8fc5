/* actors/plugin/plugin_host.c - loads plugins and keeps what they registered
 * (plugin_host.h). Plugin actors run with the plugin's ops table copied, its
 * init wrapped so that every incarnation (the first and each restart by its
 * supervisor) registers its names again. */
#define _GNU_SOURCE /* dlopen's RTLD_* on every libc */
#include "plugin_host.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/supervisor.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct moon_plugin_host {
    void                      *dl;
    const moon_plugin_entry_t *entry;
    char                       path[256];
};

typedef struct {
    char                    name[MOON_PLUGIN_NAME_MAX];
    moon_actor_ops_t        ops; /* the plugin's, init wrapped */
    const moon_actor_ops_t *orig;
    void                   *args; /* owned copy */
    size_t                  args_bytes;
    char                    place[128];
    uint32_t                max_restarts;
    uint64_t                window_ns;
    uint32_t                first_rank; /* the lowest rank it runs on: registers NAME too */
    moon_dist_t            *dist;
} pactor_t;

static struct {
    moon_plugin_host_t         plugins[MOON_PLUGIN_MAX];
    uint32_t                   n_plugins;
    pactor_t                   actors[MOON_PLUGIN_MAX_ACTORS];
    uint32_t                   n_actors;
    moon_plugin_filter_rec_t   filters[MOON_PLUGIN_MAX_FILTERS];
    uint32_t                   n_filters;
    moon_plugin_observer_rec_t observers[MOON_PLUGIN_MAX_OBSERVERS];
    uint32_t                   n_observers;
    char                       places[MOON_PLUGIN_MAX_ACTORS][192]; /* --place NAME=WHERE */
    uint32_t                   n_places;
    moon_runtime_t            *rt;
    moon_dist_t               *dist;
    moon_addr_t                sups[MOON_PLUGIN_MAX_ACTORS];
    uint32_t                   n_sups;
} g;

uint32_t moon_plugin_ev_mask_;

static int name_ok(const char *name)
{
    size_t n = name != NULL ? strlen(name) : 0;

    if (n == 0 || n >= MOON_PLUGIN_NAME_MAX) {
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

static const char *who(const moon_plugin_host_t *host)
{
    return host != NULL && host->entry != NULL && host->entry->name != NULL ? host->entry->name
                                                                            : "?";
}

/* ---- registration (plugin.h) --------------------------------------------------- */

moon_status_t moon_plugin_register_msgs(moon_plugin_host_t *host, const moon_msg_desc_t *descs)
{
    moon_status_t status;

    if (descs == NULL) {
        MOON_ERROR("plugin %s: register msgs: no table", who(host));
        return MOON_ERR_INVALID_PARAM;
    }
    for (const moon_msg_desc_t *d = descs; d->name != NULL; d++) {
        if (d->id < MOON_MSG_RANGE_PLUGIN_BASE || d->id >= MOON_MSG_RANGE_PLUGIN_END) {
            MOON_ERROR("plugin %s: message %s has id %u, outside the plugin range %u-%u of the "
                       "message-id map (declare the list with MOON_MSG_DECLARE_IN(LIST, PLUGIN, "
                       "END))",
                       who(host), d->name, d->id, MOON_MSG_RANGE_PLUGIN_BASE,
                       MOON_MSG_RANGE_PLUGIN_END - 1);
            return MOON_ERR_INVALID_PARAM;
        }
    }
    status = moon_msg_register(descs);
    if (status != MOON_OK) {
        MOON_ERROR("plugin %s: its message ids are taken (by another plugin?): %s", who(host),
                   moon_status_str(status));
    }
    return status;
}

moon_status_t moon_plugin_register_actor(moon_plugin_host_t *host, const moon_plugin_actor_t *a)
{
    pactor_t *pa;

    if (a == NULL || !name_ok(a->name) || a->ops == NULL) {
        MOON_ERROR("plugin %s: register actor: %s", who(host),
                   a == NULL || a->ops == NULL ? "no ops table" : "a name is 1-47 of [a-z0-9_-]");
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < g.n_actors; i++) {
        if (strcmp(g.actors[i].name, a->name) == 0) {
            MOON_ERROR("plugin %s: an actor called %s is registered already", who(host), a->name);
            return MOON_ERR_EXISTS;
        }
    }
    if (g.n_actors == MOON_PLUGIN_MAX_ACTORS) {
        MOON_ERROR("plugin %s: %s: %u plugin actors registered already", who(host), a->name,
                   MOON_PLUGIN_MAX_ACTORS);
        return MOON_ERR_NO_RESOURCE;
    }
    pa = &g.actors[g.n_actors];
    memset(pa, 0, sizeof(*pa));
    if (a->args_bytes > 0) {
        pa->args = moon_malloc(a->args_bytes);
        if (pa->args == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        memcpy(pa->args, a->args, a->args_bytes);
    }
    snprintf(pa->name, sizeof(pa->name), "%s", a->name);
    snprintf(pa->place, sizeof(pa->place), "%s", a->place != NULL ? a->place : "0");
    pa->orig         = a->ops;
    pa->args_bytes   = a->args_bytes;
    pa->max_restarts = a->max_restarts ? a->max_restarts : 5;
    pa->window_ns    = a->window_ns ? a->window_ns : 10000000000ull;
    g.n_actors++;
    return MOON_OK;
}

moon_status_t moon_plugin_register_policy(moon_plugin_host_t            *host,
                                          const moon_sched_policy_def_t *def)
{
    moon_status_t status = moon_sched_policy_register(def);

    if (status != MOON_OK) {
        MOON_ERROR("plugin %s: its policy was not registered: %s", who(host),
                   moon_status_str(status));
    }
    return status;
}

moon_status_t moon_plugin_register_filter(moon_plugin_host_t *host, const moon_plugin_filter_t *f)
{
    moon_plugin_filter_rec_t *r;

    if (f == NULL || !name_ok(f->actor)) {
        MOON_ERROR("plugin %s: register filter: no actor name", who(host));
        return MOON_ERR_INVALID_PARAM;
    }
    if (g.n_filters == MOON_PLUGIN_MAX_FILTERS) {
        MOON_ERROR("plugin %s: %u filters registered already", who(host), MOON_PLUGIN_MAX_FILTERS);
        return MOON_ERR_NO_RESOURCE;
    }
    r = &g.filters[g.n_filters++];
    snprintf(r->actor, sizeof(r->actor), "%s", f->actor);
    r->deadline_ms = f->deadline_ms ? f->deadline_ms : 100;
    r->fail_open   = f->fail_open != 0;
    return MOON_OK;
}

moon_status_t moon_plugin_register_observer(moon_plugin_host_t           *host,
                                            const moon_plugin_observer_t *o)
{
    moon_plugin_observer_rec_t *r;

    if (o == NULL || !name_ok(o->actor) || o->events == 0) {
        MOON_ERROR("plugin %s: register observer: %s", who(host),
                   o == NULL || !name_ok(o->actor) ? "no actor name" : "no events");
        return MOON_ERR_INVALID_PARAM;
    }
    if (g.n_observers == MOON_PLUGIN_MAX_OBSERVERS) {
        MOON_ERROR("plugin %s: %u observers registered already", who(host),
                   MOON_PLUGIN_MAX_OBSERVERS);
        return MOON_ERR_NO_RESOURCE;
    }
    r = &g.observers[g.n_observers++];
    snprintf(r->actor, sizeof(r->actor), "%s", o->actor);
    r->events = o->events;
    moon_plugin_ev_mask_ |= o->events;
    return MOON_OK;
}

/* ---- loading ------------------------------------------------------------------- */

moon_status_t moon_plugin_load(const char *spec)
{
    moon_plugin_host_t *host;
    const char         *colon, *args;
    size_t              len;
    moon_status_t       status;

    if (spec == NULL || spec[0] == '\0') {
        MOON_ERROR("plugin: --plugin needs PATH.so[:ARGS]");
        return MOON_ERR_INVALID_PARAM;
    }
    if (g.n_plugins == MOON_PLUGIN_MAX) {
        MOON_ERROR("plugin %s: %u plugins loaded already", spec, MOON_PLUGIN_MAX);
        return MOON_ERR_NO_RESOURCE;
    }
    colon = strchr(spec, ':');
    len   = colon != NULL ? (size_t)(colon - spec) : strlen(spec);
    args  = colon != NULL ? colon + 1 : "";
    host  = &g.plugins[g.n_plugins];
    memset(host, 0, sizeof(*host));
    if (len >= sizeof(host->path)) {
        MOON_ERROR("plugin: path too long: %s", spec);
        return MOON_ERR_INVALID_PARAM;
    }
    memcpy(host->path, spec, len);
    host->path[len] = '\0';
    status          = moon_msg_register(moon_plugin_msg_descs);
    if (status != MOON_OK) {
        MOON_ERROR("plugin %s: the hooks' messages did not register: %s", host->path,
                   moon_status_str(status));
        return status;
    }
    host->dl = dlopen(host->path, RTLD_NOW | RTLD_LOCAL);
    if (host->dl == NULL) {
        const char *e = dlerror();
        MOON_ERROR("plugin %s does not load: %s", host->path, e != NULL ? e : "?");
        return MOON_ERR_NOT_FOUND;
    }
    host->entry = dlsym(host->dl, MOON_PLUGIN_ENTRY_SYMBOL);
    if (host->entry == NULL) {
        MOON_ERROR("plugin %s: no symbol '%s': not a moonlet plugin (define one with "
                   "MOON_PLUGIN_DEFINE)",
                   host->path, MOON_PLUGIN_ENTRY_SYMBOL);
        dlclose(host->dl);
        return MOON_ERR_UNSUPPORTED;
    }
    if (host->entry->abi_version != MOON_PLUGIN_ABI_VERSION) {
        MOON_ERROR("plugin %s was built for plugin ABI %u; this moonlet speaks ABI %u: rebuild "
                   "it against this moonlet's headers",
                   host->path, host->entry->abi_version, MOON_PLUGIN_ABI_VERSION);
        host->entry = NULL;
        dlclose(host->dl);
        return MOON_ERR_UNSUPPORTED;
    }
    if (host->entry->init == NULL) {
        MOON_ERROR("plugin %s: its entry has no init function", host->path);
        host->entry = NULL;
        dlclose(host->dl);
        return MOON_ERR_UNSUPPORTED;
    }
    g.n_plugins++;
    status = host->entry->init(host, args);
    if (status != MOON_OK) {
        MOON_ERROR("plugin %s (%s): init failed: %s", host->path, who(host),
                   moon_status_str(status));
        return status;
    }
    MOON_INFO("plugin %s (%s) loaded%s%s", host->path, who(host), args[0] ? " with " : "", args);
    return MOON_OK;
}

static moon_status_t where_ranks(const char *where, const moon_plugin_roles_t *roles, uint8_t *on);

moon_status_t moon_plugin_place(const char *spec)
{
    const moon_plugin_roles_t any = {.n_ranks = 1024}; /* the syntax now, the ranks at start */
    uint8_t                   on[1024];
    const char               *eq = spec != NULL ? strchr(spec, '=') : NULL;
    uint32_t                  k  = 0;

    if (eq == NULL || strlen(spec) >= sizeof(g.places[0]) || g.n_places == MOON_PLUGIN_MAX_ACTORS) {
        MOON_ERROR("plugin: --place '%s': NAME=WHERE (ranks, 'all' or a role)",
                   spec != NULL ? spec : "");
        return MOON_ERR_INVALID_PARAM;
    }
    while (k < g.n_actors && !(strlen(g.actors[k].name) == (size_t)(eq - spec) &&
                               strncmp(g.actors[k].name, spec, (size_t)(eq - spec)) == 0)) {
        k++;
    }
    if (k == g.n_actors) {
        MOON_ERROR("plugin: --place %s: no plugin registered an actor of that name", spec);
        return MOON_ERR_INVALID_PARAM;
    }
    memset(on, 0, sizeof(on));
    if (where_ranks(eq + 1, &any, on) != MOON_OK) {
        MOON_ERROR("plugin actor %s: bad placement '%s' (ranks like 0,2-3, 'all', or a role: "
                   "conductor, store, prefill, decode)",
                   g.actors[k].name, eq + 1);
        return MOON_ERR_INVALID_PARAM;
    }
    snprintf(g.places[g.n_places++], sizeof(g.places[0]), "%s", spec);
    return MOON_OK;
}

int moon_plugin_loaded(void)
{
    return g.n_plugins > 0;
}

/* ---- placement and spawning ---------------------------------------------------- */

/* Marks the ranks of WHERE in on[] (n_ranks entries). */
static moon_status_t where_ranks(const char *where, const moon_plugin_roles_t *roles, uint8_t *on)
{
    static const char *const role[] = {"conductor", "store", "prefill", "decode"};
    uint32_t                 n      = roles->n_ranks;

    if (strcmp(where, "all") == 0) {
        memset(on, 1, n);
        return MOON_OK;
    }
    for (uint32_t k = 0; k < MOON_ARRAY_SIZE(role); k++) {
        uint32_t count[] = {1, roles->n_store, roles->n_prefill, roles->n_decode};
        if (strcmp(where, role[k]) != 0) {
            continue;
        }
        for (uint32_t i = 0; i < count[k]; i++) {
            char     name[48];
            uint32_t r = 0;
            snprintf(name, sizeof(name), k == 0 ? "%s" : "%s/%u", role[k], i);
            if (roles->spec != NULL && moon_dist_place(roles->spec, name, n, &r) != MOON_OK) {
                return MOON_ERR_INVALID_PARAM;
            }
            on[r] = 1;
        }
        return MOON_OK;
    }
    for (const char *p = where; *p != '\0';) {
        char         *end;
        unsigned long a = strtoul(p, &end, 10), b;
        if (end == p) {
            return MOON_ERR_INVALID_PARAM;
        }
        b = a;
        if (*end == '-') {
            p = end + 1;
            b = strtoul(p, &end, 10);
            if (end == p || b < a) {
                return MOON_ERR_INVALID_PARAM;
            }
        }
        if (b >= n) {
            MOON_ERROR("plugin: placement '%s': rank %lu of %u", where, b, n);
            return MOON_ERR_INVALID_PARAM;
        }
        memset(on + a, 1, b - a + 1);
        p = end;
        if (*p == ',') {
            p++;
        } else if (*p != '\0') {
            return MOON_ERR_INVALID_PARAM;
        }
    }
    return MOON_OK;
}

static moon_status_t register_name(moon_runtime_t *rt, moon_dist_t *dist, const char *name,
                                   moon_addr_t a)
{
    moon_status_t status =
        dist != NULL ? moon_dist_register(dist, name, a) : moon_register(rt, name, a);

    if (status == MOON_ERR_EXISTS && dist == NULL) {
        moon_unregister(rt, name); /* the incarnation before a restart */
        status = moon_register(rt, name, a);
    }
    return status;
}

/* Every incarnation: the plugin's init, then its names. */
static moon_status_t wrap_init(moon_actor_t *self, const void *args)
{
    pactor_t       *pa   = *(pactor_t *const *)args;
    moon_runtime_t *rt   = moon_actor_runtime(self);
    moon_addr_t     me   = moon_actor_addr(self);
    uint32_t        rank = moon_addr_rank(me);
    char            name[MOON_PLUGIN_NAME_MAX + 16];
    moon_status_t   status;

    status = pa->orig->init != NULL ? pa->orig->init(self, pa->args) : MOON_OK;
    if (status != MOON_OK) {
        return status;
    }
    snprintf(name, sizeof(name), "%s/%u", pa->name, rank);
    status = register_name(rt, pa->dist, name, me);
    if (status == MOON_OK && rank == pa->first_rank) {
        status = register_name(rt, pa->dist, pa->name, me);
    }
    if (status != MOON_OK) {
        MOON_ERROR("plugin actor %s: its name did not register: %s", pa->name,
                   moon_status_str(status));
        if (pa->orig->fini != NULL) {
            pa->orig->fini(self);
        }
    }
    return status;
}

static const char *placement_of(const pactor_t *pa)
{
    size_t n = strlen(pa->name);

    for (uint32_t i = g.n_places; i-- > 0;) { /* the last --place wins */
        if (strncmp(g.places[i], pa->name, n) == 0 && g.places[i][n] == '=') {
            return g.places[i] + n + 1;
        }
    }
    return pa->place;
}

moon_status_t moon_plugin_start(moon_runtime_t *rt, moon_dist_t *dist,
                                const moon_plugin_roles_t *roles)
{
    moon_plugin_roles_t one = {.n_ranks = 1};
    uint32_t            me  = dist != NULL ? moon_dist_rank(dist) : 0;
    uint8_t             on[1024];

    if (roles == NULL) {
        roles = &one;
    }
    g.rt     = rt;
    g.dist   = dist;
    g.n_sups = 0; /* a runtime before (replay runs one per policy) took its actors along */
    for (uint32_t i = 0; i < g.n_places; i++) {
        uint32_t k = 0;
        while (k < g.n_actors &&
               !(strncmp(g.places[i], g.actors[k].name, strlen(g.actors[k].name)) == 0 &&
                 g.places[i][strlen(g.actors[k].name)] == '=')) {
            k++;
        }
        if (k == g.n_actors) {
            MOON_ERROR("plugin: --place %s: no plugin registered an actor of that name",
                       g.places[i]);
            return MOON_ERR_INVALID_PARAM;
        }
    }
    if (roles->n_ranks == 0 || roles->n_ranks > sizeof(on)) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < g.n_actors; i++) {
        pactor_t              *pa    = &g.actors[i];
        const char            *where = placement_of(pa);
        pactor_t              *arg   = pa;
        moon_child_spec_t      child = {.ops        = &pa->ops,
                                        .args       = &arg,
                                        .args_bytes = sizeof(arg),
                                        .restart    = MOON_RESTART_PERMANENT};
        moon_supervisor_args_t sa    = {.strategy     = MOON_SUP_ONE_FOR_ONE,
                                        .max_restarts = pa->max_restarts,
                                        .window_ns    = pa->window_ns,
                                        .children     = &child,
                                        .n_children   = 1};
        moon_status_t          status;

        memset(on, 0, roles->n_ranks);
        if (where_ranks(where, roles, on) != MOON_OK) {
            MOON_ERROR("plugin actor %s: bad placement '%s' (ranks like 0,2-3, 'all', or a "
                       "role: conductor, store, prefill, decode)",
                       pa->name, where);
            return MOON_ERR_INVALID_PARAM;
        }
        pa->first_rank = 0;
        while (pa->first_rank < roles->n_ranks && !on[pa->first_rank]) {
            pa->first_rank++;
        }
        pa->dist     = dist;
        pa->ops      = *pa->orig;
        pa->ops.init = wrap_init;
        if (me >= roles->n_ranks || !on[me]) {
            continue;
        }
        status = moon_supervisor_spawn(rt, &sa, NULL, &g.sups[g.n_sups]);
        if (status != MOON_OK) {
            MOON_ERROR("plugin actor %s did not start on rank %u: %s", pa->name, me,
                       moon_status_str(status));
            return status;
        }
        g.n_sups++;
        MOON_INFO("plugin actor %s runs on rank %u (placement %s)", pa->name, me, where);
    }
    return MOON_OK;
}

void moon_plugin_stop(void)
{
    for (uint32_t i = 0; i < g.n_sups; i++) {
        moon_stop(g.rt, g.sups[i], MOON_OK);
    }
    g.n_sups = 0;
}

void moon_plugin_unload(void)
{
    for (uint32_t i = g.n_plugins; i-- > 0;) {
        if (g.plugins[i].entry != NULL && g.plugins[i].entry->fini != NULL) {
            g.plugins[i].entry->fini();
        }
    }
}

/* ---- the registry, read by the hooks ----------------------------------------- */

uint32_t moon_plugin_n_filters(void)
{
    return g.n_filters;
}

const moon_plugin_filter_rec_t *moon_plugin_filter_at(uint32_t i)
{
    return i < g.n_filters ? &g.filters[i] : NULL;
}

uint32_t moon_plugin_n_observers(void)
{
    return g.n_observers;
}

const moon_plugin_observer_rec_t *moon_plugin_observer_at(uint32_t i)
{
    return i < g.n_observers ? &g.observers[i] : NULL;
}

moon_status_t moon_plugin_resolve(moon_actor_t *self, const char *name, moon_addr_t *addr_p)
{
    moon_runtime_t *rt = moon_actor_runtime(self);
    char            local[MOON_PLUGIN_NAME_MAX + 16];

    snprintf(local, sizeof(local), "%s/%u", name, moon_addr_rank(moon_actor_addr(self)));
    if (moon_whereis(rt, local, addr_p) == MOON_OK) {
        return MOON_OK;
    }
    if (g.dist != NULL) {
        return moon_dist_whereis(g.dist, name, 0, addr_p);
    }
    return moon_whereis(rt, name, addr_p);
}
