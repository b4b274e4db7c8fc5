/* actors/weights_pace.h - how fast a weight receiver gets its chunks. While
 * its instance is idle, at full speed (a window of chunks in flight). While
 * the instance serves (it held requests in the last WEIGHTS_PACE_LINGER_NS:
 * requests come and go within milliseconds, and a window issued in a gap
 * would copy the whole checkpoint at once), one chunk at a time with a rest
 * after each, so copying and checking take at most `share` of the time and
 * serving keeps the cores: on a node whose cores serve too (2 cores, 5
 * ranks), a push at full speed made TTFT p99 during it 7-9x the quiet p99.
 * A rest is capped (WEIGHTS_PACE_MAX_REST_NS), so a push under steady load
 * still ends well inside its deadline. */
#ifndef MOON_ACTORS_WEIGHTS_PACE_H
#define MOON_ACTORS_WEIGHTS_PACE_H

#include "moonlet/actor.h"

#include <stdatomic.h>
#include <stdint.h>

#define WEIGHTS_PACE_MAX_REST_NS 20000000ull
#define WEIGHTS_PACE_LINGER_NS 100000000ull /* > the instances' periodic load reports (50 ms) */

typedef struct {
    const _Atomic uint64_t *busy_ns; /* when the instance last held requests (NULL: never) */
    double                  share;
    uint64_t                issued_ns;        /* when the chunk in flight was asked for */
    uint64_t                rest_until;       /* no get before (0: none) */
    uint64_t                timer;            /* the rest's (0: none) */
    uint64_t                n_rests, rest_ns; /* this push's, for its log line */
} moon_weights_pace_t;

/* share <= 0 or >= 1: full speed always. */
void moon_weights_pace_init(moon_weights_pace_t *p, const _Atomic uint64_t *busy_ns, double share);

/* How many chunks may be in flight at now_ns, out of max: 0 while resting
 * (a TIMER that moon_weights_pace_on_timer recognises wakes self when the
 * rest ends; self is used only then). */
uint32_t moon_weights_pace_window(moon_weights_pace_t *p, moon_actor_t *self, uint64_t now_ns,
                                  uint32_t max);

/* A get was issued / a chunk arrived and was checked (the rest it earns
 * starts now). */
void moon_weights_pace_issued(moon_weights_pace_t *p, uint64_t now_ns);
void moon_weights_pace_done(moon_weights_pace_t *p, uint64_t now_ns);

/* The rest that took_ns of work earns now (0: not serving), counted; for a
 * caller that sleeps on a timer of its own (the broadcaster's reads). */
uint64_t moon_weights_pace_rest(moon_weights_pace_t *p, uint64_t now_ns, uint64_t took_ns);

/* 1 if msg (a TIMER) is the end of this pacer's rest. */
int moon_weights_pace_on_timer(moon_weights_pace_t *p, const moon_msg_hdr_t *msg);

/* A push ended: no rest left, counters zeroed (a rest's timer still to
 * come is no longer this pacer's: on_timer says 0). */
void moon_weights_pace_reset(moon_weights_pace_t *p);

#endif /* MOON_ACTORS_WEIGHTS_PACE_H */
