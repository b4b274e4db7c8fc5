/* tests/serve/test_weights_kill.c - a rank lost in the middle of a weight
 * push, under mpirun --mca orte_enable_recovery 1 -np 6 (conductor and
 * broadcaster on rank 0, a store, 2 prefill and 2 decode instances; the last
 * decode instance, the end of the broadcast chain, kills its own rank with
 * SIGKILL once it holds its first chunk: MOON_WEIGHTS_F_TEST_KILL_LAST).
 * Under a load of streaming requests rank 0 checks that
 *   - the push fails with MOON_ERR_PEER_LOST and names the instance lost,
 *   - no request is lost: every one ends, with its version's exact output
 *     (version 0: the push never switched) or an error that says why,
 *   - the surviving instances all stay on version 0 and answer with it,
 *   - a push afterwards goes to the survivors, and they all switch to it.
 * No collective can end the job: rank 0 prints "weights-kill result: ok"
 * (or FAILED), tells the survivors to stop, and tests/scripts/
 * run_weights_kill.sh checks the line. */
#include "moon_test.h"
#include "moon_test_greedy.h"
#include "moonlet/config.h"
#include "moonlet/dist.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"
#include "moonlet/weights_client.h"
#include "moonlet/weights_msgs.h"

#include <stdatomic.h>
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
#define MAX_NEW 16u
#define N_LOAD 160u

#define K_STOP_FIELDS(F, T) F(T, u32, rank)
#define K_MSGS(X) X(K_STOP, k_stop_t, K_STOP_FIELDS)
MOON_MSG_DECLARE(K_MSGS, 200, K_END)
MOON_MSG_DEFINE(K_MSGS, k_descs)

static moon_dist_t           *g_dist;
static moon_serve_config_t    g_cfg;
static moon_runtime_t        *g_rt;
static moon_serve_client_t   *g_client;
static moon_weights_client_t *g_wc;
static atomic_int             g_stop;
static char                   g_model_b[128];
static int32_t                g_prompt[N_PROMPTS][12];
static int32_t                g_ref[2][N_PROMPTS][MAX_NEW];
static uint32_t               g_ref_n[2][N_PROMPTS];

typedef struct {
    uint32_t prompt, n;
    int32_t  tokens[MAX_NEW + 1];
    int      done;
    int32_t  status;
    uint64_t version;
} res_t;

static uint64_t submit(uint32_t prompt)
{
    moon_serve_params_t p;
    uint64_t            id = 0;

    moon_serve_params_default(&p);
    p.tokens     = g_prompt[prompt];
    p.n_tokens   = 12;
    p.max_tokens = MAX_NEW;
    CU_ASSERT_EQUAL(moon_serve_client_submit(g_client, &p, &id), MOON_OK);
    return id;
}

/* One event into res[id - base]; 1: a DONE, 0: a token, -1: none in time. */
static int read_event(res_t *res, uint64_t base, uint32_t n)
{
    moon_serve_event_t ev;
    res_t             *r;
    int                done = 0;

    if (moon_serve_client_next(g_client, WAIT_NS, &ev) != MOON_OK) {
        return -1;
    }
    if (ev.request_id < base || ev.request_id >= base + n) {
        moon_serve_event_fini(&ev);
        return 0;
    }
    r = &res[ev.request_id - base];
    if (ev.kind == MOON_SERVE_EV_TOKEN && r->n <= MAX_NEW) {
        r->tokens[r->n++] = ev.token;
    } else if (ev.kind == MOON_SERVE_EV_DONE) {
        r->done    = 1;
        r->status  = ev.status;
        r->version = ev.weight_version;
        done       = 1;
        if (ev.status != MOON_OK) {
            printf("request %llu failed: %s (%s)\n", (unsigned long long)ev.request_id,
                   moon_status_str(ev.status), ev.message ? ev.message : "");
            CU_ASSERT(ev.message != NULL && ev.message[0] != '\0'); /* it says why */
        }
    }
    moon_serve_event_fini(&ev);
    return done;
}

/* r ended on its version's exact output (or failed, when allowed). */
static int check(const res_t *r, int may_fail)
{
    int m = (int)r->version;

    if (r->status != MOON_OK) {
        return may_fail ? 0 : -1;
    }
    if (r->version > 1 || r->n != g_ref_n[m][r->prompt] ||
        memcmp(r->tokens, g_ref[m][r->prompt], r->n * 4) != 0) {
        fprintf(stderr, "prompt %u on version %llu: %u tokens, not its version's output\n",
                r->prompt, (unsigned long long)r->version, r->n);
        return -1;
    }
    return 1;
}

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
        int got = read_event(res, base, n);
        if (got < 0) {
            CU_FAIL("no answer within a minute");
            break;
        }
        done += (uint32_t)got;
    }
    for (uint32_t i = 0; i < n && done == n; i++) {
        CU_ASSERT_EQUAL(res[i].status, MOON_OK);
        CU_ASSERT_EQUAL(res[i].version, version);
        CU_ASSERT_EQUAL(check(&res[i], 0), 1);
    }
    free(res);
}

