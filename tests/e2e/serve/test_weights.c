/* tests/serve/test_weights.c - weight pushes into a running cluster, under
 * mpirun (conductor, broadcaster and the client on rank 0; store, prefill
 * and decode instances on ranks 1..). Model A is stories260K, model B a
 * perturbed copy (layer 0 changed, the rest bit-identical). Greedy output
 * before a push is A's, after it B's; a push under a load of streaming
 * requests loses none and every response equals the single-version output
 * of the version it names; a delta push moves only the changed chunks; a
 * corrupt chunk, another architecture, another tokenizer and a second push
 * while one runs are refused and the old version keeps serving. */
#include "moon_test.h"
#include "moon_test_greedy.h"
#include "moonlet/config.h"
#include "moonlet/dist.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"
#include "moonlet/weights_client.h"
#include "weights_image.h"
#include "moonlet/weights_msgs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef MOON_TEST_DATA_DIR
#error "MOON_TEST_DATA_DIR must point at tests/data"
#endif
#define MODEL_A MOON_TEST_DATA_DIR "/../../examples/models/stories260K/stories260K.gguf"
#define WAIT_NS 60000000000ull
#define N_PROMPTS 6u
#define MAX_NEW 24u

static moon_dist_t           *g_dist;
static moon_serve_config_t    g_cfg;
static moon_runtime_t        *g_rt;
static moon_serve_cluster_t  *g_cluster;
static moon_serve_client_t   *g_client;
static moon_weights_client_t *g_wc;
static char                   g_model_b[256], g_model_arch[256], g_model_tok[256];
/* expected greedy continuations: [model][prompt] */
static int32_t  g_prompt[N_PROMPTS][12];
static int32_t  g_ref[2][N_PROMPTS][MAX_NEW];
static uint32_t g_ref_n[2][N_PROMPTS];
/* which model each version serves (0: A, 1: B) */
static int      g_model_of[16];
static uint64_t g_serving;

typedef struct {
    uint32_t           prompt;
    int32_t            tokens[MAX_NEW + 1];
    uint32_t           n;
    int                finished;
    moon_serve_event_t done;
} res_t;

static uint64_t submit(uint32_t prompt)
{
    moon_serve_params_t p;
    uint64_t            id = 0;

    moon_serve_params_default(&p);
    p.tokens     = g_prompt[prompt];
    p.n_tokens   = 12;
    p.max_tokens = MAX_NEW;
    p.flags      = 0;
    CU_ASSERT_EQUAL(moon_serve_client_submit(g_client, &p, &id), MOON_OK);
    return id;
}

/* Reads one event into res (indexed by request id - base). 1: a DONE. */
static int read_event(res_t *res, uint64_t base, uint32_t n, uint64_t timeout_ns)
{
    moon_serve_event_t ev;
    res_t             *r;
    int                done = 0;

    if (moon_serve_client_next(g_client, timeout_ns, &ev) != MOON_OK) {
        return -1;
    }
    if (ev.request_id < base || ev.request_id >= base + n) {
        moon_serve_event_fini(&ev);
        CU_FAIL("an event of an unknown request");
        return 0;
    }
    r = &res[ev.request_id - base];
    if (ev.kind == MOON_SERVE_EV_TOKEN) {
        if (r->n <= MAX_NEW) {
            r->tokens[r->n++] = ev.token;
        }
    } else {
        r->done      = ev;
        r->done.msg_ = NULL;
        r->finished  = 1;
        done         = 1;
    }
    moon_serve_event_fini(&ev);
    return done;
}

/* r ended well, on a version the test knows, with that version's tokens. */
static int check_response(const res_t *r)
{
    uint64_t v = r->done.weight_version;
    int      model;

    CU_ASSERT_EQUAL(r->done.status, MOON_OK);
    CU_ASSERT_TRUE(r->done.finish == MOON_FINISH_LENGTH || r->done.finish == MOON_FINISH_STOP);
    if (r->done.status != MOON_OK || v >= MOON_ARRAY_SIZE(g_model_of) || g_model_of[v] < 0) {
        fprintf(stderr, "response of version %llu: %s\n", (unsigned long long)v,
                r->done.message ? r->done.message : "");
        CU_FAIL("a response failed or names an unknown version");
        return 0;
    }
    model = g_model_of[v];
    if (r->n != g_ref_n[model][r->prompt] ||
        memcmp(r->tokens, g_ref[model][r->prompt], r->n * sizeof(int32_t)) != 0) {
        fprintf(stderr, "prompt %u on version %llu (model %c): %u tokens, expected %u\n", r->prompt,
                (unsigned long long)v, "AB"[model], r -> n, g_ref_n[model][r->prompt]);
        CU_FAIL("a response differs from the single-version output of its version");
        return 0;
    }
    return 1;
}

