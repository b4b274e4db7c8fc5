/* tests/fuzz/fuzz_target.h - the one entry point every fuzz target defines
 * (libFuzzer's). Under `tests/fuzz/run.sh` libFuzzer calls it; in the normal
 * build fuzz_replay.c calls it once per file of the target's corpus, so every
 * CI run replays what the fuzzer found. It must not crash, leak or hang on
 * any input, and returns 0. */
#ifndef MOON_TESTS_FUZZ_TARGET_H
#define MOON_TESTS_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* MOON_TESTS_FUZZ_TARGET_H */
