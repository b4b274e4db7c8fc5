/* tests/unit/model/test_grammar.c - the grammar engine: GBNF parsing and its
 * errors, JSON schema compilation, token masks over a multi-byte vocabulary
 * (checked against token-by-token transitions), EOS only where a document is
 * complete, random walks that always end in a valid document, the cache. */
#include "moon_test.h"
#include "moonlet/grammar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A vocabulary: every byte 1..255, some multi-byte pieces, EOS, a control token. */
static const char *const extra[] = {
    "{\"", "\":", "\",\"",       "true", "false",         "null", "ab",  "abc",   "12", "\"}",
    "}}",  "},",  "<tool_call>", "name", "\u00e9t\u00e9", " the", "[1,", "\"a\"", "-0", ".5"};
#define N_EXTRA (sizeof(extra) / sizeof(extra[0]))
#define EOS_ID 0
#define CTRL_ID 256
#define N_VOCAB (257 + N_EXTRA)

static moon_grammar_vocab_t *vocab;
static char                  byte_piece[256][1];

static int setup(void)
{
    const char *pieces[N_VOCAB];
    uint32_t    lens[N_VOCAB];

    for (uint32_t i = 0; i < 256; i++) {
        byte_piece[i][0] = (char)i;
        pieces[i]        = byte_piece[i];
        lens[i]          = i == EOS_ID ? 0 : 1;
    }
    pieces[CTRL_ID] = "";
    lens[CTRL_ID]   = 0;
    for (uint32_t i = 0; i < N_EXTRA; i++) {
        pieces[257 + i] = extra[i];
        lens[257 + i]   = (uint32_t)strlen(extra[i]);
    }
    return moon_grammar_vocab_create(N_VOCAB, pieces, lens, EOS_ID, &vocab) == MOON_OK ? 0 : 1;
}

static int teardown(void)
{
    moon_grammar_vocab_destroy(vocab);
    return 0;
}

static const char *piece(uint32_t t, uint32_t *len)
{
    if (t < 256) {
        *len = t == EOS_ID ? 0 : 1;
        return byte_piece[t];
    }
    if (t == CTRL_ID) {
        *len = 0;
        return "";
    }
    *len = (uint32_t)strlen(extra[t - 257]);
    return extra[t - 257];
}

static moon_grammar_fsm_t *fsm_of(const char *spec)
{
    moon_grammar_t     *g = NULL;
    moon_grammar_fsm_t *f = NULL;
    char                err[MOON_GRAMMAR_ERR_MAX];
    moon_status_t       status = moon_grammar_from_spec(spec, strlen(spec), &g, err, sizeof(err));

    if (status != MOON_OK) {
        fprintf(stderr, "spec failed: %s\n", err);
        return NULL;
    }
    return moon_grammar_fsm_create(g, vocab, &f) == MOON_OK ? f : NULL;
}

static int allowed(const uint32_t *mask, uint32_t t)
{
    return (mask[t >> 5] >> (t & 31)) & 1u;
}

/* Walks from the start taking random allowed tokens (seeded); returns the
 * text (malloc'd) when a final state is reached within max_steps, else NULL.
 * Checks at each step that the mask agrees with the transitions. */
static char *walk(moon_grammar_fsm_t *f, uint64_t seed, uint32_t max_steps, int check_all)
{
    uint32_t state = 0, len = 0;
    char    *text = calloc(1, 65536);

    srand((unsigned)seed);
    for (uint32_t step = 0; step < max_steps; step++) {
        const uint32_t *mask;
        uint32_t        cand[N_VOCAB], n = 0, next;
        CU_ASSERT_EQUAL_FATAL(moon_grammar_fsm_mask(f, state, &mask), MOON_OK);
        CU_ASSERT_EQUAL(allowed(mask, EOS_ID), moon_grammar_fsm_accepting(f, state));
        CU_ASSERT_FALSE(allowed(mask, CTRL_ID));
        for (uint32_t t = 1; t < N_VOCAB; t++) {
            if (allowed(mask, t)) {
                cand[n++] = t;
            }
            if (check_all && t != CTRL_ID) {
                moon_status_t st = moon_grammar_fsm_next(f, state, (int32_t)t, &next);
                CU_ASSERT_EQUAL(st == MOON_OK, allowed(mask, t));
            }
        }
        if (moon_grammar_fsm_final(f, state)) {
            CU_ASSERT_EQUAL(n, 0);
            return text;
        }
        CU_ASSERT_FATAL(n > 0);
        /* prefer closing bytes half the time so bounded walks end sooner */
        uint32_t pick = cand[(uint32_t)rand() % n];
        if (rand() % 2 == 0) {
            for (uint32_t i = 0; i < n; i++) {
                uint32_t    l;
                const char *p = piece(cand[i], &l);
                if (l == 1 && (p[0] == '"' || p[0] == '}' || p[0] == ']')) {
                    pick = cand[i];
                }
            }
        }
        uint32_t    l;
        const char *p = piece(pick, &l);
        CU_ASSERT_EQUAL_FATAL(moon_grammar_fsm_next(f, state, (int32_t)pick, &state), MOON_OK);
        memcpy(text + len, p, l);
        len += l;
    }
    free(text);
    return NULL;
}

