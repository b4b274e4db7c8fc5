/* launch/sim/sim_report.c - replay records, their CSV and summary, and the plot
 * series (sim_report.h). Text output is printed from integers where it can
 * be, so equal records always give equal bytes. */
#include "sim_report.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

moon_status_t moon_sim_records_init(moon_sim_records_t *r, uint32_t n)
{
    r->n           = n;
    r->n_after_end = 0;
    r->recs        = moon_calloc(n ? n : 1, sizeof(*r->recs));
    if (r->recs == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < n; i++) {
        r->recs[i].prefill          = -1;
        r->recs[i].decode           = -1;
        r->recs[i].prefill_start_ns = UINT64_MAX;
    }
    return MOON_OK;
}

void moon_sim_records_fini(moon_sim_records_t *r)
{
    if (r == NULL || r->recs == NULL) {
        return;
    }
    for (uint32_t i = 0; i < r->n; i++) {
        moon_free(r->recs[i].gaps_ns);
    }
    moon_free(r->recs);
    r->recs = NULL;
}

static moon_sim_record_t *open_rec(moon_sim_records_t *r, uint32_t id)
{
    if (id >= r->n) {
        return NULL;
    }
    if (r->recs[id].status != MOON_SIM_REQ_PENDING) {
        return NULL;
    }
    return &r->recs[id];
}