static void test_references(void)
{
    int differ = 0;

    for (uint32_t p = 0; p < N_PROMPTS; p++) {
        uint32_t seed  = 41 + p;
        g_prompt[p][0] = 1;
        for (uint32_t i = 1; i < 12; i++) {
            seed           = seed * 1103515245u + 12345u;
            g_prompt[p][i] = 3 + (int32_t)((seed >> 16) % 509u);
        }
        g_ref_n[0][p] = moon_test_greedy_file(MODEL_A, g_prompt[p], 12, MAX_NEW, g_ref[0][p]);
        g_ref_n[1][p] = moon_test_greedy_file(g_model_b, g_prompt[p], 12, MAX_NEW, g_ref[1][p]);
        differ |= g_ref_n[0][p] != g_ref_n[1][p] ||
                  memcmp(g_ref[0][p], g_ref[1][p], g_ref_n[0][p] * 4) != 0;
    }
    CU_ASSERT_TRUE(differ);
}

static void test_rank_killed_midway(void)
{
    res_t                    *res  = calloc(N_LOAD, sizeof(*res));
    uint64_t                  base = 0, req = 0;
    uint32_t                  sent = 0, done = 0, ok = 0, failed = 0;
    int                       pushed = 0, answered = 0;
    moon_weights_result_t     r;
    moon_weights_state_info_t st;

    expect_serving(0);
    while (done < N_LOAD) {
        while (sent < N_LOAD && sent - done < 8) {
            uint64_t id      = submit(sent % N_PROMPTS);
            base             = sent == 0 ? id : base;
            res[sent].prompt = sent % N_PROMPTS;
            sent++;
        }
        if (!pushed && done >= 8) {
            CU_ASSERT_EQUAL(
                moon_weights_push_file(g_wc, g_model_b, 0, MOON_WEIGHTS_F_TEST_KILL_LAST, &req),
                MOON_OK);
            pushed = 1;
        }
        if (pushed && !answered && moon_weights_client_next(g_wc, 0, &r) == MOON_OK) {
            answered = 1;
        }
        int got = read_event(res, base, N_LOAD);
        if (got < 0) {
            CU_FAIL("a request got no answer within a minute: lost");
            break;
        }
        done += (uint32_t)got;
    }
    if (!answered) {
        CU_ASSERT_EQUAL_FATAL(moon_weights_client_next(g_wc, WAIT_NS, &r), MOON_OK);
    }
    printf("push: %s: %s\n", moon_status_str(r.status), r.message);
    CU_ASSERT_EQUAL(r.req, req);
    CU_ASSERT_EQUAL(r.status, MOON_ERR_PEER_LOST);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.message, "decode instance 1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.message, "lost during the push"));
    CU_ASSERT_EQUAL(r.version, 0);
    CU_ASSERT_EQUAL(done, N_LOAD); /* none lost */
    for (uint32_t i = 0; i < done; i++) {
        int c = check(&res[i], 1);
        CU_ASSERT(c >= 0);
        CU_ASSERT(res[i].status != MOON_OK || res[i].version == 0);
        ok += c == 1;
        failed += c == 0;
    }
    printf("under load: %u answered on version 0, %u failed with a reason (the lost rank's)\n", ok,
           failed);
    CU_ASSERT(ok > 0);
    /* the survivors: one version, the old one, and they answer with it */
    CU_ASSERT_EQUAL_FATAL(moon_weights_client_state(g_wc, WAIT_NS, &st), MOON_OK);
    CU_ASSERT_EQUAL(st.version, 0);
    CU_ASSERT_EQUAL(st.phase, 0);
    CU_ASSERT_EQUAL(st.n_inst, g_cfg.n_prefill + g_cfg.n_decode - 1);
    for (uint32_t i = 0; i < st.n_inst; i++) {
        CU_ASSERT_EQUAL(st.inst[i].version, 0);
    }
    expect_serving(0);
    free(res);
}

/* The survivors take the next push, all of them. */
static void test_push_after_loss(void)
{
    moon_weights_result_t     r;
    moon_weights_state_info_t st;

    CU_ASSERT_EQUAL_FATAL(moon_weights_push_file_sync(g_wc, g_model_b, 0, 0, WAIT_NS, &r), MOON_OK);
    CU_ASSERT_EQUAL(r.status, MOON_OK);
    CU_ASSERT_EQUAL(r.version, 1);
    CU_ASSERT_EQUAL(r.n_instances, g_cfg.n_prefill + g_cfg.n_decode - 1);
    CU_ASSERT_EQUAL_FATAL(moon_weights_client_state(g_wc, WAIT_NS, &st), MOON_OK);
    for (uint32_t i = 0; i < st.n_inst; i++) {
        CU_ASSERT_EQUAL(st.inst[i].version, 1);
    }
    expect_serving(1);
}

static moon_status_t ctl_on_stop(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)self;
    (void)msg;
    atomic_store(&g_stop, 1);
    return MOON_OK;
}

