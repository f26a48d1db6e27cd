/* Per-environment random numbers: splitmix64 seeding and xoshiro256** draws.
 * Every environment owns one cenv_rng; there is no shared or global RNG state. */
#ifndef CENV_RNG_H
#define CENV_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} cenv_rng;

static inline uint64_t cenv_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Seeds the stream of environment `index` of a run seeded with `seed`. */
static inline void cenv_rng_seed(cenv_rng *rng, uint64_t seed, uint64_t index) {
    uint64_t x = seed ^ (0xD1B54A32D192ED03ull * (index + 1));
    for (int i = 0; i < 4; i++) rng->s[i] = cenv_splitmix64(&x);
}

static inline uint64_t cenv_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t cenv_rng_u64(cenv_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = cenv_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = cenv_rotl(s[3], 45);
    return result;
}

/* Uniform double in [0, 1). */
static inline double cenv_rng_unit(cenv_rng *rng) {
    return (double)(cenv_rng_u64(rng) >> 11) * 0x1.0p-53;
}

/* Uniform double in [lo, hi). */
static inline double cenv_rng_uniform(cenv_rng *rng, double lo, double hi) {
    return lo + (hi - lo) * cenv_rng_unit(rng);
}

/* Uniform integer in [0, n), n > 0 (Lemire's multiply-shift, bias < 2^-32 for small n). */
static inline int cenv_rng_below(cenv_rng *rng, int n) {
    return (int)(((cenv_rng_u64(rng) >> 32) * (uint64_t)n) >> 32);
}

#endif
