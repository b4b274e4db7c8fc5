/* examples/weights_trainer.c - a trainer rank that pushes new weights into a
 * serving cluster of the same MPI job (MPMD, like serve_driver.c): run it
 * with the cluster's options and --client-ranks counting it, e.g.
 *   mpirun -np 4 moonlet serve --model M.gguf --client-ranks 2 --seconds 60 : \
 *          -np 1 serve_driver --model M.gguf --client-ranks 2 : \
 *          -np 1 weights_trainer --model M.gguf --client-ranks 2 --pushes 3
 * Every --push-every-ms it makes version v of the model (its "training
 * step": the base weights with the tensors matching --perturb-tensors
 * scaled by 1 + scale * u, u uniform in [-1, 1) seeded with v, the same
 * bytes as `moonlet perturb-model --seed v`), writes those tensors by name
 * into its registered image and pushes it (moon_weights_push_image): only
 * the chunks that changed travel, requests in flight finish on the version
 * they started with. One line per push on stdout: the version and figures. */
#include "moonlet/config.h"
#include "moonlet/dist.h"
#include "moonlet/model.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"
#include "weights_image.h"
#include "moonlet/weights_msgs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    uint32_t    pushes;
    uint32_t    every_ms;
    const char *tensors;
    double      scale;
} trainer_opts_t;

#define TR_AT(_f) MOON_CONFIG_AT(trainer_opts_t, _f)
static const moon_config_field_t trainer_fields[] = {
    {"pushes", MOON_CONFIG_U32, TR_AT(pushes), .dflt = "3", .doc = "pushes before it stops",
     .min = 1},
    {"push-every-ms", MOON_CONFIG_U32, TR_AT(every_ms), .dflt = "2000",
     .doc = "milliseconds between the end of a push and the next"},
    {"perturb-tensors", MOON_CONFIG_STRING, TR_AT(tensors), .dflt = "blk.0.",
     .doc = "the tensors a step changes (name contains it)"},
    {"perturb-scale", MOON_CONFIG_DOUBLE, TR_AT(scale), .dflt = "0.5",
     .doc = "relative size of a step's change", .dmax = 10},
    MOON_CONFIG_END,
};
static const moon_config_table_t trainer_table = {"trainer", "weights_trainer", NULL,
                                                  trainer_fields};

/* Version v's tensors: the base perturbed with seed v, written by name. */
static int train_step(moon_weights_image_t *img, const void *base, size_t len,
                      const trainer_opts_t *o, uint64_t v)
{
    void        *w = malloc(len);
    moon_gguf_t *g = NULL;
    int          n = 0;

    if (w == NULL) {
        return -1;
    }
    memcpy(w, base, len);
    if (moon_model_perturb_image(w, len, o->tensors, (float)o->scale, v, NULL) != MOON_OK ||
        moon_gguf_open_memory(w, len, &g) != MOON_OK) {
        fprintf(stderr, "weights_trainer: no f32 tensor matches '%s'\n", o->tensors);
        free(w);
        return -1;
    }
    for (uint64_t i = 0; i < moon_gguf_n_tensors(g); i++) {
        const moon_gguf_tensor_t *t = moon_gguf_tensor(g, i);
        char                      why[256];
        if (strstr(t->name, o->tensors) == NULL) {
            continue;
        }
        if (moon_weights_image_set(img, t->name, t->data, t->bytes, why, sizeof(why)) != MOON_OK) {
            fprintf(stderr, "weights_trainer: %s\n", why);
            n = -1;
            break;
        }
        n++;
    }
    moon_gguf_close(g);
    free(w);
    return n;
}

