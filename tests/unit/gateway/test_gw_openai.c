/* tests/unit/gateway/test_gw_openai.c - OpenAI request bodies: every field's
 * type and range errors, prompt forms, chat templates, tokenization against
 * the stories260K vocabulary and the context check; the field table (no
 * field silently ignored). */
#include "gw_embed.h"
#include "gw_fields.h"
#include "gw_json.h"
#include "gw_openai.h"
#include "gw_template.h"
#include "moon_test.h"
#include "moonlet/alloc.h"
#include "moonlet/gguf.h"

#include <string.h>

#ifndef MOON_TEST_MODEL
#error "MOON_TEST_MODEL must name stories260K.gguf"
#endif

static moon_tokenizer_t  *g_tok;
static moon_gw_template_t g_plain;

static moon_gw_model_info_t info(void)
{
    moon_gw_model_info_t i = {
        .model_name = "stories260K", .tpl = &g_plain, .tok = g_tok, .n_ctx = 512, .n_vocab = 512};
    return i;
}

/* Parses and prepares body; returns the HTTP status (200 when accepted). */
static int run(const char *body, int chat, moon_gw_request_t *req, moon_gw_error_t *err)
{
    moon_gw_model_info_t mi = info();
    moon_status_t        status;

    memset(err, 0, sizeof(*err));
    status = moon_gw_openai_parse(body, strlen(body), chat, req, err);
    if (status == MOON_OK) {
        status = moon_gw_openai_prepare(req, &mi, 42, err);
    }
    if (status == MOON_OK) {
        return 200;
    }
    CU_ASSERT_EQUAL(status, MOON_ERR_INVALID_PARAM);
    return err->http;
}

static void expect(const char *body, int chat, int http, const char *param)
{
    moon_gw_request_t req;
    moon_gw_error_t   err;
    int               got = run(body, chat, &req, &err);

    if (got != http) {
        fprintf(stderr, "body %s: got %d (%s), want %d\n", body, got, err.message, http);
    }
    CU_ASSERT_EQUAL(got, http);
    if (param != NULL && got != 200) {
        CU_ASSERT_STRING_EQUAL(err.param, param);
    }
    moon_gw_request_fini(&req);
}

/* echo with logprobs asks the prefill for the prompt's logprobs; echo alone does not. */
static void test_echo_logprobs(void)
{
    moon_gw_request_t req;
    moon_gw_error_t   err;

    CU_ASSERT_EQUAL_FATAL(run("{\"prompt\":\"x\",\"echo\":true,\"logprobs\":2}", 0, &req, &err),
                          200);
    CU_ASSERT(req.params.flags & MOON_SERVE_F_PROMPT_LOGPROBS);
    CU_ASSERT_EQUAL(req.params.logprobs, 3);
    moon_gw_request_fini(&req);
    CU_ASSERT_EQUAL_FATAL(run("{\"prompt\":\"x\",\"echo\":true}", 0, &req, &err), 200);
    CU_ASSERT_FALSE(req.params.flags & MOON_SERVE_F_PROMPT_LOGPROBS);
    moon_gw_request_fini(&req);
    CU_ASSERT_EQUAL_FATAL(run("{\"prompt\":\"x\",\"logprobs\":2}", 0, &req, &err), 200);
    CU_ASSERT_FALSE(req.params.flags & MOON_SERVE_F_PROMPT_LOGPROBS);
    moon_gw_request_fini(&req);
}

/* /v1/embeddings' body: status and param, n inputs and their lengths when accepted. */
static void embed_expect(const char *body, int tok, int http, const char *param, uint32_t n,
                         uint32_t len0)
{
    moon_gw_model_info_t mi = info();
    moon_gw_embed_req_t  req;
    moon_gw_error_t      err;
    moon_status_t        status;

    mi.dim = 64;
    mi.tok = tok ? g_tok : NULL;
    memset(&err, 0, sizeof(err));
    status = moon_gw_embed_parse(body, strlen(body), &mi, &req, &err);
    if ((status == MOON_OK ? 200 : err.http) != http) {
        fprintf(stderr, "embeddings body %s: got %d (%s), want %d\n", body, err.http, err.message,
                http);
    }
    CU_ASSERT_EQUAL(status == MOON_OK ? 200 : err.http, http);
    if (status == MOON_OK) {
        CU_ASSERT_EQUAL(req.n_inputs, n);
        CU_ASSERT_EQUAL(req.n_tokens[0], len0);
    } else if (param != NULL) {
        CU_ASSERT_STRING_EQUAL(err.param, param);
    }
    moon_gw_embed_fini(&req);
}

