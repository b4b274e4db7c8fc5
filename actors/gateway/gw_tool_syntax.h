/* actors/gateway/gw_tool_syntax.h - the tool-call syntaxes a model may be
 * trained on, one row each, and which one a chat template uses. Everything
 * that differs between the families (how a call is written, which key holds
 * the arguments, which grammar forces a call) is a column here, so the
 * parser (gw_tool_parse.h) and the grammar (gw_structured.c) stay generic.
 *
 *   syntax   picked when the template mentions   a call written as
 *   mistral  "[TOOL_CALLS]"                       [TOOL_CALLS][{"name":N,"arguments":{..}}, ..]
 *   hermes   "<tool_call>" <tool_call>{"name":N,"arguments":{..}}</tool_call> (one or more, one a
 * line) llama3   "<|python_tag|>" or "parameters"     {"name":N,"parameters":{..}} (Llama 3.1's
 *                                                 JSON calls, optionally after <|python_tag|>)
 *   (none)   -                                    hermes: the documented default
 *
 * [TOOL_CALLS] and <|python_tag|> are control tokens in those models'
 * vocabularies and decode to nothing, so for mistral and llama3 a JSON value
 * that opens the answer is a call even without its tag; a forced call's
 * grammar writes mistral's tag as text (a grammar never allows a control
 * token). Pure, immutable. */
#ifndef MOON_ACTORS_GW_TOOL_SYNTAX_H
#define MOON_ACTORS_GW_TOOL_SYNTAX_H

#include <stddef.h>

typedef struct {
    const char *name;       /* "hermes", "llama3", "mistral" */
    const char *markers[2]; /* a template holding one of these uses this syntax */
    const char *open;       /* the text before a call (list: before the calls) */
    const char *close;      /* the text after a call; NULL: the JSON value's end */
    const char *args_key;   /* the key of the arguments ("parameters" also read for any) */
    int         list;       /* the calls are one JSON array after open */
    int         bare_start; /* a JSON value opening the answer is calls without open */
    /* forced calls (tool_choice required or named): the grammar spec kind
     * (moonlet/grammar.h) for one call and for one or more (NULL: only one) */
    const char *grammar_one, *grammar_many;
    int         grammar_array; /* the grammar's schema is a list of calls */
} moon_gw_tool_syntax_t;

/* The syntax of a chat template (tpl, len bytes; NULL: none): the first row
 * whose marker it holds, else hermes. */
const moon_gw_tool_syntax_t *moon_gw_tool_syntax_pick(const char *tpl, size_t len);
/* hermes: for models without a template of their own. */
const moon_gw_tool_syntax_t *moon_gw_tool_syntax_default(void);
/* The row named name, or NULL (tests, logs). */
const moon_gw_tool_syntax_t *moon_gw_tool_syntax_find(const char *name);

#endif /* MOON_ACTORS_GW_TOOL_SYNTAX_H */