/* Every prompt, twice (both instances of a role see some), all on version. */
static void expect_serving(uint64_t version)
{
    const uint32_t n    = 2 * N_PROMPTS;
    res_t         *res  = calloc(n, sizeof(*res));
    uint64_t       base = 0;
    uint32_t       done = 0;

    for (uint32_t i = 0; i < n; i++) {
        uint64_t id   = submit(i % N_PROMPTS);
        base          = i == 0 ? id : base;
        res[i].prompt = i % N_PROMPTS;
    }
    while (done < n) {
        int got = read_event(res, base, n, WAIT_NS);
        if (got < 0) {
            CU_FAIL("no answer within a minute");
            break;
        }
        done += (uint32_t)got;
    }
    for (uint32_t i = 0; i < n && done == n; i++) {
        CU_ASSERT_EQUAL(res[i].done.weight_version, version);
        check_response(&res[i]);
    }
    free(res);
}

static void push(const char *path, uint64_t version, uint32_t flags, moon_weights_result_t *r)
{
    memset(r, 0, sizeof(*r));
    CU_ASSERT_EQUAL_FATAL(moon_weights_push_file_sync(g_wc, path, version, flags, WAIT_NS, r),
                          MOON_OK);
    if (r->status != MOON_OK) {
        fprintf(stderr, "push of %s: %s (%s)\n", path, moon_status_str(r->status), r->message);
    }
}

/* The references; the two models differ on these prompts (else the test
 * could not fail). */
static void test_models_differ(void)
{
    int differ = 0;

    for (uint32_t p = 0; p < N_PROMPTS; p++) {
        g_ref_n[0][p] = moon_test_greedy_file(MODEL_A, g_prompt[p], 12, MAX_NEW, g_ref[0][p]);
        g_ref_n[1][p] = moon_test_greedy_file(g_model_b, g_prompt[p], 12, MAX_NEW, g_ref[1][p]);
        CU_ASSERT(g_ref_n[0][p] > 0);
        differ |= g_ref_n[0][p] != g_ref_n[1][p] ||
                  memcmp(g_ref[0][p], g_ref[1][p], g_ref_n[0][p] * sizeof(int32_t)) != 0;
    }
    CU_ASSERT_TRUE(differ);
}

/* Before: A's outputs on version 0; the push of B answers version 1 and
 * its figures; after: B's outputs on version 1, on every instance. */
static void test_push_switches_versions(void)
{
    moon_weights_result_t     r;
    moon_weights_state_info_t st;

    expect_serving(0);
    push(g_model_b, 0, 0, &r);
    CU_ASSERT_EQUAL_FATAL(r.status, MOON_OK);
    CU_ASSERT_EQUAL(r.version, 1);
    CU_ASSERT_EQUAL(r.old_version, 0);
    CU_ASSERT_EQUAL(r.n_instances, g_cfg.n_prefill + g_cfg.n_decode);
    CU_ASSERT(r.n_chunks > 1);
    CU_ASSERT(r.n_moved > 0 && r.n_moved <= r.n_chunks);
    CU_ASSERT_EQUAL(r.moved_bytes + r.skipped_bytes, r.total_bytes);
    g_serving = 1;
    expect_serving(1);
    CU_ASSERT_EQUAL_FATAL(moon_weights_client_state(g_wc, WAIT_NS, &st), MOON_OK);
    CU_ASSERT_EQUAL(st.version, 1);
    CU_ASSERT_EQUAL(st.phase, 0);
    CU_ASSERT_EQUAL(st.n_inst, g_cfg.n_prefill + g_cfg.n_decode);
    for (uint32_t i = 0; i < st.n_inst; i++) {
        CU_ASSERT_EQUAL(st.inst[i].version, 1);
    }
}

