/* tests/fuzz/fuzz_gguf.c - libFuzzer target for the GGUF reader and what
 * reads its metadata (tokenizer, Llama hyper-parameters). `tests/fuzz/run.sh
 * gguf MINUTES` fuzzes it; CTest replays corpus/gguf (fuzz_replay.c). */
#include "moonlet/gguf.h"
#include "moonlet/log.h"
#include "moonlet/model.h"
#include "moonlet/tokenizer.h"

#include <string.h>

#include "fuzz_target.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    moon_gguf_t        *g = NULL;
    moon_tokenizer_t   *t = NULL;
    moon_model_config_t cfg;

    moon_log_set_level(0);
    if (moon_gguf_open_memory(data, size, &g) != MOON_OK) {
        return 0;
    }
    for (uint64_t i = 0; i < moon_gguf_n_tensors(g); i++) {
        const moon_gguf_tensor_t *ts  = moon_gguf_tensor(g, i);
        volatile uint8_t          sum = 0;
        for (uint64_t j = 0; j < ts->bytes; j += 97) {
            sum ^= ((const uint8_t *)ts->data)[j];
        }
        (void)sum;
    }
    moon_model_config_from_gguf(g, &cfg);
    {
        /* binding: every architecture's extra tensors, K-quant shapes */
        moon_model_t *m = NULL;
        if (moon_model_load_memory(data, size, &m) == MOON_OK) {
            moon_model_destroy(m);
        }
    }
    if (moon_tokenizer_create(g, &t) == MOON_OK) {
        int32_t ids[64];
        char    out[1024];
        size_t  n = 0, len;
        if (moon_tokenizer_encode(t, "hello world", 11, true, ids, 64, &n) == MOON_OK) {
            moon_tokenizer_decode(t, -1, ids, n, out, sizeof(out), &len);
        }
        moon_tokenizer_destroy(t);
    }
    moon_gguf_close(g);
    return 0;
}
