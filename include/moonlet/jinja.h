/* moonlet/jinja.h - a small Jinja engine for chat templates (the GGUF's
 * tokenizer.chat_template). It covers what the templates of Llama 3.x, Qwen
 * 2.5/3, Mistral and SmolLM use (the subset is listed in model/jinja/README.md)
 * and renders as Hugging Face does: trim_blocks and lstrip_blocks on, one
 * trailing newline of the source dropped, no autoescape, tojson with ", " and
 * ": " and non-ASCII kept. Anything outside the subset fails the parse with
 * MOON_ERR_UNSUPPORTED and the construct's line:col, so a caller can fall
 * back before serving. A compiled template is immutable: any thread may
 * render with it. Knows nothing of models or actors. */
#ifndef MOON_MODEL_JINJA_H
#define MOON_MODEL_JINJA_H

#include "moonlet/status.h"

#include <stddef.h>

typedef struct moon_jinja moon_jinja_t; /* opaque compiled template */

/* Where and why a parse or a render stopped. line and col count from 1 (0:
 * not tied to a place, e.g. bad variables). */
typedef struct {
    int  line, col;
    char msg[200];
} moon_jinja_error_t;

/* Compiles len bytes of src into *tpl_p. MOON_ERR_UNSUPPORTED: a construct
 * outside the subset (err names it); MOON_ERR_INVALID_PARAM: a syntax error
 * (unclosed block, bad token...); MOON_ERR_NO_MEMORY. err may be NULL. */
moon_status_t moon_jinja_parse(const char *src, size_t len, moon_jinja_t **tpl_p,
                               moon_jinja_error_t *err);
void          moon_jinja_destroy(moon_jinja_t *tpl); /* NULL: no-op */

/* Renders tpl with the variables of vars_json (len bytes of a JSON object:
 * messages, tools, add_generation_prompt, bos_token, ...; NULL: none).
 * *out_p (moon_malloc'd, NUL terminated, *len_p bytes when len_p is given).
 * MOON_ERR_INVALID_PARAM: the template raised (raise_exception: err->msg is
 * its message), failed at run time (err says where), or vars_json is not a
 * JSON object; MOON_ERR_NO_RESOURCE: a render budget (output, memory, steps,
 * depth) ran out; MOON_ERR_NO_MEMORY. */
moon_status_t moon_jinja_render(const moon_jinja_t *tpl, const char *vars_json, size_t len,
                                char **out_p, size_t *len_p, moon_jinja_error_t *err);

#endif /* MOON_MODEL_JINJA_H */