static void test_embed_bodies(void)
{
    static const uint32_t one_bits[2] = {0x3f800000u, 0xbf000000u}; /* 1.0f, -0.5f */
    const uint32_t       *vecs[2]     = {one_bits, one_bits};
    moon_gw_embed_req_t   req         = {0};
    int32_t               ids[2]      = {1, 2};
    int32_t              *tok[2]      = {ids, ids};
    uint32_t              n[2]        = {2, 2};
    size_t                len         = 0;
    char                 *json;

    embed_expect("{\"input\":[1,2,3]}", 0, 200, NULL, 1, 3);
    embed_expect("{\"input\":[[1,2],[3]]}", 0, 200, NULL, 2, 2);
    embed_expect("{\"input\":\"Once upon\"}", 1, 200, NULL, 1, 3); /* BOS first */
    embed_expect("{\"input\":[\"a\",\"b\"],\"model\":\"stories260K\"}", 1, 200, NULL, 2, 2);
    embed_expect("{\"input\":\"x\"}", 0, 501, "input", 0, 0); /* text without a tokenizer */
    embed_expect("{\"input\":[]}", 0, 400, "input", 0, 0);
    embed_expect("{\"input\":[[1],[]]}", 0, 400, "input", 0, 0);
    embed_expect("{\"input\":[1.5]}", 0, 400, "input", 0, 0);
    embed_expect("{\"input\":[512]}", 0, 400, "input", 0, 0); /* out of the vocabulary */
    embed_expect("{\"input\":[[1],{}]}", 0, 400, "input", 0, 0);
    embed_expect("{\"input\":{}}", 0, 400, "input", 0, 0);
    embed_expect("{\"input\":[1],\"dimensions\":64}", 0, 200, NULL, 1, 1);
    embed_expect("{\"input\":[1],\"dimensions\":32}", 0, 400, "dimensions", 0, 0);
    embed_expect("{\"input\":[1],\"encoding_format\":\"hex\"}", 0, 400, "encoding_format", 0, 0);
    embed_expect("{\"input\":[1],\"n\":2}", 0, 400, "n", 0, 0);
    embed_expect("{\"input\":[1],\"model\":\"other\"}", 0, 404, "model", 0, 0);
    embed_expect("{\"input\":[1],\"input\":[2]}", 0, 400, "input", 0, 0); /* a key twice */
    /* the answer: floats, or base64 of the little-endian float32s */
    req.n_inputs = 2;
    req.tokens   = tok;
    req.n_tokens = n;
    json         = moon_gw_embed_response(&req, "m", vecs, 2, &len);
    CU_ASSERT_STRING_EQUAL(json, "{\"object\":\"list\",\"data\":[{\"object\":\"embedding\","
                                 "\"index\":0,\"embedding\":[1,-0.5]},{\"object\":\"embedding\","
                                 "\"index\":1,\"embedding\":[1,-0.5]}],\"model\":\"m\",\"usage\":"
                                 "{\"prompt_tokens\":4,\"total_tokens\":4}}");
    CU_ASSERT_EQUAL(len, strlen(json));
    moon_free(json);
    req.base64   = 1;
    req.n_inputs = 1;
    json         = moon_gw_embed_response(&req, "m", vecs, 2, &len);
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"embedding\":\"AACAPwAAAL8=\""));
    moon_free(json);
}

