/* client.c - an out-of-tree program: a serving cluster in this process
 * (moonlet/serve_cluster.h) with a plugin loaded (moonlet/plugin.h), driven
 * through the serving client API (moonlet/serve_client.h).
 * usage: oot_client MODEL.gguf PLUGIN.so[:ARGS]
 * Submits a request under the cap and one over it; prints what came back
 * and exits 0 when the first finished and the second was refused (400). */
#include "moonlet/plugin.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"

#include <stdio.h>

int main(int argc, char **argv)
{
    moon_runtime_config_t rc;
    moon_runtime_t       *rt = NULL;
    moon_serve_config_t   sc;
    moon_serve_cluster_t *cluster = NULL;
    moon_serve_client_t  *client  = NULL;
    moon_serve_params_t   p;
    uint64_t              ids[2];
    int                   finished = 0, refused = 0, done = 0;

    if (argc != 3) {
        fprintf(stderr, "usage: oot_client MODEL.gguf PLUGIN.so[:ARGS]\n");
        return 2;
    }
    moon_serve_config_default(&sc);
    sc.model_path = argv[1];
    moon_runtime_config_default(&rc);
    if (moon_plugin_load(argv[2]) != MOON_OK || moon_runtime_create(&rc, &rt) != MOON_OK ||
        moon_runtime_start(rt) != MOON_OK ||
        moon_serve_cluster_start(&sc, rt, NULL, &cluster) != MOON_OK ||
        moon_plugin_start(rt, NULL, NULL) != MOON_OK ||
        moon_serve_client_create(
            rt, &(moon_serve_client_config_t){.conductor = moon_serve_cluster_conductor(cluster)},
            &client) != MOON_OK) {
        fprintf(stderr, "oot_client: the cluster did not start\n");
        return 1;
    }
    moon_serve_params_default(&p);
    p.prompt      = "Once upon a time";
    p.max_tokens  = 8;
    p.temperature = 0.8f;
    moon_serve_client_submit(client, &p, &ids[0]);
    p.max_tokens = 64;
    moon_serve_client_submit(client, &p, &ids[1]);
    while (done < 2) {
        moon_serve_event_t ev;
        if (moon_serve_client_next(client, 30000000000ull, &ev) != MOON_OK) {
            fprintf(stderr, "oot_client: no answer in 30 s\n");
            break;
        }
        if (ev.kind == MOON_SERVE_EV_DONE) {
            printf("request %llu: %s %u tokens http %u %s\n", (unsigned long long)ev.request_id,
                   moon_finish_str(ev.finish), ev.n_completion, ev.http_status, ev.message);
            finished +=
                ev.request_id == ids[0] && ev.finish == MOON_FINISH_LENGTH && ev.n_completion == 8;
            refused += ev.request_id == ids[1] && ev.finish == MOON_FINISH_REJECTED &&
                       ev.http_status == 400;
            done++;
        }
        moon_serve_event_fini(&ev);
    }
    moon_serve_client_destroy(client);
    moon_plugin_stop();
    moon_serve_cluster_stop(cluster);
    moon_runtime_shutdown(rt, 0);
    moon_runtime_wait(rt);
    moon_runtime_destroy(rt);
    moon_plugin_unload();
    printf("%s\n", finished == 1 && refused == 1 ? "ok" : "FAIL");
    return finished == 1 && refused == 1 ? 0 : 1;
}