int main(int argc, char **argv)
{
    moon_serve_config_t    scfg;
    trainer_opts_t         o;
    moon_config_t         *cfg;
    moon_dist_t           *dist;
    moon_runtime_t        *rt;
    moon_runtime_config_t  rcfg;
    moon_serve_cluster_t  *cluster;
    moon_weights_client_t *wc   = NULL;
    moon_weights_image_t  *img  = NULL;
    void                  *base = NULL;
    const void            *data;
    size_t                 len;
    int                    rc = 0;

    moon_serve_config_default(&scfg);
    if (moon_config_defaults(&trainer_table, &o) != MOON_OK ||
        moon_config_create(&cfg) != MOON_OK ||
        moon_config_add(cfg, &moon_serve_config_table, &scfg) != MOON_OK ||
        moon_config_add(cfg, &trainer_table, &o) != MOON_OK ||
        moon_config_parse(cfg, argc, argv) != MOON_OK) {
        fprintf(stderr, "weights_trainer: %s\n", moon_config_error(cfg));
        return 2;
    }
    if (moon_dist_init(&argc, &argv, NULL, &dist) != MOON_OK) {
        return 1;
    }
    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 1;
    rcfg.rank      = moon_dist_rank(dist);
    if (moon_runtime_create(&rcfg, &rt) != MOON_OK || moon_dist_start(dist, rt) != MOON_OK ||
        moon_runtime_start(rt) != MOON_OK ||
        moon_serve_cluster_start(&scfg, rt, dist, &cluster) != MOON_OK ||
        moon_dist_agree(dist, MOON_OK) != MOON_OK) { /* moonlet serve's gateway started */
        fprintf(stderr, "weights_trainer: could not join the cluster\n");
        return 1;
    }
    if (moon_weights_client_create(rt, moon_serve_cluster_weights(cluster), &wc) != MOON_OK ||
        moon_weights_image_create(dist, scfg.model_path, &img) != MOON_OK) {
        fprintf(stderr, "weights_trainer: no image of %s\n", scfg.model_path);
        rc = 1;
    }
    if (rc == 0) {
        moon_weights_image_bytes(img, &data, &len);
        base = malloc(len);
        rc   = base == NULL;
    }
    if (rc == 0 && o.scale == 0) {
        fprintf(stderr, "weights_trainer: --perturb-scale 0 changes nothing\n");
    }
    if (rc == 0) {
        memcpy(base, data, len);
    }
    for (uint64_t v = 1; rc == 0 && v <= o.pushes; v++) {
        moon_weights_result_t r;
        struct timespec       gap = {o.every_ms / 1000, (long)(o.every_ms % 1000) * 1000000};

        nanosleep(&gap, NULL);
        if (train_step(img, base, len, &o, v) <= 0) {
            rc = 1;
            break;
        }
        /* version v exactly: the driver checks responses against it */
        if (moon_weights_push_image(wc, img, v, 0, 120000000000ull, &r) != MOON_OK) {
            fprintf(stderr, "weights_trainer: no outcome of the push of version %llu\n",
                    (unsigned long long)v);
            rc = 1;
            break;
        }
        printf("{\"push\":%llu,\"status\":\"%s\",\"version\":%llu,\"moved_bytes\":%llu,"
               "\"skipped_bytes\":%llu,\"n_moved\":%u,\"n_chunks\":%u,\"stage_s\":%.4f,"
               "\"switch_s\":%.4f,\"message\":\"%s\"}\n",
               (unsigned long long)v, moon_status_str(r.status), (unsigned long long)r.version,
               (unsigned long long)r.moved_bytes, (unsigned long long)r.skipped_bytes, r.n_moved,
               r.n_chunks, r.stage_s, r.switch_s, r.message);
        fflush(stdout);
        rc = r.status != MOON_OK;
    }
    free(base);
    moon_weights_image_destroy(img);
    moon_weights_client_destroy(wc);
    moon_dist_barrier(dist);
    moon_serve_cluster_stop(cluster);
    moon_runtime_shutdown(rt, 0);
    moon_runtime_wait(rt);
    moon_dist_stop(dist);
    moon_runtime_destroy(rt);
    moon_dist_finalize(dist);
    moon_config_destroy(cfg);
    return rc;
}
