/* benchmarks/bench_weights.c - a weight push into a serving cluster under
 * mpirun -np 5 (rank 0: conductor, broadcaster and the pushing client;
 * ranks 1-4: two prefill and two decode instances, the cost-model engine so
 * no forward pass competes for the cores), against its anchor measured in
 * the same run: Open MPI's MPI_Bcast of a buffer of the same size from rank 0
 * to the same ranks. Rounds alternate push / MPI_Bcast; each push is a full
 * one (every chunk travels: MOON_WEIGHTS_F_FULL). Per size one JSON line
 * with the medians and the ratio of the throughputs (median, min, max over
 * the rounds' pairs):
 *   stage   push start -> every instance holds a checked copy (the source
 *           read once and hashed, the chain broadcast over the bulk lane,
 *           every chunk's XXH3 checked, the GGUF parsed from memory);
 *   push    -> every instance serves it (stage, engines, the conductor's flip);
 *   bcast   MPI_Bcast of the same bytes, then a barrier (the anchor).
 * The checkpoint is a random F32 Llama of about --mib MiB (gen-model's
 * writer). Three more lines per size, from the same run:
 *   delta   a push where 1 % of the chunks changed (at least one; a copy of
 *           the checkpoint with one byte changed in each) against the full
 *           push of the same round: ratio delta/full (median, min, max);
 *   delta_image   the trainer's path (weights_image.h): an image of the
 *           checkpoint pushed whole (not timed), one small tensor of its
 *           second half set, pushed again: the broadcaster gets only the
 *           bytes set; against the full push of the same round;
 *   push_under_load   TTFT p50/p99 of requests streaming (4 in flight, 64
 *           prompt tokens, 8 new, the cost-model engine) whose
 *           [submit, first token] overlaps a full push, against the anchor:
 *           requests of the quiet windows between pushes (as long as a
 *           push), windows alternating; failed requests counted;
 *   memory  the instance ranks' RSS before the first push and their peak
 *           (VmHWM) after every push, against the checkpoint's size: an
 *           instance holds the serving copy, the staged one and, between
 *           pushes, the retired copy's region kept to stage the next (each
 *           rank also holds the MPI_Bcast anchor's buffer: counted apart).
 * One size per job (the suite runs one job per size). Args:
 * --mib=N (default 64), --rounds=N (5), --chunk_mib=N (4), --warmup=N (2
 * pushes first, not timed: staging into fresh memory; first_push_s says
 * what the first one took). */
#include "bench_util.h"

#include "moonlet/dist.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"
#include "moonlet/weights_client.h"
#include "moonlet/weights_msgs.h"
#include "weights_image.h"

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Layers of write_model's checkpoint of about mib MiB (~51 MiB a layer). */
static uint32_t layers_of(uint32_t mib)
{
    uint64_t per_layer = (4ull * 1024 * 1024 + 3ull * 1024 * 2816) * 4;

    return (uint32_t)MOON_MAX(1, ((uint64_t)mib << 20) / per_layer);
}

/* A random Llama of about mib MiB: dim 1024, ff 2816. */
static int write_model(const char *path, uint32_t mib)
{
    moon_model_config_t c = {.dim        = 1024,
                             .hidden_dim = 2816,
                             .n_heads    = 16,
                             .n_kv_heads = 16,
                             .vocab_size = 512,
                             .seq_len    = 256,
                             .norm_eps   = 1e-5f,
                             .rope_theta = 10000.0f};

    c.n_layers = layers_of(mib);
    return moon_model_write_random(&c, MOON_GGML_F32, 1, path) == MOON_OK ? 0 : -1;
}

/* A trainer's push (weights_image.h) of the checkpoint's image with one
 * small tensor changed, after a push of the image as it was (not timed: it
 * puts the image in the broadcaster's memory, as the trainer's previous
 * push did; the file pushes between rounds replaced it). The seconds of
 * the changed push (0: a push failed); *res_p its outcome. */
