/* tests/e2e/gateway/gw_local.h - an in-process serving cluster on one model
 * with a gateway on a free port, as the gateway's end-to-end tests start it.
 * Test helper, main thread only. */
#ifndef MOON_TESTS_GW_LOCAL_H
#define MOON_TESTS_GW_LOCAL_H

#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"

#include <cjson/cJSON.h>
#include <stdint.h>

typedef struct {
    moon_runtime_t       *rt;
    moon_serve_cluster_t *cluster;
    moon_serve_client_t  *client; /* waited on until an instance of each role is up */
    uint16_t              port;   /* the gateway's */
} gw_local_t;

/* A runtime of 2 workers, a cluster serving model (16 MiB of store) and a
 * gateway, started and answering /health. 1 when all is up; 0 after saying
 * on stderr, as who, what did not start. Either way gw_local_stop ends what
 * did start. */
int  gw_local_start(gw_local_t *l, const char *who, const char *model);
void gw_local_stop(gw_local_t *l);

/* POSTs a JSON body with curl and asserts (CUnit) the status is want; the
 * answer parsed (NULL if not JSON), the caller's to cJSON_Delete. */
cJSON *gw_post_json(unsigned port, const char *path, const char *body, int want);

#endif /* MOON_TESTS_GW_LOCAL_H */
