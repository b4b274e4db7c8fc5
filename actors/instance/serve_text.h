/* actors/instance/serve_text.h - a request's streamed text: token ids become UTF-8
 * pieces (moon_tok_stream), and stop strings are found across pieces. Text
 * that could still become the start of a stop string is held back until it
 * cannot, so streamed text never contains a stop string (what vLLM and the
 * OpenAI API promise). One per request, used by its decode instance. */
#ifndef MOON_ACTORS_SERVE_TEXT_H
#define MOON_ACTORS_SERVE_TEXT_H

#include "moonlet/tokenizer.h"

typedef struct {
    moon_tok_stream_t st;
    const char       *stops; /* NUL-terminated strings one after another (borrowed) */
    size_t            stops_len;
    size_t            max_stop; /* longest stop string */
    char             *held;     /* text not yet released */
    size_t            n_held, cap;
    char             *piece;     /* scratch: MOON_TOK_STREAM_OUT_MAX */
    int               keep_stop; /* 1: the stop string that ends the text is released with it
                                    (vLLM's include_stop_str_in_output); set after init */
} moon_serve_text_t;

/* prev: the prompt's last token (for the leading-space rule). stops may be
 * NULL; it is borrowed for the life of t. MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_serve_text_init(moon_serve_text_t *t, const moon_tokenizer_t *tok,
                                            int32_t prev, const char *stops, size_t stops_len);
MOON_API void          moon_serve_text_fini(moon_serve_text_t *t);
/* Feeds token id. *out_p / *len_p: the text released now (into t's memory,
 * NUL-terminated, valid until the next call). Returns 1 when a stop string
 * was completed: the released text ends just before it (keep_stop: with
 * it) and nothing more comes; 0 otherwise. */
MOON_API int moon_serve_text_push(moon_serve_text_t *t, int32_t id, const char **out_p,
                                  size_t *len_p);
/* At the end (no stop string): releases what is held. */
MOON_API void moon_serve_text_flush(moon_serve_text_t *t, const char **out_p, size_t *len_p);

/* 1 when tok ends a request without being streamed: EOS or BOS (unless
 * flags has MOON_SERVE_F_IGNORE_EOS), or one of its stop ids. */
MOON_API int moon_serve_is_stop_id(uint32_t flags, const uint32_t *stop_ids, uint32_t n_stop_ids,
                                   int32_t tok, const moon_tokenizer_t *t);

#endif /* MOON_ACTORS_SERVE_TEXT_H */
