/* tests/e2e/gateway/test_gw_jinja.c - a model's own chat template served,
 * per family: a random model (moon_model_write_random_ex) whose GGUF carries
 * the family's template (tests/data/jinja/FAMILY.jinja) as
 * tokenizer.chat_template and its real vocabulary (Llama 3's and Qwen 3's
 * byte-level BPE, from the tokenizer goldens; the Mistral-style template
 * over gen-model's SentencePiece one), behind an in-process cluster and a
 * gateway. For every conversation of tests/data/jinja/conversations.jsonl
 * (system prompts, several turns, tool definitions, tool calls and results)
 * the prompt the gateway builds (its /tokenize ids, and
 * usage.prompt_tokens of a served chat) equals the @huggingface/jinja
 * rendering (FAMILY.golden) tokenized with the model's vocabulary: its
 * special tokens ("<|start_header_id|>", "<|im_start|>", "<s>") as the
 * control tokens they name, none added twice; a conversation the template
 * refuses (raise_exception) is a 400 carrying the template's message. */
#include "gateway.h"
#include "gw_curl.h"
#include "gw_local.h"
#include "moon_test.h"
#include "moon_test_vocab.h"
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

/* vocab: a .vocab golden of tests/data/tokenizer, or NULL (gen-model's
 * SentencePiece vocabulary). */
typedef struct {
    const char *name;
    const char *vocab;
    int         raises; /* conversations its template refuses (raise_exception) */
} family_t;

static const family_t families[] = {
    {"mistral_style", NULL, 1}, {"llama3", "llama3", 0}, {"qwen3", "qwen3", 0}};

static const family_t   *g_fam;
static moon_tokenizer_t *g_tok;
static unsigned          g_port;
static char              g_model[512];

/* The reference: the rendering tokenized with no BOS added; both kinds of
 * vocabulary match their special tokens ("<s>", "<|im_start|>") in the text
 * itself. */
static size_t reference_ids(const char *text, int32_t *ids, size_t cap)
{
    size_t n = 0;

    CU_ASSERT_EQUAL_FATAL(moon_tokenizer_encode(g_tok, text, strlen(text), false, ids, cap, &n),
                          MOON_OK);
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
    char  path[512];
    char *convs = moon_test_read_file(DATA "/conversations.jsonl", NULL), *gold;
    char *cs = NULL, *gs = NULL, *c, *g;
    int   checked = 0, refused = 0;

    snprintf(path, sizeof(path), DATA "/%s.golden", g_fam->name);
    gold = moon_test_read_file(path, NULL);
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
        if (cJSON_GetObjectItem(conv, "add_generation_prompt") != NULL) { /* vLLM's field */
            cJSON_AddItemReferenceToObject(body, "add_generation_prompt",
                                           cJSON_GetObjectItem(conv, "add_generation_prompt"));
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
    printf("\n  %s: %d conversations matched the reference, %d refused by the template\n",
           g_fam->name, checked, refused);
    CU_ASSERT(checked >= 6 && refused == g_fam->raises);
    free(convs);
    free(gold);
}

/* The model: llama, 64 wide, the family's vocabulary (gen-model's 512
 * tokens without one) and template. */
static int write_model(void)
{
    char                    path[512], vocab[512];
    char                   *tpl;
    moon_model_config_t     c    = {.dim        = 64,
                                    .hidden_dim = 128,
                                    .n_layers   = 2,
                                    .n_heads    = 4,
                                    .n_kv_heads = 2,
                                    .vocab_size = 512,
                                    .seq_len    = 2048,
                                    .norm_eps   = 1e-5f,
                                    .rope_theta = 10000.0f};
    moon_model_write_opts_t o    = {.type = MOON_GGML_F32, .seed = 28};
    moon_gguf_t            *gguf = NULL;
    int                     ok   = 1;

    snprintf(path, sizeof(path), DATA "/%s.jinja", g_fam->name);
    tpl             = moon_test_read_file(path, NULL);
    o.chat_template = tpl;
    if (g_fam->vocab != NULL) {
        snprintf(path, sizeof(path), MOON_TEST_DATA_DIR "/tokenizer/%s.vocab", g_fam->vocab);
        snprintf(vocab, sizeof(vocab), "%s/vocab_%s.gguf", gw_tmp_dir(), g_fam->vocab);
        ok           = moon_test_vocab_gguf(path, &(moon_test_vocab_opts_t){0}, vocab) == 0;
        o.vocab_path = vocab;
    }
    snprintf(g_model, sizeof(g_model), "%s/jinja_%s.gguf", gw_tmp_dir(), g_fam->name);
    ok = ok && tpl != NULL && moon_model_write_random_ex(&c, &o, g_model) == MOON_OK &&
         moon_gguf_open(g_model, &gguf) == MOON_OK &&
         moon_tokenizer_create(gguf, &g_tok) == MOON_OK;
    moon_gguf_close(gguf);
    if (o.vocab_path != NULL) {
        remove(vocab); /* the model holds a copy of its keys */
    }
    free(tpl);
    return ok;
}

/* One family: its model written, served, checked, removed. 0: passed. */
static int run_family(void)
{
    gw_local_t l;
    int        rc = 1;

    if (!write_model()) {
        fprintf(stderr, "test_gw_jinja: cannot write the %s model\n", g_fam->name);
        return 1;
    }
    if (gw_local_start(&l, "test_gw_jinja", g_model)) {
        g_port = l.port;
        rc     = MOON_TEST_RUN(g_fam->name, NULL, NULL, test_prompts_match_reference);
    }
    gw_local_stop(&l);
    moon_tokenizer_destroy(g_tok);
    g_tok = NULL;
    remove(g_model);
    return rc;
}

int main(void)
{
    int rc = 0;

    gw_tmp_name("gw_jinja");
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        g_fam = &families[i];
        rc |= run_family();
    }
    return rc;
}
