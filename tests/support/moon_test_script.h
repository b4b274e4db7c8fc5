/* tests/support/moon_test_script.h - a serve instance against scripted
 * peers: the real instance actor (prefill, decode or colocated) runs on
 * stories260K in one runtime with one scripted actor of the test's that
 * plays its conductor, the other instance and the client at once (every
 * address the instance answers is the script's). The test's own part is the
 * script: what it sends, and what it checks of what comes back. */
#ifndef MOON_TEST_SCRIPT_H
#define MOON_TEST_SCRIPT_H

#include "serve_instance.h"
#include "moonlet/runtime.h"

#include <stdint.h>

/* Registers the serving and transfer messages (a pull completes as
 * DIST_BULK_DONE, also in one process) and loads the model at path into
 * *model; 0 or -1, as a CUnit suite's setup answers. */
int moon_test_script_setup(const char *path, moon_model_t **model);

/* One case: the script actor (peer, spawned first: its init may start a
 * timer; *instance is set before any timer fires) and the instance
 * (instance_ops with args, whose conductor is set to the script's address).
 * threaded 0: the deterministic executor (2 s of simulated time); 1: the
 * real one, one worker. trace: the runtime's (may be NULL). The instance's
 * warnings on the error paths are silenced while it runs. Returns
 * moon_runtime_run's result. */
int moon_test_script_run(const moon_actor_ops_t *peer, const moon_actor_ops_t *instance_ops,
                         moon_serve_instance_args_t *args, int threaded, moon_trace_fn trace,
                         moon_addr_t *instance);

/* What every script does with the instance's own reports: HELLO counted in
 * *n_hello, LOAD and CACHE_EVENTS ignored. Returns 1 when msg was one of
 * them (handled), else 0. */
int moon_test_script_report(const moon_msg_hdr_t *msg, uint32_t *n_hello);

#endif /* MOON_TEST_SCRIPT_H */
