/* tests/support/moon_test_greedy.h - what a served request must give: the
 * greedy continuation of a prompt by the reference engine alone, with no
 * cluster, cache or transfer in the way (over the KV cache type a default
 * cluster of CPU instances holds). Single-threaded. */
#ifndef MOON_TEST_GREEDY_H
#define MOON_TEST_GREEDY_H

#include "moonlet/model.h"

#include <stdint.h>

/* The KV cache type of a default cluster's CPU instances (--kv-cache-type
 * auto): a reference that must match served output runs over it. */
moon_kv_type_t moon_test_cluster_kv_type(void);

/* At most max_new tokens after prompt[0..n) into out, stopping before BOS
 * or EOS (ids 1 and 2 of the llama2 vocabularies the tests use); returns
 * how many. A model that does not load or run fails the calling test. */
uint32_t moon_test_greedy(const moon_model_t *m, const int32_t *prompt, uint32_t n,
                          uint32_t max_new, int32_t *out);
/* The same for the model file at path (loaded and freed here). */
uint32_t moon_test_greedy_file(const char *path, const int32_t *prompt, uint32_t n,
                               uint32_t max_new, int32_t *out);

#endif /* MOON_TEST_GREEDY_H */
