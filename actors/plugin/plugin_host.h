/* actors/plugin/plugin_host.h - the host side of plugins (moonlet/plugin.h):
 * loading shared libraries, the process-wide registry of what they
 * registered, and spawning this rank's plugin actors under supervisors.
 * Main thread only, at start-up and at the end; the registry is read-only
 * once moon_plugin_start returned (the hooks read it from any thread). */
#ifndef MOON_ACTORS_PLUGIN_HOST_H
#define MOON_ACTORS_PLUGIN_HOST_H

#include "moonlet/dist.h"
#include "moonlet/plugin.h"

#define MOON_PLUGIN_MAX 16u
#define MOON_PLUGIN_MAX_ACTORS 32u
#define MOON_PLUGIN_MAX_FILTERS 8u
#define MOON_PLUGIN_MAX_OBSERVERS 8u
#define MOON_PLUGIN_NAME_MAX 48u

/* Loads "PATH.so[:ARGS]": dlopen, the entry symbol and its ABI version,
 * then the plugin's init. Every failure is logged with the path and its
 * cause: MOON_ERR_NOT_FOUND (the file does not load, or a symbol it needs
 * is missing), MOON_ERR_UNSUPPORTED (no entry symbol: not a plugin; or
 * another ABI version), MOON_ERR_NO_RESOURCE (MOON_PLUGIN_MAX loaded), or
 * init's status. */
moon_status_t moon_plugin_load(const char *spec);

/* Records a `--place NAME=WHERE` (see moon_plugin_actor_t.place). Applied by
 * moon_plugin_start. MOON_ERR_INVALID_PARAM: no '=' or too long. */
moon_status_t moon_plugin_place(const char *spec);

/* Where the cluster's roles run (serve_cluster.h's placement spec), so a
 * plugin actor placed by role lands beside them. */
typedef struct {
    const char *spec; /* moon_dist_place spec; NULL: everything on rank 0 */
    uint32_t    n_prefill, n_decode, n_store;
    uint32_t    n_ranks; /* 1 without dist */
} moon_plugin_roles_t;

/* Spawns, under one supervisor each, the plugin actors that land on this
 * rank, and registers their names (with dist: on every rank). Every rank
 * calls it. MOON_OK also with no plugin. MOON_ERR_INVALID_PARAM (logged): a
 * --place for no registered actor, or a bad WHERE; a spawn's status. */
moon_status_t moon_plugin_start(moon_runtime_t *rt, moon_dist_t *dist,
                                const moon_plugin_roles_t *roles);

/* Stops this rank's plugin actors (before the runtime stops). */
void moon_plugin_stop(void);

/* Calls each plugin's fini (after the runtime stopped). The libraries stay
 * mapped (their tables may still be referenced) until the process ends. */
void moon_plugin_unload(void);

/* 1 when a plugin is loaded. */
int moon_plugin_loaded(void);

/* ---- the registry, for the hooks (plugin_hooks.c) ----------------------- */
typedef struct {
    char     actor[MOON_PLUGIN_NAME_MAX];
    uint32_t deadline_ms;
    int      fail_open;
} moon_plugin_filter_rec_t;

typedef struct {
    char     actor[MOON_PLUGIN_NAME_MAX];
    uint32_t events;
} moon_plugin_observer_rec_t;

uint32_t                          moon_plugin_n_filters(void);
const moon_plugin_filter_rec_t   *moon_plugin_filter_at(uint32_t i);
uint32_t                          moon_plugin_n_observers(void);
const moon_plugin_observer_rec_t *moon_plugin_observer_at(uint32_t i);
/* Resolves a plugin actor's name from an actor of this process: NAME/<rank>
 * of this rank first, then NAME (with dist: every rank's registry). */
moon_status_t moon_plugin_resolve(moon_actor_t *self, const char *name, moon_addr_t *addr_p);

/* The union of every observer's events (read on hot paths: plugin_hooks.h). */
extern uint32_t moon_plugin_ev_mask_;

#endif /* MOON_ACTORS_PLUGIN_HOST_H */
