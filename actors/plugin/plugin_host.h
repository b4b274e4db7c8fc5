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

/* The host side (moon_plugin_load, _place, _start, _stop, _unload) is public:
 * moonlet/plugin.h. */

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
