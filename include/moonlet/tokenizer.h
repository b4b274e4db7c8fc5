/* moonlet/tokenizer.h - the tokenizer of a GGUF vocabulary (tokenizer.ggml.*):
 *  - SentencePiece BPE with byte fallback (model "llama", or none: the
 *    512-token and 32,000-token Llama vocabularies). Encoding is llama2.c's:
 *    a dummy prefix space, one token per UTF-8 character (bytes as <0xXX>
 *    tokens when the character is not in the vocabulary), then repeated merges
 *    of the adjacent pair whose concatenation has the highest score.
 *  - Byte-level BPE (model "gpt2": Llama 3, Qwen 2.5/3, SmolLM), as Hugging
 *    Face tokenizers and llama.cpp: added tokens (CONTROL and USER_DEFINED)
 *    matched first and never split, the text between them split by the
 *    family's pre-tokenizer (tokenizer.ggml.pre: llama-bpe, qwen2, smollm,
 *    gpt2), each piece merged by tokenizer.ggml.merges rank.
 * A tokenizer is immutable after create: any number of threads may use it; a
 * stream belongs to one. */
#ifndef MOONLET_TOKENIZER_H
#define MOONLET_TOKENIZER_H

#include "moonlet/defs.h"
#include "moonlet/gguf.h"
#include "moonlet/status.h"

#include <stdbool.h>

typedef struct moon_tokenizer moon_tokenizer_t;

/* Builds a tokenizer from gguf's metadata, copying everything it needs (the
 * reader may be closed afterwards). MOON_ERR_CORRUPT (logged, naming the
 * cause) when the tokenizer keys are missing or inconsistent: an unknown
 * tokenizer.ggml.model or .pre, a gpt2 vocabulary without merges or without a
 * token for some byte; MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_tokenizer_create(const moon_gguf_t *gguf, moon_tokenizer_t **tok_p);
MOON_API void          moon_tokenizer_destroy(moon_tokenizer_t *tok); /* NULL: no-op */

MOON_API uint32_t moon_tokenizer_n_vocab(const moon_tokenizer_t *tok);
MOON_API int32_t  moon_tokenizer_bos(const moon_tokenizer_t *tok);
MOON_API int32_t  moon_tokenizer_eos(const moon_tokenizer_t *tok);

/* Encodes len bytes of text (any bytes; invalid UTF-8 falls back to byte
 * tokens) into ids[0..max_ids). add_bos: the text starts a sequence, so BOS
 * comes first and EOS last where the vocabulary asks for them
 * (tokenizer.ggml.add_bos_token, default true for SentencePiece and llama-bpe,
 * else false; add_eos_token, default false). Byte-level vocabularies match
 * their added tokens ("<|im_start|>") in the text. At most len + 2 ids are
 * needed (len + 3 for a SentencePiece vocabulary that adds EOS).
 * MOON_ERR_NO_RESOURCE when max_ids is too small (ids then hold a prefix, *n_p
 * unset). */
MOON_API moon_status_t moon_tokenizer_encode(const moon_tokenizer_t *tok, const char *text,
                                             size_t len, bool add_bos, int32_t *ids, size_t max_ids,
                                             size_t *n_p);

/* The bytes token id stands for, given the previous token (SentencePiece:
 * after BOS the leading space of a piece is dropped, as llama2.c does).
 * Control tokens give "", byte tokens their one raw byte, byte-level pieces
 * their bytes (GPT-2's byte map undone), user-defined tokens their text. The result points into the
 * tokenizer (or a static table); NULL for an id out of range. */
MOON_API const char *moon_tokenizer_piece(const moon_tokenizer_t *tok, int32_t prev, int32_t id,
                                          size_t *len_p);

/* Decodes n ids (prev = the token before ids[0], or -1) into out, NUL
 * terminated. MOON_ERR_NO_RESOURCE when cap is too small; MOON_ERR_INVALID_PARAM
 * for an id out of range. The output may contain partial UTF-8 if the ids
 * split a character; use a stream for incremental output. */
MOON_API moon_status_t moon_tokenizer_decode(const moon_tokenizer_t *tok, int32_t prev,
                                             const int32_t *ids, size_t n, char *out, size_t cap,
                                             size_t *len_p);

/* Streaming decoder: never emits half a UTF-8 character. Bytes that cannot
 * start or continue a valid character come out as U+FFFD. Caller embeds it. */
typedef struct {
    const moon_tokenizer_t *tok; /* borrowed */
    int32_t                 prev;
    uint8_t                 pend[4];
    uint32_t                n_pend;
    uint32_t                need; /* bytes the pending character needs in all */
} moon_tok_stream_t;

#define MOON_TOK_STREAM_OUT_MAX(_tok) (moon_tokenizer_max_piece(_tok) * 3 + 16)
MOON_API size_t moon_tokenizer_max_piece(const moon_tokenizer_t *tok);

MOON_API void moon_tok_stream_init(moon_tok_stream_t *st, const moon_tokenizer_t *tok,
                                   int32_t prev);
/* Feeds one id; writes the complete characters it finishes into out (cap >=
 * MOON_TOK_STREAM_OUT_MAX), NUL terminated. MOON_ERR_INVALID_PARAM: bad id. */
MOON_API moon_status_t moon_tok_stream_push(moon_tok_stream_t *st, int32_t id, char *out,
                                            size_t cap, size_t *len_p);
/* Flushes an unfinished character as U+FFFD (cap >= 4). */
MOON_API void moon_tok_stream_flush(moon_tok_stream_t *st, char *out, size_t cap, size_t *len_p);

#endif /* MOONLET_TOKENIZER_H */
