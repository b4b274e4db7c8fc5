/* actors/weights_pace.c - a weight receiver's pace (weights_pace.h). */
#include "weights_pace.h"

#include "moonlet/sys_msgs.h"
#include "moonlet/defs.h"

#define PACE_COOKIE 0x70616365ull /* "pace": the receiver has no other timer */

static int busy_at(const moon_weights_pace_t *p, uint64_t now_ns)
{
    uint64_t last;

    if (p->busy_ns == NULL || p->share <= 0 || p->share >= 1) {
        return 0;
    }
    last = atomic_load_explicit(p->busy_ns, memory_order_relaxed);
    return last != 0 && now_ns < last + WEIGHTS_PACE_LINGER_NS;
}

void moon_weights_pace_init(moon_weights_pace_t *p, const _Atomic uint64_t *busy_ns, double share)
{
    *p = (moon_weights_pace_t){.busy_ns = busy_ns, .share = share};
}

uint32_t moon_weights_pace_window(moon_weights_pace_t *p, moon_actor_t *self, uint64_t now,
                                  uint32_t max)
{
    if (p->rest_until > now) {
        if (p->timer == 0 &&
            moon_timer_start(self, p->rest_until - now, 0, PACE_COOKIE, &p->timer) != MOON_OK) {
            p->rest_until = 0; /* no timer to wake us: go on rather than stall */
            return busy_at(p, now) ? 1 : max;
        }
        return 0;
    }
    return busy_at(p, now) ? 1 : max;
}

void moon_weights_pace_issued(moon_weights_pace_t *p, uint64_t now_ns)
{
    p->issued_ns = now_ns;
}

uint64_t moon_weights_pace_rest(moon_weights_pace_t *p, uint64_t now_ns, uint64_t took_ns)
{
    uint64_t rest;

    if (!busy_at(p, now_ns)) {
        return 0;
    }
    rest =
        MOON_MIN((uint64_t)((double)took_ns * (1 - p->share) / p->share), WEIGHTS_PACE_MAX_REST_NS);
    p->n_rests++;
    p->rest_ns += rest;
    return rest;
}

void moon_weights_pace_done(moon_weights_pace_t *p, uint64_t now_ns)
{
    uint64_t rest = 0;

    if (p->issued_ns != 0 && now_ns > p->issued_ns) {
        rest = moon_weights_pace_rest(p, now_ns, now_ns - p->issued_ns);
    }
    p->rest_until = rest != 0 ? now_ns + rest : 0;
}

int moon_weights_pace_on_timer(moon_weights_pace_t *p, const moon_msg_hdr_t *msg)
{
    const moon_sys_timer_t *t = (const void *)msg;

    if (t->cookie != PACE_COOKIE || t->timer != p->timer) {
        return 0;
    }
    p->timer      = 0;
    p->rest_until = 0;
    return 1;
}

void moon_weights_pace_reset(moon_weights_pace_t *p)
{
    moon_weights_pace_init(p, p->busy_ns, p->share);
}
