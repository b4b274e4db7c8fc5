/* actors/gateway/gw_template.h - chat messages to a prompt, by the model's chat
 * template. A Jinja engine is out of scope: the GGUF `tokenizer.chat_template`
 * is recognised by its markers as one of the common families and rendered by
 * hand; anything else (or no template) gets the plain template.
 *
 *   family   recognised by          rendering (BOS first when the vocabulary has one)
 *   chatml   "<|im_start|>"         <|im_start|>{role}\n{content}<|im_end|>\n ...
 *                                   <|im_start|>assistant\n
 *   llama2   "[INST]"               BOS [INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST]
 *                                   {assistant} EOS BOS [INST] {user} [/INST]
 *                                   (contents stripped, system folded into the next user
 *                                   turn, as Meta's reference does)
 *   zephyr   "<|user|>"/"<|assistant|>"  <|{role}|>\n{content}EOS\n ... <|assistant|>\n
 *   plain    anything else          {system}\n\n  User: {user}\n  Assistant: {assistant}\n
 *                                   ... Assistant:
 *   jinja    the model's own template, rendered by Moonlet's Jinja engine
 *            (moonlet/jinja.h; moon_gw_template_init_jinja, what the gateway
 *            loads): messages, tools, add_generation_prompt, bos_token and
 *            eos_token as Hugging Face passes them. A template the engine
 *            cannot parse, or that fails on a sample conversation, is logged
 *            with its line:col and replaced by the plain template.
 * BOS and EOS are the tokenizer's control tokens (never their text), ChatML's
 * markers the vocabulary's own tokens when it has them. Roles: system and
 * developer (a system turn), user, assistant. A template is immutable after
 * init: any thread may render with it; fini frees a jinja one. */
#ifndef MOON_ACTORS_GW_TEMPLATE_H
#define MOON_ACTORS_GW_TEMPLATE_H

#include "gw_tool_syntax.h"
#include "moonlet/jinja.h"
#include "moonlet/status.h"
#include "moonlet/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    MOON_GW_TPL_PLAIN  = 0,
    MOON_GW_TPL_CHATML = 1,
    MOON_GW_TPL_LLAMA2 = 2,
    MOON_GW_TPL_ZEPHYR = 3,
    MOON_GW_TPL_JINJA  = 4,
} moon_gw_tpl_kind_t;

typedef struct {
    moon_gw_tpl_kind_t kind;
    int                recognised; /* 0: a template was given but none of the families matched */
    int32_t            bos, eos;   /* -1: none */
    int32_t            im_start, im_end;    /* ChatML markers' ids; -1: rendered as text */
    moon_jinja_t      *jinja;               /* JINJA: the compiled template (owned) */
    char              *bos_text, *eos_text; /* JINJA: bos_token / eos_token (owned; NULL: none) */
    /* the tool-call syntax: JINJA the template's (gw_tool_syntax.h), the
     * others Hermes' (their prompts carry Hermes' tools prompt) */
    const moon_gw_tool_syntax_t *tools;
} moon_gw_template_t;

/* Id of a special token by its text, -1 if the vocabulary has none. */
typedef int32_t (*moon_gw_special_fn)(void *arg, const char *text);

/* Picks the family of jinja (len bytes; NULL: none given). special (optional)
 * finds ChatML's marker ids. */
void        moon_gw_template_init(moon_gw_template_t *t, const char *jinja, size_t len, int32_t bos,
                                  int32_t eos, moon_gw_special_fn special, void *arg);
const char *moon_gw_template_name(moon_gw_tpl_kind_t kind); /* "plain", "chatml", ... */

/* The model's template through the Jinja engine: parsed, then tried on a
 * sample conversation (system, user, assistant, user, with a tool). On
 * success kind JINJA; else the plain template with recognised 0 and *why
 * (may be NULL) saying where and what stopped it. bos_text / eos_text (may
 * be NULL) are the control tokens' texts (copied). */
void moon_gw_template_init_jinja(moon_gw_template_t *t, const char *jinja, size_t len, int32_t bos,
                                 int32_t eos, const char *bos_text, const char *eos_text,
                                 moon_gw_special_fn special, void *arg, moon_jinja_error_t *why);
void moon_gw_template_fini(moon_gw_template_t *t); /* after any init */

typedef struct {
    const char *role;    /* "system", "developer", "user", "assistant" */
    const char *content; /* UTF-8 */
} moon_gw_chat_msg_t;

/* A rendered prompt: text parts and special token ids in order. */
typedef struct {
    int32_t special; /* -1: a text part */
    char   *text;    /* text part, moon_malloc'd */
} moon_gw_part_t;

typedef struct {
    moon_gw_part_t *parts;
    uint32_t        n, cap;
} moon_gw_prompt_t;

/* Renders msgs[0..n) (roles checked by the caller; others count as user)
 * into out (caller's, zeroed or after fini). MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_template_render(const moon_gw_template_t *t, const moon_gw_chat_msg_t *msgs,
                                      uint32_t n, moon_gw_prompt_t *out);
void          moon_gw_prompt_fini(moon_gw_prompt_t *p);
/* Appends a part (text moon_malloc'd, owned by p from now; NULL for a
 * special). 0 when out of memory (text then still the caller's). */
int moon_gw_prompt_push(moon_gw_prompt_t *p, int32_t special, char *text);

/* A JINJA template's rendering of msgs_json (a JSON array of OpenAI chat
 * messages, as moon_gw_chat_json makes it) and tools_json (a JSON array, or
 * NULL: no tools), with add_generation_prompt as open_turn (vLLM's default
 * 1: the assistant's turn opened at the end): the text split where BOS, EOS
 * and ChatML's markers stand into their control ids. MOON_ERR_INVALID_PARAM:
 * the template raised or failed (err says why), MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_template_render_jinja(const moon_gw_template_t *t, const char *msgs_json,
                                            const char *tools_json, int open_turn,
                                            moon_gw_prompt_t *out, moon_jinja_error_t *err);

/* The prompt as one string, specials spelled "<s>", "</s>", "<|im_start|>",
 * "<|im_end|>" (tests; servers without a tokenizer). *text_p moon_malloc'd. */
moon_status_t moon_gw_prompt_text(const moon_gw_prompt_t *p, const moon_gw_template_t *t,
                                  char **text_p);
/* Token ids of the prompt: each text part encoded on its own (no BOS added),
 * specials as they are. *ids_p moon_malloc'd. MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_prompt_tokenize(const moon_gw_prompt_t *p, const moon_tokenizer_t *tok,
                                      int32_t **ids_p, uint32_t *n_p);

#endif /* MOON_ACTORS_GW_TEMPLATE_H */
