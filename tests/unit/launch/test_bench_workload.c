/* tests/unit/launch/test_bench_workload.c - `moonlet bench` workloads: the
 * same seed gives the same prompts and gaps, Gamma gaps have the asked mean
 * and shape, lengths stay in range, shared-prefix chats extend their own
 * earlier turns over shared system prompts. */
#include "loadgen_opts.h"
#include "loadgen_rand.h"
#include "loadgen_workload.h"

#include "moonlet/alloc.h"

#include "moon_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static moon_loadgen_opts_t opts_of(const char *workload, const char *a, const char *b,
                                   const char *c, const char *d)
{
    char               *argv[8] = {"bench", (char *)workload};
    int                 argc    = 2;
    moon_loadgen_opts_t o;
    char                err[200];

    if (a)
        argv[argc++] = (char *)a;
    if (b)
        argv[argc++] = (char *)b;
    if (c)
        argv[argc++] = (char *)c;
    if (d)
        argv[argc++] = (char *)d;
    CU_ASSERT_EQUAL_FATAL(moon_loadgen_opts_parse(argc, argv, &o, err, sizeof(err)), MOON_OK);
    return o;
}

static int same_workload(const moon_loadgen_workload_t *x, const moon_loadgen_workload_t *y)
{
    if (x->n_reqs != y->n_reqs || x->words != y->words) {
        return 0;
    }
    for (uint32_t i = 0; i < x->n_reqs; i++) {
        const moon_loadgen_req_t *a = &x->reqs[i], *b = &y->reqs[i];
        if (a->arrival_s != b->arrival_s || a->max_tokens != b->max_tokens ||
            a->n_ids != b->n_ids || a->n_msgs != b->n_msgs ||
            memcmp(a->ids, b->ids, a->n_ids * sizeof(*a->ids)) != 0 ||
            memcmp(a->msgs, b->msgs, a->n_msgs * sizeof(*a->msgs)) != 0) {
            return 0;
        }
    }
    return 1;
}

static void test_same_seed_same_workload(void)
{
    const char *kinds[] = {"random", "shared-prefix"};

    for (int k = 0; k < 2; k++) {
        moon_loadgen_opts_t o1 =
            opts_of(kinds[k], "--seed=7", "--rate=5", "--range-ratio=0.5", NULL);
        moon_loadgen_opts_t o2 =
            opts_of(kinds[k], "--seed=8", "--rate=5", "--range-ratio=0.5", NULL);
        moon_loadgen_workload_t *a = NULL, *b = NULL, *c = NULL;

        CU_ASSERT_EQUAL_FATAL(moon_loadgen_workload_create(&o1, &a), MOON_OK);
        CU_ASSERT_EQUAL_FATAL(moon_loadgen_workload_create(&o1, &b), MOON_OK);
        CU_ASSERT_EQUAL_FATAL(moon_loadgen_workload_create(&o2, &c), MOON_OK);
        CU_ASSERT_EQUAL(a->n_reqs, 100);
        CU_ASSERT_TRUE(same_workload(a, b));
        CU_ASSERT_FALSE(same_workload(a, c));
        moon_loadgen_workload_destroy(a);
        moon_loadgen_workload_destroy(b);
        moon_loadgen_workload_destroy(c);
    }
}

static void test_rate_changes_gaps_not_prompts(void)
{
    moon_loadgen_opts_t      o1 = opts_of("random", "--rate=5", NULL, NULL, NULL);
    moon_loadgen_opts_t      o2 = opts_of("random", "--rate=50", NULL, NULL, NULL);
    moon_loadgen_workload_t *a = NULL, *b = NULL;

    CU_ASSERT_EQUAL_FATAL(moon_loadgen_workload_create(&o1, &a), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_loadgen_workload_create(&o2, &b), MOON_OK);
    for (uint32_t i = 0; i < a->n_reqs; i++) {
        CU_ASSERT_EQUAL(a->reqs[i].n_ids, b->reqs[i].n_ids);
        CU_ASSERT_EQUAL(memcmp(a->reqs[i].ids, b->reqs[i].ids, a->reqs[i].n_ids * 4), 0);
    }
    CU_ASSERT(a->reqs[99].arrival_s > b->reqs[99].arrival_s);
    moon_loadgen_workload_destroy(a);
    moon_loadgen_workload_destroy(b);
}

