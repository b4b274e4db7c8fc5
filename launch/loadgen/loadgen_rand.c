/* launch/loadgen/loadgen_rand.c - seeding, bounded integers, normal and Gamma draws
 * for `moonlet bench` (see loadgen_rand.h). */
#include "loadgen_rand.h"

#include <math.h>

void moon_loadgen_rand_init(moon_loadgen_rand_t *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = moon_loadgen_mix64(seed) ^ moon_loadgen_mix64(stream * 0x632be59bd9b4e019ull + 1);

    for (int i = 0; i < 4; i++) {
        x       = moon_loadgen_mix64(x);
        r->s[i] = x;
    }
}

uint64_t moon_loadgen_rand_range(moon_loadgen_rand_t *r, uint64_t lo, uint64_t hi)
{
    uint64_t span = hi - lo + 1;
    uint64_t limit, v;

    if (span == 0) { /* the whole 64-bit range */
        return moon_loadgen_rand_u64(r);
    }
    /* rejection keeps every value equally likely */
    limit = UINT64_MAX - UINT64_MAX % span;
    do {
        v = moon_loadgen_rand_u64(r);
    } while (v >= limit);
    return lo + v % span;
}

double moon_loadgen_rand_normal(moon_loadgen_rand_t *r)
{
    double u1 = 1.0 - moon_loadgen_rand_unit(r); /* (0, 1]: log is finite */
    double u2 = moon_loadgen_rand_unit(r);

    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

double moon_loadgen_rand_gamma(moon_loadgen_rand_t *r, double shape, double scale)
{
    double d, c, x, v, u;

    if (shape < 1.0) {
        u = 1.0 - moon_loadgen_rand_unit(r);
        return moon_loadgen_rand_gamma(r, shape + 1.0, scale) * pow(u, 1.0 / shape);
    }
    d = shape - 1.0 / 3.0;
    c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        do {
            x = moon_loadgen_rand_normal(r);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        u = 1.0 - moon_loadgen_rand_unit(r);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) {
            return d * v * scale;
        }
    }
}
