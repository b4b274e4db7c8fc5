/* moonlet/grammar.h - constrained decoding: a grammar (GBNF text, or a JSON
 * schema compiled to GBNF) over bytes, run as a pushdown automaton whose
 * parse states are interned, each with a cached mask of the vocabulary's
 * tokens that can continue it (a token is allowed when all its bytes can).
 * See model/grammar/README.md for the design and how it compares with
 * llama.cpp's GBNF, XGrammar and Outlines.
 *
 * Objects: a grammar (rules; immutable once built), a vocabulary (token
 * bytes in a trie; immutable), and an automaton (grammar x vocabulary: the
 * interned states, their masks and token transitions, filled lazily). An
 * automaton belongs to one thread (the serving actor that holds it); grammars
 * and vocabularies may be shared by any number of threads once built. */
#ifndef MOONLET_GRAMMAR_H
#define MOONLET_GRAMMAR_H

#include "moonlet/defs.h"
#include "moonlet/status.h"

#include <stddef.h>
#include <stdint.h>

MOON_EXTERN_C_BEGIN

typedef struct moon_grammar       moon_grammar_t;
typedef struct moon_grammar_vocab moon_grammar_vocab_t;
typedef struct moon_grammar_fsm   moon_grammar_fsm_t;
typedef struct moon_grammar_cache moon_grammar_cache_t;

/* Room for an error message (err arguments below). */
#define MOON_GRAMMAR_ERR_MAX 192

/* Parses GBNF (llama.cpp's grammar syntax: `name ::= alternatives`, "text",
 * [classes] with ranges and ^, ( groups ), . , * + ? {m} {m,} {m,n}, #
 * comments; the start rule is `root`). Characters are Unicode code points
 * matched as their UTF-8 bytes. MOON_ERR_INVALID_PARAM (err: why, with the
 * offset): a syntax error, an undefined rule, no root; MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_grammar_from_gbnf(const char *text, size_t len, moon_grammar_t **g_p,
                                              char *err, size_t err_cap);

/* Compiles a JSON schema (JSON text) to GBNF, appended to out (a string of
 * cap bytes, NUL terminated; *len_p its length) - compact JSON, properties in
 * the schema's order. schema NULL: any JSON object (response_format
 * json_object). What is supported and how is listed in model/grammar/README.md;
 * anything else (a keyword whose constraint a grammar cannot express) is
 * MOON_ERR_UNSUPPORTED with err naming it, never silently ignored. Other
 * errors: MOON_ERR_INVALID_PARAM (not JSON, not a schema), MOON_ERR_NO_RESOURCE
 * (the grammar outgrows cap), MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_grammar_schema_to_gbnf(const char *schema, size_t len, char *out,
                                                   size_t cap, size_t *len_p, char *err,
                                                   size_t err_cap);

/* A grammar from a spec, the form serving messages carry: "json_object",
 * "json_schema\n<schema>", "gbnf\n<text>", "tool_calls\n<schema>" /
 * "tool_call\n<schema>" (one or more / exactly one
 * `<tool_call>{json}</tool_call>` whose JSON matches <schema>, separated by
 * newlines: Hermes' tool calls), or "mistral_calls\n<schema>" (`[TOOL_CALLS]`
 * then JSON matching <schema>, a list of calls: Mistral's). Errors as above. */
MOON_API moon_status_t moon_grammar_from_spec(const char *spec, size_t len, moon_grammar_t **g_p,
                                              char *err, size_t err_cap);
MOON_API void          moon_grammar_destroy(moon_grammar_t *g); /* NULL: no-op */
/* Number of rules (after groups and repetitions became rules of their own). */
MOON_API uint32_t moon_grammar_n_rules(const moon_grammar_t *g);