static void test_completion_fields(void)
{
    moon_gw_request_t req;
    moon_gw_error_t   err;

    CU_ASSERT_EQUAL_FATAL(
        run("{\"model\":\"stories260K\",\"prompt\":\"Once upon\",\"max_tokens\":7,"
            "\"temperature\":0,\"top_p\":0.5,\"top_k\":3,\"seed\":9,\"stop\":[\".\",\"!\"],"
            "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"ignore_eos\":true,"
            "\"moonlet_details\":true,\"user\":\"ignored\"}",
            0, &req, &err),
        200);
    CU_ASSERT_EQUAL(req.params.max_tokens, 7);
    CU_ASSERT_DOUBLE_EQUAL(req.params.temperature, 0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(req.params.top_p, 0.5, 1e-6);
    CU_ASSERT_EQUAL(req.params.top_k, 3);
    CU_ASSERT_EQUAL(req.params.seed, 9);
    CU_ASSERT_EQUAL(req.params.n_stop, 2);
    CU_ASSERT_STRING_EQUAL(req.params.stop[1], "!");
    CU_ASSERT_TRUE(req.stream);
    CU_ASSERT_TRUE(req.include_usage);
    CU_ASSERT_TRUE(req.details);
    CU_ASSERT(req.params.flags & MOON_SERVE_F_IGNORE_EOS);
    /* tokenized here, BOS first, no ADD_BOS flag for the cluster */
    CU_ASSERT(req.params.n_tokens > 2);
    CU_ASSERT_EQUAL(req.params.tokens[0], moon_tokenizer_bos(g_tok));
    CU_ASSERT_PTR_NULL(req.params.prompt);
    CU_ASSERT_FALSE(req.params.flags & MOON_SERVE_F_ADD_BOS);
    moon_gw_request_fini(&req);

    /* defaults: OpenAI's temperature 1, 16 tokens, a seed of our own */
    CU_ASSERT_EQUAL_FATAL(run("{\"prompt\":[1,2,3]}", 0, &req, &err), 200);
    CU_ASSERT_EQUAL(req.params.max_tokens, 16);
    CU_ASSERT_DOUBLE_EQUAL(req.params.temperature, 1, 1e-9);
    CU_ASSERT_EQUAL(req.params.seed, 42);
    CU_ASSERT_EQUAL(req.params.n_tokens, 3);
    CU_ASSERT_FALSE(req.stream);
    moon_gw_request_fini(&req);

    /* a list of one string; max_completion_tokens */
    CU_ASSERT_EQUAL_FATAL(
        run("{\"prompt\":[\"Hi\"],\"max_completion_tokens\":3,\"stop\":\"x\"}", 0, &req, &err),
        200);
    CU_ASSERT_EQUAL(req.params.max_tokens, 3);
    CU_ASSERT_EQUAL(req.params.n_stop, 1);
    moon_gw_request_fini(&req);
    CU_ASSERT_EQUAL_FATAL(run("{\"prompt\":[[5,6]]}", 0, &req, &err), 200);
    CU_ASSERT_EQUAL(req.params.n_tokens, 2);
    moon_gw_request_fini(&req);
}

static void test_completion_errors(void)
{
    expect("{\"prompt\":\"x\"", 0, 400, NULL);                /* bad JSON */
    expect("[1,2]", 0, 400, NULL);                            /* not an object */
    expect("{}", 0, 400, "prompt");                           /* missing */
    expect("{\"prompt\":7}", 0, 400, "prompt");               /* wrong type */
    expect("{\"prompt\":[]}", 0, 400, "prompt");              /* empty */
    expect("{\"prompt\":[\"a\",\"b\"]}", 0, 200, NULL);       /* two prompts */
    expect("{\"prompt\":[\"a\",[1,2]]}", 0, 200, NULL);       /* a text and ids */
    expect("{\"prompt\":[\"a\",[\"b\"]]}", 0, 400, "prompt"); /* not a prompt */
    expect("{\"prompt\":[\"a\",\"b\",\"c\",\"d\"],\"best_of\":16,\"n\":16}", 0, 200, NULL);
    expect("{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\","
           "\"m\",\"n\",\"o\",\"p\",\"q\"],\"n\":16}",
           0, 400, "prompt"); /* 17 x 16 sequences */
    expect("{\"prompt\":[1,-2]}", 0, 400, "prompt");
    expect("{\"prompt\":[1,2.5]}", 0, 400, "prompt");
    expect("{\"prompt\":[1,999]}", 0, 400, "prompt"); /* out of the vocabulary */
    expect("{\"prompt\":\"x\",\"model\":\"gpt-4\"}", 0, 404, "model");
    expect("{\"prompt\":\"x\",\"model\":3}", 0, 400, "model");
    expect("{\"prompt\":\"x\",\"max_tokens\":0}", 0, 400, "max_tokens");
    expect("{\"prompt\":\"x\",\"max_tokens\":\"5\"}", 0, 400, "max_tokens");
    expect("{\"prompt\":\"x\",\"max_tokens\":1.5}", 0, 400, "max_tokens");
    expect("{\"prompt\":\"x\",\"temperature\":3}", 0, 400, "temperature");
    expect("{\"prompt\":\"x\",\"temperature\":\"hot\"}", 0, 400, "temperature");
    expect("{\"prompt\":\"x\",\"top_p\":0}", 0, 400, "top_p");
    expect("{\"prompt\":\"x\",\"top_k\":-2}", 0, 400, "top_k");
    expect("{\"prompt\":\"x\",\"seed\":\"s\"}", 0, 400, "seed");
    expect("{\"prompt\":\"x\",\"stop\":5}", 0, 400, "stop");
    expect("{\"prompt\":\"x\",\"stop\":[\"a\",1]}", 0, 400, "stop");
    expect("{\"prompt\":\"x\",\"n\":2}", 0, 200, NULL);
    expect("{\"prompt\":\"x\",\"n\":17}", 0, 400, "n"); /* over MOON_GW_MAX_CHOICES */
    expect("{\"prompt\":\"x\",\"n\":0}", 0, 400, "n");
    expect("{\"prompt\":\"x\",\"n\":3,\"best_of\":2}", 0, 400, "best_of");
    expect("{\"prompt\":\"x\",\"n\":2,\"best_of\":4}", 0, 200, NULL);
    expect("{\"prompt\":\"x\",\"best_of\":3,\"stream\":true}", 0, 400, "best_of");
    expect("{\"prompt\":\"x\",\"n\":3,\"best_of\":3,\"stream\":true}", 0, 200, NULL);
    expect("{\"prompt\":\"x\",\"echo\":\"y\"}", 0, 400, "echo");
    expect("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"best_of\":2}", 1, 400,
           "best_of"); /* a completions field */
    expect("{\"prompt\":\"x\",\"n\":\"1\"}", 0, 400, "n");
    expect("{\"prompt\":\"x\",\"n\":1}", 0, 200, NULL);
    expect("{\"prompt\":\"x\",\"stream\":1}", 0, 400, "stream");
    expect("{\"prompt\":\"x\",\"moonlet_details\":\"yes\"}", 0, 400, "moonlet_details");
    expect("{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":\"y\"}}", 0, 400,
           "stream_options");
    expect("{\"prompt\":\"x\",\"echo\":true}", 0, 200, NULL);
    expect("{\"prompt\":\"x\",\"logprobs\":2.5}", 0, 400, "logprobs");
    expect("{\"prompt\":\"x\",\"best_of\":3}", 0, 200, NULL);
    expect("{\"prompt\":\"x\",\"stop_token_ids\":[1,600]}", 0, 400, "stop_token_ids");
    expect("{\"prompt\":\"x\",\"stream\":null,\"stop\":null,\"max_tokens\":null}", 0, 200, NULL);
}

static void test_context_check(void)
{
    char             *body = moon_malloc(8192);
    size_t            n    = 0;
    moon_gw_request_t req;
    moon_gw_error_t   err;

    /* 600 ids: over the 512-token context */
    n += (size_t)snprintf(body + n, 8192 - n, "{\"prompt\":[");
    for (int i = 0; i < 600; i++) {
        n += (size_t)snprintf(body + n, 8192 - n, "%s%d", i ? "," : "", 1 + i % 100);
    }
    snprintf(body + n, 8192 - n, "]}");
    CU_ASSERT_EQUAL(run(body, 0, &req, &err), 400);
    CU_ASSERT_STRING_EQUAL(err.code, "context_length_exceeded");
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "maximum context length is 512 tokens"));
    moon_gw_request_fini(&req);
    /* a text far over the context: refused before tokenizing */
    memset(body, 'a', 8000);
    memcpy(body, "{\"prompt\":\"", 11);
    memcpy(body + 7990, "\"}", 3);
    CU_ASSERT_EQUAL(run(body, 0, &req, &err), 400);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "bytes is longer"));
    moon_gw_request_fini(&req);
    /* prompt + max_tokens over the context */
    CU_ASSERT_EQUAL(run("{\"prompt\":[1,2,3],\"max_tokens\":510}", 0, &req, &err), 400);
    CU_ASSERT_STRING_EQUAL(err.param, "max_tokens");
    moon_gw_request_fini(&req);
    CU_ASSERT_EQUAL(run("{\"prompt\":[1,2,3],\"max_tokens\":509}", 0, &req, &err), 200);
    moon_gw_request_fini(&req);
    /* chat's default max_tokens: the rest of the context */
    CU_ASSERT_EQUAL(run("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", 1, &req, &err),
                    200);
    CU_ASSERT_EQUAL(req.params.max_tokens, 512 - req.params.n_tokens);
    moon_gw_request_fini(&req);
    moon_free(body);
}

