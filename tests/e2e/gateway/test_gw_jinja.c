/* tests/e2e/gateway/test_gw_jinja.c - a model's own chat template served:
 * a random model (moon_model_write_random_ex) whose GGUF carries
 * tests/data/jinja/mistral_style.jinja as tokenizer.chat_template, behind an
 * in-process cluster and a gateway. For every conversation of
 * tests/data/jinja/conversations.jsonl (system prompts, several turns, tool
 * definitions, tool calls and results) the prompt the gateway builds (its
 * /tokenize ids, and usage.prompt_tokens of a served chat) equals the
 * @huggingface/jinja rendering (tests/data/jinja/mistral_style.golden)
 * tokenized with the model's vocabulary, BOS and EOS as control tokens; a
 * conversation the template refuses (raise_exception) is a 400 carrying the
 * template's message. */
#include "gateway.h"
#include "gw_curl.h"
#include "gw_local.h"
#include "moon_test.h"
#include "moonlet/alloc.h"
#include "moonlet/dist.h"
#include "moonlet/gguf.h"
#include "moonlet/model.h"
#include "moonlet/runtime.h"
#include "moonlet/tokenizer.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DATA MOON_TEST_DATA_DIR "/jinja"

static moon_tokenizer_t *g_tok;
static unsigned          g_port;
static char              g_model[512];

/* The reference: text split at "<s>" / "</s>" into BOS / EOS, the rest
 * encoded with no BOS added. */
static size_t reference_ids(const char *text, int32_t *ids, size_t cap)
{
    size_t n = 0;

    while (*text != 0) {
        const char *bos = strstr(text, "<s>"), *eos = strstr(text, "</s>");
        const char *hit = bos != NULL && (eos == NULL || bos < eos) ? bos : eos;
        size_t      len = hit != NULL ? (size_t)(hit - text) : strlen(text), got = 0;

        if (len > 0) {
            CU_ASSERT_EQUAL_FATAL(
                moon_tokenizer_encode(g_tok, text, len, false, ids + n, cap - n, &got), MOON_OK);
            n += got;
        }
        if (hit == NULL) {
            break;
        }
        ids[n++] = hit == bos ? moon_tokenizer_bos(g_tok) : moon_tokenizer_eos(g_tok);
        text     = hit + (hit == bos ? 3 : 4);
    }
    return n;
}

/* OpenAI clients send tool-call arguments as JSON text (the goldens' inputs
 * hold objects, as Hugging Face's templates take them): the gateway must
 * parse them back. */
static void arguments_as_text(cJSON *conv)
{
    cJSON *m;

    cJSON_ArrayForEach(m, cJSON_GetObjectItem(conv, "messages"))
    {
        cJSON *call;
        cJSON_ArrayForEach(call, cJSON_GetObjectItem(m, "tool_calls"))
        {
            cJSON *fn   = cJSON_GetObjectItem(call, "function");
            char  *args = cJSON_PrintUnformatted(cJSON_GetObjectItem(fn, "arguments"));
            cJSON_ReplaceItemInObject(fn, "arguments", cJSON_CreateString(args));
            cJSON_free(args);
        }
    }
}

