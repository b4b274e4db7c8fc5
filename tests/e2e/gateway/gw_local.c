/* tests/e2e/gateway/gw_local.c - an in-process cluster and gateway for the
 * gateway's end-to-end tests. */
#include "gw_local.h"

#include "gateway.h"
#include "gw_curl.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#define WAIT_NS 60000000000ull /* for the instances, as for /health */

int gw_local_start(gw_local_t *l, const char *who, const char *model)
{
    moon_runtime_config_t      rcfg;
    moon_serve_config_t        scfg;
    moon_serve_client_config_t ccfg = {0};
    moon_gateway_args_t        args;
    moon_addr_t                addr;

    memset(l, 0, sizeof(*l));
    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 2;
    if (moon_runtime_create(&rcfg, &l->rt) != MOON_OK || moon_runtime_start(l->rt) != MOON_OK) {
        fprintf(stderr, "%s: the runtime did not start\n", who);
        return 0;
    }
    moon_serve_config_default(&scfg);
    scfg.model_path     = model;
    scfg.store_dram_mib = 16;
    if (moon_serve_cluster_start(&scfg, l->rt, NULL, &l->cluster) != MOON_OK) {
        fprintf(stderr, "%s: the cluster did not start\n", who);
        return 0;
    }
    ccfg.conductor = moon_serve_cluster_conductor(l->cluster);
    memset(&args, 0, sizeof(args));
    moon_gateway_config_default(&args.config);
    args.config.port = 0;
    args.conductor   = ccfg.conductor;
    args.model_path  = model;
    args.port_p      = &l->port;
    if (moon_serve_client_create(l->rt, &ccfg, &l->client) != MOON_OK ||
        moon_serve_client_wait_ready(l->client, 1, 1, WAIT_NS) != MOON_OK ||
        moon_spawn(l->rt, &moon_gateway_ops, &args, NULL, &addr) != MOON_OK ||
        !gw_wait_health(l->port, 200)) {
        fprintf(stderr, "%s: the gateway did not start\n", who);
        return 0;
    }
    return 1;
}

void gw_local_stop(gw_local_t *l)
{
    if (l->client != NULL) {
        moon_serve_client_destroy(l->client);
    }
    if (l->cluster != NULL) {
        moon_serve_cluster_stop(l->cluster);
    }
    if (l->rt != NULL) {
        moon_runtime_shutdown(l->rt, 0);
        moon_runtime_wait(l->rt);
        moon_runtime_destroy(l->rt);
    }
    memset(l, 0, sizeof(*l));
}

cJSON *gw_post_json(unsigned port, const char *path, const char *body, int want)
{
    gw_http_t r;
    cJSON    *o;
    int       code = gw_post(&r, port, path, body, NULL);

    CU_ASSERT_EQUAL(code, want);
    if (code != want) {
        fprintf(stderr, "POST %s %s -> %d %s\n", path, body, code, r.body ? r.body : "");
    }
    o = cJSON_Parse(r.body != NULL ? r.body : "");
    gw_http_fini(&r);
    return o;
}