static void test_gbnf_parses_and_matches(void)
{
    const char         *src = "root ::= greet (\" \" name)? \"!\"\n"
                              "greet ::= \"hi\" | \"hello\" # a comment\n"
                              "name ::= [a-z]+ | [^\\x00-\\x7F]{1,2}\n";
    moon_grammar_t     *g   = NULL;
    moon_grammar_fsm_t *f   = NULL;
    uint32_t            s;

    CU_ASSERT_EQUAL_FATAL(moon_grammar_from_gbnf(src, strlen(src), &g, NULL, 0), MOON_OK);
    CU_ASSERT(moon_grammar_n_rules(g) >= 3);
    CU_ASSERT_EQUAL_FATAL(moon_grammar_fsm_create(g, vocab, &f), MOON_OK);
    CU_ASSERT_TRUE(moon_grammar_fsm_match(f, 0, "hi!", 3, &s));
    CU_ASSERT_TRUE(moon_grammar_fsm_final(f, s));
    CU_ASSERT_TRUE(moon_grammar_fsm_match(f, 0, "hello bob!", 10, &s));
    CU_ASSERT_TRUE(moon_grammar_fsm_accepting(f, s));
    CU_ASSERT_TRUE(moon_grammar_fsm_match(f, 0, "hi \xc3\xa9!", 6, &s));
    CU_ASSERT_TRUE(moon_grammar_fsm_match(f, 0, "hello b", 7, &s));
    CU_ASSERT_FALSE(moon_grammar_fsm_accepting(f, s));
    CU_ASSERT_FALSE(moon_grammar_fsm_match(f, 0, "hey", 3, NULL));
    CU_ASSERT_FALSE(moon_grammar_fsm_match(f, 0, "hi \xc3", 4, &s) && moon_grammar_fsm_final(f, s));
    CU_ASSERT_FALSE(moon_grammar_fsm_match(f, 0, "hi \xff", 4, NULL));
    moon_grammar_fsm_destroy(f);
}

static void test_gbnf_errors(void)
{
    static const char *const bad[] = {
        "root ::= foo\n",     "root ::= \"a\n",    "root ::= [a-\n",
        "x ::= \"a\"\n",      "root ::= (\"a\"\n", "root ::= \"a\"{3,1}\n",
        "root ::= * \"a\"\n", "root = \"a\"\n",    "root ::= \"a\"\nroot ::= \"b\"\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        moon_grammar_t *g = NULL;
        char            err[MOON_GRAMMAR_ERR_MAX];
        CU_ASSERT_EQUAL(moon_grammar_from_gbnf(bad[i], strlen(bad[i]), &g, err, sizeof(err)),
                        MOON_ERR_INVALID_PARAM);
        CU_ASSERT_PTR_NULL(g);
        CU_ASSERT(strlen(err) > 0);
    }
}

