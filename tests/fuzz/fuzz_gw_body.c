/* tests/fuzz/fuzz_gw_body.c - OpenAI request bodies: parse and prepare
 * (strict JSON, every field's checks, the chat template, tokenization
 * against stories260K) on any bytes. The first byte picks the route (bit 0:
 * chat) and the template (bit 1: chatml), or (bit 2) /v1/embeddings; the
 * rest is the body. Checks that
 * bad input is refused with a 400/404 whose error object is valid UTF-8 JSON,
 * and that an accepted request is within every cap (embeddings: 1..256
 * inputs, each 1..n_ctx - 1 ids of the vocabulary). */
#include "fuzz_target.h"
#include "gw_embed.h"
#include "gw_json.h"
#include "gw_openai.h"
#include "gw_template.h"
#include "moonlet/alloc.h"
#include "moonlet/gguf.h"
#include "moonlet/log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MOON_FUZZ_MODEL
#error "MOON_FUZZ_MODEL must name stories260K.gguf"
#endif

static moon_tokenizer_t  *g_tok;
static moon_gw_template_t g_plain, g_chatml;

static void fuzz_init(void)
{
    static const char chatml[] =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] "
        "+ '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";
    moon_gguf_t *gguf = NULL;

    moon_log_set_level(MOON_LOG_ERROR);
    if (moon_gguf_open(MOON_FUZZ_MODEL, &gguf) != MOON_OK ||
        moon_tokenizer_create(gguf, &g_tok) != MOON_OK) {
        fprintf(stderr, "fuzz_gw_body: cannot load %s\n", MOON_FUZZ_MODEL);
        abort();
    }
    moon_gguf_close(gguf);
    moon_gw_template_init(&g_plain, NULL, 0, moon_tokenizer_bos(g_tok), moon_tokenizer_eos(g_tok),
                          NULL, NULL);
    moon_gw_template_init(&g_chatml, chatml, sizeof(chatml) - 1, moon_tokenizer_bos(g_tok),
                          moon_tokenizer_eos(g_tok), NULL, NULL);
}

#define CHECK(_e)                                                                                  \
    do {                                                                                           \
        if (!(_e)) {                                                                               \
            fprintf(stderr, "fuzz_gw_body: check failed: %s\n", #_e);                              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* An error's answer: 400 or 404, its object valid UTF-8 JSON. */
static void check_refusal(const moon_gw_error_t *err)
{
    char *json = moon_gw_error_json(err);

    CHECK(err->http == 400 || err->http == 404);
    if (json != NULL) {
        size_t n = strlen(json);
        CHECK(moon_gw_utf8_valid_len(json, n) == n);
        moon_free(json);
    }
}

static int embeddings(const uint8_t *data, size_t size, moon_gw_model_info_t *mi)
{
    moon_gw_embed_req_t req;
    moon_gw_error_t     err;
    moon_status_t       status;

    mi->dim = 64;
    memset(&err, 0, sizeof(err));
    status = moon_gw_embed_parse((const char *)data, size, mi, &req, &err);
    if (status == MOON_OK) {
        CHECK(req.n_inputs >= 1 && req.n_inputs <= MOON_GW_EMBED_MAX_INPUTS);
        for (uint32_t i = 0; i < req.n_inputs; i++) {
            CHECK(req.n_tokens[i] >= 1 && req.n_tokens[i] < mi->n_ctx);
            for (uint32_t j = 0; j < req.n_tokens[i]; j++) {
                CHECK(req.tokens[i][j] >= 0 && (uint32_t)req.tokens[i][j] < mi->n_vocab);
            }
        }
    } else if (status == MOON_ERR_INVALID_PARAM) {
        check_refusal(&err);
    } else {
        CHECK(status == MOON_ERR_NO_MEMORY);
    }
    moon_gw_embed_fini(&req);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    moon_gw_request_t    req;
    moon_gw_error_t      err;
    moon_gw_model_info_t mi;
    moon_status_t        status;

    if (g_tok == NULL) {
        fuzz_init();
    }
    if (size < 1) {
        return 0;
    }
    mi = (moon_gw_model_info_t){.model_name = "stories260K",
                                .tpl        = (data[0] & 2) ? &g_chatml : &g_plain,
                                .tok        = g_tok,
                                .n_ctx      = 512,
                                .n_vocab    = moon_tokenizer_n_vocab(g_tok)};
    memset(&err, 0, sizeof(err));
    if (data[0] & 4) {
        return embeddings(data + 1, size - 1, &mi);
    }
    status = moon_gw_openai_parse((const char *)data + 1, size - 1, data[0] & 1, &req, &err);
    if (status == MOON_OK) {
        status = moon_gw_openai_prepare(&req, &mi, 7, &err);
    }
    if (status == MOON_OK) {
        CHECK(req.n_stop <= MOON_GW_MAX_STOP && req.n_stop_ids <= MOON_GW_MAX_STOP_IDS);
        for (uint32_t i = 0; i < req.n_stop; i++) {
            CHECK(strlen(req.stop[i]) <= MOON_GW_MAX_STOP_BYTES);
        }
        CHECK(req.params.n_tokens < mi.n_ctx && req.params.max_tokens > 0);
    } else if (status == MOON_ERR_INVALID_PARAM) {
        check_refusal(&err);
    } else {
        CHECK(status == MOON_ERR_NO_MEMORY);
    }
    moon_gw_request_fini(&req);
    return 0;
}
