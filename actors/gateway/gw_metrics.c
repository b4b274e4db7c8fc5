/* actors/gateway/gw_metrics.c - Prometheus registry (see gw_metrics.h). Families and
 * their series live in growable arrays searched linearly: a registry holds a
 * few dozen families of a few series each. */
#include "gw_metrics.h"

#include "gw_buf.h"
#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char     *labels;  /* as given ("" for none) */
    double    value;   /* counter, gauge; histogram: sum */
    uint64_t  count;   /* histogram */
    uint64_t *buckets; /* histogram: n_bounds counts (not cumulative) */
} series_t;

typedef struct {
    char                 *name;
    char                 *help;
    moon_gw_metric_kind_t kind;
    double               *bounds;
    uint32_t              n_bounds;
    series_t             *series;
    uint32_t              n_series, cap_series;
} family_t;

struct moon_gw_metrics {
    pthread_mutex_t mu;
    char           *const_labels;
    family_t       *fams;
    uint32_t        n_fams, cap_fams;
};

moon_status_t moon_gw_metrics_create(const char *const_labels, moon_gw_metrics_t **m_p)
{
    moon_gw_metrics_t *m = moon_calloc(1, sizeof(*m));

    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->const_labels = moon_strdup(const_labels != NULL ? const_labels : "");
    if (m->const_labels == NULL) {
        moon_free(m);
        return MOON_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&m->mu, NULL);
    *m_p = m;
    return MOON_OK;
}

void moon_gw_metrics_destroy(moon_gw_metrics_t *m)
{
    if (m == NULL) {
        return;
    }
    for (uint32_t i = 0; i < m->n_fams; i++) {
        family_t *f = &m->fams[i];
        for (uint32_t j = 0; j < f->n_series; j++) {
            moon_free(f->series[j].labels);
            moon_free(f->series[j].buckets);
        }
        moon_free(f->series);
        moon_free(f->bounds);
        moon_free(f->name);
        moon_free(f->help);
    }
    moon_free(m->fams);
    moon_free(m->const_labels);
    pthread_mutex_destroy(&m->mu);
    moon_free(m);
}

/* [a-zA-Z_:][a-zA-Z0-9_:]* */
static int valid_name(const char *name)
{
    if (name == NULL || name[0] == '\0' || (name[0] >= '0' && name[0] <= '9')) {
        return 0;
    }
    for (const char *c = name; *c; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == ':')) {
            return 0;
        }
    }
    return 1;
}

/* Preformatted labels: no line breaks, balanced quotes. */
static int valid_labels(const char *labels)
{
    int quotes = 0;

    for (const char *c = labels; *c; c++) {
        if (*c == '\n' || *c == '\r' || *c == '{' || *c == '}') {
            return 0;
        }
        if (*c == '"' && (c == labels || c[-1] != '\\')) {
            quotes++;
        }
    }
    return quotes % 2 == 0;
}

static family_t *find_family(moon_gw_metrics_t *m, const char *name)
{
    for (uint32_t i = 0; i < m->n_fams; i++) {
        if (strcmp(m->fams[i].name, name) == 0) {
            return &m->fams[i];
        }
    }
    return NULL;
}

