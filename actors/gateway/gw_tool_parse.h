/* actors/gateway/gw_tool_parse.h - a model's answer split into content and
 * tool calls, by the syntax of its family (gw_tool_syntax.h), fed a piece at
 * a time (a stream's tokens) or whole (an answer is fed once, then ended):
 * one parser for both, so a streamed answer and a whole one split alike.
 *
 * Content is passed on as soon as it cannot begin a call; what may (a tag cut
 * across pieces, a call not yet closed) is held back. A call is passed on
 * once it is complete: {"name": string, args_key (or "arguments" /
 * "parameters"): an object or its text}. Anything else - a malformed or
 * unclosed call, a JSON value that is no call, a list with one element that
 * is no call - goes back out as content, exactly as the model wrote it: never
 * an error. Whitespace leading up to a call, and between and after calls, is
 * no content. Pure: one parser per answer, any thread. */
#ifndef MOON_ACTORS_GW_TOOL_PARSE_H
#define MOON_ACTORS_GW_TOOL_PARSE_H

#include "gw_buf.h"
#include "gw_tool_syntax.h"

#include <stddef.h>
#include <stdint.h>

/* text (n bytes, not NUL terminated) is content. */
typedef void (*moon_gw_tool_content_fn)(void *arg, const char *text, size_t n);
/* A call: its name and its arguments as JSON text (both NUL terminated,
 * borrowed for the call). */
typedef void (*moon_gw_tool_call_fn)(void *arg, const char *name, const char *args);

typedef struct {
    const moon_gw_tool_syntax_t *syn;
    moon_gw_tool_content_fn      on_content;
    moon_gw_tool_call_fn         on_call;
    void                        *arg;
    uint32_t                     n_calls; /* calls passed on so far */
    /* private */
    moon_gw_buf_t pend;   /* what is held back */
    moon_gw_buf_t opened; /* the tag that opened the calls, as written (empty: bare) */
    int           state;  /* start, text, calls */
} moon_gw_tool_parser_t;

void moon_gw_tool_parser_init(moon_gw_tool_parser_t *p, const moon_gw_tool_syntax_t *syn,
                              moon_gw_tool_content_fn on_content, moon_gw_tool_call_fn on_call,
                              void *arg);
/* Feeds n bytes of the answer. 0: out of memory (the parser is then spent). */
int moon_gw_tool_parser_feed(moon_gw_tool_parser_t *p, const char *text, size_t n);
/* The answer's end: what is held back goes out (as content where it is no
 * complete call). */
void moon_gw_tool_parser_end(moon_gw_tool_parser_t *p);
void moon_gw_tool_parser_fini(moon_gw_tool_parser_t *p);

#endif /* MOON_ACTORS_GW_TOOL_PARSE_H */