static void test_chat_errors(void)
{
    expect("{}", 1, 400, "messages");
    expect("{\"messages\":{}}", 1, 400, "messages");
    expect("{\"messages\":[]}", 1, 400, "messages");
    expect("{\"messages\":[3]}", 1, 400, "messages[0]");
    expect("{\"messages\":[{\"content\":\"x\"}]}", 1, 400, "messages[0].role");
    expect("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"robot\","
           "\"content\":\"b\"}]}",
           1, 400, "messages[1].role");
    expect("{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 1, 400, "messages[0].content");
    expect("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 1, 400,
           "messages[0].content");
    expect("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
           "{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null}]}",
           1, 200, NULL);
    expect("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}", 1, 400,
           "logprobs");
    expect("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", 1, 400,
           "top_logprobs");
    expect("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,"
           "\"top_logprobs\":21}",
           1, 400, "top_logprobs");
    /* vLLM's add_generation_prompt: a boolean; false needs the model's own
     * Jinja template (test_gw_jinja serves it), the built-in ones refuse */
    expect("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"add_generation_prompt\":1}", 1,
           400, "add_generation_prompt");
    expect("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
           "\"add_generation_prompt\":false}",
           1, 400, "add_generation_prompt");
    expect("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
           "\"add_generation_prompt\":true}",
           1, 200, NULL);
}

/* Renders msgs with tpl, specials spelled out. */
static void render(const moon_gw_template_t *tpl, const moon_gw_chat_msg_t *msgs, uint32_t n,
                   const char *want)
{
    moon_gw_prompt_t p;
    char            *text = NULL;

    CU_ASSERT_EQUAL_FATAL(moon_gw_template_render(tpl, msgs, n, &p), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_gw_prompt_text(&p, tpl, &text), MOON_OK);
    if (strcmp(text, want) != 0) {
        fprintf(stderr, "rendered [%s]\nwanted   [%s]\n", text, want);
    }
    CU_ASSERT_STRING_EQUAL(text, want);
    moon_free(text);
    moon_gw_prompt_fini(&p);
}

static int32_t fake_special(void *arg, const char *text)
{
    (void)arg;
    return strcmp(text, "<|im_start|>") == 0 ? 7 : strcmp(text, "<|im_end|>") == 0 ? 8 : -1;
}

static void test_templates(void)
{
    static const moon_gw_chat_msg_t msgs[] = {
        {"system", "Be brief."}, {"user", " Hi "}, {"assistant", "Hello."}, {"user", "Why?"}};
    moon_gw_template_t t;
    static const char  chatml[] = "{% for m in messages %}<|im_start|>{{m.role}}...";
    static const char  llama2[] = "{{ bos_token + '[INST] ' + content + ' [/INST]' }}";
    static const char  zephyr[] = "{{ '<|user|>\\n' + message['content'] + eos_token }}";

    moon_gw_template_init(&t, NULL, 0, 1, 2, NULL, NULL);
    CU_ASSERT_EQUAL(t.kind, MOON_GW_TPL_PLAIN);
    render(&t, msgs, 4, "<s>Be brief.\n\nUser:  Hi \nAssistant: Hello.\nUser: Why?\nAssistant:");

    moon_gw_template_init(&t, chatml, sizeof(chatml) - 1, 1, 2, fake_special, NULL);
    CU_ASSERT_EQUAL(t.kind, MOON_GW_TPL_CHATML);
    CU_ASSERT_EQUAL(t.im_start, 7);
    render(&t, msgs, 2,
           "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n"
           "<|im_start|>assistant\n");

    moon_gw_template_init(&t, llama2, sizeof(llama2) - 1, 1, 2, NULL, NULL);
    CU_ASSERT_EQUAL(t.kind, MOON_GW_TPL_LLAMA2);
    render(&t, msgs, 4,
           "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Why? "
           "[/INST]");

    moon_gw_template_init(&t, zephyr, sizeof(zephyr) - 1, 1, 2, NULL, NULL);
    CU_ASSERT_EQUAL(t.kind, MOON_GW_TPL_ZEPHYR);
    render(&t, msgs, 3,
           "<s><|system|>\nBe brief.</s>\n<|user|>\n Hi </s>\n<|assistant|>\nHello.</s>\n"
           "<|assistant|>\n");

    moon_gw_template_init(&t, "{{ weird }}", 11, 1, 2, NULL, NULL);
    CU_ASSERT_EQUAL(t.kind, MOON_GW_TPL_PLAIN);
    CU_ASSERT_FALSE(t.recognised);
}

/* The model's own template through the Jinja engine: rendered with the
 * request's messages and tools, BOS/EOS and ChatML markers split out as ids;
 * an unsupported construct, or a template failing on the sample
 * conversation, falls back to the plain template with its line:col. */
static void test_jinja_templates(void)
{
    static const char  own[] = "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n"
                               "{{ m.content | trim }}<|im_end|>{% endfor %}"
                               "{% if tools %}T{{ tools | length }}{% endif %}{{ eos_token }}";
    static const char  bad[] = "ok\n  {% call x() %}{% endcall %}";
    moon_gw_template_t t;
    moon_jinja_error_t why;
    moon_gw_prompt_t   p;
    char              *text = NULL;

    moon_gw_template_init_jinja(&t, own, sizeof(own) - 1, 1, 2, "<s>", "</s>", fake_special, NULL,
                                &why);
    CU_ASSERT_EQUAL_FATAL(t.kind, MOON_GW_TPL_JINJA);
    CU_ASSERT_TRUE(t.recognised);
    CU_ASSERT_STRING_EQUAL(moon_gw_template_name(t.kind), "jinja");
    CU_ASSERT_EQUAL_FATAL(
        moon_gw_template_render_jinja(&t, "[{\"role\":\"user\",\"content\":\" Hi \"}]",
                                      "[{\"type\":\"function\"}]", 1, &p, &why),
        MOON_OK);
    /* BOS, im_start, "user\nHi", im_end, "T1", EOS */
    CU_ASSERT_EQUAL_FATAL(p.n, 6);
    CU_ASSERT_EQUAL(p.parts[0].special, 1);
    CU_ASSERT_EQUAL(p.parts[1].special, 7);
    CU_ASSERT_STRING_EQUAL(p.parts[2].text, "user\nHi");
    CU_ASSERT_EQUAL(p.parts[3].special, 8);
    CU_ASSERT_STRING_EQUAL(p.parts[4].text, "T1");
    CU_ASSERT_EQUAL(p.parts[5].special, 2);
    CU_ASSERT_EQUAL(moon_gw_prompt_text(&p, &t, &text), MOON_OK);
    CU_ASSERT_STRING_EQUAL(text, "<s><|im_start|>user\nHi<|im_end|>T1</s>");
    moon_free(text);
    moon_gw_prompt_fini(&p);
    moon_gw_template_fini(&t);

    moon_gw_template_init_jinja(&t, bad, sizeof(bad) - 1, 1, 2, "<s>", "</s>", NULL, NULL, &why);
    CU_ASSERT_EQUAL(t.kind, MOON_GW_TPL_PLAIN);
    CU_ASSERT_FALSE(t.recognised);
    CU_ASSERT_EQUAL(why.line, 2);
    CU_ASSERT_EQUAL(why.col, 6);
    CU_ASSERT_PTR_NOT_NULL(strstr(why.msg, "unsupported tag 'call'"));
    moon_gw_template_fini(&t);

    moon_gw_template_init_jinja(&t, "{{ raise_exception('no tools here') if tools }}", 47, 1, 2,
                                NULL, NULL, NULL, NULL, &why);
    CU_ASSERT_EQUAL(t.kind, MOON_GW_TPL_PLAIN);
    CU_ASSERT_STRING_EQUAL(why.msg, "no tools here");
    moon_gw_template_fini(&t);

    moon_gw_template_init_jinja(&t, NULL, 0, 1, 2, NULL, NULL, NULL, NULL, &why);
    CU_ASSERT_EQUAL(t.kind, MOON_GW_TPL_PLAIN);
    CU_ASSERT_TRUE(t.recognised); /* no template: the plain one is the documented default */
    moon_gw_template_fini(&t);
}

/* Llama-2's BOS/EOS are token ids, never their text. */
static void test_template_tokens(void)
{
    static const moon_gw_chat_msg_t msgs[] = {{"user", "Hi"}, {"assistant", "Yo"}, {"user", "Ok"}};
    moon_gw_template_t              t;
    moon_gw_prompt_t                p;
    int32_t                        *ids = NULL;
    uint32_t                        n = 0, n_bos = 0, n_eos = 0;
    static const char               llama2[] = "[INST]";

    moon_gw_template_init(&t, llama2, 6, moon_tokenizer_bos(g_tok), moon_tokenizer_eos(g_tok), NULL,
                          NULL);
    CU_ASSERT_EQUAL_FATAL(moon_gw_template_render(&t, msgs, 3, &p), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_gw_prompt_tokenize(&p, g_tok, &ids, &n), MOON_OK);
    for (uint32_t i = 0; i < n; i++) {
        n_bos += ids[i] == moon_tokenizer_bos(g_tok);
        n_eos += ids[i] == moon_tokenizer_eos(g_tok);
    }
    CU_ASSERT_EQUAL(ids[0], moon_tokenizer_bos(g_tok));
    CU_ASSERT_EQUAL(n_bos, 2);
    CU_ASSERT_EQUAL(n_eos, 1);
    moon_free(ids);
    moon_gw_prompt_fini(&p);
}

/* Parses len bytes (NULs allowed); returns the HTTP status, err filled. */
static int parse_len(const char *body, size_t len, moon_gw_error_t *err)
{
    moon_gw_request_t req;
    moon_status_t     status;

    memset(err, 0, sizeof(*err));
    status = moon_gw_openai_parse(body, len, 0, &req, err);
    moon_gw_request_fini(&req);
    return status == MOON_OK ? 200 : err->http;
}

/* One JSON object, nothing else: a key twice (at any depth, most parsers keep
 * the last, cJSON the first), data after the value, a NUL (cJSON would cut
 * the prompt there) or a raw control character in a string are 400s. */
static void test_strict_json(void)
{
    static const char nul_raw[] = "{\"prompt\":\"abc\0def\"}";
    moon_gw_error_t   err;
    char              big[4096];
    size_t            n = 0;

    expect("{\"prompt\":\"a\",\"prompt\":\"b\"}", 0, 400, "prompt");
    CU_ASSERT_EQUAL(parse_len("{\"prompt\":\"a\",\"prompt\":\"b\"}", 27, &err), 400);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "key twice"));
    expect("{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true,\"include_usage\":"
           "false}}",
           0, 400, "include_usage");
    expect("{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"role\":\"system\"}]}", 1, 400,
           "role");
    /* more keys than the pairwise check takes: sorted */
    n += (size_t)snprintf(big + n, sizeof(big) - n, "{\"prompt\":\"a\"");
    for (int i = 0; i < 40; i++) {
        n += (size_t)snprintf(big + n, sizeof(big) - n, ",\"k%d\":%d", i % 39, i);
    }
    snprintf(big + n, sizeof(big) - n, "}");
    expect(big, 0, 400, "k0");
    /* the same key in two objects is no duplicate (x is refused as unknown, not twice) */
    expect("{\"prompt\":\"a\",\"x\":{\"a\":1},\"y\":{\"a\":1}}", 0, 400, "x");
    /* trailing data */
    expect("{\"prompt\":\"a\"} {\"prompt\":\"b\"}", 0, 400, NULL);
    expect("{\"prompt\":\"a\"}x", 0, 400, NULL);
    expect("{\"prompt\":\"a\"} \r\n\t", 0, 200, NULL);
    CU_ASSERT_EQUAL(parse_len("{\"prompt\":\"a\"}\0x", 16, &err), 400);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "after its JSON value"));
    /* NUL: escaped or raw */
    expect("{\"prompt\":\"abc\\u0000def\"}", 0, 400, NULL);
    CU_ASSERT_EQUAL(parse_len("{\"prompt\":\"abc\\u0000def\"}", 25, &err), 400);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "NUL"));
    CU_ASSERT_EQUAL(parse_len(nul_raw, sizeof(nul_raw) - 1, &err), 400);
    CU_ASSERT_EQUAL(parse_len("{\"prompt\":\"a\nb\"}", 16, &err), 400);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "control character"));
    /* an escaped backslash before u0000 is text, not a NUL */
    expect("{\"prompt\":\"a\\\\u0000\"}", 0, 200, NULL);
    expect("{\"prompt\":\"\\u0001 and \\n are fine\"}", 0, 200, NULL);
}

