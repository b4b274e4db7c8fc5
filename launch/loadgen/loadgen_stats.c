/* launch/loadgen/loadgen_stats.c - serving metrics from request timelines, with
 * vLLM's definitions (loadgen_stats.h). */
#include "loadgen_stats.h"

#include "moonlet/alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void moon_loadgen_results_fini(moon_loadgen_result_t *results, uint32_t n)
{
    for (uint32_t i = 0; results != NULL && i < n; i++) {
        moon_free(results[i].itl_s);
        results[i].itl_s = NULL;
        results[i].n_itl = 0;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y ? 1 : 0;
}

double moon_loadgen_percentile(const double *sorted, size_t n, double p)
{
    double pos, frac;
    size_t lo;

    if (n == 0) {
        return 0.0;
    }
    pos  = p / 100.0 * (double)(n - 1);
    lo   = (size_t)floor(pos);
    frac = pos - (double)lo;
    if (lo + 1 >= n) {
        return sorted[n - 1];
    }
    return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * frac;
}

void moon_loadgen_dist(double *x, size_t n, moon_loadgen_dist_t *dist)
{
    double sum = 0.0, sq = 0.0, mean;

    memset(dist, 0, sizeof(*dist));
    dist->n = (uint32_t)n;
    if (n == 0) {
        return;
    }
    qsort(x, n, sizeof(*x), cmp_double);
    for (size_t i = 0; i < n; i++) {
        sum += x[i];
    }
    mean = sum / (double)n;
    for (size_t i = 0; i < n; i++) {
        sq += (x[i] - mean) * (x[i] - mean);
    }
    dist->mean   = mean * 1e3;
    dist->std    = sqrt(sq / (double)n) * 1e3;
    dist->median = moon_loadgen_percentile(x, n, 50) * 1e3;
    dist->p90    = moon_loadgen_percentile(x, n, 90) * 1e3;
    dist->p99    = moon_loadgen_percentile(x, n, 99) * 1e3;
    dist->min    = x[0] * 1e3;
    dist->max    = x[n - 1] * 1e3;
}

double moon_loadgen_tpot(const moon_loadgen_result_t *r)
{
    return r->n_out > 1 ? (r->e2el_s - r->ttft_s) / (double)(r->n_out - 1) : 0.0;
}

static int meets_slo(const moon_loadgen_result_t *r, const moon_loadgen_slo_t *slo)
{
    return (slo->slo_ttft_ms <= 0 || r->ttft_s * 1e3 <= slo->slo_ttft_ms) &&
           (slo->slo_tpot_ms <= 0 || moon_loadgen_tpot(r) * 1e3 <= slo->slo_tpot_ms) &&
           (slo->slo_e2el_ms <= 0 || r->e2el_s * 1e3 <= slo->slo_e2el_ms);
}

/* Most requests whose [send, send + e2el] intervals overlap; ev has room
 * for 2n doubles. A request ending when another starts does not overlap it. */
static uint32_t peak_concurrency(const moon_loadgen_result_t *results, uint32_t n, double *ev)
{
    double  *starts = ev, *ends = ev + n;
    uint32_t cur = 0, peak = 0, s = 0, e = 0;

    for (uint32_t i = 0; i < n; i++) {
        starts[i] = results[i].send_s;
        ends[i]   = results[i].send_s + results[i].e2el_s;
    }
    qsort(starts, n, sizeof(double), cmp_double);
    qsort(ends, n, sizeof(double), cmp_double);
    while (s < n) {
        if (e < n && ends[e] <= starts[s]) {
            cur--;
            e++;
        } else {
            cur++;
            s++;
            peak = cur > peak ? cur : peak;
        }
    }
    return peak;
}

void moon_loadgen_throughput_series(const moon_loadgen_result_t *results, uint32_t n,
                                    double bucket_s, double *rate, uint32_t n_buckets)
{
    memset(rate, 0, (size_t)n_buckets * sizeof(*rate));
    if (bucket_s <= 0 || n_buckets == 0) {
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        const moon_loadgen_result_t *r = &results[i];
        double                       t, per_chunk;
        size_t                       b;

        if (!r->ok || r->n_out == 0) {
            continue;
        }
        if (r->n_chunks == 0) { /* no text came: every token at the end */
            b = (size_t)((r->send_s + r->e2el_s) / bucket_s);
            rate[b < n_buckets ? b : n_buckets - 1] += r->n_out;
            continue;
        }
        per_chunk = (double)r->n_out / r->n_chunks;
        t         = r->send_s + r->ttft_s;
        for (uint32_t k = 0; k < r->n_chunks; k++) {
            if (k > 0 && k - 1 < r->n_itl) {
                t += r->itl_s[k - 1];
            }
            b = (size_t)(t / bucket_s);
            rate[b < n_buckets ? b : n_buckets - 1] += per_chunk;
        }
    }
    for (uint32_t b = 0; b < n_buckets; b++) {
        rate[b] /= bucket_s;
    }
}

moon_status_t moon_loadgen_stats_compute(const moon_loadgen_result_t *results, uint32_t n,
                                         double duration_s, const moon_loadgen_slo_t *slo,
                                         moon_loadgen_stats_t *stats)
{
    size_t   n_itl = 0, k_ttft = 0, k_tpot = 0, k_e2el = 0, k_itl = 0;
    double  *ttft, *tpot, *e2el, *itl, *series;
    uint32_t n_buckets;

    memset(stats, 0, sizeof(*stats));
    for (uint32_t i = 0; i < n; i++) {
        n_itl += results[i].ok ? results[i].n_itl : 0;
    }
    n_buckets = (uint32_t)ceil(duration_s > 0 ? duration_s : 1) + 1;
    ttft      = moon_calloc(n + 1, sizeof(double));
    tpot      = moon_calloc(n + 1, sizeof(double));
    e2el      = moon_calloc(2 * (size_t)n + 1, sizeof(double));
    itl       = moon_calloc(n_itl + 1, sizeof(double));
    series    = moon_calloc(n_buckets, sizeof(double));
    if (ttft == NULL || tpot == NULL || e2el == NULL || itl == NULL || series == NULL) {
        moon_free(ttft);
        moon_free(tpot);
        moon_free(e2el);
        moon_free(itl);
        moon_free(series);
        return MOON_ERR_NO_MEMORY;
    }
    stats->has_slo =
        slo != NULL && (slo->slo_ttft_ms > 0 || slo->slo_tpot_ms > 0 || slo->slo_e2el_ms > 0);
    for (uint32_t i = 0; i < n; i++) {
        const moon_loadgen_result_t *r = &results[i];
        if (!r->ok) {
            stats->failed++;
            continue;
        }
        stats->completed++;
        stats->total_input += r->n_in;
        stats->total_output += r->n_out;
        stats->total_cached += r->n_cached;
        ttft[k_ttft++] = r->ttft_s;
        e2el[k_e2el++] = r->e2el_s;
        if (r->n_out > 1) {
            tpot[k_tpot++] = moon_loadgen_tpot(r);
        }
        for (uint32_t j = 0; j < r->n_itl; j++) {
            itl[k_itl++] = r->itl_s[j];
        }
        if (stats->has_slo && meets_slo(r, slo)) {
            stats->good++;
        }
    }
    stats->duration_s = duration_s;
    if (duration_s > 0) {
        stats->request_throughput = stats->completed / duration_s;
        stats->output_throughput  = (double)stats->total_output / duration_s;
        stats->total_token_throughput =
            (double)(stats->total_input + stats->total_output) / duration_s;
        stats->request_goodput = stats->good / duration_s;
    }
    stats->slo_attainment = stats->completed ? (double)stats->good / stats->completed : 0.0;
    moon_loadgen_dist(ttft, k_ttft, &stats->ttft);
    moon_loadgen_dist(tpot, k_tpot, &stats->tpot);
    moon_loadgen_dist(itl, k_itl, &stats->itl);
    moon_loadgen_dist(e2el, k_e2el, &stats->e2el);
    moon_loadgen_throughput_series(results, n, 1.0, series, n_buckets);
    for (uint32_t b = 0; b < n_buckets; b++) {
        stats->peak_output_throughput = fmax(stats->peak_output_throughput, series[b]);
    }
    stats->peak_concurrency = n > 0 ? peak_concurrency(results, n, e2el) : 0;
    moon_free(ttft);
    moon_free(tpot);
    moon_free(e2el);
    moon_free(itl);
    moon_free(series);
    return MOON_OK;
}
