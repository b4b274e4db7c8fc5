/* tests/unit/actors/test_serve_tokens.c - the TOKENS message (one decode
 * step's tokens for one reply address): read entry by entry, split into
 * TOKEN messages, and malformed ones (mismatched spans, a text without its
 * NUL, ends going backwards) refused whole. */
#include "moon_test.h"

#include "moonlet/serve_client.h"

#include <string.h>

/* A TOKENS of n entries with texts[i]; then the test may break it. */
static moon_serve_tokens_t *tokens_new(uint32_t n, const char *const *texts)
{
    moon_serve_tokens_t *m;
    uint64_t            *ids, *ver;
    uint32_t            *idx, *tok, *end, bytes = 0, off = 0;
    char                *text;

    for (uint32_t i = 0; i < n; i++) {
        bytes += (uint32_t)strlen(texts[i]) + 1;
    }
    m    = moon_msg_new(MOON_MSG_SERVE_TOKENS, (size_t)n * 28 + bytes + 40);
    ids  = moon_msg_span_alloc(m, &m->request_id, n, 8, 0);
    idx  = moon_msg_span_alloc(m, &m->index, n, 4, 0);
    tok  = moon_msg_span_alloc(m, &m->token, n, 4, 0);
    end  = moon_msg_span_alloc(m, &m->text_end, n, 4, 0);
    text = moon_msg_span_alloc(m, &m->text, bytes, 1, 0);
    ver  = moon_msg_span_alloc(m, &m->weight_version, n, 8, 0);
    for (uint32_t i = 0; i < n; i++) {
        size_t len = strlen(texts[i]) + 1;
        ids[i]     = 100 + i;
        idx[i]     = 7 * i;
        tok[i]     = 1000 + i;
        ver[i]     = 5 + i;
        memcpy(text + off, texts[i], len);
        off += (uint32_t)len;
        end[i] = off;
    }
    return m;
}

static void test_entries_and_split(void)
{
    const char *const    texts[] = {"he", "", "llo world"};
    moon_serve_tokens_t *m       = tokens_new(3, texts);
    moon_serve_event_t   ev;
    moon_serve_token_t  *t;

    CU_ASSERT_EQUAL(moon_serve_tokens_count(&m->hdr), 3);
    for (uint32_t i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(moon_serve_tokens_event(&m->hdr, i, &ev), MOON_OK);
        CU_ASSERT_EQUAL(ev.kind, MOON_SERVE_EV_TOKEN);
        CU_ASSERT_EQUAL(ev.request_id, 100 + i);
        CU_ASSERT_EQUAL(ev.index, 7 * i);
        CU_ASSERT_EQUAL(ev.token, (int32_t)(1000 + i));
        CU_ASSERT_STRING_EQUAL(ev.text, texts[i]);
        CU_ASSERT_EQUAL(ev.weight_version, 5 + i);
    }
    CU_ASSERT_EQUAL(moon_serve_tokens_event(&m->hdr, 3, &ev), MOON_ERR_INVALID_PARAM);
    t = moon_serve_tokens_split(&m->hdr, 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(moon_serve_event_of(&t->hdr, &ev), MOON_OK);
    CU_ASSERT_EQUAL(ev.request_id, 102);
    CU_ASSERT_EQUAL(ev.index, 14);
    CU_ASSERT_STRING_EQUAL(ev.text, "llo world");
    CU_ASSERT_EQUAL(ev.weight_version, 7); /* a split TOKEN keeps its entry's version */
    moon_msg_release(&t->hdr);
    CU_ASSERT_PTR_NULL(moon_serve_tokens_split(&m->hdr, 9));
    moon_msg_release(&m->hdr);
}

static void test_malformed_refused(void)
{
    const char *const    texts[] = {"a", "bc"};
    moon_serve_tokens_t *m;
    moon_serve_event_t   ev;

    m          = tokens_new(2, texts); /* spans of different lengths */
    m->index.n = 1;
    CU_ASSERT_EQUAL(moon_serve_tokens_count(&m->hdr), 0);
    CU_ASSERT_EQUAL(moon_serve_tokens_event(&m->hdr, 0, &ev), MOON_ERR_INVALID_PARAM);
    moon_msg_release(&m->hdr);

    m                   = tokens_new(2, texts); /* versions missing for an entry */
    m->weight_version.n = 1;
    CU_ASSERT_EQUAL(moon_serve_tokens_count(&m->hdr), 0);
    moon_msg_release(&m->hdr);

    m = tokens_new(2, texts); /* an end past the text */
    ((uint32_t *)MOON_SPAN_PTR(m, m->text_end))[1] = m->text.n + 1;
    CU_ASSERT_EQUAL(moon_serve_tokens_count(&m->hdr), 0);
    moon_msg_release(&m->hdr);

    m                                      = tokens_new(2, texts); /* a text without its NUL */
    ((char *)MOON_SPAN_PTR(m, m->text))[1] = 'x';
    CU_ASSERT_EQUAL(moon_serve_tokens_count(&m->hdr), 0);
    moon_msg_release(&m->hdr);

    m = tokens_new(2, texts); /* ends going backwards */
    ((uint32_t *)MOON_SPAN_PTR(m, m->text_end))[1] = 1;
    CU_ASSERT_EQUAL(moon_serve_tokens_count(&m->hdr), 0);
    moon_msg_release(&m->hdr);

    /* another type altogether */
    {
        moon_serve_token_t *t = moon_msg_new(MOON_MSG_SERVE_TOKEN, 4);
        CU_ASSERT_EQUAL(moon_serve_tokens_count(&t->hdr), 0);
        moon_msg_release(&t->hdr);
    }
}

static int suite_init(void)
{
    return moon_serve_msgs_register() == MOON_OK ? 0 : 1;
}

MOON_TEST_MAIN("serve_tokens", suite_init, NULL, test_entries_and_split, test_malformed_refused)