moon_status_t moon_gw_metrics_declare(moon_gw_metrics_t *m, const char *name,
                                      moon_gw_metric_kind_t kind, const char *help,
                                      const double *bounds, uint32_t n_bounds)
{
    moon_status_t status = MOON_OK;
    family_t     *f;

    size_t len = name != NULL ? strlen(name) : 0;

    /* Prometheus' naming rule (promtool): only counters end in _total */
    if (!valid_name(name) || kind < MOON_GW_COUNTER || kind > MOON_GW_HISTOGRAM ||
        (kind != MOON_GW_COUNTER && len >= 6 && strcmp(name + len - 6, "_total") == 0) ||
        (kind == MOON_GW_HISTOGRAM) != (n_bounds > 0) || (n_bounds > 0 && bounds == NULL)) {
        MOON_ERROR("metrics: bad declaration of %s", name != NULL ? name : "(null)");
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 1; i < n_bounds; i++) {
        if (!(bounds[i] > bounds[i - 1])) {
            MOON_ERROR("metrics: %s: bucket bounds not increasing", name);
            return MOON_ERR_INVALID_PARAM;
        }
    }
    pthread_mutex_lock(&m->mu);
    f = find_family(m, name);
    if (f != NULL) {
        status = f->kind == kind ? MOON_OK : MOON_ERR_EXISTS;
        goto out;
    }
    if (m->n_fams == m->cap_fams) {
        uint32_t  cap  = m->cap_fams ? m->cap_fams * 2 : 32;
        family_t *fams = moon_realloc(m->fams, cap * sizeof(*fams));
        if (fams == NULL) {
            status = MOON_ERR_NO_MEMORY;
            goto out;
        }
        m->fams     = fams;
        m->cap_fams = cap;
    }
    f = &m->fams[m->n_fams];
    memset(f, 0, sizeof(*f));
    f->kind     = kind;
    f->name     = moon_strdup(name);
    f->help     = moon_strdup(help != NULL ? help : "");
    f->n_bounds = n_bounds;
    if (n_bounds > 0) {
        f->bounds = moon_malloc(n_bounds * sizeof(double));
        if (f->bounds != NULL) {
            memcpy(f->bounds, bounds, n_bounds * sizeof(double));
        }
    }
    if (f->name == NULL || f->help == NULL || (n_bounds > 0 && f->bounds == NULL)) {
        moon_free(f->name);
        moon_free(f->help);
        moon_free(f->bounds);
        status = MOON_ERR_NO_MEMORY;
        goto out;
    }
    m->n_fams++;
out:
    pthread_mutex_unlock(&m->mu);
    return status;
}

/* The series of f with labels, created when missing (NULL: out of memory). */
static series_t *get_series(family_t *f, const char *labels, int create)
{
    series_t *s;

    for (uint32_t i = 0; i < f->n_series; i++) {
        if (strcmp(f->series[i].labels, labels) == 0) {
            return &f->series[i];
        }
    }
    if (!create) {
        return NULL;
    }
    if (f->n_series == f->cap_series) {
        uint32_t  cap    = f->cap_series ? f->cap_series * 2 : 4;
        series_t *series = moon_realloc(f->series, cap * sizeof(*series));
        if (series == NULL) {
            return NULL;
        }
        f->series     = series;
        f->cap_series = cap;
    }
    s = &f->series[f->n_series];
    memset(s, 0, sizeof(*s));
    s->labels = moon_strdup(labels);
    if (f->n_bounds > 0) {
        s->buckets = moon_calloc(f->n_bounds, sizeof(uint64_t));
    }
    if (s->labels == NULL || (f->n_bounds > 0 && s->buckets == NULL)) {
        moon_free(s->labels);
        moon_free(s->buckets);
        return NULL;
    }
    f->n_series++;
    return s;
}

typedef enum { OP_ADD, OP_SET, OP_OBSERVE } op_t;

static moon_status_t update(moon_gw_metrics_t *m, const char *name, const char *labels, double v,
                            op_t op)
{
    moon_status_t status = MOON_OK;
    family_t     *f;
    series_t     *s;

    if (labels == NULL) {
        labels = "";
    }
    if (m == NULL || name == NULL || !valid_labels(labels)) {
        return MOON_ERR_INVALID_PARAM;
    }
    pthread_mutex_lock(&m->mu);
    f = find_family(m, name);
    if (f == NULL) {
        status = MOON_ERR_NOT_FOUND;
        goto out;
    }
    if ((op == OP_OBSERVE) != (f->kind == MOON_GW_HISTOGRAM) ||
        (op == OP_ADD && f->kind == MOON_GW_COUNTER && v < 0)) {
        status = MOON_ERR_INVALID_PARAM;
        goto out;
    }
    s = get_series(f, labels, 1);
    if (s == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto out;
    }
    switch (op) {
    case OP_ADD:
        s->value += v;
        break;
    case OP_SET:
        s->value = v;
        break;
    case OP_OBSERVE:
        for (uint32_t i = 0; i < f->n_bounds; i++) {
            if (v <= f->bounds[i]) {
                s->buckets[i]++;
                break;
            }
        }
        s->value += v;
        s->count++;
        break;
    }
out:
    pthread_mutex_unlock(&m->mu);
    return status;
}

