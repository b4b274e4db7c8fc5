/* model/convert/hf_vocab.h - a Hugging Face tokenizer.json (+
 * tokenizer_config.json) as GGUF tokenizer keys, the ones llama.cpp's
 * converter writes (the C twin of hf_tokenizer.mjs). */
#ifndef MOON_MODEL_HF_VOCAB_H
#define MOON_MODEL_HF_VOCAB_H

#include "moonlet/gguf.h"
#include "moonlet/status.h"

#include <cjson/cJSON.h>

/* Writes tokenizer.ggml.* and tokenizer.chat_template from tj (tokenizer.json)
 * and tc (tokenizer_config.json; may be NULL) into w, the token list padded
 * with [PADi] unused tokens up to min_tokens. *n_tokens_p: tokens written.
 * MOON_ERR_UNSUPPORTED: not a byte-level BPE or an unknown pre-tokenizer
 * (logged); MOON_ERR_CORRUPT: malformed; MOON_ERR_NO_MEMORY. */
moon_status_t moon_hf_vocab_write(const cJSON *tj, const cJSON *tc, uint32_t min_tokens,
                                  moon_gguf_writer_t *w, uint32_t *n_tokens_p);

#endif /* MOON_MODEL_HF_VOCAB_H */
