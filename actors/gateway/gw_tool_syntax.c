/* actors/gateway/gw_tool_syntax.c - the tool-call syntaxes' table (see
 * gw_tool_syntax.h). */
#include "gw_tool_syntax.h"

#include "moonlet/alloc.h"

#include <string.h>

/* Checked in this order: Mistral's templates also hold "parameters" (in the
 * tools' schemas they print), so the rarer markers come first. */
static const moon_gw_tool_syntax_t syntaxes[] = {
    {.name          = "mistral",
     .markers       = {"[TOOL_CALLS]", NULL},
     .open          = "[TOOL_CALLS]",
     .close         = NULL,
     .args_key      = "arguments",
     .list          = 1,
     .bare_start    = 1,
     .grammar_one   = "mistral_calls",
     .grammar_many  = "mistral_calls",
     .grammar_array = 1},
    {.name          = "hermes",
     .markers       = {"<tool_call>", NULL},
     .open          = "<tool_call>",
     .close         = "</tool_call>",
     .args_key      = "arguments",
     .list          = 0,
     .bare_start    = 0,
     .grammar_one   = "tool_call",
     .grammar_many  = "tool_calls",
     .grammar_array = 0},
    /* Llama 3.1 writes one call a turn: a forced call is one */
    {.name          = "llama3",
     .markers       = {"<|python_tag|>", "\"parameters\""},
     .open          = "<|python_tag|>",
     .close         = NULL,
     .args_key      = "parameters",
     .list          = 0,
     .bare_start    = 1,
     .grammar_one   = "json_schema",
     .grammar_many  = NULL,
     .grammar_array = 0},
};

#define HERMES (&syntaxes[1])

/* memmem is not C11 */
static int holds(const char *s, size_t n, const char *what)
{
    size_t w = strlen(what);

    for (size_t i = 0; w <= n && i <= n - w; i++) {
        if (memcmp(s + i, what, w) == 0) {
            return 1;
        }
    }
    return 0;
}

const moon_gw_tool_syntax_t *moon_gw_tool_syntax_pick(const char *tpl, size_t len)
{
    if (tpl == NULL) {
        return HERMES;
    }
    for (size_t i = 0; i < MOON_ARRAY_SIZE(syntaxes); i++) {
        for (size_t k = 0; k < MOON_ARRAY_SIZE(syntaxes[i].markers); k++) {
            if (syntaxes[i].markers[k] != NULL && holds(tpl, len, syntaxes[i].markers[k])) {
                return &syntaxes[i];
            }
        }
    }
    return HERMES;
}

const moon_gw_tool_syntax_t *moon_gw_tool_syntax_default(void)
{
    return HERMES;
}

const moon_gw_tool_syntax_t *moon_gw_tool_syntax_find(const char *name)
{
    for (size_t i = 0; i < MOON_ARRAY_SIZE(syntaxes); i++) {
        if (strcmp(syntaxes[i].name, name) == 0) {
            return &syntaxes[i];
        }
    }
    return NULL;
}