moon_status_t moon_gw_metrics_add(moon_gw_metrics_t *m, const char *name, const char *labels,
                                  double delta)
{
    return update(m, name, labels, delta, OP_ADD);
}

moon_status_t moon_gw_metrics_set_gauge(moon_gw_metrics_t *m, const char *name, const char *labels,
                                        double value)
{
    return update(m, name, labels, value, OP_SET);
}

moon_status_t moon_gw_metrics_observe(moon_gw_metrics_t *m, const char *name, const char *labels,
                                      double value)
{
    return update(m, name, labels, value, OP_OBSERVE);
}

moon_status_t moon_gw_metrics_get(moon_gw_metrics_t *m, const char *name, const char *labels,
                                  double *v_p)
{
    moon_status_t status = MOON_OK;
    family_t     *f;
    series_t     *s;

    pthread_mutex_lock(&m->mu);
    f = find_family(m, name);
    if (f == NULL) {
        status = MOON_ERR_NOT_FOUND;
    } else {
        s    = get_series(f, labels != NULL ? labels : "", 0);
        *v_p = s == NULL ? 0 : f->kind == MOON_GW_HISTOGRAM ? (double)s->count : s->value;
    }
    pthread_mutex_unlock(&m->mu);
    return status;
}

/* name{const,labels[,extra]} */
static void put_series_name(moon_gw_buf_t *b, const moon_gw_metrics_t *m, const char *name,
                            const char *suffix, const char *labels, const char *extra)
{
    const char *parts[3] = {m->const_labels, labels, extra};
    int         n        = 0;

    moon_gw_buf_puts(b, name);
    moon_gw_buf_puts(b, suffix);
    for (int i = 0; i < 3; i++) {
        if (parts[i] == NULL || parts[i][0] == '\0') {
            continue;
        }
        moon_gw_buf_puts(b, n++ == 0 ? "{" : ",");
        moon_gw_buf_puts(b, parts[i]);
    }
    if (n > 0) {
        moon_gw_buf_puts(b, "}");
    }
    moon_gw_buf_puts(b, " ");
}

static void render_series(moon_gw_buf_t *b, const moon_gw_metrics_t *m, const family_t *f,
                          const series_t *s)
{
    uint64_t cum = 0;
    char     le[48];

    if (f->kind != MOON_GW_HISTOGRAM) {
        put_series_name(b, m, f->name, "", s->labels, NULL);
        moon_gw_buf_number(b, s->value);
        moon_gw_buf_puts(b, "\n");
        return;
    }
    for (uint32_t i = 0; i <= f->n_bounds; i++) {
        moon_gw_buf_t num;

        moon_gw_buf_init(&num);
        if (i < f->n_bounds) {
            cum += s->buckets[i];
            moon_gw_buf_number(&num, f->bounds[i]);
        } else {
            moon_gw_buf_puts(&num, "+Inf");
        }
        snprintf(le, sizeof(le), "le=\"%s\"", num.data != NULL ? num.data : "");
        b->failed |= num.failed;
        moon_gw_buf_fini(&num);
        put_series_name(b, m, f->name, "_bucket", s->labels, le);
        moon_gw_buf_number(b, (double)(i < f->n_bounds ? cum : s->count));
        moon_gw_buf_puts(b, "\n");
    }
    put_series_name(b, m, f->name, "_sum", s->labels, NULL);
    moon_gw_buf_number(b, s->value);
    moon_gw_buf_puts(b, "\n");
    put_series_name(b, m, f->name, "_count", s->labels, NULL);
    moon_gw_buf_number(b, (double)s->count);
    moon_gw_buf_puts(b, "\n");
}