/* A vocabulary from n_tokens pieces (pieces[i], lens[i] bytes, copied; a
 * token of 0 bytes - control tokens - is never allowed by a mask). eos: the
 * token allowed exactly in accepting states (-1: none). MOON_ERR_INVALID_PARAM:
 * n_tokens 0, NULL arrays, eos out of range; MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_grammar_vocab_create(uint32_t n_tokens, const char *const *pieces,
                                                 const uint32_t *lens, int32_t eos,
                                                 moon_grammar_vocab_t **v_p);
MOON_API void          moon_grammar_vocab_destroy(moon_grammar_vocab_t *v); /* NULL: no-op */
MOON_API uint32_t      moon_grammar_vocab_n(const moon_grammar_vocab_t *v);

/* An automaton over g (taken: destroyed with the automaton, also on error)
 * and v (borrowed: must outlive it). State 0 is the start. */
MOON_API moon_status_t moon_grammar_fsm_create(moon_grammar_t *g, const moon_grammar_vocab_t *v,
                                               moon_grammar_fsm_t **fsm_p);
MOON_API void          moon_grammar_fsm_destroy(moon_grammar_fsm_t *fsm); /* NULL: no-op */

/* The mask of state: bit t of (*mask_p)[t / 32] set when token t may come
 * next (EOS when the state accepts). Computed on the first call for a state
 * and cached (the pointer stays valid until destroy): call it for the next
 * state while the forward pass runs, so the sampler only reads it.
 * MOON_ERR_NO_MEMORY; MOON_ERR_INVALID_PARAM: no such state. */
MOON_API moon_status_t moon_grammar_fsm_mask(moon_grammar_fsm_t *fsm, uint32_t state,
                                             const uint32_t **mask_p);
/* The state after token in state (cached). MOON_ERR_INVALID_PARAM: the token
 * cannot continue the grammar there (also EOS: use _accepting); MOON_ERR_NO_RESOURCE:
 * the automaton hit its limits (states, stacks); MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_grammar_fsm_next(moon_grammar_fsm_t *fsm, uint32_t state, int32_t token,
                                             uint32_t *next_p);
/* 1 when the text so far is a complete document. */
MOON_API int moon_grammar_fsm_accepting(const moon_grammar_fsm_t *fsm, uint32_t state);
/* 1 when it is complete and nothing can follow (generation ends there). */
MOON_API int moon_grammar_fsm_final(const moon_grammar_fsm_t *fsm, uint32_t state);
/* 1 when bytes (len) can all be read from state (a prefix of some document
 * from there); *next_p (optional) gets the state after them. For tests and
 * validation of text; not cached. */
MOON_API int      moon_grammar_fsm_match(moon_grammar_fsm_t *fsm, uint32_t state, const char *bytes,
                                         size_t len, uint32_t *next_p);
MOON_API uint32_t moon_grammar_fsm_n_states(const moon_grammar_fsm_t *fsm);

/* Sets logits[t] to -INFINITY for every token t (< n) that mask forbids. */
MOON_API void moon_grammar_mask_apply(const uint32_t *mask, float *logits, uint32_t n);

/* Compiled automata by spec (hash of the spec text), for one thread: a
 * serving instance compiles a schema once and every request that names it
 * again reuses its states and masks. At most capacity unused automata are
 * kept (least recently used dropped first). v borrowed for the cache's life. */
MOON_API moon_status_t moon_grammar_cache_create(const moon_grammar_vocab_t *v, uint32_t capacity,
                                                 moon_grammar_cache_t **cache_p);
MOON_API void          moon_grammar_cache_destroy(moon_grammar_cache_t *c); /* NULL: no-op */
/* The automaton for spec (compiled on a miss), held until put back with
 * moon_grammar_cache_put. Errors as moon_grammar_from_spec. */
MOON_API moon_status_t moon_grammar_cache_get(moon_grammar_cache_t *c, const char *spec, size_t len,
                                              moon_grammar_fsm_t **fsm_p, char *err,
                                              size_t err_cap);
MOON_API void          moon_grammar_cache_put(moon_grammar_cache_t *c, moon_grammar_fsm_t *fsm);

MOON_EXTERN_C_END

#endif /* MOONLET_GRAMMAR_H */