static void test_random_ids_and_lengths_in_range(void)
{
    moon_loadgen_opts_t o =
        opts_of("random", "--input-len=100", "--range-ratio=0.2", "--vocab=10", "--output-len=10");
    moon_loadgen_workload_t *wl       = NULL;
    int                      seen[10] = {0};
    uint32_t                 lo = UINT32_MAX, hi = 0;

    CU_ASSERT_EQUAL_FATAL(moon_loadgen_workload_create(&o, &wl), MOON_OK);
    CU_ASSERT_FALSE(wl->words);
    for (uint32_t i = 0; i < wl->n_reqs; i++) {
        const moon_loadgen_req_t *r = &wl->reqs[i];
        CU_ASSERT(r->n_ids >= 80 && r->n_ids <= 120);
        CU_ASSERT(r->max_tokens >= 8 && r->max_tokens <= 12);
        CU_ASSERT_EQUAL(r->n_msgs, 1);
        CU_ASSERT_EQUAL(r->msgs[0].n_ids, r->n_ids);
        CU_ASSERT_EQUAL(r->arrival_s, 0.0); /* no rate: all at once */
        lo = r->n_ids < lo ? r->n_ids : lo;
        hi = r->n_ids > hi ? r->n_ids : hi;
        for (uint32_t j = 0; j < r->n_ids; j++) {
            CU_ASSERT_FATAL(r->ids[j] >= 3 && r->ids[j] < 10); /* never 0..2 */
            seen[r->ids[j]] = 1;
        }
    }
    CU_ASSERT(lo < 90 && hi > 110); /* the range is used */
    for (int t = 3; t < 10; t++) {
        CU_ASSERT(seen[t]);
    }
    moon_loadgen_workload_destroy(wl);
}

static void test_max_context_clamps_lengths(void)
{
    moon_loadgen_opts_t o =
        opts_of("random", "--input-len=500", "--output-len=100", "--max-context=256", NULL);
    moon_loadgen_workload_t *wl = NULL;
    uint32_t                 in = 10, out = 600;

    CU_ASSERT_EQUAL_FATAL(moon_loadgen_workload_create(&o, &wl), MOON_OK);
    CU_ASSERT_EQUAL(wl->reqs[0].max_tokens, 100);
    CU_ASSERT_EQUAL(wl->reqs[0].n_ids, 156);
    moon_loadgen_workload_destroy(wl);
    moon_loadgen_clamp(512, &in, &out);
    CU_ASSERT_EQUAL(out, 511);
    CU_ASSERT_EQUAL(in, 1);
    in = 0, out = 0;
    moon_loadgen_clamp(0, &in, &out);
    CU_ASSERT(in == 1 && out == 1);
}

static void gap_moments(double rate, double shape, double *mean_p, double *cv2_p)
{
    enum { N = 40000 };
    static double t[N];
    double        sum = 0, sq = 0, mean;

    moon_loadgen_arrivals(rate, shape, 42, N, t);
    CU_ASSERT_EQUAL(t[0], 0.0);
    for (int i = 1; i < N; i++) {
        CU_ASSERT_FATAL(t[i] >= t[i - 1]);
        sum += t[i] - t[i - 1];
    }
    mean = sum / (N - 1);
    for (int i = 1; i < N; i++) {
        sq += (t[i] - t[i - 1] - mean) * (t[i] - t[i - 1] - mean);
    }
    *mean_p = mean;
    *cv2_p  = sq / (N - 1) / (mean * mean);
}

static void test_gamma_gaps_have_the_right_mean_and_shape(void)
{
    const double shapes[] = {1.0, 0.25, 4.0};
    double       mean, cv2;

    for (int i = 0; i < 3; i++) {
        gap_moments(8.0, shapes[i], &mean, &cv2);
        /* mean 1/rate; squared coefficient of variation 1/shape (Poisson: 1) */
        CU_ASSERT(fabs(mean - 0.125) < 0.125 * 0.03);
        CU_ASSERT(fabs(cv2 - 1.0 / shapes[i]) < 0.1 / shapes[i]);
    }
}

static void test_gamma_draws_are_seeded(void)
{
    moon_loadgen_rand_t a, b, c;

    moon_loadgen_rand_init(&a, 1, 2);
    moon_loadgen_rand_init(&b, 1, 2);
    moon_loadgen_rand_init(&c, 1, 3);
    for (int i = 0; i < 100; i++) {
        double x = moon_loadgen_rand_gamma(&a, 0.5, 2.0);
        CU_ASSERT_EQUAL(x, moon_loadgen_rand_gamma(&b, 0.5, 2.0));
        CU_ASSERT(x >= 0);
    }
    CU_ASSERT_NOT_EQUAL(moon_loadgen_rand_u64(&a), moon_loadgen_rand_u64(&c));
}