/* Back to A as version 2: only the chunks where A and B differ travel. */
static void test_delta_push_moves_changed_chunks(void)
{
    moon_weights_result_t r;
    FILE                 *fa = fopen(MODEL_A, "rb"), *fb = fopen(g_model_b, "rb");
    uint64_t              chunk = (uint64_t)(g_cfg.weights_chunk_mib * (1 << 20));
    char                 *a = malloc(chunk), *b = malloc(chunk);
    uint32_t              differ = 0, n = 0;
    size_t                la, lb;

    CU_ASSERT_PTR_NOT_NULL_FATAL(fa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fb);
    while ((la = fread(a, 1, chunk, fa)) > 0) {
        lb = fread(b, 1, chunk, fb);
        differ += la != lb || memcmp(a, b, la) != 0;
        n++;
    }
    fclose(fa);
    fclose(fb);
    free(a);
    free(b);
    CU_ASSERT(differ > 0 && differ < n);
    push(MODEL_A, 2, 0, &r);
    CU_ASSERT_EQUAL_FATAL(r.status, MOON_OK);
    CU_ASSERT_EQUAL(r.version, 2);
    CU_ASSERT_EQUAL(r.n_chunks, n);
    CU_ASSERT_EQUAL(r.n_moved, differ);
    CU_ASSERT(r.skipped_bytes > 0);
    printf("delta push: %u of %u chunks moved, %llu of %llu bytes\n", r.n_moved, r.n_chunks,
           (unsigned long long)r.moved_bytes, (unsigned long long)r.total_bytes);
    g_serving = 2;
    expect_serving(2);
}

/* Refused pushes change nothing: the old version answers, correctly. */
static void test_corrupt_chunk_rolls_back(void)
{
    moon_weights_result_t r;

    push(g_model_b, 0, MOON_WEIGHTS_F_TEST_CORRUPT, &r);
    CU_ASSERT_EQUAL(r.status, MOON_ERR_CORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.message, "corrupt"));
    CU_ASSERT_EQUAL(r.version, g_serving);
    expect_serving(g_serving);
}

static void test_wrong_architecture_refused(void)
{
    moon_weights_result_t r;

    push(g_model_arch, 0, 0, &r);
    CU_ASSERT_EQUAL(r.status, MOON_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.message, "architecture"));
    CU_ASSERT_EQUAL(r.version, g_serving);
    push("/nonexistent/model.gguf", 0, 0, &r);
    CU_ASSERT_EQUAL(r.status, MOON_ERR_NOT_FOUND);
    push(MODEL_A, g_serving, 0, &r); /* not above the serving version */
    CU_ASSERT_EQUAL(r.status, MOON_ERR_INVALID_PARAM);
    expect_serving(g_serving);
}

static void test_tokenizer_change_refused(void)
{
    moon_weights_result_t r;

    push(g_model_tok, 0, 0, &r);
    CU_ASSERT_EQUAL(r.status, MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.message, "tokenizer"));
    expect_serving(g_serving);
}

/* Two pushes at once: the second is refused, the first goes through. */
static void test_second_push_refused(void)
{
    moon_weights_result_t r1, r2;
    uint64_t              q1, q2;

    CU_ASSERT_EQUAL_FATAL(moon_weights_push_file(g_wc, g_model_b, 0, 0, &q1), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_weights_push_file(g_wc, g_model_b, 0, 0, &q2), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_weights_client_next(g_wc, WAIT_NS, &r1), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_weights_client_next(g_wc, WAIT_NS, &r2), MOON_OK);
    if (r1.req != q2) { /* the refusal comes first */
        moon_weights_result_t t = r1;
        r1                      = r2;
        r2                      = t;
    }
    CU_ASSERT_EQUAL(r1.req, q2);
    CU_ASSERT_EQUAL(r1.status, MOON_ERR_NO_RESOURCE);
    CU_ASSERT_PTR_NOT_NULL(strstr(r1.message, "already under way"));
    CU_ASSERT_EQUAL(r2.req, q1);
    CU_ASSERT_EQUAL(r2.status, MOON_OK);
    g_serving = r2.status == MOON_OK ? r2.version : g_serving;
    CU_ASSERT_EQUAL(g_model_of[g_serving], 1);
    expect_serving(g_serving);
}

/* A steady load of streaming requests while A is pushed: none fails, and
 * every response is exactly its version's output; versions only go up in
 * the order responses were submitted after the switch. The load goes on
 * until the push has answered (a push yields to serving, so under load it
 * takes longer: weights_pace.h), and AFTER requests more are sent then. */
