/* tests/fuzz/fuzz_safetensors.c - libFuzzer target for the safetensors
 * reader (the JSON header, offsets, shapes, dtypes of a Hugging Face
 * checkpoint). `tests/fuzz/run.sh safetensors MINUTES` fuzzes it; CTest
 * replays corpus/safetensors (fuzz_replay.c). */
#include "moonlet/hf.h"
#include "moonlet/log.h"

#include "fuzz_target.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    moon_st_t *st = NULL;

    moon_log_set_level(0);
    if (moon_st_open_memory(data, size, "fuzz", &st) != MOON_OK) {
        return 0;
    }
    for (uint64_t i = 0; i < moon_st_n_tensors(st); i++) {
        const moon_st_tensor_t *t   = moon_st_tensor(st, i);
        volatile uint8_t        sum = 0;
        for (uint64_t j = 0; j < t->bytes; j += 31) {
            sum ^= ((const uint8_t *)t->data)[j];
        }
        if (t->bytes > 0) {
            sum ^= ((const uint8_t *)t->data)[t->bytes - 1];
        }
        (void)sum;
        (void)moon_st_find(st, t->name);
    }
    moon_st_close(st);
    return 0;
}
