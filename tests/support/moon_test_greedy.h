/* tests/support/moon_test_greedy.h - what a served request must give: the
 * greedy continuation of a prompt by the reference engine alone, with no
 * cluster, cache or transfer in the way. Single-threaded. */
#ifndef MOON_TEST_GREEDY_H
#define MOON_TEST_GREEDY_H

#include "moonlet/model.h"

#include <stdint.h>

/* At most max_new tokens after prompt[0..n) into out, stopping before BOS
 * or EOS (ids 1 and 2 of the llama2 vocabularies the tests use); returns
 * how many. A model that does not load or run fails the calling test. */
uint32_t moon_test_greedy(const moon_model_t *m, const int32_t *prompt, uint32_t n,
                          uint32_t max_new, int32_t *out);
/* The same for the model file at path (loaded and freed here). */
uint32_t moon_test_greedy_file(const char *path, const int32_t *prompt, uint32_t n,
                               uint32_t max_new, int32_t *out);

#endif /* MOON_TEST_GREEDY_H */