moon_status_t moon_sim_records_arrive(moon_sim_records_t *r, uint32_t id, uint64_t t_ns,
                                      uint32_t input_tokens)
{
    moon_sim_record_t *x = open_rec(r, id);

    if (x == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    x->arrival_ns   = t_ns;
    x->input_tokens = input_tokens;
    return MOON_OK;
}

moon_status_t moon_sim_records_place(moon_sim_records_t *r, uint32_t id, int32_t prefill,
                                     int32_t decode, uint32_t prefix_hit_tokens)
{
    moon_sim_record_t *x = open_rec(r, id);

    if (x == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    x->prefill           = prefill;
    x->decode            = decode;
    x->prefix_hit_tokens = prefix_hit_tokens;
    return MOON_OK;
}

moon_status_t moon_sim_records_service(moon_sim_records_t *r, uint32_t id, uint64_t decode_ttft_ns)
{
    moon_sim_record_t *x = open_rec(r, id);

    if (x == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    x->decode_ttft_ns = decode_ttft_ns;
    return MOON_OK;
}

moon_status_t moon_sim_records_prefill_start(moon_sim_records_t *r, uint32_t id, uint64_t t_ns)
{
    moon_sim_record_t *x = open_rec(r, id);

    if (x == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    x->prefill_start_ns = t_ns;
    return MOON_OK;
}

/* A client-visible event (TOKEN, DONE) for a request that had ended: the
 * fault checks count them (a duplicate DONE, a token past the end). */
static void after_end(moon_sim_records_t *r, uint32_t id)
{
    if (id < r->n) {
        r->n_after_end++;
        MOON_WARN("replay: request %u got an event after its end", id);
    }
}

moon_status_t moon_sim_records_token(moon_sim_records_t *r, uint32_t id, uint64_t t_ns)
{
    moon_sim_record_t *x = open_rec(r, id);

    if (x == NULL) {
        after_end(r, id);
        return MOON_ERR_INVALID_PARAM;
    }
    if (x->output_tokens > 0) {
        if (x->n_gaps == x->cap_gaps) {
            uint32_t  cap = x->cap_gaps ? 2 * x->cap_gaps : 64;
            uint64_t *g   = moon_realloc(x->gaps_ns, cap * sizeof(*g));

            if (g == NULL) {
                return MOON_ERR_NO_MEMORY;
            }
            x->gaps_ns  = g;
            x->cap_gaps = cap;
        }
        x->gaps_ns[x->n_gaps++] = t_ns - x->last_token_ns;
    } else {
        x->first_token_ns = t_ns;
    }
    x->last_token_ns = t_ns;
    x->output_tokens++;
    return MOON_OK;
}

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? 1 : x > y ? -1 : 0;
}

uint64_t moon_sim_tbt_ns(uint64_t *gaps, uint32_t n)
{
    uint32_t k   = (n + 9) / 10;
    uint64_t sum = 0;

    if (n == 0) {
        return 0;
    }
    qsort(gaps, n, sizeof(*gaps), cmp_desc);
    for (uint32_t i = 0; i < k; i++) {
        sum += gaps[i];
    }
    return (sum + k / 2) / k;
}

moon_status_t moon_sim_records_finish(moon_sim_records_t *r, uint32_t id, uint64_t t_ns,
                                      moon_sim_req_status_t status)
{
    moon_sim_record_t *x = open_rec(r, id);

    if (x == NULL) {
        after_end(r, id);
    }
    if (x == NULL || status == MOON_SIM_REQ_PENDING || status > MOON_SIM_REQ_ERROR) {
        return MOON_ERR_INVALID_PARAM;
    }
    x->finish_ns = t_ns;
    x->status    = status;
    x->tbt_ns    = moon_sim_tbt_ns(x->gaps_ns, x->n_gaps);
    moon_free(x->gaps_ns);
    x->gaps_ns  = NULL;
    x->n_gaps   = 0;
    x->cap_gaps = 0;
    return MOON_OK;
}

static const char *status_name(moon_sim_req_status_t s)
{
    static const char *names[] = {"pending", "ok", "rejected", "error"};
    return s <= MOON_SIM_REQ_ERROR ? names[s] : "?";
}

/* ns as seconds with 9 decimals, exact; into buf. */
static const char *secs(char *buf, size_t n, uint64_t ns)
{
    snprintf(buf, n, "%llu.%09llu", (unsigned long long)(ns / 1000000000ull),
             (unsigned long long)(ns % 1000000000ull));
    return buf;
}

moon_status_t moon_sim_records_write_csv(const moon_sim_records_t *r, FILE *f)
{
    int bad = fputs("id,arrival_s,prefill,decode,input_tokens,output_tokens,prefix_hit_tokens,"
                    "queue_s,ttft_s,tbt_s,finish_s,status\n",
                    f) < 0;

    for (uint32_t i = 0; i < r->n && !bad; i++) {
        const moon_sim_record_t *x = &r->recs[i];
        char                     a[32], q[32] = "", t[32] = "", b[32] = "", e[32] = "";

        secs(a, sizeof(a), x->arrival_ns);
        if (x->prefill_start_ns != UINT64_MAX && x->prefill_start_ns >= x->arrival_ns) {
            secs(q, sizeof(q), x->prefill_start_ns - x->arrival_ns);
        }
        if (x->output_tokens > 0) {
            secs(t, sizeof(t), x->first_token_ns - x->arrival_ns);
        }
        if (x->status == MOON_SIM_REQ_OK) {
            secs(b, sizeof(b), x->tbt_ns);
        }
        if (x->status != MOON_SIM_REQ_PENDING) {
            secs(e, sizeof(e), x->finish_ns);
        }
        bad = fprintf(f, "%u,%s,%d,%d,%u,%u,%u,%s,%s,%s,%s,%s\n", i, a, x->prefill, x->decode,
                      x->input_tokens, x->output_tokens, x->prefix_hit_tokens, q, t, b, e,
                      status_name(x->status)) < 0;
    }
    if (bad || ferror(f)) {
        MOON_ERROR("replay: writing the request CSV failed");
        return MOON_ERR_IO;
    }
    return MOON_OK;
}

static double ttft_s(const moon_sim_record_t *x)
{
    return (double)(x->first_token_ns - x->arrival_ns) * 1e-9;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y ? 1 : 0;
}

/* Nearest rank: the ceil(p / 100 * n)-th smallest of sorted v[0..n). */
static double pct(const double *v, uint64_t n, double p)
{
    uint64_t rank = (uint64_t)ceil(p / 100.0 * (double)n - 1e-9);

    if (n == 0) {
        return 0.0;
    }
    return v[rank == 0 ? 0 : rank - 1];
}

/* Sorted TTFT (which 0) or TBT (1) of the completed requests; *n_p their count. */
static moon_status_t sorted_values(const moon_sim_records_t *r, moon_sim_series_t which,
                                   double **v_p, uint64_t *n_p)
{
    double  *v = moon_malloc((r->n ? r->n : 1) * sizeof(double));
    uint64_t n = 0;

    if (v == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < r->n; i++) {
        const moon_sim_record_t *x = &r->recs[i];
        if (x->status == MOON_SIM_REQ_OK && x->output_tokens > 0) {
            v[n++] = which == MOON_SIM_SERIES_TTFT ? ttft_s(x) : (double)x->tbt_ns * 1e-9;
        }
    }
    qsort(v, n, sizeof(*v), cmp_dbl);
    *v_p = v;
    *n_p = n;
    return MOON_OK;
}

static uint64_t slo_ns(double s)
{
    return !(s > 0.0) ? 0 : s >= 1.8e10 ? UINT64_MAX : (uint64_t)llround(s * 1e9);
}

static int meets(const moon_sim_record_t *x, double ttft_slo_s, double tbt_slo_s)
{
    return x->status == MOON_SIM_REQ_OK && x->output_tokens > 0 &&
           x->first_token_ns - x->arrival_ns <= slo_ns(ttft_slo_s) &&
           x->tbt_ns <= slo_ns(tbt_slo_s);
}

moon_status_t moon_sim_summarize(const moon_sim_records_t *r, double ttft_slo_s, double tbt_slo_s,
                                 moon_sim_summary_t *s_p)
{
    moon_sim_summary_t s     = {.ttft_slo_s = ttft_slo_s, .tbt_slo_s = tbt_slo_s};
    uint64_t           first = UINT64_MAX, last = 0, hit = 0, prompt = 0;
    double             sum;
    double            *v;
    uint64_t           n;
    moon_status_t      status;

    for (uint32_t i = 0; i < r->n; i++) {
        const moon_sim_record_t *x = &r->recs[i];

        s.requests++;
        s.completed += x->status == MOON_SIM_REQ_OK;
        s.rejected += x->status == MOON_SIM_REQ_REJECTED;
        s.errors += x->status == MOON_SIM_REQ_ERROR;
        s.met += meets(x, ttft_slo_s, tbt_slo_s);
        first = x->arrival_ns < first ? x->arrival_ns : first;
        last  = x->finish_ns > last ? x->finish_ns : last;
        if (x->prefill >= 0) {
            hit += x->prefix_hit_tokens;
            prompt += x->input_tokens;
        }
    }
    s.makespan_s      = last > first && first != UINT64_MAX ? (double)(last - first) * 1e-9 : 0.0;
    s.slo_attainment  = s.requests ? (double)s.met / (double)s.requests : 0.0;
    s.goodput_rps     = s.makespan_s > 0.0 ? (double)s.met / s.makespan_s : 0.0;
    s.cache_hit_ratio = prompt ? (double)hit / (double)prompt : 0.0;
    for (int which = 0; which < 2; which++) {
        status = sorted_values(r, (moon_sim_series_t)which, &v, &n);
        if (status != MOON_OK) {
            return status;
        }
        sum = 0.0;
        for (uint64_t i = 0; i < n; i++) {
            sum += v[i];
        }
        if (which == MOON_SIM_SERIES_TTFT) {
            s.ttft_mean_s = n ? sum / (double)n : 0.0;
            s.ttft_p50_s  = pct(v, n, 50);
            s.ttft_p90_s  = pct(v, n, 90);
            s.ttft_p99_s  = pct(v, n, 99);
        } else {
            s.tbt_mean_s = n ? sum / (double)n : 0.0;
            s.tbt_p50_s  = pct(v, n, 50);
            s.tbt_p90_s  = pct(v, n, 90);
            s.tbt_p99_s  = pct(v, n, 99);
        }
        moon_free(v);
    }
    *s_p = s;
    return MOON_OK;
}

moon_status_t moon_sim_summary_write_json(const moon_sim_summary_t *s, const char *label, FILE *f)
{
    int bad = 0;

    bad |= fprintf(f, "{\n") < 0;
    if (label != NULL) {
        /* labels are policy names: no quotes or backslashes to escape */
        bad |= fprintf(f, "  \"label\": \"%s\",\n", label) < 0;
    }
    bad |= fprintf(f,
                   "  \"requests\": %llu,\n  \"completed\": %llu,\n  \"rejected\": %llu,\n"
                   "  \"errors\": %llu,\n  \"slo_met\": %llu,\n",
                   (unsigned long long)s->requests, (unsigned long long)s->completed,
                   (unsigned long long)s->rejected, (unsigned long long)s->errors,
                   (unsigned long long)s->met) < 0;
    bad |= fprintf(f,
                   "  \"ttft_slo_s\": %.6f,\n  \"tbt_slo_s\": %.6f,\n"
                   "  \"slo_attainment\": %.6f,\n  \"goodput_rps\": %.6f,\n"
                   "  \"cache_hit_ratio\": %.6f,\n  \"makespan_s\": %.6f,\n",
                   s->ttft_slo_s, s->tbt_slo_s, s->slo_attainment, s->goodput_rps,
                   s->cache_hit_ratio, s->makespan_s) < 0;
    bad |= fprintf(f,
                   "  \"ttft_mean_s\": %.6f,\n  \"ttft_p50_s\": %.6f,\n  \"ttft_p90_s\": %.6f,\n"
                   "  \"ttft_p99_s\": %.6f,\n  \"tbt_mean_s\": %.6f,\n  \"tbt_p50_s\": %.6f,\n"
                   "  \"tbt_p90_s\": %.6f,\n  \"tbt_p99_s\": %.6f\n}\n",
                   s->ttft_mean_s, s->ttft_p50_s, s->ttft_p90_s, s->ttft_p99_s, s->tbt_mean_s,
                   s->tbt_p50_s, s->tbt_p90_s, s->tbt_p99_s) < 0;
    if (bad || ferror(f)) {
        MOON_ERROR("replay: writing the summary failed");
        return MOON_ERR_IO;
    }
    return MOON_OK;
}

moon_status_t moon_sim_write_cdf(const moon_sim_records_t *r, moon_sim_series_t which, FILE *f)
{
    double       *v;
    uint64_t      n;
    moon_status_t status = sorted_values(r, which, &v, &n);
    int           bad    = 0;

    if (status != MOON_OK) {
        return status;
    }
    for (uint64_t i = 0; i < n && !bad; i++) {
        bad = fprintf(f, "%.6f %.6f\n", v[i], (double)(i + 1) / (double)n) < 0;
    }
    moon_free(v);
    return bad || ferror(f) ? MOON_ERR_IO : MOON_OK;
}

moon_status_t moon_sim_write_slo_curve(const moon_sim_records_t *r, double ttft_slo_s,
                                       double from_s, double to_s, double step_s, FILE *f)
{
    int bad = 0;

    if (!(step_s > 0.0) || !(to_s >= from_s) || r->n == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t k = 0; !bad && from_s + k * step_s <= to_s + 1e-12; k++) {
        double x =
            round((from_s + k * step_s) * 1e6) / 1e6; /* no drift: 0.3, not 0.30000000000000004 */
        uint64_t met = 0;

        for (uint32_t i = 0; i < r->n; i++) {
            met += meets(&r->recs[i], ttft_slo_s, x);
        }
        bad = fprintf(f, "%.3f %.6f\n", x * 1e3, (double)met / r->n) < 0;
    }
    return bad || ferror(f) ? MOON_ERR_IO : MOON_OK;
}

moon_status_t moon_sim_write_hit_series(const moon_sim_records_t *r, double window_s, FILE *f)
{
    uint64_t win = (uint64_t)llround(window_s * 1e9), last = 0;
    int      bad = 0;

    if (win == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < r->n; i++) {
        last = r->recs[i].arrival_ns > last ? r->recs[i].arrival_ns : last;
    }
    /* records arrive in id order; one pass per window keeps it simple */
    for (uint64_t w = 0; !bad && w <= last / win; w++) {
        uint64_t hit = 0, prompt = 0;

        for (uint32_t i = 0; i < r->n; i++) {
            const moon_sim_record_t *x = &r->recs[i];
            if (x->prefill >= 0 && x->arrival_ns / win == w) {
                hit += x->prefix_hit_tokens;
                prompt += x->input_tokens;
            }
        }
        if (prompt > 0) {
            bad = fprintf(f, "%.3f %.6f\n", (double)((w + 1) * win) * 1e-9,
                          (double)hit / (double)prompt) < 0;
        }
    }
    return bad || ferror(f) ? MOON_ERR_IO : MOON_OK;
}
