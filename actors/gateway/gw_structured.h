/* actors/gateway/gw_structured.h - structured output and tool calls on the
 * OpenAI routes: response_format (json_object, json_schema), llama.cpp's
 * grammar and vLLM's guided_json / guided_grammar become a grammar spec
 * (moonlet/grammar.h) that the instances enforce by constrained decoding;
 * tools / tool_choice / parallel_tool_calls become a system prompt plus
 * (required or a named function) a grammar, and the model's output is parsed
 * back into tool_calls.
 *
 * Tool syntax: a model served with its own (Jinja) template gets the syntax
 * that template uses (gw_tool_syntax.h: Hermes/Qwen, Llama 3.1's JSON calls,
 * Mistral's [TOOL_CALLS]); the template itself shows the tools, past calls
 * and tool results to the model, and the answer is parsed and a forced call
 * constrained in that syntax. Models whose template has none (the bundled
 * stories260K, the chatml/llama2/zephyr templates here) get the documented
 * default, Hermes' (Qwen's) syntax: the tools listed in the system message
 * as <tools>[{...}]</tools>, a call written as
 * <tool_call>{"name":N,"arguments":{...}}</tool_call> (with tool_choice
 * required and parallel_tool_calls, one or more, one a line; a named
 * function is called exactly once), a tool's answer shown to the model as a user
 * turn <tool_response>...</tool_response>. Pure functions: any thread. */
#ifndef MOON_ACTORS_GW_STRUCTURED_H
#define MOON_ACTORS_GW_STRUCTURED_H

#include "gw_buf.h"
#include "gw_errors.h"
#include "gw_format.h"
#include "gw_json.h"
#include "gw_template.h"
#include "gw_tool_parse.h"
#include "gw_tool_syntax.h"

#include <stddef.h>
#include <stdint.h>

/* The largest grammar spec a request may send (bytes). */
#define MOON_GW_MAX_GRAMMAR_BYTES (256u * 1024u)

typedef struct {
    char                        *grammar; /* spec for SUBMIT, NULL: unconstrained */
    uint32_t                     grammar_len;
    char                        *tools_prompt; /* system text listing the tools; NULL: no tools */
    int                          tools;        /* parse tool calls out of the answer */
    const moon_gw_tool_syntax_t *syntax;       /* the calls' syntax; NULL: Hermes */
    /* private */
    cJSON                     *forced;      /* the functions a forced call may call */
    int                        forced_many; /* one or more calls */
    moon_gw_tool_parser_t      parser;      /* the stream's */
    int                        parsing;
    const moon_gw_resp_meta_t *sm; /* the stream's, while a piece is parsed */
    moon_gw_buf_t             *sout;
} moon_gw_structured_t;

/* Reads response_format, grammar, guided_json, guided_grammar (both routes)
 * and tools, tool_choice, parallel_tool_calls (chat) from root into s
 * (caller's memory, zeroed; fini it whatever the result). Each is checked and
 * its grammar compiled once here, so a schema the engine cannot enforce is a
 * 400 naming the field and the keyword. MOON_ERR_INVALID_PARAM (err set),
 * MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_structured_parse(const cJSON *root, int chat, moon_gw_structured_t *s,
                                       moon_gw_error_t *err);
void          moon_gw_structured_fini(moon_gw_structured_t *s);
/* The model's tool syntax (its template's; parse assumed Hermes): a forced
 * call's grammar is built again in syn's form. Call it before the request
 * is sent and before any answer is parsed. MOON_ERR_INVALID_PARAM (err set),
 * MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_structured_bind(moon_gw_structured_t *s, const moon_gw_tool_syntax_t *syn,
                                      moon_gw_error_t *err);

/* 1 when chat message m (role role) is a tool turn: role "tool", or an
 * assistant turn carrying tool_calls. */
int moon_gw_structured_is_tool_msg(const cJSON *m, const char *role);
/* Renders such a turn (message index i) into *out: role and content
 * moon_malloc'd. MOON_ERR_INVALID_PARAM (err set), MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_structured_tool_msg(const cJSON *m, uint32_t i, moon_gw_chat_msg_t *out,
                                          moon_gw_error_t *err);
/* Puts s's tools prompt at the head of the first system message (or a new
 * one first), growing *msgs_p (n_p messages, moon_malloc'd). */
moon_status_t moon_gw_structured_add_tools(const moon_gw_structured_t *s,
                                           moon_gw_chat_msg_t **msgs_p, uint32_t *n_p);

/* The whole chat answer with the tool calls of text split out (as
 * moon_gw_format_response, which it wraps). */
char *moon_gw_structured_response(const moon_gw_structured_t *s, const moon_gw_resp_meta_t *m,
                                  const char *text, const char *finish, const moon_gw_usage_t *u,
                                  size_t *len_p);
/* A stream's text (a token's piece) through the tool-call parser: content
 * deltas and tool_calls deltas (a call whole, once it closes) appended to
 * out as SSE events. */
void moon_gw_structured_stream(moon_gw_structured_t *s, const moon_gw_resp_meta_t *m,
                               const char *text, moon_gw_buf_t *out);
/* The stream's end: what is held back, then the closing chunk with finish
 * ("tool_calls" instead of "stop" when calls were made). */
void moon_gw_structured_stream_end(moon_gw_structured_t *s, const moon_gw_resp_meta_t *m,
                                   const char *finish, moon_gw_buf_t *out);

#endif /* MOON_ACTORS_GW_STRUCTURED_H */
