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
 * writer). One size per job (the suite runs one job per size). Args:
 * --mib=N (default 64), --rounds=N (5), --chunk_mib=N (4), --warmup=N (2
 * pushes first, not timed: staging into fresh memory; first_push_s says
 * what the first one took). */
#include "bench_util.h"

#include "moonlet/dist.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "serve_client.h"
#include "serve_cluster.h"
#include "weights_client.h"
#include "weights_msgs.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* A random Llama of about mib MiB: dim 1024, ff 2816, ~51 MiB a layer. */
static int write_model(const char *path, uint32_t mib)
{
    moon_model_config_t c         = {.dim        = 1024,
                                     .hidden_dim = 2816,
                                     .n_heads    = 16,
                                     .n_kv_heads = 16,
                                     .vocab_size = 512,
                                     .seq_len    = 256,
                                     .norm_eps   = 1e-5f,
                                     .rope_theta = 10000.0f};
    uint64_t            per_layer = (4ull * 1024 * 1024 + 3ull * 1024 * 2816) * 4;

    c.n_layers = (uint32_t)MOON_MAX(1, ((uint64_t)mib << 20) / per_layer);
    return moon_model_write_random(&c, MOON_GGML_F32, 1, path) == MOON_OK ? 0 : -1;
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

int main(int argc, char **argv)
{
    uint32_t              mib    = (uint32_t)moon_bench_arg_int(argc, argv, "mib", 64);
    int                   rounds = (int)moon_bench_arg_int(argc, argv, "rounds", 5);
    double                chunk  = (double)moon_bench_arg_int(argc, argv, "chunk_mib", 4);
    int                   warmup = (int)moon_bench_arg_int(argc, argv, "warmup", 2);
    double                cold_s = 0.0;
    moon_dist_t          *dist   = NULL;
    moon_runtime_t       *rt     = NULL;
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
        uint64_t               total = 0;
        void                  *buf;
        int                    ok = 1;

        snprintf(path, sizeof(path), "%s/m%u.gguf", dir, mib);
        if (rank == 0 && write_model(path, mib) != 0) {
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
        }
        MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
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
        }
        if (rank == 0) {
            moon_serve_client_destroy(sc);
            moon_weights_client_destroy(wc);
            unlink(path);
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
