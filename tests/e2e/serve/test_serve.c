/* tests/serve/test_serve.c - the serving cluster end to end through the
 * client API: greedy output equals `moonlet generate` (the golden ids of
 * stories260K) token for token, prefix reuse through the store, 64
 * concurrent requests with cancels and no leaked blocks, stop strings, and
 * bad input answered with errors. One process (every actor in it), or under
 * mpirun: conductor and the client on rank 0, store, prefill and decode on
 * ranks 1.. (disaggregated, KV pulled between ranks). */
#include "moon_test.h"
#include "moon_test_greedy.h"
#include "moonlet/config.h"
#include "moonlet/dist.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef MOON_TEST_DATA_DIR
#error "MOON_TEST_DATA_DIR must point at tests/data"
#endif
#define MODEL MOON_TEST_DATA_DIR "/../../examples/models/stories260K/stories260K.gguf"
#define GOLDEN MOON_TEST_DATA_DIR "/stories260K/expected_greedy.json"
#define WAIT_NS 60000000000ull

static moon_dist_t          *g_dist;
static moon_serve_config_t   g_cfg; /* the cluster under test (options from argv) */
static moon_runtime_t       *g_rt;
static moon_serve_cluster_t *g_cluster;
static moon_serve_client_t  *g_client;

typedef struct {
    int32_t            tokens[1024];
    uint32_t           n;
    char               text[8192];
    size_t             text_len;
    moon_serve_event_t done;
    int                finished;
    int                out_of_order;
} result_t;

/* Collects events into results[request id - base] until n DONEs. */
static void collect(result_t *res, uint64_t base, uint32_t n)
{
    uint32_t done = 0;

    while (done < n) {
        moon_serve_event_t ev;
        result_t          *r;
        if (moon_serve_client_next(g_client, WAIT_NS, &ev) != MOON_OK) {
            CU_FAIL("no event within a minute");
            return;
        }
        CU_ASSERT_FATAL(ev.request_id >= base && ev.request_id < base + n);
        r = &res[ev.request_id - base];
        CU_ASSERT(!r->finished); /* nothing after DONE */
        if (ev.kind == MOON_SERVE_EV_TOKEN) {
            r->out_of_order |= ev.index != r->n;
            if (r->n < MOON_ARRAY_SIZE(r->tokens)) {
                r->tokens[r->n++] = ev.token;
            }
            size_t l = strlen(ev.text);
            if (r->text_len + l < sizeof(r->text)) {
                memcpy(r->text + r->text_len, ev.text, l + 1);
                r->text_len += l;
            }
        } else {
            r->done      = ev;
            r->done.msg_ = NULL;
            r->finished  = 1;
            done++;
        }
        moon_serve_event_fini(&ev);
    }
}

static void run_one(const moon_serve_params_t *p, result_t *r)
{
    uint64_t id;

    memset(r, 0, sizeof(*r));
    CU_ASSERT_EQUAL_FATAL(moon_serve_client_submit(g_client, p, &id), MOON_OK);
    collect(r, id, 1);
}