static double image_delta_s(moon_weights_client_t *wc, moon_weights_image_t *img,
                            const char *tensor, moon_weights_result_t *res_p)
{
    const moon_gguf_tensor_t *t = moon_weights_image_tensor(img, tensor);
    uint8_t                   v[64 << 10];
    uint64_t                  t0;
    char                      why[256];

    if (t == NULL || t->bytes > sizeof(v) ||
        moon_weights_push_image(wc, img, 0, 0, 600000000000ull, res_p) != MOON_OK ||
        res_p->status != MOON_OK) {
        return 0;
    }
    memcpy(v, t->data, t->bytes);
    v[0] ^= 0x01; /* a low mantissa bit */
    if (moon_weights_image_set(img, tensor, v, t->bytes, why, sizeof(why)) != MOON_OK) {
        return 0;
    }
    t0 = moon_bench_now_ns();
    if (moon_weights_push_image(wc, img, 0, 0, 600000000000ull, res_p) != MOON_OK ||
        res_p->status != MOON_OK) {
        return 0;
    }
    return (double)(moon_bench_now_ns() - t0) * 1e-9;
}

static double bcast_s(void *buf, size_t n)
{
    double t0;

    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (size_t off = 0; off < n; off += (size_t)1 << 30) { /* counts are ints */
        MPI_Bcast((char *)buf + off, (int)MOON_MIN(n - off, (size_t)1 << 30), MPI_BYTE, 0,
                  MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return MPI_Wtime() - t0;
}

/* A copy of src with one byte changed in n_changed chunks spread over its
 * second half (tensor data: the GGUF stays valid, shapes unchanged). */
static int write_delta(const char *src, const char *dst, uint64_t chunk, uint32_t *n_changed_p)
{
    FILE    *f = fopen(src, "rb");
    uint8_t *d;
    long     len;
    uint64_t n_chunks, n_changed;
    int      ok;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) <= 0 ||
        fseek(f, 0, SEEK_SET) != 0 || (d = malloc((size_t)len)) == NULL) {
        if (f != NULL) {
            fclose(f);
        }
        return -1;
    }
    ok = fread(d, 1, (size_t)len, f) == (size_t)len;
    fclose(f);
    n_chunks  = ((uint64_t)len + chunk - 1) / chunk;
    n_changed = MOON_MAX(1, n_chunks / 100);
    for (uint64_t i = 0; i < n_changed; i++) {
        uint64_t k = n_chunks / 2 + i * (n_chunks / 2) / n_changed;
        uint64_t o = MOON_MIN(k * chunk + chunk / 2, (uint64_t)len - 1);
        d[o] ^= 0x01; /* a low mantissa bit of some weight */
    }
    f  = ok ? fopen(dst, "wb") : NULL;
    ok = f != NULL && fwrite(d, 1, (size_t)len, f) == (size_t)len;
    ok = (f != NULL && fclose(f) == 0) && ok;
    free(d);
    *n_changed_p = (uint32_t)n_changed;
    return ok ? 0 : -1;
}

/* A field of /proc/self/status (VmRSS, VmHWM, RssAnon, RssShmem) or, with
 * file "smaps_rollup", of that (Pss: shared pages divided among their
 * mappers), MiB (0: unknown). */
static double proc_mib_of(const char *file, const char *field)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/%s", file);
    FILE  *f = fopen(path, "r");
    char   line[256];
    double kib = 0;

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, field, strlen(field)) == 0) {
            kib = strtod(line + strlen(field) + 1, NULL);
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kib / 1024.0;
}

static double proc_mib(const char *field)
{
    return proc_mib_of("status", field);
}

/* ---- requests streaming during pushes (rank 0's load thread) -------------- */

#define LOAD_MAX 20000u
#define LOAD_IN_FLIGHT 4u

typedef struct {
    uint64_t submit_ns, first_ns;
    int      status, done;
} load_req_t;

typedef struct {
    moon_serve_client_t *sc;
    atomic_int           stop;
    load_req_t          *req;
    uint32_t             n; /* submitted */
    uint64_t             base;
} load_t;

