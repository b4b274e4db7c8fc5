/* tests/serve/test_weights_trainer.c - a trainer in the same MPI job pushes
 * weights from its own memory while requests stream (MPMD: this test on the
 * cluster's ranks, examples/weights_trainer on the last one, --client-ranks
 * 1). The trainer pushes versions 1..N_PUSHES, version v being
 * stories260K with blk.0.* perturbed with seed v; rank 0 keeps
 * IN_FLIGHT requests streaming until N_PUSHES serves, and checks that no
 * request is lost (every one ends well) and every response equals, token
 * for token, the single-version output of the version it names. */
#include "moon_test.h"
#include "moon_test_greedy.h"
#include "moonlet/config.h"
#include "moonlet/dist.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef MOON_TEST_DATA_DIR
#error "MOON_TEST_DATA_DIR must point at tests/data"
#endif
#define MODEL_A MOON_TEST_DATA_DIR "/../../examples/models/stories260K/stories260K.gguf"
#define N_PUSHES 3u /* the trainer's --pushes (tests/e2e/serve/CMakeLists.txt) */
#define PATTERN "blk.0."
#define SCALE 0.5f
#define N_PROMPTS 6u
#define MAX_NEW 16u
#define IN_FLIGHT 6u
#define MAX_REQ 30000u
#define DEADLINE_S 150

static moon_serve_client_t *g_client;
static int32_t              g_prompt[N_PROMPTS][12];
static int32_t              g_ref[N_PUSHES + 1][N_PROMPTS][MAX_NEW];
static uint32_t             g_ref_n[N_PUSHES + 1][N_PROMPTS];

/* Version v's model, made the way the trainer makes it, and its outputs. */
static void test_references(void)
{
    char dir[]  = "/tmp/moon_trainer_XXXXXX";
    int  differ = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    for (uint32_t p = 0; p < N_PROMPTS; p++) {
        uint32_t seed  = 29 + p;
        g_prompt[p][0] = 1;
        for (uint32_t i = 1; i < 12; i++) {
            seed           = seed * 1103515245u + 12345u;
            g_prompt[p][i] = 3 + (int32_t)((seed >> 16) % 509u);
        }
    }
    for (uint32_t v = 0; v <= N_PUSHES; v++) {
        char path[96];
        snprintf(path, sizeof(path), "%s/v%u.gguf", dir, v);
        if (v > 0) {
            CU_ASSERT_EQUAL_FATAL(
                moon_model_write_perturbed(MODEL_A, path, PATTERN, SCALE, v, NULL), MOON_OK);
        }
        for (uint32_t p = 0; p < N_PROMPTS; p++) {
            g_ref_n[v][p] =
                moon_test_greedy_file(v ? path : MODEL_A, g_prompt[p], 12, MAX_NEW, g_ref[v][p]);
            differ |= v > 0 && (g_ref_n[v][p] != g_ref_n[0][p] ||
                                memcmp(g_ref[v][p], g_ref[0][p], g_ref_n[0][p] * 4) != 0);
        }
        if (v > 0) {
            remove(path);
        }
    }
    remove(dir);
    CU_ASSERT_TRUE(differ); /* else the check below could not fail */
}

typedef struct {
    uint32_t prompt, n;
    int32_t  tokens[MAX_NEW + 1];
    int      done;
    int32_t  status;
    uint64_t version;
} res_t;

static void test_trainer_pushes_under_load(void)
{
    res_t   *res  = calloc(MAX_REQ, sizeof(*res));
    uint64_t base = 0, t0 = (uint64_t)time(NULL);
    uint32_t sent = 0, done = 0, on_last = 0, bad = 0;
    uint32_t per_version[N_PUSHES + 1] = {0};

    CU_ASSERT_PTR_NOT_NULL_FATAL(res);
    /* until 8 responses came from the last version, or the deadline */
    while (done < sent || on_last < 8) {
        moon_serve_event_t ev;
        res_t             *r;
        while (on_last < 8 && sent < MAX_REQ && sent - done < IN_FLIGHT) {
            moon_serve_params_t p;
            uint64_t            id = 0;
            /* paced (about 200 a second): the pushes take seconds */
            nanosleep(&(struct timespec){0, 5000000}, NULL);
            moon_serve_params_default(&p);
            p.tokens     = g_prompt[sent % N_PROMPTS];
            p.n_tokens   = 12;
            p.max_tokens = MAX_NEW;
            CU_ASSERT_EQUAL_FATAL(moon_serve_client_submit(g_client, &p, &id), MOON_OK);
            base               = sent == 0 ? id : base;
            res[sent].prompt   = sent % N_PROMPTS;
            res[sent++].status = -1000;
        }
        if ((uint64_t)time(NULL) - t0 > DEADLINE_S || (sent == MAX_REQ && done == sent)) {
            CU_FAIL("the trainer's last version did not serve in time");
            break;
        }
        if (moon_serve_client_next(g_client, 60000000000ull, &ev) != MOON_OK) {
            CU_FAIL("no answer within a minute");
            break;
        }
        if (ev.request_id < base || ev.request_id >= base + sent) {
            CU_FAIL("an event of an unknown request");
            moon_serve_event_fini(&ev);
            continue;
        }
        r = &res[ev.request_id - base];
        if (ev.kind == MOON_SERVE_EV_TOKEN && r->n <= MAX_NEW) {
            r->tokens[r->n++] = ev.token;
        } else if (ev.kind == MOON_SERVE_EV_DONE) {
            r->done    = 1;
            r->status  = ev.status;
            r->version = ev.weight_version;
            done++;
            on_last += ev.status == MOON_OK && ev.weight_version == N_PUSHES;
        }
        moon_serve_event_fini(&ev);
    }
    for (uint32_t i = 0; i < sent; i++) {
        const res_t *r  = &res[i];
        int          ok = r->done && r->status == MOON_OK && r->version <= N_PUSHES &&
                 r->n == g_ref_n[r->version][r->prompt] &&
                 memcmp(r->tokens, g_ref[r->version][r->prompt], r->n * 4) == 0;
        if (!ok && bad++ < 5) {
            fprintf(stderr, "request %u (prompt %u): done %d status %d version %llu, %u tokens\n",
                    i, r->prompt, r->done, r->status, (unsigned long long)r->version, r->n);
        }
        per_version[r->version <= N_PUSHES ? r->version : 0] += ok;
    }
    printf("%u requests, none lost: %u bad; per version:", sent, bad);
    for (uint32_t v = 0; v <= N_PUSHES; v++) {
        printf(" v%u %u", v, per_version[v]);
    }
    printf("\n");
    CU_ASSERT_EQUAL(done, sent);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(per_version[0] > 0);
    CU_ASSERT(per_version[N_PUSHES] >= 8);
    free(res);
}

