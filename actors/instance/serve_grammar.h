/* actors/instance/serve_grammar.h - constrained decoding in a serving
 * instance: the instance's compiled grammars (one automaton per spec, over
 * the model's vocabulary, kept in a cache) and a request's place in one.
 * Everything here runs on the instance actor's thread. */
#ifndef MOON_ACTORS_SERVE_GRAMMAR_H
#define MOON_ACTORS_SERVE_GRAMMAR_H

#include "moonlet/grammar.h"
#include "moonlet/tokenizer.h"

typedef struct moon_serve_grammars moon_serve_grammars_t;

/* A request's grammar: fsm NULL when it has none. */
typedef struct {
    moon_grammar_fsm_t *fsm; /* held from the instance's cache */
    uint32_t            state;
} moon_serve_grammar_t;

/* The grammars of an instance whose model has tokenizer tok (borrowed: must
 * outlive them); keeps up to 16 unused automata. MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_serve_grammars_create(const moon_tokenizer_t *tok,
                                                  moon_serve_grammars_t **gs_p);
MOON_API void          moon_serve_grammars_destroy(moon_serve_grammars_t *gs); /* NULL: no-op */

/* Starts g on spec (len bytes; len 0: no grammar, g->fsm NULL), then reads
 * the n_done tokens done[] already generated (a resumed request). *gs_p is
 * created on first use. Errors (g unset, err says why): those of
 * moon_grammar_from_spec, MOON_ERR_INVALID_PARAM when done[] breaks it. */
MOON_API moon_status_t moon_serve_grammar_begin(moon_serve_grammars_t **gs_p,
                                                const moon_tokenizer_t *tok, const char *spec,
                                                size_t len, const uint32_t *done, uint32_t n_done,
                                                moon_serve_grammar_t *g, char *err, size_t err_cap);
/* Gives g's automaton back (g->fsm NULL after; no-op when it had none). */
MOON_API void moon_serve_grammar_end(moon_serve_grammars_t *gs, moon_serve_grammar_t *g);

/* Masks logits (vocab n) to the tokens g's state allows. MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_serve_grammar_mask(moon_serve_grammar_t *g, float *logits, uint32_t n);
/* Computes g's current mask if it is not cached yet (call while the forward
 * pass runs). Errors are left for _mask to report. */
MOON_API void moon_serve_grammar_prefetch(moon_serve_grammar_t *g);
/* Moves g past token (a sampled one). MOON_ERR_INVALID_PARAM: it cannot
 * follow; MOON_ERR_NO_RESOURCE: the automaton's limits. */
MOON_API moon_status_t moon_serve_grammar_accept(moon_serve_grammar_t *g, int32_t token);
/* 1 when the document is complete and nothing may follow. */
MOON_API int moon_serve_grammar_final(const moon_serve_grammar_t *g);

#endif /* MOON_ACTORS_SERVE_GRAMMAR_H */
