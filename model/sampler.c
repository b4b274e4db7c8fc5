/* model/sampler.c - greedy, temperature, top-k and top-p sampling with a
 * seeded generator (llama2.c's sampler). A sampler belongs to one thread. */
#include "moonlet/model.h"

#include "moonlet/alloc.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    float   prob;
    int32_t index;
} prob_index_t;

int32_t moon_argmax(const float *x, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++) {
        if (x[i] > x[best]) {
            best = i;
        }
    }
    return (int32_t)best;
}

moon_status_t moon_sampler_init(moon_sampler_t *s, uint32_t vocab_size, float temperature,
                                float top_p, uint32_t top_k, uint64_t seed)
{
    if (s == NULL || vocab_size == 0 || !(temperature >= 0.0f) || !(top_p > 0.0f) || top_p > 1.0f) {
        return MOON_ERR_INVALID_PARAM;
    }
    s->scratch = moon_malloc(vocab_size * sizeof(prob_index_t));
    if (s->scratch == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    s->temperature = temperature;
    s->top_p       = top_p;
    s->top_k       = top_k;
    s->rng         = seed ? seed : 0x2545f4914f6cdd1dull;
    s->vocab_size  = vocab_size;
    return MOON_OK;
}

void moon_sampler_fini(moon_sampler_t *s)
{
    if (s != NULL) {
        moon_free(s->scratch);
        s->scratch = NULL;
    }
}

static float rand_f32(uint64_t *state) /* xorshift*, [0, 1) */
{
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (float)((*state * 0x2545f4914f6cdd1dull) >> 40) / 16777216.0f;
}

static int cmp_desc(const void *a, const void *b)
{
    const prob_index_t *x = a, *y = b;
    return x->prob > y->prob   ? -1
           : x->prob < y->prob ? 1
                               : (x->index > y->index) - (x->index < y->index);
}

int32_t moon_sampler_sample(moon_sampler_t *s, float *logits)
{
    prob_index_t *pi = s->scratch;
    uint32_t      n  = s->vocab_size, m;
    float         max, sum = 0.0f, coin, cum, cutoff;

    if (s->temperature == 0.0f || s->top_k == 1) {
        return moon_argmax(logits, n);
    }
    max = logits[moon_argmax(logits, n)];
    for (uint32_t i = 0; i < n; i++) {
        logits[i] = expf((logits[i] - max) / s->temperature);
        sum += logits[i];
    }
    for (uint32_t i = 0; i < n; i++) {
        logits[i] /= sum;
    }
    coin = rand_f32(&s->rng);
    if (s->top_k == 0 && s->top_p >= 1.0f) {
        cum = 0.0f;
        for (uint32_t i = 0; i < n; i++) {
            cum += logits[i];
            if (coin < cum) {
                return (int32_t)i;
            }
        }
        return (int32_t)(n - 1);
    }
    /* keep candidates: top-k first, then the smallest set with mass >= top_p */
    cutoff = s->top_k == 0 ? (1.0f - s->top_p) / (float)(n - 1 ? n - 1 : 1) : 0.0f;
    m      = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (logits[i] >= cutoff) {
            pi[m].prob  = logits[i];
            pi[m].index = (int32_t)i;
            m++;
        }
    }
    qsort(pi, m, sizeof(*pi), cmp_desc);
    if (s->top_k > 0 && m > s->top_k) {
        m = s->top_k;
    }
    cum = 0.0f;
    for (uint32_t i = 0; i < m; i++) {
        cum += pi[i].prob;
        if (cum >= s->top_p) {
            m = i + 1;
            break;
        }
    }
    coin *= cum;
    sum = 0.0f;
    for (uint32_t i = 0; i < m; i++) {
        sum += pi[i].prob;
        if (coin < sum) {
            return pi[i].index;
        }
    }
    return pi[m - 1].index;
}