static void test_shared_prefix_turns_extend_their_chat(void)
{
    moon_loadgen_opts_t o =
        opts_of("shared-prefix", "--num-prompts=12", "--num-prefixes=2", "--turns=3", NULL);
    moon_loadgen_workload_t *wl      = NULL;
    uint32_t                 n_chats = 4;

    CU_ASSERT_EQUAL_FATAL(moon_loadgen_workload_create(&o, &wl), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(wl->n_reqs, 12);
    for (uint32_t k = 0; k < 12; k++) {
        const moon_loadgen_req_t *r = &wl->reqs[k];
        uint32_t                  t = k / n_chats, c = k % n_chats;
        CU_ASSERT_EQUAL(r->n_ids, 128 + t * (16 + 64) + 16);
        CU_ASSERT_EQUAL(r->n_msgs, 2 + 2 * t);
        CU_ASSERT_EQUAL(r->msgs[0].role, MOON_LOADGEN_ROLE_SYSTEM);
        CU_ASSERT_EQUAL(r->msgs[r->n_msgs - 1].role, MOON_LOADGEN_ROLE_USER);
        /* the same system prompt for chats c and c + 2 (2 prefixes), not c + 1 */
        if (c + 2 < n_chats) {
            CU_ASSERT_EQUAL(memcmp(r->ids, wl->reqs[k + 2].ids, 128 * 4), 0);
            CU_ASSERT_NOT_EQUAL(memcmp(r->ids, wl->reqs[k + 1].ids, 128 * 4), 0);
        }
        /* turn t + 1 starts with the whole prompt of turn t */
        if (t > 0) {
            const moon_loadgen_req_t *prev = &wl->reqs[k - n_chats];
            CU_ASSERT_EQUAL(memcmp(r->ids, prev->ids, prev->n_ids * 4), 0);
            CU_ASSERT_EQUAL(r->msgs[r->n_msgs - 2].role, MOON_LOADGEN_ROLE_ASSISTANT);
            CU_ASSERT_EQUAL(r->msgs[r->n_msgs - 2].n_ids, 64);
        }
    }
    moon_loadgen_workload_destroy(wl);
}

static void test_shared_prefix_over_the_context_is_refused(void)
{
    moon_loadgen_opts_t      o  = opts_of("shared-prefix", "--max-context=200", NULL, NULL, NULL);
    moon_loadgen_workload_t *wl = NULL;

    CU_ASSERT_EQUAL(moon_loadgen_workload_create(&o, &wl), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NULL(wl);
}

static void test_words_format_indexes_the_word_list(void)
{
    moon_loadgen_opts_t      o  = opts_of("random", "--endpoint=chat", NULL, NULL, NULL);
    moon_loadgen_workload_t *wl = NULL;

    CU_ASSERT_EQUAL_FATAL(moon_loadgen_workload_create(&o, &wl), MOON_OK);
    CU_ASSERT_TRUE(wl->words);
    for (uint32_t j = 0; j < wl->reqs[0].n_ids; j++) {
        CU_ASSERT(wl->reqs[0].ids[j] < moon_loadgen_n_words());
    }
    CU_ASSERT_STRING_EQUAL(moon_loadgen_word(moon_loadgen_n_words()), "");
    moon_loadgen_workload_destroy(wl);
}

static void test_out_of_memory_leaves_nothing(void)
{
    const char *kinds[] = {"random", "shared-prefix"};

    for (int k = 0; k < 2; k++) {
        moon_loadgen_opts_t o = opts_of(kinds[k], "--num-prompts=5", NULL, NULL, NULL);
        for (uint64_t n = 1;; n++) {
            moon_loadgen_workload_t *wl = NULL;
            moon_status_t            status;

            moon_fault_fail_after(n);
            status = moon_loadgen_workload_create(&o, &wl);
            moon_fault_reset();
            if (status == MOON_OK) {
                CU_ASSERT(n > 5); /* it did allocate per request */
                moon_loadgen_workload_destroy(wl);
                break;
            }
            CU_ASSERT_EQUAL_FATAL(status, MOON_ERR_NO_MEMORY);
            CU_ASSERT_PTR_NULL(wl);
        }
    }
}

MOON_TEST_MAIN("bench_workload", NULL, NULL, test_out_of_memory_leaves_nothing,
               test_same_seed_same_workload, test_rate_changes_gaps_not_prompts,
               test_random_ids_and_lengths_in_range, test_max_context_clamps_lengths,
               test_gamma_gaps_have_the_right_mean_and_shape, test_gamma_draws_are_seeded,
               test_shared_prefix_turns_extend_their_chat,
               test_shared_prefix_over_the_context_is_refused,
               test_words_format_indexes_the_word_list)