/* Every field that travels between ranks is capped, with a 400 naming it. */
static void test_caps(void)
{
    char  *body = moon_malloc(64 << 10);
    size_t n    = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(body);
    /* 17 stop strings */
    expect("{\"prompt\":\"a\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\","
           "\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
           0, 400, "stop");
    /* a stop string over 512 bytes, alone or in a list; 512 is fine */
    for (int len = 512; len <= 513; len++) {
        n = (size_t)snprintf(body, 64 << 10, "{\"prompt\":\"a\",\"stop\":%s\"",
                             len == 512 ? "" : "[\"x\",");
        memset(body + n, 's', (size_t)len);
        n += (size_t)len;
        snprintf(body + n, 64, "\"%s}", len == 512 ? "" : "]");
        expect(body, 0, len == 512 ? 200 : 400, "stop");
    }
    /* stop_token_ids: 256 fine, 257 refused */
    for (int k = 256; k <= 257; k++) {
        n = (size_t)snprintf(body, 64 << 10, "{\"prompt\":\"a\",\"stop_token_ids\":[1");
        for (int i = 1; i < k; i++) {
            n += (size_t)snprintf(body + n, (64 << 10) - n, ",%d", i % 500);
        }
        snprintf(body + n, (64 << 10) - n, "]}");
        expect(body, 0, k == 256 ? 200 : 400, "stop_token_ids");
    }
    /* a prompt of ids past the context */
    n = (size_t)snprintf(body, 64 << 10, "{\"prompt\":[1");
    for (int i = 1; i < 600; i++) {
        n += (size_t)snprintf(body + n, (64 << 10) - n, ",5");
    }
    snprintf(body + n, (64 << 10) - n, "]}");
    expect(body, 0, 400, "prompt");
    moon_free(body);
}