static void test_push_under_load(void)
{
    const uint32_t        n_min = 96, n_max = 4096, in_flight = 8, after = 16;
    res_t                *res  = calloc(n_max, sizeof(*res));
    uint64_t              base = 0, req = 0, target = g_serving + 1;
    uint32_t              sent = 0, done = 0, n_old = 0, n_new = 0, goal = n_min;
    int                   pushed = 0, answered = 0;
    moon_weights_result_t r;

    CU_ASSERT_PTR_NOT_NULL_FATAL(res);
    g_model_of[target] = 0;
    while (done < goal) {
        while (sent < goal && sent - done < in_flight) {
            uint64_t id      = submit(sent % N_PROMPTS);
            base             = sent == 0 ? id : base;
            res[sent].prompt = sent % N_PROMPTS;
            sent++;
        }
        if (!pushed && done >= 8) {
            CU_ASSERT_EQUAL(moon_weights_push_file(g_wc, MODEL_A, target, 0, &req), MOON_OK);
            pushed = 1;
        }
        if (pushed && !answered && moon_weights_client_next(g_wc, 0, &r) == MOON_OK) {
            CU_ASSERT_EQUAL(r.req, req);
            CU_ASSERT_EQUAL(r.status, MOON_OK);
            answered = 1;
            goal     = MOON_MIN(n_max, MOON_MAX(goal, sent + after));
        }
        if (pushed && !answered) {
            goal = MOON_MIN(n_max, MOON_MAX(goal, sent + 1)); /* the load goes on */
        }
        int got = read_event(res, base, sent, WAIT_NS);
        if (got < 0) {
            CU_FAIL("no answer within a minute under load");
            break;
        }
        done += (uint32_t)got;
    }
    if (!answered) {
        CU_ASSERT_EQUAL_FATAL(moon_weights_client_next(g_wc, WAIT_NS, &r), MOON_OK);
        CU_ASSERT_EQUAL(r.status, MOON_OK);
    }
    for (uint32_t i = 0; i < sent && done == goal; i++) {
        check_response(&res[i]);
        n_old += res[i].done.weight_version == g_serving;
        n_new += res[i].done.weight_version == target;
    }
    printf("under load: %u responses on version %llu, %u on %llu, none failed\n", n_old,
           (unsigned long long)g_serving, n_new, (unsigned long long)target);
    CU_ASSERT_EQUAL(n_old + n_new, sent);
    CU_ASSERT(n_old > 0);
    CU_ASSERT(n_new > 0);
    g_serving = target;
    free(res);
    expect_serving(g_serving);
}

/* img holds B and was pushed last: layer 0 set back to A's by name, the
 * broadcaster gets only those bytes (the rest of the image is the push
 * before), A answers; pushed again unchanged, nothing is read. */
