/* scheduler/cost.c - the cost predictor (Mooncake Eq. 1 forms) and its
 * non-negative least-squares fits from timed samples. A fit solves every
 * subset of the three terms the samples determine (normal equations on
 * column-scaled, relative-error rows), keeps the feasible ones (no negative
 * coefficient) and takes the smallest residual: for three unknowns this is
 * the exact NNLS optimum, and it falls back to fewer terms by itself. */
#include "moonlet/sched_cost.h"
#include "moonlet/log.h"

#include <math.h>
#include <string.h>

#define N_TERMS 3

double moon_sched_cost_prefill_s(const moon_sched_cost_t *cost, uint64_t n_new, uint64_t n_prefix)
{
    double n = (double)n_new, p = (double)n_prefix;

    if (cost == NULL || n_new == 0) {
        return 0.0;
    }
    /* (p + n)^2 - p^2 written without the cancellation */
    return cost->a0 + cost->a1 * n + cost->a2 * (n * n + 2.0 * p * n);
}

double moon_sched_cost_step_s(const moon_sched_cost_t *cost, uint32_t batch, uint64_t ctx_tokens)
{
    if (cost == NULL || batch == 0) {
        return 0.0;
    }
    return cost->d0 + cost->d1 * (double)batch + cost->d2 * (double)ctx_tokens;
}

double moon_sched_cost_transfer_s(const moon_sched_cost_t *cost, uint32_t n_blocks)
{
    if (cost == NULL || n_blocks == 0) {
        return 0.0;
    }
    if (!(cost->xfer_bytes_per_s > 0.0)) {
        return HUGE_VAL;
    }
    return cost->xfer_latency_s +
           (double)n_blocks * (double)cost->block_bytes / cost->xfer_bytes_per_s;
}

/* A fit's rows, computed on demand so a fit allocates nothing: row i is the
 * sample's terms divided by its seconds (the target is then 1 per row). */
typedef struct {
    uint32_t    n_rows;
    const void *samples;
    void (*row)(const void *samples, uint32_t i, double out[N_TERMS]);
} fit_problem_t;

/* Least squares over the columns in mask against a target of 1 per row.
 * Writes coef (N_TERMS, 0 outside mask) and the residual sum of squares;
 * returns 0 when the columns are (numerically) dependent or too many. */
static int solve_subset(const fit_problem_t *fp, unsigned mask, double coef[N_TERMS], double *rss_p)
{
    int    cols[N_TERMS], k = 0;
    double scale[N_TERMS] = {0}, a[N_TERMS][N_TERMS + 1], x[N_TERMS];

    for (int j = 0; j < N_TERMS; j++) {
        if (mask & (1u << j)) {
            cols[k++] = j;
        }
    }
    if ((uint32_t)k > fp->n_rows) {
        return 0;
    }
    /* scale each column to unit max so n^2 terms do not swamp the pivots */
    for (uint32_t r = 0; r < fp->n_rows; r++) {
        fp->row(fp->samples, r, x);
        for (int c = 0; c < k; c++) {
            scale[c] = fmax(scale[c], fabs(x[cols[c]]));
        }
    }
    for (int c = 0; c < k; c++) {
        if (scale[c] == 0.0) {
            return 0;
        }
    }
    memset(a, 0, sizeof(a));
    for (uint32_t r = 0; r < fp->n_rows; r++) {
        fp->row(fp->samples, r, x);
        for (int i = 0; i < k; i++) {
            double xi = x[cols[i]] / scale[i];
            for (int j = 0; j < k; j++) {
                a[i][j] += xi * x[cols[j]] / scale[j];
            }
            a[i][k] += xi;
        }
    }
    /* Gauss-Jordan with partial pivoting on the k x k system; a pivot this
     * small (columns scaled to 1) means dependent columns: a smaller subset
     * describes the data as well */
    for (int i = 0; i < k; i++) {
        int piv = i;
        for (int r = i + 1; r < k; r++) {
            if (fabs(a[r][i]) > fabs(a[piv][i])) {
                piv = r;
            }
        }
        if (fabs(a[piv][i]) < 1e-9) {
            return 0;
        }
        for (int c = 0; c <= k && piv != i; c++) {
            double t  = a[i][c];
            a[i][c]   = a[piv][c];
            a[piv][c] = t;
        }
        for (int r = 0; r < k; r++) {
            if (r != i) {
                double f = a[r][i] / a[i][i];
                for (int c = i; c <= k; c++) {
                    a[r][c] -= f * a[i][c];
                }
            }
        }
    }
    for (int j = 0; j < N_TERMS; j++) {
        coef[j] = 0.0;
    }
    for (int i = 0; i < k; i++) {
        coef[cols[i]] = a[i][k] / a[i][i] / scale[i];
    }
    *rss_p = 0.0;
    for (uint32_t r = 0; r < fp->n_rows; r++) {
        double pred = 0.0;
        fp->row(fp->samples, r, x);
        for (int j = 0; j < N_TERMS; j++) {
            pred += coef[j] * x[j];
        }
        *rss_p += (pred - 1.0) * (pred - 1.0);
    }
    return 1;
}