static void *load_main(void *arg)
{
    load_t  *l = arg;
    int32_t  tok[64];
    uint32_t done = 0, seed = 7;

    for (uint32_t i = 0; i < 64; i++) {
        seed   = seed * 1103515245u + 12345u;
        tok[i] = 3 + (int32_t)((seed >> 16) % 500u);
    }
    while (!atomic_load(&l->stop) || done < l->n) {
        moon_serve_event_t ev;
        while (!atomic_load(&l->stop) && l->n < LOAD_MAX && l->n - done < LOAD_IN_FLIGHT) {
            moon_serve_params_t p;
            uint64_t            id = 0;
            moon_serve_params_default(&p);
            tok[1 + l->n % 60] ^= 1; /* each prompt its own: no cache hit */
            p.tokens     = tok;
            p.n_tokens   = 64;
            p.max_tokens = 8;
            if (moon_serve_client_submit(l->sc, &p, &id) != MOON_OK) {
                break;
            }
            l->base                = l->n == 0 ? id : l->base;
            l->req[l->n].submit_ns = moon_bench_now_ns();
            l->req[l->n++].status  = -1000;
        }
        if (moon_serve_client_next(l->sc, 100000000ull, &ev) != MOON_OK) {
            if (atomic_load(&l->stop) >= 2) {
                break; /* given up on the rest */
            }
            continue;
        }
        if (ev.request_id >= l->base && ev.request_id < l->base + l->n) {
            load_req_t *r = &l->req[ev.request_id - l->base];
            if (r->first_ns == 0 && (ev.kind == MOON_SERVE_EV_TOKEN || ev.status != MOON_OK)) {
                r->first_ns = moon_bench_now_ns();
            }
            if (ev.kind == MOON_SERVE_EV_DONE) {
                r->done   = 1;
                r->status = ev.status;
                done++;
            }
        }
        moon_serve_event_fini(&ev);
    }
    return NULL;
}