static const char *kind_name(moon_gw_metric_kind_t kind)
{
    return kind == MOON_GW_COUNTER ? "counter" : kind == MOON_GW_GAUGE ? "gauge" : "histogram";
}

moon_status_t moon_gw_metrics_render(moon_gw_metrics_t *m, char **text_p, size_t *len_p)
{
    moon_gw_buf_t b;

    moon_gw_buf_init(&b);
    pthread_mutex_lock(&m->mu);
    for (uint32_t i = 0; i < m->n_fams; i++) {
        const family_t *f = &m->fams[i];
        uint64_t        zeros[64];
        series_t        zero = {.labels = "", .buckets = zeros};

        moon_gw_buf_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name,
                           kind_name(f->kind));
        if (f->n_series == 0 && f->n_bounds <= MOON_ARRAY_SIZE(zeros)) {
            memset(zeros, 0, sizeof(zeros));
            render_series(&b, m, f, &zero);
        }
        for (uint32_t j = 0; j < f->n_series; j++) {
            render_series(&b, m, f, &f->series[j]);
        }
    }
    pthread_mutex_unlock(&m->mu);
    return moon_gw_buf_take(&b, text_p, len_p);
}

/* ---- the serving catalogue ------------------------------------------------ */

/* Seconds: from 0.5 ms (a tiny model's token) to minutes. */
static const double latency_s[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02,  0.04, 0.06,
                                   0.08,   0.1,   0.25,   0.5,   0.75, 1.0,   2.5,  5.0,
                                   7.5,    10.0,  20.0,   40.0,  80.0, 160.0, 640.0};
static const double token_s[]   = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                   0.025,  0.05,    0.075,  0.1,   0.15,   0.2,   0.3,
                                   0.4,    0.5,     0.75,   1.0,   2.5,    5.0,   10.0};
static const double tokens_n[]  = {1,   2,    5,    10,   20,    50,    100,   200,
                                   500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};

typedef struct {
    const char           *name;
    const char           *help;
    moon_gw_metric_kind_t kind;
    const double         *bounds;
    uint32_t              n_bounds;
} decl_t;

#define HIST(_b) MOON_GW_HISTOGRAM, _b, MOON_ARRAY_SIZE(_b)

