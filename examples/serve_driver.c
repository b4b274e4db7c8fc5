/* examples/serve_driver.c - a client rank of a serving cluster: run it in the
 * same mpirun job as `moonlet serve` (MPMD), with the same options and
 * --client-ranks 1, e.g.
 *   mpirun -np 4 moonlet serve --model M.gguf --client-ranks 1 --seconds 30 : \
 *          -np 1 serve_driver --model M.gguf --client-ranks 1
 * It joins the cluster's start-up (no role lands on its rank), finds the
 * conductor by name, submits a few prompts through the client API and prints
 * each answer as its tokens stream in. */
#include "moonlet/config.h"
#include "moonlet/dist.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"

#include <stdio.h>

int main(int argc, char **argv)
{
    static const char *const   prompts[] = {"Once upon a time", "Lily and Tom", "The little dog"};
    moon_serve_config_t        scfg;
    moon_config_t             *cfg;
    moon_dist_t               *dist;
    moon_runtime_t            *rt;
    moon_runtime_config_t      rcfg;
    moon_serve_cluster_t      *cluster;
    moon_serve_client_t       *client;
    moon_serve_client_config_t ccfg = {0};
    int                        rc   = 0;

    moon_serve_config_default(&scfg);
    if (moon_config_create(&cfg) != MOON_OK ||
        moon_config_add(cfg, &moon_serve_config_table, &scfg) != MOON_OK ||
        moon_config_parse(cfg, argc, argv) != MOON_OK) {
        fprintf(stderr, "serve_driver: %s\n", moon_config_error(cfg));
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
        fprintf(stderr, "serve_driver: could not join the cluster\n");
        return 1;
    }
    ccfg.conductor = moon_serve_cluster_conductor(cluster);
    if (moon_serve_client_create(rt, &ccfg, &client) != MOON_OK ||
        moon_serve_client_wait_ready(client, scfg.n_prefill, scfg.n_decode, 30000000000ull) !=
            MOON_OK) {
        fprintf(stderr, "serve_driver: the cluster did not come up\n");
        return 1;
    }
    for (size_t i = 0; i < sizeof(prompts) / sizeof(prompts[0]); i++) {
        moon_serve_params_t p;
        moon_serve_event_t  ev;
        uint64_t            id;

        moon_serve_params_default(&p);
        p.prompt     = prompts[i];
        p.max_tokens = 48;
        if (moon_serve_client_submit(client, &p, &id) != MOON_OK) {
            rc = 1;
            break;
        }
        printf("[%s]", prompts[i]);
        while (moon_serve_client_next(client, 30000000000ull, &ev) == MOON_OK) {
            int done = ev.kind == MOON_SERVE_EV_DONE;
            printf("%s", ev.text);
            fflush(stdout);
            if (done) {
                printf(
                    "\n  (finish %s, %u prompt + %u completion tokens, %u cached, ttft %.2f ms)\n",
                    moon_finish_str(ev.finish), ev.n_prompt, ev.n_completion, ev.n_cached,
                    ev.ttft_ns / 1e6);
                rc |= ev.status != MOON_OK;
            }
            moon_serve_event_fini(&ev);
            if (done) {
                break;
            }
        }
    }
    moon_serve_client_destroy(client);
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