/* Windows alternate quiet / push (rounds of each); one JSON line. */
static void load_phase(moon_serve_client_t *sc, moon_weights_client_t *wc, const char *path,
                       int rounds, double push_s, uint64_t total)
{
    load_t            l = {.sc = sc};
    pthread_t         th;
    uint64_t          win[128][2];
    int               n_win = 0, n_fail = 0, n_push_fail = 0;
    double           *quiet  = calloc(LOAD_MAX, sizeof(double));
    double           *during = calloc(LOAD_MAX, sizeof(double)), sw[64];
    size_t            nq = 0, nd = 0;
    uint64_t          quiet_ns = (uint64_t)(MOON_MAX(0.3, push_s) * 1e9);
    moon_bench_json_t j;

    l.req = calloc(LOAD_MAX, sizeof(load_req_t));
    atomic_init(&l.stop, 0);
    if (l.req == NULL || quiet == NULL || during == NULL ||
        pthread_create(&th, NULL, load_main, &l) != 0) {
        return;
    }
    nanosleep(&(struct timespec){0, 300000000}, NULL); /* the load settles */
    rounds = MOON_MIN(rounds, 64);
    for (int r = 0; r < rounds; r++) {
        moon_weights_result_t res = {0};
        uint64_t              t0  = moon_bench_now_ns();
        nanosleep(&(struct timespec){(time_t)(quiet_ns / 1000000000ull),
                                     (long)(quiet_ns % 1000000000ull)},
                  NULL);
        win[n_win][0]   = t0;
        win[n_win++][1] = moon_bench_now_ns(); /* quiet */
        t0              = moon_bench_now_ns();
        if (moon_weights_push_file_sync(wc, path, 0, MOON_WEIGHTS_F_FULL, 600000000000ull, &res) !=
                MOON_OK ||
            res.status != MOON_OK) {
            n_push_fail++;
        }
        win[n_win][0]   = t0;
        win[n_win++][1] = moon_bench_now_ns(); /* push */
        sw[r]           = (double)(win[n_win - 1][1] - t0) * 1e-9;
    }
    atomic_store(&l.stop, 1);
    for (int k = 0; k < 300 && l.n > 0; k++) { /* at most 30 s for the last answers */
        uint32_t open = 0;
        for (uint32_t i = 0; i < l.n; i++) {
            open += !l.req[i].done;
        }
        if (open == 0) {
            break;
        }
        nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    atomic_store(&l.stop, 2);
    pthread_join(th, NULL);
    for (uint32_t i = 0; i < l.n; i++) {
        const load_req_t *q   = &l.req[i];
        int               got = -1;
        if (!q->done || q->status != MOON_OK) {
            n_fail++;
            continue;
        }
        for (int w = 0; w < n_win && got < 0; w++) {
            if (q->submit_ns < win[w][1] && q->first_ns > win[w][0]) {
                got = w % 2; /* 0 quiet, 1 push */
            }
        }
        if (got == 1) {
            during[nd++] = (double)(q->first_ns - q->submit_ns) * 1e-9;
        } else if (got == 0 && q->submit_ns >= win[0][0]) {
            quiet[nq++] = (double)(q->first_ns - q->submit_ns) * 1e-9;
        }
    }
    moon_bench_json_begin(&j);
    moon_bench_json_str(&j, "suite", "weights");
    moon_bench_json_str(&j, "bench", "push_under_load");
    moon_bench_json_str(&j, "impl", "moonlet");
    moon_bench_json_str(&j, "anchor", "no_push");
    moon_bench_json_int(&j, "bytes", (int64_t)total);
    moon_bench_json_int(&j, "rounds", rounds);
    moon_bench_json_int(&j, "requests", l.n);
    moon_bench_json_int(&j, "failed", n_fail);
    moon_bench_json_int(&j, "pushes_failed", n_push_fail);
    moon_bench_json_int(&j, "n_during", (int64_t)nd);
    moon_bench_json_int(&j, "n_anchor", (int64_t)nq);
    if (nd > 0 && nq > 0) {
        double a50 = moon_bench_percentile(quiet, nq, 50),
               a99 = moon_bench_percentile(quiet, nq, 99);
        double d50 = moon_bench_percentile(during, nd, 50);
        double d99 = moon_bench_percentile(during, nd, 99);
        moon_bench_json_num(&j, "ttft_s_p50_during", d50);
        moon_bench_json_num(&j, "ttft_s_p99_during", d99);
        moon_bench_json_num(&j, "ttft_s_p50_anchor", a50);
        moon_bench_json_num(&j, "ttft_s_p99_anchor", a99);
        moon_bench_json_num(&j, "p99_ratio", d99 / a99);
    }
    moon_bench_json_num(&j, "push_to_serving_s_p50", median(sw, rounds));
    moon_bench_json_end(&j);
    free(l.req);
    free(quiet);
    free(during);
}

int main(int argc, char **argv)
{
    uint32_t mib     = (uint32_t)moon_bench_arg_int(argc, argv, "mib", 64);
    int      rounds  = (int)moon_bench_arg_int(argc, argv, "rounds", 5);
    double   chunk   = (double)moon_bench_arg_int(argc, argv, "chunk_mib", 4);
    int      warmup  = (int)moon_bench_arg_int(argc, argv, "warmup", 2);
    int    load_skip = (int)moon_bench_arg_int(argc, argv, "no_load", 0); /* skip push_under_load */
    double cold_s    = 0.0;
    moon_dist_t          *dist = NULL;
    moon_runtime_t       *rt   = NULL;
    moon_runtime_config_t rcfg;
    int                   rank, size;
    char                  dir[] = "/tmp/moon_bench_weights_XXXXXX";

    if (moon_dist_init(&argc, &argv, NULL, &dist) != MOON_OK) {
        return 1;
    }
    rank = (int)moon_dist_rank(dist);
    size = (int)moon_dist_size(dist);
    if (size != 5) {
        if (rank == 0) {
            fprintf(stderr, "bench_weights: run under mpirun -np 5\n");
        }
        moon_dist_finalize(dist);
        return 2;
    }
    if (rank == 0 && mkdtemp(dir) == NULL) {
        return 1;
    }
    MPI_Bcast(dir, sizeof(dir), MPI_CHAR, 0, MPI_COMM_WORLD);
    {
        char                   path[300];
        moon_serve_config_t    cfg;
        moon_serve_cluster_t  *cluster = NULL;
        moon_weights_client_t *wc      = NULL;
        moon_serve_client_t   *sc      = NULL;
        double                 stage[64], push[64], bc[64], ratio[64], ratio_copy[64];
        double                 delta[64], dratio[64], rss[5], all_rss[25] = {0};
        double                 idelta[64], iratio[64];
        moon_weights_result_t  ires = {0};
        moon_weights_image_t  *img  = NULL;
        char                   tensor[64];
        char                   path_b[300];
        uint32_t               n_changed = 0, n_chunks = 0, n_moved = 0;
        uint64_t               total = 0;
        void                  *buf;
        int                    ok = 1;

        snprintf(path, sizeof(path), "%s/m%u.gguf", dir, mib);
        snprintf(path_b, sizeof(path_b), "%s/m%u_delta.gguf", dir, mib);
        if (rank == 0 &&
            (write_model(path, mib) != 0 ||
             write_delta(path, path_b, (uint64_t)(chunk * (1 << 20)), &n_changed) != 0)) {
            return 1;
        }
        if (rank == 0) {
            struct stat st;
            total = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
        }
        MPI_Bcast(&total, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
        moon_runtime_config_default(&rcfg);
        rcfg.n_workers = 1;
        rcfg.rank      = (uint32_t)rank;
        if (moon_runtime_create(&rcfg, &rt) != MOON_OK || moon_dist_start(dist, rt) != MOON_OK ||
            moon_runtime_start(rt) != MOON_OK) {
            return 1;
        }
        moon_serve_config_default(&cfg);
        cfg.model_path        = path;
        cfg.n_prefill         = 2;
        cfg.n_decode          = 2;
        cfg.n_store           = 0;
        cfg.backend           = MOON_BACKEND_COST;
        cfg.cost              = moon_cost_llama3_70b();
        cfg.cost.shape        = (moon_model_config_t){0};
        cfg.pin               = 0;
        cfg.weights_chunk_mib = chunk;
        if (moon_serve_cluster_start(&cfg, rt, dist, &cluster) != MOON_OK) {
            return 1;
        }
        rounds = MOON_MIN(rounds, 64);
        buf    = malloc(total);
        memset(buf, rank, total);
        rss[0] = proc_mib("VmRSS:");
        if (rank == 0) {
            moon_serve_client_config_t ccfg = {.conductor = moon_serve_cluster_conductor(cluster)};
            ok = moon_weights_client_create(rt, moon_serve_cluster_weights(cluster), &wc) ==
                     MOON_OK &&
                 moon_serve_client_create(rt, &ccfg, &sc) == MOON_OK &&
                 moon_serve_client_wait_ready(sc, 2, 2, 120000000000ull) == MOON_OK;
        }
        /* warm-up: the first two pushes stage into fresh memory (its pages
         * faulted in on this loaded machine at ~0.5 ms each); from the third
         * on, a receiver stages into the region of the version retired before
         * (as a trainer pushing every few minutes does) */
        for (int w = 0; w < warmup && rank == 0 && ok; w++) {
            moon_weights_result_t res = {0};
            uint64_t              t0  = moon_bench_now_ns();
            ok = moon_weights_push_file_sync(wc, path, 0, MOON_WEIGHTS_F_FULL, 600000000000ull,
                                             &res) == MOON_OK &&
                 res.status == MOON_OK;
            cold_s = w == 0 ? (double)(moon_bench_now_ns() - t0) * 1e-9 : cold_s;
        }
        for (int r = 0; r < rounds; r++) {
            moon_weights_result_t res = {0};
            if (rank == 0 && ok) {
                uint64_t t0 = moon_bench_now_ns();
                ok = moon_weights_push_file_sync(wc, path, 0, MOON_WEIGHTS_F_FULL, 600000000000ull,
                                                 &res) == MOON_OK &&
                     res.status == MOON_OK;
                push[r]  = (double)(moon_bench_now_ns() - t0) * 1e-9;
                stage[r] = res.stage_s;
                if (!ok) {
                    fprintf(stderr, "bench_weights: push failed: %s\n", res.message);
                }
            }
            bc[r] = bcast_s(buf, total);
            if (rank == 0 && ok) {
                /* the delta (1 % of the chunks), then back (not timed) */
                moon_weights_result_t back = {0};
                uint64_t              t0   = moon_bench_now_ns();
                ok = moon_weights_push_file_sync(wc, path_b, 0, 0, 600000000000ull, &res) ==
                         MOON_OK &&
                     res.status == MOON_OK;
                delta[r]  = (double)(moon_bench_now_ns() - t0) * 1e-9;
                dratio[r] = delta[r] / push[r];
                /* the trainer's path: one small tensor of the second half */
                snprintf(tensor, sizeof(tensor), "blk.%u.attn_norm.weight", layers_of(mib) / 2);
                if (img == NULL && moon_weights_image_create(dist, path, &img) != MOON_OK) {
                    ok = 0;
                }
                idelta[r] = ok ? image_delta_s(wc, img, tensor, &ires) : 0;
                iratio[r] = idelta[r] / push[r];
                ok        = ok && idelta[r] > 0;
                n_chunks  = res.n_chunks;
                n_moved   = res.n_moved;
                ok        = ok &&
                     moon_weights_push_file_sync(wc, path, 0, 0, 600000000000ull, &back) ==
                         MOON_OK &&
                     back.status == MOON_OK;
            }
        }
        MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
        rss[1] = proc_mib("VmHWM:");
        rss[2] = proc_mib_of("smaps_rollup", "Pss:");
        rss[3] = proc_mib("RssAnon:");
        rss[4] = proc_mib("RssShmem:");
        MPI_Gather(rss, 5, MPI_DOUBLE, all_rss, 5, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (rank == 0 && ok) {
            moon_bench_json_t j;
            double            s[64], p[64], b[64];
            for (int r = 0; r < rounds; r++) {
                ratio[r] = bc[r] / stage[r]; /* throughput ratio: same bytes */
                s[r]     = stage[r];
                p[r]     = push[r];
                b[r]     = bc[r];
            }
            memcpy(ratio_copy, ratio, sizeof(double) * (size_t)rounds);
            qsort(ratio_copy, (size_t)rounds, sizeof(double), cmp_double);
            moon_bench_json_begin(&j);
            moon_bench_json_str(&j, "suite", "weights");
            moon_bench_json_str(&j, "bench", "broadcast");
            moon_bench_json_str(&j, "impl", "moonlet");
            moon_bench_json_str(&j, "anchor", "mpi_bcast");
            moon_bench_json_int(&j, "bytes", (int64_t)total);
            moon_bench_json_int(&j, "ranks", 4);
            moon_bench_json_num(&j, "chunk_mib", chunk);
            moon_bench_json_int(&j, "rounds", rounds);
            moon_bench_json_int(&j, "warmup", warmup);
            moon_bench_json_num(&j, "first_push_s", cold_s);
            moon_bench_json_num(&j, "stage_s_p50", median(s, rounds));
            moon_bench_json_num(&j, "push_s_p50", median(p, rounds));
            moon_bench_json_num(&j, "bcast_s_p50", median(b, rounds));
            moon_bench_json_num(&j, "stage_gbps_p50", (double)total / median(s, rounds) * 1e-9);
            moon_bench_json_num(&j, "bcast_gbps_p50", (double)total / median(b, rounds) * 1e-9);
            moon_bench_json_num(&j, "ratio_p50", median(ratio, rounds));
            moon_bench_json_num(&j, "ratio_min", ratio_copy[0]);
            moon_bench_json_num(&j, "ratio_max", ratio_copy[rounds - 1]);
            moon_bench_json_end(&j);

            for (int r = 0; r < rounds; r++) {
                b[r] = delta[r];
            }
            memcpy(ratio_copy, dratio, sizeof(double) * (size_t)rounds);
            qsort(ratio_copy, (size_t)rounds, sizeof(double), cmp_double);
            moon_bench_json_begin(&j);
            moon_bench_json_str(&j, "suite", "weights");
            moon_bench_json_str(&j, "bench", "delta");
            moon_bench_json_str(&j, "impl", "moonlet");
            moon_bench_json_str(&j, "anchor", "full_push");
            moon_bench_json_int(&j, "bytes", (int64_t)total);
            moon_bench_json_int(&j, "chunks", n_chunks);
            moon_bench_json_int(&j, "chunks_changed", n_changed);
            moon_bench_json_int(&j, "chunks_moved", n_moved);
            moon_bench_json_int(&j, "rounds", rounds);
            moon_bench_json_num(&j, "delta_s_p50", median(b, rounds));
            moon_bench_json_num(&j, "full_s_p50", median(p, rounds));
            moon_bench_json_num(&j, "ratio_p50", median(dratio, rounds));
            moon_bench_json_num(&j, "ratio_min", ratio_copy[0]);
            moon_bench_json_num(&j, "ratio_max", ratio_copy[rounds - 1]);
            moon_bench_json_end(&j);

            for (int r = 0; r < rounds; r++) {
                b[r] = idelta[r];
            }
            memcpy(ratio_copy, iratio, sizeof(double) * (size_t)rounds);
            qsort(ratio_copy, (size_t)rounds, sizeof(double), cmp_double);
            moon_bench_json_begin(&j);
            moon_bench_json_str(&j, "suite", "weights");
            moon_bench_json_str(&j, "bench", "delta_image");
            moon_bench_json_str(&j, "impl", "moonlet");
            moon_bench_json_str(&j, "anchor", "full_push");
            moon_bench_json_int(&j, "bytes", (int64_t)total);
            moon_bench_json_int(&j, "chunks", ires.n_chunks);
            moon_bench_json_int(&j, "chunks_moved", ires.n_moved);
            moon_bench_json_int(&j, "read_bytes", (int64_t)ires.read_bytes);
            moon_bench_json_int(&j, "rounds", rounds);
            moon_bench_json_num(&j, "delta_s_p50", median(b, rounds));
            moon_bench_json_num(&j, "full_s_p50", median(p, rounds));
            moon_bench_json_num(&j, "ratio_p50", median(iratio, rounds));
            moon_bench_json_num(&j, "ratio_min", ratio_copy[0]);
            moon_bench_json_num(&j, "ratio_max", ratio_copy[rounds - 1]);
            moon_bench_json_end(&j);

            {
                double before = 0, peak = 0, pss = 0, anon = 0, shmem = 0;
                for (int k = 1; k < 5; k++) {
                    before = MOON_MAX(before, all_rss[5 * k]);
                    peak   = MOON_MAX(peak, all_rss[5 * k + 1]);
                    pss    = MOON_MAX(pss, all_rss[5 * k + 2]);
                    anon   = MOON_MAX(anon, all_rss[5 * k + 3]);
                    shmem  = MOON_MAX(shmem, all_rss[5 * k + 4]);
                }
                moon_bench_json_begin(&j);
                moon_bench_json_str(&j, "suite", "weights");
                moon_bench_json_str(&j, "bench", "memory");
                moon_bench_json_str(&j, "impl", "moonlet");
                moon_bench_json_str(&j, "anchor", "checkpoint_size");
                moon_bench_json_num(&j, "checkpoint_mib", (double)total / (1 << 20));
                moon_bench_json_num(&j, "bcast_buffer_mib", (double)total / (1 << 20));
                moon_bench_json_num(&j, "instance_rss_before_mib", before);
                moon_bench_json_num(&j, "instance_rss_peak_mib", peak);
                /* after the pushes: PSS counts the shared pages a rank maps
                 * of its chain neighbour's region once among them */
                moon_bench_json_num(&j, "instance_pss_after_mib", pss);
                moon_bench_json_num(&j, "instance_rss_anon_after_mib", anon);
                moon_bench_json_num(&j, "instance_rss_shmem_after_mib", shmem);
                moon_bench_json_num(&j, "peak_over_checkpoint", peak / ((double)total / (1 << 20)));
                moon_bench_json_end(&j);
            }
        }
        if (rank == 0 && ok && !load_skip) {
            load_phase(sc, wc, path, rounds, median(push, rounds), total);
        }
        if (rank == 0) {
            moon_weights_image_destroy(img);
            moon_serve_client_destroy(sc);
            moon_weights_client_destroy(wc);
            unlink(path);
            unlink(path_b);
        }
        free(buf);
        moon_dist_barrier(dist);
        moon_serve_cluster_stop(cluster);
        moon_runtime_shutdown(rt, 0);
        moon_runtime_wait(rt);
        moon_dist_stop(dist);
        moon_runtime_destroy(rt);
        rt = NULL;
        if (!ok) {
            moon_dist_finalize(dist);
            return 1;
        }
    }
    if (rank == 0) {
        rmdir(dir);
    }
    moon_dist_finalize(dist);
    return 0;
}