static cJSON *load_golden(void)
{
    FILE  *f = fopen(GOLDEN, "rb");
    char  *buf;
    long   n;
    cJSON *j;

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    CU_ASSERT_EQUAL_FATAL(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    j = cJSON_Parse(buf);
    free(buf);
    return j;
}

/* Greedy output through the cluster equals the golden ids for every case. */
static void test_golden_greedy(void)
{
    cJSON *j = load_golden(), *c;

    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases"))
    {
        cJSON              *prompt_ids = cJSON_GetObjectItem(c, "prompt_ids");
        cJSON              *gen        = cJSON_GetObjectItem(c, "generated_ids");
        int                 n_prompt   = cJSON_GetArraySize(prompt_ids);
        int                 steps      = cJSON_GetObjectItem(c, "steps")->valueint;
        moon_serve_params_t p;
        result_t           *r = calloc(1, sizeof(*r));

        moon_serve_params_default(&p);
        p.prompt     = cJSON_GetObjectItem(c, "prompt")->valuestring;
        p.max_tokens = (uint32_t)(steps - n_prompt + 1);
        run_one(&p, r);
        CU_ASSERT_EQUAL(r->done.status, MOON_OK);
        CU_ASSERT_EQUAL(r->done.n_prompt, (uint32_t)n_prompt);
        CU_ASSERT_FALSE(r->out_of_order);
        /* generated_ids repeat the prompt after BOS, then the new tokens */
        CU_ASSERT_EQUAL(r->n, (uint32_t)(cJSON_GetArraySize(gen) - (n_prompt - 1)));
        for (uint32_t i = 0; i < r->n; i++) {
            int want = cJSON_GetArrayItem(gen, (int)i + n_prompt - 1)->valueint;
            if (r->tokens[i] != want) {
                fprintf(stderr, "case '%s': token %u is %d, expected %d\n", p.prompt, i,
                        r->tokens[i], want);
                CU_FAIL("a token differs from the golden output");
                break;
            }
        }
        CU_ASSERT_EQUAL(r->done.finish, MOON_FINISH_LENGTH);
        free(r);
    }
    cJSON_Delete(j);
}

static void make_prompt(int32_t *t, uint32_t n, uint32_t seed)
{
    for (uint32_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = 3 + (int32_t)((seed >> 16) % 509u);
    }
}

/* A second request sharing a 3-block prefix reuses those blocks and gives
 * the same tokens as computing them: the prefill instance that computed
 * them still holds them in its own prefix cache (one prefill instance: no
 * fetch from the store, only the 12 new tokens computed); a colocated
 * instance in its pool. */
/* The conductor's counters once they hold every answer so far: they sum
 * the instances' LOAD reports, which come after the answers (two reads
 * 100 ms apart agree; at most 5 s). */
static void stats_settled(moon_serve_stats_t *s)
{
    moon_serve_stats_t last;

    CU_ASSERT_EQUAL_FATAL(moon_serve_client_stats(g_client, WAIT_NS, &last), MOON_OK);
    for (int i = 0; i < 50; i++) {
        nanosleep(&(struct timespec){0, 100000000}, NULL);
        CU_ASSERT_EQUAL_FATAL(moon_serve_client_stats(g_client, WAIT_NS, s), MOON_OK);
        if (s->computed_tokens == last.computed_tokens &&
            s->store_hit_tokens == last.store_hit_tokens) {
            return;
        }
        last = *s;
    }
}

static void test_prefix_reuse(void)
{
    int32_t             a[60], b[60];
    moon_serve_params_t p;
    moon_serve_stats_t  s0, s1;
    result_t           *r1 = calloc(1, sizeof(*r1)), *r2 = calloc(1, sizeof(*r2));
    result_t           *r3 = calloc(1, sizeof(*r3));

    make_prompt(a, 60, 7);
    memcpy(b, a, sizeof(b));
    make_prompt(b + 48, 12, 99); /* 3 blocks of 16 shared, the rest differs */
    moon_serve_params_default(&p);
    p.tokens     = a;
    p.n_tokens   = 60;
    p.max_tokens = 12;
    p.flags      = 0;
    run_one(&p, r1);
    CU_ASSERT_EQUAL(r1->done.n_cached, 0);
    /* b, cold: the store holds a's blocks only, which b shares. a's puts
     * commit after its answer: give the store time for them */
    nanosleep(&(struct timespec){0, 300000000}, NULL);
    stats_settled(&s0);
    p.tokens = b;
    run_one(&p, r2);
    CU_ASSERT_EQUAL(r2->done.status, MOON_OK);
    CU_ASSERT_EQUAL(r2->done.n_cached, 48);
    /* the same tokens as the engine computing all of b */
    r3->n = moon_test_greedy(moon_serve_cluster_model(g_cluster), b, 60, 12, r3->tokens);
    CU_ASSERT_EQUAL(r2->n, r3->n);
    CU_ASSERT_EQUAL(memcmp(r2->tokens, r3->tokens, r2->n * sizeof(int32_t)), 0);
    stats_settled(&s1);
    if (!g_cfg.colocated && g_cfg.n_prefill == 1) {
        CU_ASSERT_EQUAL(s1.store_hit_tokens, s0.store_hit_tokens); /* not from the store */
        CU_ASSERT_EQUAL(s1.computed_tokens, s0.computed_tokens + 12);
    }
    free(r1);
    free(r2);
    free(r3);
}

/* A store small enough to fill (--store-dram-mib 1): once other prompts have
 * pushed a prompt's blocks out, it is computed again, with the same tokens;
 * with an SSD tier (--store-ssd) the blocks spill instead and are still
 * fetched. */
static void test_evicted_prefix_recomputes(void)
{
    moon_kv_config_t kc =
        moon_model_kv_config(moon_model_config(moon_serve_cluster_model(g_cluster)), 16, 1,
                             1); /* one block of the instances' caches */
    uint64_t            capacity;
    int32_t             a[60], other[60];
    moon_serve_params_t p;
    result_t           *r1 = calloc(1, sizeof(*r1)), *r2 = calloc(1, sizeof(*r2));
    result_t           *ref = calloc(1, sizeof(*ref)), *tmp = calloc(1, sizeof(*tmp));

    CU_ASSERT_EQUAL_FATAL(moon_serve_config_kv(&g_cfg, &kc.elem_type, NULL), MOON_OK);
    capacity = (g_cfg.store_dram_mib << 20) / moon_kv_config_pool_bytes(&kc);
    if (g_cfg.colocated || g_cfg.n_store == 0 || capacity > 400 || g_cfg.block_tokens != 16) {
        printf("skipped: needs a store of at most 400 blocks (--store-dram-mib 1) ");
        goto out;
    }
    make_prompt(a, 60, 4242);
    moon_serve_params_default(&p);
    p.tokens     = a;
    p.n_tokens   = 60;
    p.max_tokens = 8;
    p.flags      = 0;
    run_one(&p, r1);
    CU_ASSERT_EQUAL(r1->done.status, MOON_OK);
    /* 3 new blocks per prompt: twice the store's capacity pushes a's out of DRAM */
    for (uint32_t i = 0; i < 2 * capacity / 3 + 8; i++) {
        make_prompt(other, 60, 10000 + i);
        p.tokens = other;
        run_one(&p, tmp);
        CU_ASSERT_EQUAL(tmp->done.status, MOON_OK);
    }
    nanosleep(&(struct timespec){0, 300000000}, NULL); /* the last puts commit */
    p.tokens = a;
    run_one(&p, r2);
    CU_ASSERT_EQUAL(r2->done.status, MOON_OK);
    if (g_cfg.store_ssd != NULL) {
        CU_ASSERT_EQUAL(r2->done.n_cached, 48); /* spilled to SSD, fetched from there */
    } else {
        CU_ASSERT(r2->done.n_cached < 48); /* evicted: computed again */
    }
    ref->n = moon_test_greedy(moon_serve_cluster_model(g_cluster), a, 60, 8, ref->tokens);
    CU_ASSERT_EQUAL(r2->n, ref->n);
    CU_ASSERT_EQUAL(memcmp(r2->tokens, ref->tokens, ref->n * sizeof(int32_t)), 0);
    CU_ASSERT_EQUAL(memcmp(r1->tokens, ref->tokens, ref->n * sizeof(int32_t)), 0);
out:
    free(r1);
    free(r2);
    free(ref);
    free(tmp);
}

/* Bad input gets a clear error; nothing else is affected. */
static void test_bad_input(void)
{
    moon_serve_params_t p;
    result_t           *r = calloc(1, sizeof(*r));
    int32_t             big[600], tok = 5, stop = 100000;

    moon_serve_params_default(&p);
    p.prompt = "";
    p.flags  = 0;
    run_one(&p, r);
    CU_ASSERT_EQUAL(r->done.finish, MOON_FINISH_ERROR);
    CU_ASSERT_EQUAL(r->done.status, MOON_ERR_INVALID_PARAM);
    CU_ASSERT(strstr(r->done.message, "empty") != NULL);

    make_prompt(big, 600, 3);
    moon_serve_params_default(&p);
    p.tokens   = big;
    p.n_tokens = 600;
    run_one(&p, r);
    CU_ASSERT_EQUAL(r->done.finish, MOON_FINISH_ERROR);
    CU_ASSERT(strstr(r->done.message, "context") != NULL);

    moon_serve_params_default(&p);
    p.tokens     = &tok;
    p.n_tokens   = 1;
    p.max_tokens = 0;
    run_one(&p, r);
    CU_ASSERT_EQUAL(r->done.finish, MOON_FINISH_ERROR);

    p.max_tokens = 1000;
    run_one(&p, r);
    CU_ASSERT_EQUAL(r->done.finish, MOON_FINISH_ERROR);

    p.max_tokens = 4;
    p.stop_ids   = &stop;
    p.n_stop_ids = 1;
    run_one(&p, r);
    CU_ASSERT_EQUAL(r->done.finish, MOON_FINISH_ERROR);
    CU_ASSERT(strstr(r->done.message, "stop") != NULL);

    /* choices: more than 16 refused by the client; with the prompt's
     * logprobs (each choice's prefill would send them) by the conductor,
     * every choice answered */
    p.n_stop_ids = 0;
    p.n_choices  = MOON_SERVE_MAX_CHOICES + 1;
    CU_ASSERT_EQUAL(moon_serve_client_submit(g_client, &p, NULL), MOON_ERR_INVALID_PARAM);
    if (!g_cfg.colocated) {
        result_t *two = calloc(2, sizeof(*two));
        uint64_t  id;
        p.n_choices = 2;
        p.logprobs  = 1;
        p.flags     = MOON_SERVE_F_PROMPT_LOGPROBS;
        CU_ASSERT_EQUAL_FATAL(moon_serve_client_submit(g_client, &p, &id), MOON_OK);
        collect(two, id, 2);
        for (int i = 0; i < 2; i++) {
            CU_ASSERT_EQUAL(two[i].done.finish, MOON_FINISH_ERROR);
            CU_ASSERT_EQUAL(two[i].done.status, MOON_ERR_INVALID_PARAM);
        }
        free(two);
        p.logprobs = 0;
        p.flags    = 0;
    }
    p.n_choices = 0;

    /* and a good one still works */
    run_one(&p, r);
    CU_ASSERT_EQUAL(r->done.status, MOON_OK);
    CU_ASSERT_EQUAL(r->n, 4);
    free(r);
}

/* Stop strings end the request and never appear in the streamed text. */
static void test_stop_string(void)
{
    moon_serve_params_t p;
    result_t           *r    = calloc(1, sizeof(*r));
    const char         *stop = "Lily";

    moon_serve_params_default(&p);
    p.prompt     = "Once upon a time";
    p.max_tokens = 60;
    p.stop       = &stop;
    p.n_stop     = 1;
    run_one(&p, r);
    CU_ASSERT_EQUAL(r->done.finish, MOON_FINISH_STOP);
    CU_ASSERT(strstr(r->text, "Lily") == NULL);
    /* the golden text: ", there was a little girl named Lily." */
    CU_ASSERT(strstr(r->text, "girl named ") != NULL);
    free(r);
}

/* 64 concurrent requests of mixed lengths, some sampled, some cancelled:
 * each ends with the right reason, the greedy ones with their
 * single-request tokens, and afterwards no pool holds a block. */
static void test_concurrent_with_cancels(void)
{
    enum { N = 64 };
    result_t           *solo = calloc(N, sizeof(*solo)), *res = calloc(N, sizeof(*res));
    int32_t             prompts[N][40];
    moon_serve_params_t p[N];
    uint64_t            base = 0, id;
    moon_serve_stats_t  s;

    for (uint32_t i = 0; i < N; i++) {
        make_prompt(prompts[i], 40, 1000 + i % 16); /* repeats: prefix hits under load */
        moon_serve_params_default(&p[i]);
        p[i].tokens      = prompts[i];
        p[i].n_tokens    = 8 + (i * 5) % 32;
        p[i].max_tokens  = 8 + (i % 3) * 8;
        p[i].flags       = 0;
        p[i].temperature = i % 4 == 1 ? 0.8f : 0.0f;
        p[i].seed        = i + 1;
    }
    for (uint32_t i = 0; i < N; i += 4) {
        run_one(&p[i], &solo[i]); /* references for the greedy ones */
    }
    for (uint32_t i = 0; i < N; i++) {
        CU_ASSERT_EQUAL_FATAL(moon_serve_client_submit(g_client, &p[i], &id), MOON_OK);
        base = i == 0 ? id : base;
        CU_ASSERT_EQUAL(id, base + i);
        if (i % 8 == 3) {
            moon_serve_client_cancel(g_client, id);
        }
    }
    collect(res, base, N);
    for (uint32_t i = 0; i < N; i++) {
        CU_ASSERT_TRUE(res[i].finished);
        CU_ASSERT_FALSE(res[i].out_of_order);
        if (i % 8 == 3) {
            /* cancelled at once: it may still have finished first */
            CU_ASSERT(res[i].done.finish == MOON_FINISH_CANCELLED ||
                      res[i].done.finish == MOON_FINISH_LENGTH ||
                      res[i].done.finish == MOON_FINISH_STOP);
        } else {
            CU_ASSERT(res[i].done.finish == MOON_FINISH_LENGTH ||
                      res[i].done.finish == MOON_FINISH_STOP);
        }
        if (i % 4 == 0) {
            CU_ASSERT_EQUAL(res[i].n, solo[i].n);
            CU_ASSERT_EQUAL(memcmp(res[i].tokens, solo[i].tokens, solo[i].n * sizeof(int32_t)), 0);
        }
    }
    /* load reports follow every release: wait for the last ones */
    for (int k = 0; k < 200; k++) {
        CU_ASSERT_EQUAL_FATAL(moon_serve_client_stats(g_client, WAIT_NS, &s), MOON_OK);
        if (s.in_flight == 0 && s.blocks_used_prefill == 0 && s.blocks_used_decode == 0) {
            break;
        }
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    CU_ASSERT_EQUAL(s.in_flight, 0);
    CU_ASSERT_EQUAL(s.blocks_used_prefill, 0);
    CU_ASSERT_EQUAL(s.blocks_used_decode, 0);
    CU_ASSERT(s.n_finished[MOON_FINISH_CANCELLED] > 0 || s.n_finished[MOON_FINISH_LENGTH] > 0);
    free(solo);
    free(res);
}

/* n choices of a prompt (SUBMIT n_choices) share one prefill: the prompt
 * is computed once (a fan-out of n requests would compute the last,
 * partial block n times even with the prefix cache), and choice i streams
 * under id + i exactly the tokens the prompt alone gives with choice i's
 * seed (greedy: all alike), so a seeded request with n > 1 repeats. */
static void run_choices(int32_t *prompt, uint32_t n_prompt, float temperature, uint32_t n)
{
    moon_serve_params_t p;
    moon_serve_stats_t  s0, s1;
    result_t           *res = calloc(n, sizeof(*res)), *solo = calloc(1, sizeof(*solo));
    uint64_t            id;

    moon_serve_params_default(&p);
    p.tokens      = prompt;
    p.n_tokens    = n_prompt;
    p.max_tokens  = 12;
    p.flags       = MOON_SERVE_F_IGNORE_EOS;
    p.temperature = temperature;
    p.seed        = 1234;
    p.n_choices   = n;
    stats_settled(&s0);
    CU_ASSERT_EQUAL_FATAL(moon_serve_client_submit(g_client, &p, &id), MOON_OK);
    collect(res, id, n);
    stats_settled(&s1);
    if (s1.computed_tokens - s0.computed_tokens != n_prompt) {
        fprintf(stderr, "n = %u: %llu prompt tokens computed, %llu from the store, %u expected\n",
                n, (unsigned long long)(s1.computed_tokens - s0.computed_tokens),
                (unsigned long long)(s1.store_hit_tokens - s0.store_hit_tokens), n_prompt);
    }
    CU_ASSERT_EQUAL(s1.computed_tokens - s0.computed_tokens, n_prompt); /* one prefill */
    for (uint32_t i = 0; i < n; i++) {
        CU_ASSERT_EQUAL(res[i].done.status, MOON_OK);
        CU_ASSERT_EQUAL(res[i].done.finish, MOON_FINISH_LENGTH);
        CU_ASSERT_EQUAL(res[i].done.n_prompt, n_prompt);
        CU_ASSERT_FALSE(res[i].out_of_order);
        CU_ASSERT_EQUAL(res[i].n, 12);
        p.n_choices = 1;
        p.seed      = moon_serve_choice_seed(1234, i);
        run_one(&p, solo);
        CU_ASSERT_EQUAL(solo->n, res[i].n);
        CU_ASSERT_EQUAL(memcmp(solo->tokens, res[i].tokens, solo->n * sizeof(int32_t)), 0);
    }
    if (temperature > 0.0f && n > 2) {
        /* the seeds differ: so (almost surely, at 0.9 on this model) do the texts */
        CU_ASSERT_NOT_EQUAL(memcmp(res[1].tokens, res[2].tokens, 12 * sizeof(int32_t)), 0);
    }
    free(res);
    free(solo);
}

static void test_choices(void)
{
    int32_t a[40], b[40];

    make_prompt(a, 40, 5151); /* 2 full blocks and a partial one of 8; no other test's */
    make_prompt(b, 40, 5252);
    run_choices(a, 40, 0.9f, 4);
    run_choices(b, 40, 0.0f, 3);
}

/* CANCEL of one choice ends that choice alone; the others run to their
 * end. victim: the choice cancelled, at once (before the prompt is
 * handed over, most likely) or at its first token. */
static void run_choice_cancel(uint32_t victim, int at_once)
{
    enum { N = 3 };
    int32_t             prompt[24];
    moon_serve_params_t p;
    result_t           *res = calloc(N, sizeof(*res));
    uint64_t            id;
    uint32_t            done      = 0;
    int                 cancelled = 0;

    make_prompt(prompt, 24, 777 + victim);
    moon_serve_params_default(&p);
    p.tokens      = prompt;
    p.n_tokens    = 24;
    p.max_tokens  = 300;
    p.flags       = MOON_SERVE_F_IGNORE_EOS;
    p.temperature = 0.8f;
    p.seed        = 5;
    p.n_choices   = N;
    CU_ASSERT_EQUAL_FATAL(moon_serve_client_submit(g_client, &p, &id), MOON_OK);
    if (at_once) {
        CU_ASSERT_EQUAL(moon_serve_client_cancel(g_client, id + victim), MOON_OK);
        cancelled = 1;
    }
    while (done < N) {
        moon_serve_event_t ev;
        if (moon_serve_client_next(g_client, WAIT_NS, &ev) != MOON_OK) {
            CU_FAIL("no event within a minute");
            break;
        }
        CU_ASSERT_FATAL(ev.request_id >= id && ev.request_id < id + N);
        if (ev.kind == MOON_SERVE_EV_TOKEN) {
            res[ev.request_id - id].n++;
            if (ev.request_id == id + victim && !cancelled) {
                CU_ASSERT_EQUAL(moon_serve_client_cancel(g_client, id + victim), MOON_OK);
                cancelled = 1;
            }
        } else {
            res[ev.request_id - id].done      = ev;
            res[ev.request_id - id].done.msg_ = NULL;
            done++;
        }
        moon_serve_event_fini(&ev);
    }
    for (uint32_t i = 0; i < N; i++) {
        if (i == victim) {
            CU_ASSERT_EQUAL(res[i].done.finish, MOON_FINISH_CANCELLED);
            CU_ASSERT(res[i].n < 300);
        } else {
            CU_ASSERT_EQUAL(res[i].done.finish, MOON_FINISH_LENGTH);
            CU_ASSERT_EQUAL(res[i].n, 300);
        }
    }
    free(res);
}

static void test_choice_cancel(void)
{
    run_choice_cancel(1, 0);
    run_choice_cancel(0, 1); /* choice 0's KV still serves the others */
    run_choice_cancel(2, 1);
}

/* A batch (SLO class 2) that overfills the decode budget, then, once its
 * first requests are 100 tokens in (the rest long prefilled and waiting for
 * room), an interactive request (class 0): it is taken at once, ahead of the
 * batch's waiting requests, and ends first (it wants 4 tokens, the batch's
 * 200 each; first come first served would put it behind them). */
static void test_interactive_passes_batch(void)
{
    enum { N = 24 };
    result_t           *res = calloc(N + 1, sizeof(*res));
    int32_t             prompts[N + 1][8];
    moon_serve_params_t p[N + 1];
    uint64_t            base   = 0, id;
    uint32_t            n_done = 0, max_index = 0;
    int                 sent = 0;

    for (uint32_t i = 0; i <= N; i++) {
        make_prompt(prompts[i], 8, 7000 + i);
        moon_serve_params_default(&p[i]);
        p[i].tokens     = prompts[i];
        p[i].n_tokens   = 8;
        p[i].flags      = MOON_SERVE_F_IGNORE_EOS;
        p[i].max_tokens = i < N ? 200 : 4;
        p[i].slo_class  = i < N ? 2 : 0;
    }
    for (uint32_t i = 0; i < N; i++) {
        CU_ASSERT_EQUAL_FATAL(moon_serve_client_submit(g_client, &p[i], &id), MOON_OK);
        base = i == 0 ? id : base;
    }
    while (n_done < N + (uint32_t)sent) {
        moon_serve_event_t ev;
        if (!sent && max_index >= 100) {
            CU_ASSERT_EQUAL_FATAL(moon_serve_client_submit(g_client, &p[N], &id), MOON_OK);
            CU_ASSERT_EQUAL(id, base + N);
            sent = 1;
        }
        if (moon_serve_client_next(g_client, WAIT_NS, &ev) != MOON_OK) {
            CU_FAIL("no event within a minute");
            break;
        }
        CU_ASSERT_FATAL(ev.request_id >= base && ev.request_id <= base + N);
        if (ev.kind == MOON_SERVE_EV_TOKEN) {
            max_index = MOON_MAX(max_index, ev.index);
        } else {
            result_t *r  = &res[ev.request_id - base];
            r->finished  = 1;
            r->done      = ev;
            r->done.msg_ = NULL;
            r->n         = n_done++; /* its place in the order of ends */
        }
        moon_serve_event_fini(&ev);
    }
    CU_ASSERT_TRUE(sent);
    CU_ASSERT_TRUE(res[N].finished);
    CU_ASSERT_EQUAL(res[N].done.finish, MOON_FINISH_LENGTH);
    CU_ASSERT_EQUAL(res[N].n, 0); /* the interactive one ended first */
    for (uint32_t i = 0; i < N; i++) {
        CU_ASSERT_EQUAL(res[i].done.finish, MOON_FINISH_LENGTH);
    }
    free(res);
}

/* With an SLO no request can meet (--ttft-slo-ms 0.001): every request is
 * rejected at arrival, answered at once, nothing placed. */
static void test_early_rejection(void)
{
    moon_serve_params_t p;
    moon_serve_stats_t  s;
    result_t           *r = calloc(1, sizeof(*r));

    moon_serve_params_default(&p);
    p.prompt     = "Once upon a time";
    p.max_tokens = 8;
    run_one(&p, r);
    CU_ASSERT_EQUAL(r->done.finish, MOON_FINISH_REJECTED);
    CU_ASSERT_EQUAL(r->n, 0);
    CU_ASSERT(strstr(r->done.message, "ttft") != NULL);
    CU_ASSERT_EQUAL_FATAL(moon_serve_client_stats(g_client, WAIT_NS, &s), MOON_OK);
    CU_ASSERT_EQUAL(s.n_placed, 0);
    CU_ASSERT(s.n_rejected >= 1);
    free(r);
}

int main(int argc, char **argv)
{
    moon_runtime_config_t      rcfg;
    moon_serve_config_t       *scfg = &g_cfg;
    moon_serve_client_config_t ccfg = {0};
    moon_config_t             *opts = NULL;
    int                        rc   = 0;

    /* the deployment's options, as `moonlet serve` takes them (CTest runs
     * variants: colocated, several instances) */
    moon_serve_config_default(scfg);
    scfg->model_path     = MODEL;
    scfg->store_dram_mib = 16;
    if (moon_config_create(&opts) != MOON_OK ||
        moon_config_add(opts, &moon_serve_config_table, scfg) != MOON_OK ||
        moon_config_parse(opts, argc, argv) != MOON_OK) {
        fprintf(stderr, "test_serve: %s\n", opts ? moon_config_error(opts) : "no memory");
        return 2;
    }
    if (moon_dist_init(&argc, &argv, NULL, &g_dist) != MOON_OK) {
        return 1;
    }
    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 2;
    rcfg.rank      = moon_dist_rank(g_dist);
    if (moon_runtime_create(&rcfg, &g_rt) != MOON_OK) {
        return 1;
    }
    if (moon_dist_size(g_dist) > 1 && moon_dist_start(g_dist, g_rt) != MOON_OK) {
        return 1;
    }
    moon_runtime_start(g_rt);
    if (moon_serve_cluster_start(scfg, g_rt, moon_dist_size(g_dist) > 1 ? g_dist : NULL,
                                 &g_cluster) != MOON_OK) {
        fprintf(stderr, "test_serve: the cluster did not start\n");
        return 1;
    }
    if (moon_dist_rank(g_dist) == 0) {
        ccfg.conductor = moon_serve_cluster_conductor(g_cluster);
        if (moon_serve_client_create(g_rt, &ccfg, &g_client) != MOON_OK) {
            return 1;
        }
        uint32_t n_pre = scfg->colocated ? 0 : scfg->n_prefill;
        uint32_t n_dec = scfg->colocated ? scfg->n_prefill + scfg->n_decode : scfg->n_decode;
        if (moon_serve_client_wait_ready(g_client, n_pre, n_dec, WAIT_NS) != MOON_OK) {
            fprintf(stderr, "test_serve: the instances did not come up\n");
            return 1;
        }
        rc = scfg->ttft_slo_ms > 0.0
                 ? MOON_TEST_RUN("serve_slo", NULL, NULL, test_early_rejection)
                 : MOON_TEST_RUN("serve", NULL, NULL, test_golden_greedy, test_stop_string,
                                 test_prefix_reuse, test_evicted_prefix_recomputes, test_bad_input,
                                 test_concurrent_with_cancels, test_interactive_passes_batch,
                                 test_choices, test_choice_cancel);
        moon_serve_client_destroy(g_client);
    }
    if (moon_dist_size(g_dist) > 1) {
        moon_dist_barrier(g_dist);
    }
    moon_serve_cluster_stop(g_cluster);
    moon_runtime_shutdown(g_rt, 0);
    moon_runtime_wait(g_rt);
    moon_dist_stop(g_dist);
    moon_runtime_destroy(g_rt);
    moon_dist_finalize(g_dist);
    moon_config_destroy(opts);
    return rc;
}
