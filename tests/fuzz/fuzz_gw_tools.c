/* tests/fuzz/fuzz_gw_tools.c - the tool-call parser (gw_tool_parse.h) on
 * any answer. The first byte picks the syntax (mod 3: hermes, llama3,
 * mistral) and the size of the stream's pieces (bits 2..5, plus 1); the
 * rest is the answer. Checks that the answer fed whole and fed in pieces
 * gives the same content and calls, that content never outgrows the
 * answer, and that every call's name is non-empty and its arguments JSON. */
#include "fuzz_target.h"
#include "gw_buf.h"
#include "gw_tool_parse.h"
#include "gw_tool_syntax.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(_e)                                                                                  \
    do {                                                                                           \
        if (!(_e)) {                                                                               \
            fprintf(stderr, "fuzz_gw_tools: check failed: %s\n", #_e);                             \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

typedef struct {
    moon_gw_buf_t content, calls;
} got_t;

static void on_content(void *arg, const char *text, size_t n)
{
    moon_gw_buf_append(&((got_t *)arg)->content, text, n);
}

static void on_call(void *arg, const char *name, const char *args)
{
    cJSON *a = cJSON_Parse(args);

    CHECK(name[0] != '\0');
    CHECK(a != NULL || args[0] != '{'); /* an object's text is JSON; a string may be anything */
    cJSON_Delete(a);
    moon_gw_buf_printf(&((got_t *)arg)->calls, "%s\n%s\n", name, args);
}

static void run(const moon_gw_tool_syntax_t *syn, const char *s, size_t n, size_t step, got_t *g)
{
    moon_gw_tool_parser_t p;

    moon_gw_buf_init(&g->content);
    moon_gw_buf_init(&g->calls);
    moon_gw_tool_parser_init(&p, syn, on_content, on_call, g);
    for (size_t i = 0; i < n; i += step) {
        CHECK(moon_gw_tool_parser_feed(&p, s + i, step < n - i ? step : n - i));
    }
    moon_gw_tool_parser_end(&p);
    moon_gw_tool_parser_fini(&p);
}

static int same(const moon_gw_buf_t *a, const moon_gw_buf_t *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const     names[] = {"hermes", "llama3", "mistral"};
    const moon_gw_tool_syntax_t *syn;
    got_t                        whole, pieces;

    if (size < 1) {
        return 0;
    }
    syn = moon_gw_tool_syntax_find(names[data[0] % 3]);
    run(syn, (const char *)data + 1, size - 1, size, &whole);
    run(syn, (const char *)data + 1, size - 1, 1 + ((data[0] >> 2) & 15), &pieces);
    CHECK(!whole.content.failed && !pieces.content.failed);
    CHECK(same(&whole.content, &pieces.content));
    CHECK(same(&whole.calls, &pieces.calls));
    CHECK(whole.content.len <= size - 1);
    moon_gw_buf_fini(&whole.content);
    moon_gw_buf_fini(&whole.calls);
    moon_gw_buf_fini(&pieces.content);
    moon_gw_buf_fini(&pieces.calls);
    return 0;
}