static void test_json_object_masks(void)
{
    moon_grammar_fsm_t *f = fsm_of("json_object");
    const uint32_t     *mask;
    uint32_t            s, lb = '{';

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL_FATAL(moon_grammar_fsm_mask(f, 0, &mask), MOON_OK);
    CU_ASSERT_TRUE(allowed(mask, lb));
    CU_ASSERT_TRUE(allowed(mask, 257)); /* {" */
    CU_ASSERT_FALSE(allowed(mask, EOS_ID));
    CU_ASSERT_FALSE(allowed(mask, '['));
    CU_ASSERT_FALSE(allowed(mask, ' '));
    CU_ASSERT_TRUE(moon_grammar_fsm_match(f, 0, "{\"a\":[1,{\"b\":null}],\"c\":\"x\\n\"}", 30, &s));
    CU_ASSERT_TRUE(moon_grammar_fsm_final(f, s));
    CU_ASSERT_EQUAL(moon_grammar_fsm_mask(f, s, &mask), MOON_OK);
    CU_ASSERT_TRUE(allowed(mask, EOS_ID));
    CU_ASSERT_FALSE(moon_grammar_fsm_match(f, 0, "{\"a\":01}", 8, NULL));
    CU_ASSERT_FALSE(moon_grammar_fsm_match(f, 0, "{\"a\":\"\x01\"}", 9, NULL));
    for (uint64_t seed = 1; seed <= 20; seed++) {
        char *t = walk(f, seed, 4000, seed <= 3);
        if (t != NULL) { /* unbounded: a walk may not end, but what it wrote parses */
            CU_ASSERT_EQUAL(t[0], '{');
            free(t);
        }
    }
    moon_grammar_fsm_destroy(f);
}

static const char *const schema =
    "json_schema\n"
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":5},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\\\"c\",3,null]},\"maxItems\":3},"
    "\"kind\":{\"const\":\"x\"},"
    "\"when\":{\"type\":\"string\",\"format\":\"date\"},"
    "\"opt\":{\"type\":[\"boolean\",\"null\"]},"
    "\"sub\":{\"$ref\":\"#/$defs/S\"}},"
    "\"required\":[\"name\",\"age\",\"tags\",\"kind\",\"sub\"],\"additionalProperties\":false,"
    "\"$defs\":{\"S\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\"}},"
    "\"required\":[\"v\"]}}}";

static void test_schema_documents(void)
{
    moon_grammar_fsm_t *f = fsm_of(schema);
    uint32_t            s;
    static const char  *good[] = {
         "{\"name\":\"bob\",\"age\":3,\"tags\":[],\"kind\":\"x\",\"sub\":{\"v\":-1.5e3}}",
         "{\"name\":\"\",\"age\":0,\"tags\":[\"a\",null,\"b\\\"c\"],\"kind\":\"x\","
          "\"when\":\"2024-02-29\",\"opt\":null,\"sub\":{\"v\":0}}",
    };
    static const char *bad[] = {
        "{\"name\":\"toolong\",",
        "{\"age\":3",
        "{\"name\":\"a\",\"age\":-1",
        "{\"name\":\"a\",\"age\":1,\"tags\":[\"c\"]",
        "{\"name\":\"a\",\"age\":1,\"tags\":[3,3,3,3]",
        "{\"name\":\"a\",\"age\":1,\"tags\":[],\"kind\":\"y\"",
        "{\"name\":\"a\",\"age\":1,\"tags\":[],\"kind\":\"x\",\"when\":\"2024-13-01\"",
        "{\"name\":\"a\",\"age\":1,\"tags\":[],\"kind\":\"x\",\"extra\":1",
        "{\"name\":\"a\",\"age\":1,\"tags\":[],\"kind\":\"x\",\"sub\":{}}",
    };

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        CU_ASSERT_TRUE(moon_grammar_fsm_match(f, 0, good[i], strlen(good[i]), &s));
        CU_ASSERT_TRUE(moon_grammar_fsm_final(f, s));
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CU_ASSERT_FALSE(moon_grammar_fsm_match(f, 0, bad[i], strlen(bad[i]), NULL));
    }
    /* every bounded walk ends in a complete document */
    for (uint64_t seed = 1; seed <= 30; seed++) {
        char *t = walk(f, seed, 2000, seed <= 2);
        CU_ASSERT_PTR_NOT_NULL(t);
        if (t != NULL) {
            CU_ASSERT_EQUAL(strncmp(t, "{\"name\":\"", 9), 0);
            CU_ASSERT_PTR_NOT_NULL(strstr(t, "\"kind\":\"x\""));
            CU_ASSERT_PTR_NOT_NULL(strstr(t, "\"sub\":{\"v\":"));
            free(t);
        }
    }
    moon_grammar_fsm_destroy(f);
}