int main(int argc, char **argv)
{
    moon_serve_config_t        cfg;
    moon_runtime_config_t      rcfg;
    moon_serve_client_config_t ccfg = {0};
    moon_config_t             *opts = NULL;
    moon_dist_t               *dist;
    moon_runtime_t            *rt;
    moon_serve_cluster_t      *cluster;
    int                        rc = 0;

    moon_serve_config_default(&cfg);
    if (moon_config_create(&opts) != MOON_OK ||
        moon_config_add(opts, &moon_serve_config_table, &cfg) != MOON_OK ||
        moon_config_parse(opts, argc, argv) != MOON_OK) {
        fprintf(stderr, "test_weights_trainer: %s\n", opts ? moon_config_error(opts) : "no memory");
        return 2;
    }
    if (moon_dist_init(&argc, &argv, NULL, &dist) != MOON_OK) {
        return 1;
    }
    if (moon_dist_size(dist) < 3 || cfg.client_ranks != 1) {
        printf("skipped: run under mpirun with a trainer rank (--client-ranks 1)\n");
        moon_dist_finalize(dist);
        moon_config_destroy(opts);
        return 0;
    }
    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 2;
    rcfg.rank      = moon_dist_rank(dist);
    if (moon_runtime_create(&rcfg, &rt) != MOON_OK || moon_dist_start(dist, rt) != MOON_OK ||
        moon_runtime_start(rt) != MOON_OK ||
        moon_serve_cluster_start(&cfg, rt, dist, &cluster) != MOON_OK) {
        fprintf(stderr, "test_weights_trainer: the cluster did not start\n");
        return 1;
    }
    /* Rank 0 is ready (client up, every version's outputs computed) before
     * the agreement that starts the trainer's clock: pushes land while
     * version 0 serves, however slow this machine is (under ASan the
     * references alone outlasted the first 1.5 s). */
    if (moon_dist_rank(dist) == 0) {
        ccfg.conductor = moon_serve_cluster_conductor(cluster);
        if (moon_serve_client_create(rt, &ccfg, &g_client) != MOON_OK ||
            moon_serve_client_wait_ready(g_client, cfg.n_prefill, cfg.n_decode, 60000000000ull) !=
                MOON_OK) {
            fprintf(stderr, "test_weights_trainer: setup failed\n");
            return 1;
        }
        rc = MOON_TEST_RUN("weights_trainer_refs", NULL, NULL, test_references);
    }
    if (moon_dist_agree(dist, rc == 0 ? MOON_OK : MOON_ERR_INVALID_PARAM) != MOON_OK) {
        fprintf(stderr, "test_weights_trainer: a rank did not start (or no references)\n");
        rc = 1; /* as moonlet serve: the trainer waits for this, and stops on a failure */
    } else if (moon_dist_rank(dist) == 0) {
        rc = MOON_TEST_RUN("weights_trainer", NULL, NULL, test_trainer_pushes_under_load);
    }
    if (moon_dist_rank(dist) == 0) {
        moon_serve_client_destroy(g_client);
    }
    moon_dist_barrier(dist);
    moon_serve_cluster_stop(cluster);
    moon_runtime_shutdown(rt, 0);
    moon_runtime_wait(rt);
    moon_dist_stop(dist);
    moon_runtime_destroy(rt);
    moon_dist_finalize(dist);
    moon_config_destroy(opts);
    return rc;
}