static void image_pushes_only_changes(moon_weights_image_t *img)
{
    moon_gguf_t          *ga  = NULL;
    uint64_t              set = 0;
    moon_weights_result_t r;
    char                  why[256];

    CU_ASSERT_EQUAL_FATAL(moon_gguf_open(MODEL_A, &ga), MOON_OK);
    for (uint64_t i = 0; i < moon_gguf_n_tensors(ga); i++) {
        const moon_gguf_tensor_t *t = moon_gguf_tensor(ga, i);
        if (strncmp(t->name, "blk.0.", 6) == 0) {
            CU_ASSERT_EQUAL(
                moon_weights_image_set(img, t->name, t->data, t->bytes, why, sizeof(why)), MOON_OK);
            set += t->bytes;
        }
    }
    moon_gguf_close(ga);
    CU_ASSERT_EQUAL_FATAL(moon_weights_push_image(g_wc, img, 0, 0, WAIT_NS, &r), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(r.status, MOON_OK);
    CU_ASSERT_EQUAL(r.read_bytes, set);
    CU_ASSERT(set > 0 && set < r.total_bytes);
    CU_ASSERT(r.n_moved > 0 && r.n_moved < r.n_chunks);
    printf("image delta push: %llu of %llu bytes read, %u of %u chunks moved\n",
           (unsigned long long)r.read_bytes, (unsigned long long)r.total_bytes, r.n_moved,
           r.n_chunks);
    g_serving             = r.version;
    g_model_of[g_serving] = 0;
    expect_serving(g_serving);
    CU_ASSERT_EQUAL_FATAL(moon_weights_push_image(g_wc, img, 0, 0, WAIT_NS, &r), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(r.status, MOON_OK);
    CU_ASSERT_EQUAL(r.read_bytes, 0);
    CU_ASSERT_EQUAL(r.n_moved, 0);
    g_serving             = r.version;
    g_model_of[g_serving] = 0;
    expect_serving(g_serving);
}

/* The trainer's C API: tensors refused by name with the reason; B's layer 0
 * written by name into an image of A; that image damaged on the way, and an
 * image of other shapes, refused by the cluster (the old version serves);
 * then pushed from memory: B's outputs everywhere. */
static void test_image_push(void)
{
    moon_weights_image_t     *img = NULL, *arch = NULL;
    moon_gguf_t              *gb = NULL;
    const moon_gguf_tensor_t *t;
    moon_weights_result_t     r;
    char                      why[256];
    float                    *buf;
    uint32_t                  n_set = 0;

    CU_ASSERT_EQUAL_FATAL(moon_weights_image_create(g_dist, MODEL_A, &img), MOON_OK);
    t = moon_weights_image_tensor(img, "blk.0.attn_q.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    buf = calloc(t->bytes + 4, 1);
    CU_ASSERT_EQUAL(moon_weights_image_set(img, "no.such.tensor", buf, 4, why, sizeof(why)),
                    MOON_ERR_NOT_FOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "no tensor named no.such.tensor"));
    CU_ASSERT_EQUAL(
        moon_weights_image_set(img, "blk.0.attn_q.weight", buf, t->bytes + 4, why, sizeof(why)),
        MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "bytes"));
    buf[3] = 0.0f / 0.0f;
    CU_ASSERT_EQUAL(
        moon_weights_image_set(img, "blk.0.attn_q.weight", buf, t->bytes, why, sizeof(why)),
        MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "element 3 is not finite"));
    free(buf);
    /* B's changed tensors, by name, from memory */
    CU_ASSERT_EQUAL_FATAL(moon_gguf_open(g_model_b, &gb), MOON_OK);
    for (uint64_t i = 0; i < moon_gguf_n_tensors(gb); i++) {
        t = moon_gguf_tensor(gb, i);
        if (strncmp(t->name, "blk.0.", 6) == 0) {
            CU_ASSERT_EQUAL(
                moon_weights_image_set(img, t->name, t->data, t->bytes, why, sizeof(why)), MOON_OK);
            n_set++;
        }
    }
    moon_gguf_close(gb);
    CU_ASSERT(n_set > 0);
    /* damaged on the way: refused, the old version serves */
    CU_ASSERT_EQUAL_FATAL(
        moon_weights_push_image(g_wc, img, 0, MOON_WEIGHTS_F_TEST_CORRUPT, WAIT_NS, &r), MOON_OK);
    CU_ASSERT_EQUAL(r.status, MOON_ERR_CORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.message, "corrupt"));
    CU_ASSERT_EQUAL(r.version, g_serving);
    /* tensors of other shapes: refused before anything moves */
    CU_ASSERT_EQUAL_FATAL(moon_weights_image_create(g_dist, g_model_arch, &arch), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_weights_push_image(g_wc, arch, 0, 0, WAIT_NS, &r), MOON_OK);
    CU_ASSERT_EQUAL(r.status, MOON_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.message, "architecture"));
    CU_ASSERT_EQUAL(r.version, g_serving);
    moon_weights_image_destroy(arch);
    expect_serving(g_serving);
    CU_ASSERT_EQUAL_FATAL(moon_weights_push_image(g_wc, img, 0, 0, WAIT_NS, &r), MOON_OK);
    CU_ASSERT_EQUAL(r.status, MOON_OK);
    CU_ASSERT_EQUAL(r.version, g_serving + 1);
    CU_ASSERT(r.n_moved > 0 && r.n_moved < r.n_chunks);
    /* the broadcaster held another image (arch's): this one was got whole */
    CU_ASSERT_EQUAL(r.read_bytes, r.total_bytes);
    g_serving             = r.version;
    g_model_of[g_serving] = 1;
    expect_serving(g_serving);
    image_pushes_only_changes(img);
    moon_weights_image_destroy(img);
}