static const moon_actor_ops_t ctl_ops = {.name = "wkill_ctl", .on_msg = {[K_STOP] = ctl_on_stop}};

int main(int argc, char **argv)
{
    moon_runtime_config_t      rcfg;
    moon_serve_client_config_t ccfg = {0};
    moon_config_t             *opts = NULL;
    moon_serve_cluster_t      *cluster;
    moon_spawn_opts_t          copts = {.flags = MOON_SPAWN_CONTROL};
    moon_addr_t                ctl;
    char                       name[32];
    int                        rc = 0;

    moon_serve_config_default(&g_cfg);
    g_cfg.model_path        = MODEL_A;
    g_cfg.store_dram_mib    = 16;
    g_cfg.weights_chunk_mib = 1.0 / 16;
    if (moon_config_create(&opts) != MOON_OK ||
        moon_config_add(opts, &moon_serve_config_table, &g_cfg) != MOON_OK ||
        moon_config_parse(opts, argc, argv) != MOON_OK) {
        fprintf(stderr, "test_weights_kill: %s\n", opts ? moon_config_error(opts) : "no memory");
        return 2;
    }
    if (moon_dist_init(&argc, &argv, NULL, &g_dist) != MOON_OK) {
        return 1;
    }
    if (moon_dist_size(g_dist) < 6 || g_cfg.n_decode < 2) {
        printf("skipped: needs mpirun -np 6 and --prefill 2 --decode 2\n");
        printf("weights-kill result: ok\n");
        moon_dist_finalize(g_dist);
        return 0;
    }
    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 2;
    rcfg.rank      = moon_dist_rank(g_dist);
    if (moon_runtime_create(&rcfg, &g_rt) != MOON_OK || moon_dist_start(g_dist, g_rt) != MOON_OK ||
        moon_msg_register(k_descs) != MOON_OK) {
        return 1;
    }
    moon_runtime_start(g_rt);
    snprintf(name, sizeof(name), "wkill/ctl/%u", moon_dist_rank(g_dist));
    if (moon_spawn(g_rt, &ctl_ops, NULL, &copts, &ctl) != MOON_OK ||
        moon_dist_register(g_dist, name, ctl) != MOON_OK ||
        moon_serve_cluster_start(&g_cfg, g_rt, g_dist, &cluster) != MOON_OK) {
        fprintf(stderr, "test_weights_kill: the cluster did not start\n");
        return 1;
    }
    if (moon_dist_rank(g_dist) == 0) {
        char dir[]     = "/tmp/moon_wkill_XXXXXX";
        ccfg.conductor = moon_serve_cluster_conductor(cluster);
        if (mkdtemp(dir) == NULL ||
            snprintf(g_model_b, sizeof(g_model_b), "%s/b.gguf", dir) >= (int)sizeof(g_model_b) ||
            moon_model_write_perturbed(MODEL_A, g_model_b, "blk.0.", 0.5f, 7, NULL) != MOON_OK ||
            moon_serve_client_create(g_rt, &ccfg, &g_client) != MOON_OK ||
            moon_weights_client_create(g_rt, moon_serve_cluster_weights(cluster), &g_wc) !=
                MOON_OK ||
            moon_serve_client_wait_ready(g_client, g_cfg.n_prefill, g_cfg.n_decode, WAIT_NS) !=
                MOON_OK) {
            fprintf(stderr, "test_weights_kill: setup failed\n");
            rc = 1;
        } else {
            rc = MOON_TEST_RUN("weights_kill", NULL, NULL, test_references, test_rank_killed_midway,
                               test_push_after_loss);
        }
        remove(g_model_b);
        *strrchr(g_model_b, '/') = '\0';
        rmdir(g_model_b);
        printf("weights-kill result: %s\n", rc ? "FAILED" : "ok");
        fflush(stdout);
        moon_weights_client_destroy(g_wc);
        moon_serve_client_destroy(g_client);
        for (uint32_t r = 1; r < moon_dist_size(g_dist); r++) {
            moon_addr_t a;
            k_stop_t   *m;
            snprintf(name, sizeof(name), "wkill/ctl/%u", r);
            if (moon_dist_peer_alive(g_dist, r) &&
                moon_dist_whereis(g_dist, name, 1000000000ull, &a) == MOON_OK &&
                (m = moon_msg_new(K_STOP, 0)) != NULL &&
                moon_runtime_send(g_rt, a, &m->hdr) != MOON_OK) {
                moon_msg_release(&m->hdr);
            }
        }
    } else {
        /* serve until rank 0 says stop (or is gone, or 280 s) */
        for (int i = 0; i < 28000 && !atomic_load(&g_stop) && moon_dist_peer_alive(g_dist, 0);
             i++) {
            nanosleep(&(struct timespec){0, 10000000}, NULL);
        }
    }
    /* no collective can end this job (a rank is gone): goodbyes to the live */
    moon_serve_cluster_stop(cluster);
    moon_dist_stop(g_dist);
    moon_runtime_shutdown(g_rt, 0);
    moon_runtime_wait(g_rt);
    moon_config_destroy(opts);
    _exit(rc);
}
