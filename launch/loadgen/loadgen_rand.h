/* launch/loadgen/loadgen_rand.h - the seeded generator of `moonlet bench` workloads:
 * xoshiro256** seeded through splitmix64, uniform, normal and Gamma draws.
 * The same seed gives the same sequence on every machine (integer state, no
 * libm calls in the uniform path). One generator per thread; no globals. */
#ifndef MOON_LAUNCH_BENCH_RAND_H
#define MOON_LAUNCH_BENCH_RAND_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} moon_loadgen_rand_t;

/* splitmix64 step: also the stateless hash used for trace block tokens. */
static inline uint64_t moon_loadgen_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Seeds the generator from (seed, stream): distinct streams are independent
 * sequences, so e.g. arrival gaps do not shift when prompt lengths change. */
void moon_loadgen_rand_init(moon_loadgen_rand_t *r, uint64_t seed, uint64_t stream);

static inline uint64_t moon_loadgen_rand_u64(moon_loadgen_rand_t *r)
{
    uint64_t *s      = r->s;
    uint64_t  x      = s[1] * 5;
    uint64_t  result = ((x << 7) | (x >> 57)) * 9;
    uint64_t  t      = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform in [0, 1). */
static inline double moon_loadgen_rand_unit(moon_loadgen_rand_t *r)
{
    return (double)(moon_loadgen_rand_u64(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [lo, hi] (lo <= hi). */
uint64_t moon_loadgen_rand_range(moon_loadgen_rand_t *r, uint64_t lo, uint64_t hi);

/* Standard normal (Box-Muller). */
double moon_loadgen_rand_normal(moon_loadgen_rand_t *r);

/* Gamma(shape, scale) with mean shape*scale (Marsaglia-Tsang; shape < 1 by
 * the u^(1/shape) boost). shape and scale must be > 0. */
double moon_loadgen_rand_gamma(moon_loadgen_rand_t *r, double shape, double scale);

#endif /* MOON_LAUNCH_BENCH_RAND_H */