/* One request of the 48-token prompt p (to the end); its DONE. */
static moon_serve_event_t run_long(const int32_t *p, int32_t *out, uint32_t *n_out)
{
    moon_serve_params_t params;
    moon_serve_event_t  ev, done = {0};
    uint64_t            id = 0;

    moon_serve_params_default(&params);
    params.tokens     = p;
    params.n_tokens   = 48;
    params.max_tokens = MAX_NEW;
    *n_out            = 0;
    CU_ASSERT_EQUAL_FATAL(moon_serve_client_submit(g_client, &params, &id), MOON_OK);
    while (moon_serve_client_next(g_client, WAIT_NS, &ev) == MOON_OK) {
        int end = ev.request_id == id && ev.kind == MOON_SERVE_EV_DONE;
        if (ev.request_id == id && ev.kind == MOON_SERVE_EV_TOKEN && *n_out < MAX_NEW) {
            out[(*n_out)++] = ev.token;
        }
        if (end) {
            done      = ev;
            done.msg_ = NULL;
        }
        moon_serve_event_fini(&ev);
        if (end) {
            return done;
        }
    }
    CU_FAIL("no answer within a minute");
    return done;
}

/* A prompt's KV blocks of the serving version are found again (a repeat
 * hits the cache, within a deadline: the store indexes them after the
 * first answer). */
static void expect_cache_hit(const int32_t *p)
{
    int32_t  out[MAX_NEW];
    uint32_t n, hit = 0;

    for (int tries = 0; tries < 40 && hit == 0; tries++) {
        moon_serve_event_t d = run_long(p, out, &n);
        CU_ASSERT_EQUAL(d.status, MOON_OK);
        hit = d.n_cached;
        if (hit == 0) {
            nanosleep(&(struct timespec){0, 50000000}, NULL);
        }
    }
    CU_ASSERT(hit > 0);
}

/* KV by version: blocks computed by one version are never reused by the
 * next (the first request after the switch computes all of its prompt and
 * answers the new version's output), and the new version's blocks are
 * found again (the prefix indexes follow the switch). */
static void test_kv_blocks_not_reused_across_versions(void)
{
    int32_t               p[48], out[MAX_NEW], ref[2][MAX_NEW];
    uint32_t              n, n_ref[2], seed = 99;
    moon_weights_result_t r;
    moon_serve_event_t    d;
    int                   next;

    p[0] = 1;
    for (uint32_t i = 1; i < 48; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = 3 + (int32_t)((seed >> 16) % 509u);
    }
    n_ref[0] = moon_test_greedy_file(MODEL_A, p, 48, MAX_NEW, ref[0]);
    n_ref[1] = moon_test_greedy_file(g_model_b, p, 48, MAX_NEW, ref[1]);
    run_long(p, out, &n);
    expect_cache_hit(p);
    next = !g_model_of[g_serving];
    push(next ? g_model_b : MODEL_A, 0, 0, &r);
    CU_ASSERT_EQUAL_FATAL(r.status, MOON_OK);
    g_serving             = r.version;
    g_model_of[g_serving] = next;
    d                     = run_long(p, out, &n);
    CU_ASSERT_EQUAL(d.status, MOON_OK);
    CU_ASSERT_EQUAL(d.weight_version, g_serving);
    CU_ASSERT_EQUAL(d.n_cached, 0); /* nothing of the old version */
    CU_ASSERT_EQUAL(n, n_ref[next]);
    CU_ASSERT_EQUAL(memcmp(out, ref[next], n * sizeof(int32_t)), 0);
    expect_cache_hit(p);
}

