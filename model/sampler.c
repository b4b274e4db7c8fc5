/* model/sampler.c - greedy, temperature, top-k and top-p sampling with a
 * seeded generator (llama2.c's sampler), and per-request controls on the
 * logits (penalties, logit bias, min_tokens, min_p) that cost nothing to a
 * sampler without them. A sampler belongs to one thread. */
#include "moonlet/model.h"

#include "moonlet/alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float   prob;
    int32_t index;
} prob_index_t;

typedef struct {
    float     presence, frequency, repetition, min_p;
    uint32_t  min_tokens, n_accepted;
    uint32_t *count; /* (vocab) generated occurrences; NULL: no frequency/presence penalty */
    uint8_t  *seen;  /* (vocab) 1: in the prompt or generated; NULL: no repetition penalty */
    int32_t  *ban;   /* (n_ban) */
    uint32_t  n_ban;
    int32_t  *bias_ids; /* (n_bias) */
    float    *bias;
    uint32_t  n_bias;
} ctl_t;

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

void moon_logprobs(const float *logits, uint32_t n, int32_t token, uint32_t k, float *lp_p,
                   int32_t *top_ids, float *top_lps)
{
    float  max = logits[moon_argmax(logits, n)];
    double sum = 0.0;
    float  lse;

    for (uint32_t i = 0; i < n; i++) {
        sum += exp((double)(logits[i] - max));
    }
    lse   = max + (float)log(sum);
    *lp_p = token >= 0 && (uint32_t)token < n ? logits[token] - lse : -INFINITY;
    k     = k < n ? k : n;
    /* insertion into a sorted top-k: k <= 20 */
    for (uint32_t j = 0; j < k; j++) {
        top_ids[j] = -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = k;
        while (j > 0 && (top_ids[j - 1] < 0 || logits[i] > logits[top_ids[j - 1]])) {
            j--;
        }
        if (j < k) {
            memmove(&top_ids[j + 1], &top_ids[j], (k - j - 1) * sizeof(int32_t));
            top_ids[j] = (int32_t)i;
        }
    }
    for (uint32_t j = 0; j < k; j++) {
        top_lps[j] = logits[top_ids[j]] - lse;
    }
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
    s->ctl         = NULL;
    return MOON_OK;
}

static void ctl_free(ctl_t *c)
{
    if (c != NULL) {
        moon_free(c->count);
        moon_free(c->seen);
        moon_free(c->ban);
        moon_free(c->bias_ids);
        moon_free(c->bias);
        moon_free(c);
    }
}

void moon_sampler_fini(moon_sampler_t *s)
{
    if (s != NULL) {
        moon_free(s->scratch);
        s->scratch = NULL;
        ctl_free(s->ctl);
        s->ctl = NULL;
    }
}

static int ctl_valid(const moon_sampler_ctl_t *k, uint32_t vocab)
{
    if (!(k->presence_penalty >= -2.0f && k->presence_penalty <= 2.0f) ||
        !(k->frequency_penalty >= -2.0f && k->frequency_penalty <= 2.0f) ||
        !(k->repetition_penalty >= 0.0f && isfinite(k->repetition_penalty)) ||
        !(k->min_p >= 0.0f && k->min_p <= 1.0f) || (k->n_ban > 0 && k->ban_ids == NULL) ||
        (k->n_bias > 0 && (k->bias_ids == NULL || k->bias == NULL))) {
        return 0;
    }
    for (uint32_t i = 0; i < k->n_ban; i++) {
        if (k->ban_ids[i] < 0 || (uint32_t)k->ban_ids[i] >= vocab) {
            return 0;
        }
    }
    for (uint32_t i = 0; i < k->n_bias; i++) {
        if (k->bias_ids[i] < 0 || (uint32_t)k->bias_ids[i] >= vocab || !isfinite(k->bias[i])) {
            return 0;
        }
    }
    return 1;
}