static void test_error_utf8(void)
{
    moon_gw_error_t err;
    char           *json;
    char            out[8];

    /* /v1/models/%ff: the url's byte is echoed */
    moon_gw_error_set(&err, 404, "model_not_found",
                      "mo\xff"
                      "del",
                      "The model `%s` does not exist.",
                      "\xff\xc3(\xe2\x82\xac\xf0\x9f\x98\x80\xed\xa0\x80\xc0\xaf");
    CU_ASSERT_STRING_EQUAL(err.message, "The model `\xef\xbf\xbd\xef\xbf\xbd(\xe2\x82\xac"
                                        "\xf0\x9f\x98\x80\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                                        "\xef\xbf\xbd\xef\xbf\xbd` does not exist.");
    CU_ASSERT_STRING_EQUAL(err.param, "mo\xef\xbf\xbd"
                                      "del");
    json = moon_gw_error_json(&err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(json);
    CU_ASSERT_EQUAL(moon_gw_utf8_valid_len(json, strlen(json)), strlen(json));
    moon_free(json);
    /* truncation never splits a character */
    moon_gw_utf8_copy(out, sizeof(out), "ab\xe2\x82\xac\xe2\x82\xac");
    CU_ASSERT_STRING_EQUAL(out, "ab\xe2\x82\xac");
    CU_ASSERT_EQUAL(moon_gw_utf8_valid_len("a\xf4\x90\x80\x80", 5), 1); /* past U+10FFFF */
    CU_ASSERT_EQUAL(moon_gw_utf8_valid_len("\xe0\x80\xaf", 3), 0);      /* overlong */
}

static void test_allocation_failures(void)
{
    static const char *body = "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":"
                              "\"user\",\"content\":\"Hello there\"}],\"stop\":[\"a\",\"b\"],"
                              "\"stop_token_ids\":[3]}";
    for (uint64_t n = 1; n < 60; n++) {
        moon_gw_request_t req;
        moon_gw_error_t   err;

        moon_gw_model_info_t mi = info();

        moon_fault_fail_after(n);
        if (moon_gw_openai_parse(body, strlen(body), 1, &req, &err) == MOON_OK) {
            moon_gw_openai_prepare(&req, &mi, 1, &err);
        }
        moon_gw_request_fini(&req);
        moon_fault_reset();
    }
    CU_PASS("no crash, no leak under ASan");
}

/* Every refused row is a 400 naming it on each of its routes (and accepted
 * as null); a row of the other route only, or a key in no row, is a 400
 * naming it. */
static void test_field_table(void)
{
    uint32_t               n;
    const moon_gw_field_t *rows = moon_gw_fields(&n);
    char                   body[256];

    CU_ASSERT_TRUE(n > 40);
    for (uint32_t i = 0; i < n; i++) {
        for (int chat = 0; chat < 2; chat++) {
            const char *base  = chat ? "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]"
                                     : "\"prompt\":\"Hi\"";
            unsigned    route = chat ? MOON_GW_ROUTE_CHAT : MOON_GW_ROUTE_COMPLETIONS;

            if (strcmp(rows[i].name, "prompt") == 0 || strcmp(rows[i].name, "messages") == 0) {
                continue;
            }
            snprintf(body, sizeof(body), "{%s,\"%s\":{\"x\":1}}", base, rows[i].name);
            if (!(rows[i].routes & route) || rows[i].how == MOON_GW_FIELD_REFUSED) {
                expect(body, chat, 400, rows[i].name);
            }
            if (rows[i].how == MOON_GW_FIELD_REFUSED && (rows[i].routes & route)) {
                snprintf(body, sizeof(body), "{%s,\"%s\":null}", base, rows[i].name);
                expect(body, chat, 200, NULL);
            }
        }
    }
    expect("{\"prompt\":\"Hi\",\"frobnicate\":true}", 0, 400, "frobnicate");
    expect("{\"prompt\":\"Hi\",\"messages\":[]}", 0, 400, "messages");
    expect("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"prompt\":\"x\"}", 1, 400,
           "prompt");
    expect("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"guided_regex\":\"a+\"}", 1,
           400, "guided_regex");
    /* structured output is read (gw_structured.h): a grammar it cannot use is a 400 */
    expect("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"guided_json\":{}}", 1, 200,
           NULL);
    expect("{\"prompt\":\"Hi\",\"grammar\":\"root ::= x\"}", 0, 400, "grammar");
    expect("{\"prompt\":\"Hi\",\"user\":\"u1\"}", 0, 200, NULL);
    CU_ASSERT_PTR_NOT_NULL(moon_gw_field_find("tools"));
    CU_ASSERT_PTR_NULL(moon_gw_field_find("frobnicate"));
}

/* Penalties, min_p, min_tokens, logit_bias, include_stop_str_in_output: read
 * into the params, each range a 400 naming the field. */
static void test_sampling_controls(void)
{
    moon_gw_request_t req;
    moon_gw_error_t   err;

    CU_ASSERT_EQUAL_FATAL(run("{\"prompt\":\"a\",\"max_tokens\":9,\"presence_penalty\":-2,"
                              "\"frequency_penalty\":1.5,\"repetition_penalty\":1.2,\"min_p\":0.1,"
                              "\"min_tokens\":4,\"logit_bias\":{\"7\":-100,\"11\":2.5},"
                              "\"include_stop_str_in_output\":true}",
                              0, &req, &err),
                          200);
    CU_ASSERT_DOUBLE_EQUAL(req.params.presence_penalty, -2, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(req.params.frequency_penalty, 1.5, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(req.params.repetition_penalty, 1.2, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(req.params.min_p, 0.1, 1e-6);
    CU_ASSERT_EQUAL(req.params.min_tokens, 4);
    CU_ASSERT_EQUAL_FATAL(req.params.n_bias, 2);
    CU_ASSERT_EQUAL(req.params.bias_ids[0], 7);
    CU_ASSERT_DOUBLE_EQUAL(req.params.bias[0], -100, 1e-6);
    CU_ASSERT_EQUAL(req.params.bias_ids[1], 11);
    CU_ASSERT(req.params.flags & MOON_SERVE_F_STOP_STR_OUT);
    moon_gw_request_fini(&req);
    expect("{\"prompt\":\"a\",\"presence_penalty\":2.1}", 0, 400, "presence_penalty");
    expect("{\"prompt\":\"a\",\"frequency_penalty\":\"x\"}", 0, 400, "frequency_penalty");
    expect("{\"prompt\":\"a\",\"repetition_penalty\":0}", 0, 400, "repetition_penalty");
    expect("{\"prompt\":\"a\",\"min_p\":1.01}", 0, 400, "min_p");
    expect("{\"prompt\":\"a\",\"min_tokens\":-1}", 0, 400, "min_tokens");
    expect("{\"prompt\":\"a\",\"max_tokens\":3,\"min_tokens\":4}", 0, 400, "min_tokens");
    expect("{\"prompt\":\"a\",\"logit_bias\":{\"7\":101}}", 0, 400, "logit_bias");
    expect("{\"prompt\":\"a\",\"logit_bias\":{\"x7\":1}}", 0, 400, "logit_bias");
    expect("{\"prompt\":\"a\",\"logit_bias\":{\"512\":1}}", 0, 400, "logit_bias");
    expect("{\"prompt\":\"a\",\"logit_bias\":[1]}", 0, 400, "logit_bias");
    {
        moon_gw_request_t r2;
        CU_ASSERT_EQUAL(run("{\"prompt\":\"a\",\"logprobs\":3}", 0, &r2, &err), 200);
        CU_ASSERT_EQUAL(r2.params.logprobs, 4);
        moon_gw_request_fini(&r2);
        CU_ASSERT_EQUAL(run("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                            "\"logprobs\":true,\"top_logprobs\":20}",
                            1, &r2, &err),
                        200);
        CU_ASSERT_EQUAL(r2.params.logprobs, 21);
        moon_gw_request_fini(&r2);
    }
    expect("{\"prompt\":\"a\",\"logprobs\":21}", 0, 400, "logprobs");
    expect("{\"prompt\":\"a\",\"include_stop_str_in_output\":1}", 0, 400,
           "include_stop_str_in_output");
    expect("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"3\":1},"
           "\"presence_penalty\":0.5}",
           1, 200, NULL);
}

int main(void)
{
    moon_gguf_t *gguf = NULL;
    int          rc;

    if (moon_gguf_open(MOON_TEST_MODEL, &gguf) != MOON_OK ||
        moon_tokenizer_create(gguf, &g_tok) != MOON_OK) {
        fprintf(stderr, "test_gw_openai: cannot load %s\n", MOON_TEST_MODEL);
        return 1;
    }
    moon_gguf_close(gguf);
    moon_gw_template_init(&g_plain, NULL, 0, moon_tokenizer_bos(g_tok), moon_tokenizer_eos(g_tok),
                          NULL, NULL);
    rc = MOON_TEST_RUN("gw_openai", NULL, NULL, test_completion_fields, test_completion_errors,
                       test_context_check, test_chat_errors, test_templates, test_jinja_templates,
                       test_template_tokens, test_strict_json, test_caps, test_error_utf8,
                       test_allocation_failures, test_field_table, test_sampling_controls,
                       test_echo_logprobs, test_embed_bodies);
    moon_tokenizer_destroy(g_tok);
    return rc;
}
