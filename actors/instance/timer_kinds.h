/* actors/instance/timer_kinds.h - the TIMER kinds (moon_timer_start_kind)
 * of the instance kit's modules, which run inside their instance's actor:
 * one list, so no two collide and every cookie stays whole. Kind 0 is the
 * instance's own timers (its load reports). */
#ifndef MOON_ACTORS_TIMER_KINDS_H
#define MOON_ACTORS_TIMER_KINDS_H

enum {
    MOON_TIMER_KIND_ENGINE_RUNNER = 1, /* an inline runner's job ended (modeled time) */
    MOON_TIMER_KIND_KV_POOL       = 2, /* a modeled pull ended; cookie: the pull's */
    MOON_TIMER_KIND_SERVE_XFER    = 3, /* a modeled store fetch ended; cookie: the request's slot */
};

#endif /* MOON_ACTORS_TIMER_KINDS_H */