static void test_prompts_match_reference(void)
{
    char *convs = moon_test_read_file(DATA "/conversations.jsonl", NULL);
    char *gold  = moon_test_read_file(DATA "/mistral_style.golden", NULL);
    char *cs = NULL, *gs = NULL, *c, *g;
    int   checked = 0, refused = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(convs);
    CU_ASSERT_PTR_NOT_NULL_FATAL(gold);
    for (c = strtok_r(convs, "\n", &cs), g = strtok_r(gold, "\n", &gs); c != NULL && g != NULL;
         c = strtok_r(NULL, "\n", &cs), g = strtok_r(NULL, "\n", &gs)) {
        cJSON    *conv = cJSON_Parse(c), *want = cJSON_Parse(g), *body, *got;
        gw_http_t r;
        char     *text;
        int       code;

        arguments_as_text(conv);
        body = cJSON_CreateObject();
        cJSON_AddItemReferenceToObject(body, "messages", cJSON_GetObjectItem(conv, "messages"));
        if (cJSON_GetObjectItem(conv, "tools") != NULL) {
            cJSON_AddItemReferenceToObject(body, "tools", cJSON_GetObjectItem(conv, "tools"));
        }
        text = cJSON_PrintUnformatted(body);
        code = gw_post(&r, g_port, "/tokenize", text, NULL);
        got  = cJSON_Parse(r.body != NULL ? r.body : "");
        if (cJSON_IsString(want)) {
            static int32_t ids[16384];
            size_t         n      = reference_ids(want->valuestring, ids, 16384);
            cJSON         *tokens = cJSON_GetObjectItem(got, "tokens");
            int            same   = code == 200 && (size_t)cJSON_GetArraySize(tokens) == n;

            for (size_t i = 0; same && i < n; i++) {
                same = cJSON_GetArrayItem(tokens, (int)i)->valueint == ids[i];
            }
            if (!same) {
                fprintf(stderr, "conversation %d: %d, %d ids, want %zu: %s\n",
                        checked + refused + 1, code, cJSON_GetArraySize(tokens), n,
                        r.body != NULL ? r.body : "");
            }
            CU_ASSERT_TRUE(same);
            /* served: the prompt the instances got has the same length */
            if (checked == 0 || cJSON_GetObjectItem(conv, "tools") != NULL) {
                gw_http_t r2;
                cJSON    *ans, *usage;
                char     *chat;
                cJSON_AddNumberToObject(body, "max_tokens", 2);
                cJSON_AddNumberToObject(body, "temperature", 0);
                chat = cJSON_PrintUnformatted(body);
                CU_ASSERT_EQUAL(gw_post(&r2, g_port, "/v1/chat/completions", chat, NULL), 200);
                ans   = cJSON_Parse(r2.body != NULL ? r2.body : "");
                usage = cJSON_GetObjectItem(ans, "usage");
                CU_ASSERT_EQUAL(cJSON_GetObjectItem(usage, "prompt_tokens") != NULL
                                    ? cJSON_GetObjectItem(usage, "prompt_tokens")->valueint
                                    : -1,
                                (int)n);
                cJSON_Delete(ans);
                cJSON_free(chat);
                gw_http_fini(&r2);
            }
            checked++;
        } else {
            const char *msg = cJSON_GetObjectItem(want, "error")->valuestring;
            CU_ASSERT_EQUAL(code, 400);
            CU_ASSERT_PTR_NOT_NULL(r.body != NULL ? strstr(r.body, msg) : NULL);
            refused++;
        }
        cJSON_Delete(got);
        cJSON_free(text);
        cJSON_Delete(body);
        cJSON_Delete(conv);
        cJSON_Delete(want);
        gw_http_fini(&r);
    }
    printf("\n  %d conversations matched the reference, %d refused by the template\n", checked,
           refused);
    CU_ASSERT(checked >= 6 && refused >= 1);
    free(convs);
    free(gold);
}

/* The model: llama, 64 wide, gen-model's 512-token vocabulary, the template. */
static int write_model(void)
{
    char                   *tpl  = moon_test_read_file(DATA "/mistral_style.jinja", NULL);
    moon_model_config_t     c    = {.dim        = 64,
                                    .hidden_dim = 128,
                                    .n_layers   = 2,
                                    .n_heads    = 4,
                                    .n_kv_heads = 2,
                                    .vocab_size = 512,
                                    .seq_len    = 2048,
                                    .norm_eps   = 1e-5f,
                                    .rope_theta = 10000.0f};
    moon_model_write_opts_t o    = {.type = MOON_GGML_F32, .seed = 28, .chat_template = tpl};
    moon_gguf_t            *gguf = NULL;
    int                     ok;

    snprintf(g_model, sizeof(g_model), "%s/jinja_model.gguf", gw_tmp_dir());
    ok = tpl != NULL && moon_model_write_random_ex(&c, &o, g_model) == MOON_OK &&
         moon_gguf_open(g_model, &gguf) == MOON_OK &&
         moon_tokenizer_create(gguf, &g_tok) == MOON_OK;
    moon_gguf_close(gguf);
    free(tpl);
    return ok;
}

int main(void)
{
    gw_local_t l;
    int        rc = 1;

    gw_tmp_name("gw_jinja");
    if (!write_model()) {
        fprintf(stderr, "test_gw_jinja: cannot write the model\n");
        return 1;
    }
    if (gw_local_start(&l, "test_gw_jinja", g_model)) {
        g_port = l.port;
        rc     = MOON_TEST_RUN("gw_jinja", NULL, NULL, test_prompts_match_reference);
    }
    gw_local_stop(&l);
    moon_tokenizer_destroy(g_tok);
    remove(g_model);
    return rc;
}
