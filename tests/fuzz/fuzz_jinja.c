/* tests/fuzz/fuzz_jinja.c - libFuzzer target for the chat-template engine:
 * the input is a template, optionally followed by a NUL and the variables'
 * JSON (else a two-turn conversation with a tool). Parse, then render: any
 * status is fine, a crash, leak or hang is not. `tests/fuzz/run.sh jinja
 * MINUTES` fuzzes it; CTest replays corpus/jinja (fuzz_replay.c). */
#include "moonlet/alloc.h"
#include "moonlet/jinja.h"

#include <string.h>

#include "fuzz_target.h"

static const char g_vars[] =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":"
    "\"hi\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":"
    "\"f\",\"arguments\":{\"a\":1}}}]},{\"role\":\"tool\",\"content\":\"r\"}],\"tools\":[{"
    "\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"add_generation_prompt\":true,"
    "\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char        *src  = (const char *)data;
    const char        *nul  = memchr(data, 0, size);
    size_t             len  = nul != NULL ? (size_t)(nul - src) : size;
    const char        *vars = nul != NULL ? nul + 1 : g_vars;
    size_t             vlen = nul != NULL ? size - len - 1 : sizeof(g_vars) - 1;
    moon_jinja_t      *t    = NULL;
    moon_jinja_error_t err;
    char              *out = NULL;

    if (moon_jinja_parse(src, len, &t, &err) != MOON_OK) {
        return 0;
    }
    if (moon_jinja_render(t, vars, vlen, &out, NULL, &err) == MOON_OK) {
        moon_free(out);
    }
    moon_jinja_destroy(t);
    return 0;
}
