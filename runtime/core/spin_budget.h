/* runtime/core/spin_budget.h - how long an idle thread spins before it sleeps,
 * learned from how its last spins ended.
 *
 * A spin pays off when the answer to what just left comes back within it (a
 * ping-pong, a burst of messages); it is pure cost when the wake was a lone
 * timer tick, heartbeat or load report (an idle cluster). Each spin that ended
 * in sleep with nothing found quarters the next spin's rounds, down to
 * SPIN_BUDGET_MIN; one that found work restores the full budget. So a busy
 * thread keeps spinning as before, and an idle one wakes, does its work and
 * sleeps again at once (issue 27: idle ranks under 2 % of a core).
 *
 * Owned by one thread; no synchronisation. */
#ifndef MOON_SPIN_BUDGET_H
#define MOON_SPIN_BUDGET_H

#include <stdint.h>

#define SPIN_BUDGET_MIN 8u   /* rounds a spin keeps however often spins failed */
#define SPIN_BUDGET_SHIFT 8u /* at most max >> 8 (then SPIN_BUDGET_MIN) */

typedef struct {
    uint32_t fruitless; /* consecutive spins that ended in sleep */
} moon_spin_budget_t;

/* The rounds the next spin may take, out of max. */
static inline uint32_t moon_spin_budget(const moon_spin_budget_t *b, uint32_t max)
{
    uint32_t shift = b->fruitless * 2 < SPIN_BUDGET_SHIFT ? b->fruitless * 2 : SPIN_BUDGET_SHIFT;
    uint32_t n     = max >> shift;

    return n > SPIN_BUDGET_MIN ? n : (max < SPIN_BUDGET_MIN ? max : SPIN_BUDGET_MIN);
}

/* The spin found work (found != 0) or gave up and went to sleep. */
static inline void moon_spin_budget_end(moon_spin_budget_t *b, int found)
{
    if (found) {
        b->fruitless = 0;
    } else if (b->fruitless < SPIN_BUDGET_SHIFT) {
        b->fruitless++;
    }
}

#endif