static int setup_models(void)
{
    moon_model_t       *a = NULL;
    moon_model_config_t c;
    char                dir[] = "/tmp/moon_weights_XXXXXX";

    if (mkdtemp(dir) == NULL || moon_model_load(MODEL_A, &a) != MOON_OK) {
        return -1;
    }
    c = *moon_model_config(a);
    moon_model_destroy(a);
    snprintf(g_model_b, sizeof(g_model_b), "%s/b.gguf", dir);
    snprintf(g_model_arch, sizeof(g_model_arch), "%s/arch.gguf", dir);
    snprintf(g_model_tok, sizeof(g_model_tok), "%s/tok.gguf", dir);
    if (moon_model_write_perturbed(MODEL_A, g_model_b, "blk.0.", 0.5f, 7, NULL) != MOON_OK) {
        return -1;
    }
    /* the same shape with another (byte-level) tokenizer, and another shape */
    if (moon_model_write_random(&c, MOON_GGML_F32, 3, g_model_tok) != MOON_OK) {
        return -1;
    }
    c.n_layers += 1;
    if (moon_model_write_random(&c, MOON_GGML_F32, 3, g_model_arch) != MOON_OK) {
        return -1;
    }
    for (uint32_t p = 0; p < N_PROMPTS; p++) {
        uint32_t seed  = 17 + p;
        g_prompt[p][0] = 1; /* BOS */
        for (uint32_t i = 1; i < 12; i++) {
            seed           = seed * 1103515245u + 12345u;
            g_prompt[p][i] = 3 + (int32_t)((seed >> 16) % 509u);
        }
    }
    for (uint32_t v = 0; v < MOON_ARRAY_SIZE(g_model_of); v++) {
        g_model_of[v] = -1;
    }
    g_model_of[0] = 0;
    g_model_of[1] = 1;
    g_model_of[2] = 0;
    g_model_of[3] = 1; /* test_second_push_refused */
    return 0;
}

int main(int argc, char **argv)
{
    moon_runtime_config_t      rcfg;
    moon_serve_client_config_t ccfg = {0};
    moon_config_t             *opts = NULL;
    int                        rc   = 0;

    moon_serve_config_default(&g_cfg);
    g_cfg.model_path        = MODEL_A;
    g_cfg.store_dram_mib    = 16;
    g_cfg.weights_chunk_mib = 1.0 / 16; /* 64 KiB: stories260K is 16 chunks */
    if (moon_config_create(&opts) != MOON_OK ||
        moon_config_add(opts, &moon_serve_config_table, &g_cfg) != MOON_OK ||
        moon_config_parse(opts, argc, argv) != MOON_OK) {
        fprintf(stderr, "test_weights: %s\n", opts ? moon_config_error(opts) : "no memory");
        return 2;
    }
    if (moon_dist_init(&argc, &argv, NULL, &g_dist) != MOON_OK) {
        return 1;
    }
    if (moon_dist_size(g_dist) < 2) {
        printf("skipped: weight pushes need mpirun (a distributed runtime)\n");
        moon_dist_finalize(g_dist);
        moon_config_destroy(opts);
        return 0;
    }
    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 2;
    rcfg.rank      = moon_dist_rank(g_dist);
    if (moon_runtime_create(&rcfg, &g_rt) != MOON_OK || moon_dist_start(g_dist, g_rt) != MOON_OK) {
        return 1;
    }
    moon_runtime_start(g_rt);
    if (moon_serve_cluster_start(&g_cfg, g_rt, g_dist, &g_cluster) != MOON_OK) {
        fprintf(stderr, "test_weights: the cluster did not start\n");
        return 1;
    }
    if (moon_dist_rank(g_dist) == 0) {
        ccfg.conductor = moon_serve_cluster_conductor(g_cluster);
        if (setup_models() != 0 || moon_serve_client_create(g_rt, &ccfg, &g_client) != MOON_OK ||
            moon_weights_client_create(g_rt, moon_serve_cluster_weights(g_cluster), &g_wc) !=
                MOON_OK ||
            moon_serve_client_wait_ready(g_client, g_cfg.n_prefill, g_cfg.n_decode, WAIT_NS) !=
                MOON_OK) {
            fprintf(stderr, "test_weights: setup failed\n");
            return 1;
        }
        rc = MOON_TEST_RUN("weights", NULL, NULL, test_models_differ, test_push_switches_versions,
                           test_delta_push_moves_changed_chunks, test_corrupt_chunk_rolls_back,
                           test_wrong_architecture_refused, test_tokenizer_change_refused,
                           test_second_push_refused, test_push_under_load, test_image_push,
                           test_kv_blocks_not_reused_across_versions);
        moon_weights_client_destroy(g_wc);
        moon_serve_client_destroy(g_client);
    }
    moon_dist_barrier(g_dist);
    moon_serve_cluster_stop(g_cluster);
    moon_runtime_shutdown(g_rt, 0);
    moon_runtime_wait(g_rt);
    moon_dist_stop(g_dist);
    moon_runtime_destroy(g_rt);
    moon_dist_finalize(g_dist);
    moon_config_destroy(opts);
    return rc;
}