/* The best feasible subset, masks tried in order (a tie keeps the earlier). */
static void fit_nnls(const fit_problem_t *fp, const unsigned order[7], double coef_out[N_TERMS])
{
    double best_rss = HUGE_VAL;
    double tol      = 1e-9 * (double)fp->n_rows; /* equal within rounding */

    for (int j = 0; j < N_TERMS; j++) {
        coef_out[j] = 0.0;
    }
    for (int s = 0; s < 7; s++) {
        double coef[N_TERMS], rss;
        int    feasible = 1;

        if (!solve_subset(fp, order[s], coef, &rss)) {
            continue;
        }
        for (int j = 0; j < N_TERMS; j++) {
            feasible &= coef[j] >= 0.0;
        }
        if (feasible && rss < best_rss - tol) {
            best_rss = rss;
            memcpy(coef_out, coef, sizeof(coef));
        }
    }
}

static int good_seconds(double s)
{
    return isfinite(s) && s > 0.0;
}

static void prefill_row(const void *samples, uint32_t i, double out[N_TERMS])
{
    const moon_sched_prefill_sample_t *s = (const moon_sched_prefill_sample_t *)samples + i;
    double n = (double)s->n_new, p = (double)s->n_prefix, w = 1.0 / s->seconds;

    out[0] = w;
    out[1] = w * n;
    out[2] = w * (n * n + 2.0 * p * n);
}

static void decode_row(const void *samples, uint32_t i, double out[N_TERMS])
{
    const moon_sched_decode_sample_t *s = (const moon_sched_decode_sample_t *)samples + i;
    double                            w = 1.0 / s->seconds;

    out[0] = w;
    out[1] = w * (double)s->batch;
    out[2] = w * (double)s->ctx_tokens;
}

/* 1 (and logged) when sample i cannot be fitted. */
typedef int (*sample_bad_fn)(const void *samples, uint32_t i);

static int prefill_bad(const void *samples, uint32_t i)
{
    const moon_sched_prefill_sample_t *s = (const moon_sched_prefill_sample_t *)samples + i;

    if (s->n_new == 0 || !good_seconds(s->seconds)) {
        MOON_ERROR("sched cost fit prefill: sample %u has n_new %llu, seconds %g", i,
                   (unsigned long long)s->n_new, s->seconds);
        return 1;
    }
    return 0;
}

static int decode_bad(const void *samples, uint32_t i)
{
    const moon_sched_decode_sample_t *s = (const moon_sched_decode_sample_t *)samples + i;

    if (s->batch == 0 || !good_seconds(s->seconds)) {
        MOON_ERROR("sched cost fit decode: sample %u has batch %u, seconds %g", i, s->batch,
                   s->seconds);
        return 1;
    }
    return 0;
}

/* Checks the samples, then fits fp's three terms (subsets tried in order)
 * into *c0, *c1, *c2 (unchanged on error). */
static moon_status_t fit_checked(const char *what, const fit_problem_t *fp, const unsigned order[7],
                                 sample_bad_fn bad, const moon_sched_cost_t *cost, double *c0,
                                 double *c1, double *c2)
{
    double coef[N_TERMS];

    if (fp->samples == NULL || fp->n_rows == 0 || cost == NULL) {
        MOON_ERROR("sched cost fit %s: no samples or no cost", what);
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < fp->n_rows; i++) {
        if (bad(fp->samples, i)) {
            return MOON_ERR_INVALID_PARAM;
        }
    }
    fit_nnls(fp, order, coef);
    *c0 = coef[0];
    *c1 = coef[1];
    *c2 = coef[2];
    return MOON_OK;
}

moon_status_t moon_sched_cost_fit_prefill(const moon_sched_prefill_sample_t *samples,
                                          uint32_t n_samples, moon_sched_cost_t *cost)
{
    /* a1 alone first (one sample: seconds per token), then a0, a2, pairs, all */
    static const unsigned order[7] = {0x2, 0x1, 0x4, 0x3, 0x6, 0x5, 0x7};
    fit_problem_t         fp       = {.n_rows = n_samples, .samples = samples, .row = prefill_row};

    return fit_checked("prefill", &fp, order, prefill_bad, cost, cost ? &cost->a0 : NULL,
                       cost ? &cost->a1 : NULL, cost ? &cost->a2 : NULL);
}

moon_status_t moon_sched_cost_fit_decode(const moon_sched_decode_sample_t *samples,
                                         uint32_t n_samples, moon_sched_cost_t *cost)
{
    /* d0 alone first (a step is mostly reading the weights), then d1, d2,
     * pairs with d0, then d1 + d2, then all */
    static const unsigned order[7] = {0x1, 0x2, 0x4, 0x3, 0x5, 0x6, 0x7};
    fit_problem_t         fp       = {.n_rows = n_samples, .samples = samples, .row = decode_row};

    return fit_checked("decode", &fp, order, decode_bad, cost, cost ? &cost->d0 : NULL,
                       cost ? &cost->d1 : NULL, cost ? &cost->d2 : NULL);
}
