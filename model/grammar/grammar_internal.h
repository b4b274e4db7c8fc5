/* model/grammar/grammar_internal.h - a compiled grammar, shared by the GBNF
 * parser (gbnf.c) and the automaton (fsm.c): rules as flat element arrays in
 * llama.cpp's layout (alternatives separated by ALT, a rule ended by END). */
#ifndef MOON_MODEL_GRAMMAR_INTERNAL_H
#define MOON_MODEL_GRAMMAR_INTERNAL_H

#include "moonlet/grammar.h"

enum {
    GE_END  = 0, /* end of the rule */
    GE_ALT  = 1, /* end of an alternative, another follows */
    GE_REF  = 2, /* val: a rule id */
    GE_CHAR = 3, /* val: one byte */
    GE_SET  = 4, /* val: index of a 256-bit byte set */
};

typedef struct {
    uint32_t type : 4;
    uint32_t val : 28;
} gelem_t;

struct moon_grammar {
    gelem_t  *el; /* n_el: every rule's elements, one after the other */
    uint32_t  n_el;
    uint32_t *rule_start; /* n_rules: a rule's first element; rule 0 is root */
    uint32_t  n_rules;
    uint32_t *alt_off;   /* n_rules + 1: rule r's alternatives are */
    uint32_t *alt_start; /* alt_start[alt_off[r] .. alt_off[r + 1]) (element indices) */
    uint32_t (*sets)[8]; /* n_sets byte sets, bit b of word b / 32 */
    uint32_t n_sets;
};

static inline int moon_gelem_match(const moon_grammar_t *g, gelem_t e, uint8_t c)
{
    return e.type == GE_CHAR ? e.val == c : (g->sets[e.val][c >> 5] >> (c & 31)) & 1u;
}

#endif /* MOON_MODEL_GRAMMAR_INTERNAL_H */