static void test_tool_call_wrapper(void)
{
    moon_grammar_fsm_t *f = fsm_of("tool_calls\n{\"type\":\"object\",\"properties\":{\"name\":"
                                   "{\"const\":\"get\"},\"arguments\":{\"type\":\"object\","
                                   "\"properties\":{\"q\":{\"type\":\"string\",\"maxLength\":3}},"
                                   "\"required\":[\"q\"]}},\"required\":[\"name\",\"arguments\"]}");
    const char *one = "<tool_call>{\"name\":\"get\",\"arguments\":{\"q\":\"ab\"}}</tool_call>";
    uint32_t    s;

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_TRUE(moon_grammar_fsm_match(f, 0, one, strlen(one), &s));
    CU_ASSERT_TRUE(moon_grammar_fsm_accepting(f, s));
    CU_ASSERT_FALSE(moon_grammar_fsm_final(f, s)); /* a second call may follow */
    CU_ASSERT_TRUE(moon_grammar_fsm_match(f, s, "\n<tool_call>{", 13, NULL));
    CU_ASSERT_FALSE(moon_grammar_fsm_match(f, 0, "{", 1, NULL));
    moon_grammar_fsm_destroy(f);
}

/* Mistral's form: [TOOL_CALLS] then a list of calls; with maxItems 1 the
 * document is final after one. */
static void test_mistral_calls_wrapper(void)
{
    moon_grammar_fsm_t *f   = fsm_of("mistral_calls\n{\"type\":\"array\",\"items\":{\"type\":"
                                       "\"object\",\"properties\":{\"name\":{\"const\":\"get\"},"
                                       "\"arguments\":{\"type\":\"object\"}},\"required\":[\"name\","
                                       "\"arguments\"]},\"minItems\":1,\"maxItems\":1}");
    const char         *one = "[TOOL_CALLS][{\"name\":\"get\",\"arguments\":{}}]";
    uint32_t            s;

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_TRUE(moon_grammar_fsm_match(f, 0, one, strlen(one), &s));
    CU_ASSERT_TRUE(moon_grammar_fsm_accepting(f, s));
    CU_ASSERT_TRUE(moon_grammar_fsm_final(f, s));
    CU_ASSERT_FALSE(moon_grammar_fsm_match(f, 0, "[TOOL_CALLS][]", 14, NULL));
    CU_ASSERT_FALSE(moon_grammar_fsm_match(f, 0, "[{", 2, NULL));
    moon_grammar_fsm_destroy(f);
}

static void test_unsupported_is_an_error(void)
{
    static const char *const specs[] = {
        "json_schema\n{\"type\":\"string\",\"pattern\":\"^a+$\"}",
        "json_schema\n{\"type\":\"string\",\"format\":\"hostname-ish\"}",
        "json_schema\n{\"type\":\"integer\",\"maximum\":10}",
        "json_schema\n{\"not\":{}}",
        "json_schema\n{\"$ref\":\"http://x/y\"}",
    };
    static const char *const invalid[] = {
        "json_schema\n{\"type\":", "json_schema\n{\"type\":\"wat\"}", "yaml\nfoo",
        "json_schema\n[1]"};
    moon_grammar_t *g = NULL;
    char            err[MOON_GRAMMAR_ERR_MAX];

    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        CU_ASSERT_EQUAL(moon_grammar_from_spec(specs[i], strlen(specs[i]), &g, err, sizeof(err)),
                        MOON_ERR_UNSUPPORTED);
        CU_ASSERT(strlen(err) > 0);
    }
    for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
        CU_ASSERT_EQUAL(
            moon_grammar_from_spec(invalid[i], strlen(invalid[i]), &g, err, sizeof(err)),
            MOON_ERR_INVALID_PARAM);
        CU_ASSERT(strlen(err) > 0);
    }
    CU_ASSERT_PTR_NULL(g);
}

static void test_recursive_ref(void)
{
    moon_grammar_fsm_t *f   = fsm_of("json_schema\n{\"$defs\":{\"T\":{\"type\":\"object\","
                                       "\"properties\":{\"kids\":{\"type\":\"array\",\"items\":"
                                       "{\"$ref\":\"#/$defs/T\"},\"maxItems\":2}},\"required\":"
                                       "[\"kids\"]}},\"$ref\":\"#/$defs/T\"}");
    const char         *doc = "{\"kids\":[{\"kids\":[]},{\"kids\":[{\"kids\":[]}]}]}";
    uint32_t            s;

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_TRUE(moon_grammar_fsm_match(f, 0, doc, strlen(doc), &s));
    CU_ASSERT_TRUE(moon_grammar_fsm_final(f, s));
    moon_grammar_fsm_destroy(f);
}