moon_status_t moon_sampler_set_ctl(moon_sampler_t *s, const moon_sampler_ctl_t *k,
                                   const int32_t *prompt, uint32_t n_prompt)
{
    ctl_t *c;
    float  rep;

    if (s == NULL || k == NULL || (n_prompt > 0 && prompt == NULL) ||
        !ctl_valid(k, s->vocab_size)) {
        return MOON_ERR_INVALID_PARAM;
    }
    rep = k->repetition_penalty == 0.0f ? 1.0f : k->repetition_penalty;
    if (k->presence_penalty == 0.0f && k->frequency_penalty == 0.0f && rep == 1.0f &&
        k->min_p == 0.0f && (k->min_tokens == 0 || k->n_ban == 0) && k->n_bias == 0) {
        ctl_free(s->ctl);
        s->ctl = NULL;
        return MOON_OK;
    }
    c = moon_calloc(1, sizeof(*c));
    if (c == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    c->presence   = k->presence_penalty;
    c->frequency  = k->frequency_penalty;
    c->repetition = rep;
    c->min_p      = k->min_p;
    c->min_tokens = k->n_ban > 0 ? k->min_tokens : 0;
    if ((c->presence != 0.0f || c->frequency != 0.0f) &&
        (c->count = moon_calloc(s->vocab_size, sizeof(uint32_t))) == NULL) {
        goto err_free;
    }
    if (rep != 1.0f && (c->seen = moon_calloc(s->vocab_size, 1)) == NULL) {
        goto err_free;
    }
    if (c->min_tokens > 0) {
        c->ban = moon_malloc((size_t)k->n_ban * sizeof(int32_t));
        if (c->ban == NULL) {
            goto err_free;
        }
        memcpy(c->ban, k->ban_ids, (size_t)k->n_ban * sizeof(int32_t));
        c->n_ban = k->n_ban;
    }
    if (k->n_bias > 0) {
        c->bias_ids = moon_malloc((size_t)k->n_bias * sizeof(int32_t));
        c->bias     = moon_malloc((size_t)k->n_bias * sizeof(float));
        if (c->bias_ids == NULL || c->bias == NULL) {
            goto err_free;
        }
        memcpy(c->bias_ids, k->bias_ids, (size_t)k->n_bias * sizeof(int32_t));
        memcpy(c->bias, k->bias, (size_t)k->n_bias * sizeof(float));
        c->n_bias = k->n_bias;
    }
    for (uint32_t i = 0; c->seen != NULL && i < n_prompt; i++) {
        if (prompt[i] >= 0 && (uint32_t)prompt[i] < s->vocab_size) {
            c->seen[prompt[i]] = 1;
        }
    }
    ctl_free(s->ctl);
    s->ctl = c;
    return MOON_OK;

err_free:
    ctl_free(c);
    return MOON_ERR_NO_MEMORY;
}

void moon_sampler_accept(moon_sampler_t *s, int32_t token)
{
    ctl_t *c = s->ctl;

    if (c == NULL || token < 0 || (uint32_t)token >= s->vocab_size) {
        return;
    }
    c->n_accepted++;
    if (c->count != NULL) {
        c->count[token]++;
    }
    if (c->seen != NULL) {
        c->seen[token] = 1;
    }
}

/* Penalties, bias and min_tokens' mask on the raw logits (vLLM's order). */
static void ctl_apply(const ctl_t *c, float *logits, uint32_t n)
{
    if (c->seen != NULL) {
        for (uint32_t i = 0; i < n; i++) {
            if (c->seen[i]) {
                logits[i] =
                    logits[i] > 0.0f ? logits[i] / c->repetition : logits[i] * c->repetition;
            }
        }
    }
    if (c->count != NULL) {
        for (uint32_t i = 0; i < n; i++) {
            if (c->count[i] > 0) {
                logits[i] -= c->frequency * (float)c->count[i] + c->presence;
            }
        }
    }
    for (uint32_t i = 0; i < c->n_bias; i++) {
        logits[c->bias_ids[i]] += c->bias[i];
    }
    if (c->n_accepted < c->min_tokens) {
        for (uint32_t i = 0; i < c->n_ban; i++) {
            logits[c->ban[i]] = -INFINITY;
        }
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
    const ctl_t  *c = s->ctl;

    if (c != NULL) {
        ctl_apply(c, logits, n);
    }
    if (s->temperature == 0.0f || s->top_k == 1) {
        return moon_argmax(logits, n);
    }
    max = logits[moon_argmax(logits, n)];
    for (uint32_t i = 0; i < n; i++) {
        logits[i] = expf((logits[i] - max) / s->temperature);
        sum += logits[i];
    }
    if (c != NULL && c->min_p > 0.0f) {
        /* the top token's unnormalized prob is exp(0) = 1 */
        float keep = c->min_p, kept = 0.0f;
        for (uint32_t i = 0; i < n; i++) {
            logits[i] = logits[i] >= keep ? logits[i] : 0.0f;
            kept += logits[i];
        }
        sum = kept;
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