static const decl_t serving[] = {
    {MOON_GW_M_TTFT, "Histogram of time to first token in seconds.", HIST(latency_s)},
    {MOON_GW_M_TPOT,
     "Histogram of time per output token in seconds (per request, after the first).",
     HIST(token_s)},
    {MOON_GW_M_ITL, "Histogram of inter-token latency in seconds.", HIST(token_s)},
    {MOON_GW_M_E2E, "Histogram of end to end request latency in seconds.", HIST(latency_s)},
    {MOON_GW_M_QUEUE, "Histogram of time spent waiting for prefill in seconds.", HIST(latency_s)},
    {MOON_GW_M_PREFILL, "Histogram of time spent in prefill in seconds.", HIST(latency_s)},
    {MOON_GW_M_TRANSFER, "Histogram of KV cache handover time (prefill to decode) in seconds.",
     HIST(latency_s)},
    {MOON_GW_M_PROMPT_LEN, "Number of prefill tokens processed per request.", HIST(tokens_n)},
    {MOON_GW_M_GEN_LEN, "Number of generation tokens processed per request.", HIST(tokens_n)},
    {MOON_GW_M_RUNNING, "Number of requests generating tokens.", MOON_GW_GAUGE, NULL, 0},
    {MOON_GW_M_WAITING, "Number of requests waiting for their first token.", MOON_GW_GAUGE, NULL,
     0},
    {MOON_GW_M_PROMPT_TOKENS, "Number of prefill tokens processed.", MOON_GW_COUNTER, NULL, 0},
    {MOON_GW_M_GEN_TOKENS, "Number of generation tokens processed.", MOON_GW_COUNTER, NULL, 0},
    {MOON_GW_M_CACHE_QUERIES, "Prefix cache queries, in tokens.", MOON_GW_COUNTER, NULL, 0},
    {MOON_GW_M_CACHE_HITS, "Prefix cache hits, in tokens.", MOON_GW_COUNTER, NULL, 0},
    {MOON_GW_M_SUCCESS, "Count of finished requests by finish reason.", MOON_GW_COUNTER, NULL, 0},
    {MOON_GW_M_REJECTED, "Requests rejected at arrival because an SLO could not be met.",
     MOON_GW_COUNTER, NULL, 0},
    {MOON_GW_M_HTTP, "HTTP responses by status code.", MOON_GW_COUNTER, NULL, 0},
    {MOON_GW_M_KV_USED, "KV cache blocks in use, per tier.", MOON_GW_GAUGE, NULL, 0},
    {MOON_GW_M_KV_TOTAL, "KV cache blocks in all, per tier.", MOON_GW_GAUGE, NULL, 0},
    {MOON_GW_M_ALIVE, "Serving instances alive, per role.", MOON_GW_GAUGE, NULL, 0},
    {MOON_GW_M_STORE_OPS, "KV store operations, per kind.", MOON_GW_COUNTER, NULL, 0},
    {MOON_GW_M_STORE_EVICT, "KV store blocks evicted.", MOON_GW_COUNTER, NULL, 0},
    {MOON_GW_M_IN_FLIGHT, "Requests placed by the conductor and not yet released.", MOON_GW_GAUGE,
     NULL, 0},
    {MOON_GW_M_STORE_HITS, "Prompt tokens whose KV was fetched from the store.", MOON_GW_COUNTER,
     NULL, 0},
};

static const struct {
    const char *name;
    const char *labels;
} serving_series[] = {
    {MOON_GW_M_SUCCESS, "finished_reason=\"stop\""},
    {MOON_GW_M_SUCCESS, "finished_reason=\"length\""},
    {MOON_GW_M_SUCCESS, "finished_reason=\"cancelled\""},
    {MOON_GW_M_SUCCESS, "finished_reason=\"rejected\""},
    {MOON_GW_M_SUCCESS, "finished_reason=\"error\""},
    {MOON_GW_M_KV_USED, "tier=\"decode_pool\""},
    {MOON_GW_M_KV_USED, "tier=\"prefill_pool\""},
    {MOON_GW_M_KV_USED, "tier=\"store_dram\""},
    {MOON_GW_M_KV_USED, "tier=\"store_ssd\""},
    {MOON_GW_M_KV_TOTAL, "tier=\"decode_pool\""},
    {MOON_GW_M_KV_TOTAL, "tier=\"prefill_pool\""},
    {MOON_GW_M_KV_TOTAL, "tier=\"store_dram\""},
    {MOON_GW_M_KV_TOTAL, "tier=\"store_ssd\""},
    {MOON_GW_M_ALIVE, "role=\"prefill\""},
    {MOON_GW_M_ALIVE, "role=\"decode\""},
    {MOON_GW_M_ALIVE, "role=\"colocated\""},
    {MOON_GW_M_ALIVE, "role=\"store\""},
};

moon_status_t moon_gw_metrics_declare_serving(moon_gw_metrics_t *m)
{
    moon_status_t status;

    for (size_t i = 0; i < MOON_ARRAY_SIZE(serving); i++) {
        const decl_t *d = &serving[i];
        status = moon_gw_metrics_declare(m, d->name, d->kind, d->help, d->bounds, d->n_bounds);
        if (status != MOON_OK) {
            return status;
        }
    }
    for (size_t i = 0; i < MOON_ARRAY_SIZE(serving_series); i++) {
        status = moon_gw_metrics_add(m, serving_series[i].name, serving_series[i].labels, 0);
        if (status != MOON_OK) {
            return status;
        }
    }
    return MOON_OK;
}