static void test_cache_reuses_automata(void)
{
    moon_grammar_cache_t *c = NULL;
    moon_grammar_fsm_t   *a = NULL, *b = NULL, *d = NULL;
    char                  err[MOON_GRAMMAR_ERR_MAX];

    CU_ASSERT_EQUAL_FATAL(moon_grammar_cache_create(vocab, 1, &c), MOON_OK);
    CU_ASSERT_EQUAL(moon_grammar_cache_get(c, schema, strlen(schema), &a, err, sizeof(err)),
                    MOON_OK);
    CU_ASSERT_EQUAL(moon_grammar_cache_get(c, schema, strlen(schema), &b, err, sizeof(err)),
                    MOON_OK);
    CU_ASSERT_PTR_EQUAL(a, b);
    CU_ASSERT_EQUAL(moon_grammar_cache_get(c, "json_object", 11, &d, err, sizeof(err)), MOON_OK);
    CU_ASSERT_PTR_NOT_EQUAL(a, d);
    CU_ASSERT_EQUAL(moon_grammar_cache_get(c, "json_schema\n{", 13, &b, err, sizeof(err)),
                    MOON_ERR_INVALID_PARAM);
    moon_grammar_cache_put(c, a);
    moon_grammar_cache_put(c, a);
    moon_grammar_cache_put(c, d);
    moon_grammar_cache_destroy(c);
}

/* A grammar with a state per position over a huge vocabulary stops making
 * states at its memory budget (an error, not an exhausted machine). */
static void test_state_budget(void)
{
    enum { N = 300000 };
    const char          **pieces = malloc(N * sizeof(*pieces));
    uint32_t             *lens   = malloc(N * sizeof(*lens));
    moon_grammar_vocab_t *v      = NULL;
    moon_grammar_t       *g      = NULL;
    moon_grammar_fsm_t   *f      = NULL;
    const char           *src    = "root ::= \"a\"{0,4000}\n";
    char                 *text   = malloc(4001);
    uint32_t              s;
    moon_status_t         st = MOON_OK;

    for (uint32_t i = 0; i < N; i++) {
        pieces[i] = "a";
        lens[i]   = 1;
    }
    memset(text, 'a', 4000);
    CU_ASSERT_EQUAL_FATAL(moon_grammar_vocab_create(N, pieces, lens, -1, &v), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_grammar_from_gbnf(src, strlen(src), &g, NULL, 0), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_grammar_fsm_create(g, v, &f), MOON_OK);
    CU_ASSERT_TRUE(moon_grammar_fsm_match(f, 0, text, 4000, &s)); /* one state: fine */
    s = 0;
    for (int i = 0; i < 4000 && st == MOON_OK; i++) { /* a state per token: ~3,400 at most */
        st = moon_grammar_fsm_next(f, s, 7, &s);
    }
    CU_ASSERT_EQUAL(st, MOON_ERR_NO_RESOURCE);
    CU_ASSERT(moon_grammar_fsm_n_states(f) < 4000);
    moon_grammar_fsm_destroy(f);
    moon_grammar_vocab_destroy(v);
    free(pieces);
    free(lens);
    free(text);
}

static void test_mask_apply(void)
{
    uint32_t mask[2] = {0x5u, 0x1u};
    float    l[33];
    for (int i = 0; i < 33; i++) {
        l[i] = 1.0f;
    }
    moon_grammar_mask_apply(mask, l, 33);
    CU_ASSERT_EQUAL(l[0], 1.0f);
    CU_ASSERT_TRUE(isinf(l[1]) && l[1] < 0);
    CU_ASSERT_EQUAL(l[2], 1.0f);
    CU_ASSERT_TRUE(isinf(l[31]));
    CU_ASSERT_EQUAL(l[32], 1.0f);
}

MOON_TEST_MAIN("grammar", setup, teardown, test_gbnf_parses_and_matches, test_gbnf_errors,
               test_json_object_masks, test_schema_documents, test_tool_call_wrapper,
               test_mistral_calls_wrapper, test_unsupported_is_an_error, test_recursive_ref,
               test_cache_reuses_automata, test_state_budget, test_mask_apply)
