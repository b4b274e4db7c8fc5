/* tests/unit/runtime/test_msg.c - message schema, spans, references, the
 * msgpack codec and message images (runtime/msg/msg_internal.h): round trips of
 * every type, and bad bytes of every kind. */
#include "moonlet/moonlet.h"

#include "msg_internal.h"

#include "moon_test.h"
#include "moon_test_msg.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

/* A schema with every field kind. */
#define T_ALL_FIELDS(F, T)                                                                         \
    F(T, u8, a)                                                                                    \
    F(T, u16, b)                                                                                   \
    F(T, u32, c) F(T, u64, d) F(T, i32, e) F(T, i64, f) F(T, f32, g) F(T, f64, h) F(T, addr, who)  \
        F(T, str, text) F(T, bytes, blob) F(T, u32s, tokens) F(T, u64s, keys)
#define T_NONE_FIELDS(F, T)
#define T_MSGS(X)                                                                                  \
    X(T_MSG_ALL, t_all_t, T_ALL_FIELDS)                                                            \
    X(T_MSG_NONE, t_none_t, T_NONE_FIELDS)
MOON_MSG_DECLARE(T_MSGS, 200, T_MSG_END)
MOON_MSG_DEFINE(T_MSGS, t_msg_descs)

/* A second table claiming an id already taken. */
#define T_CLASH_MSGS(X) X(T_MSG_CLASH, t_clash_t, T_NONE_FIELDS)
MOON_MSG_DECLARE(T_CLASH_MSGS, 200, T_MSG_CLASH_END)
MOON_MSG_DEFINE(T_CLASH_MSGS, t_clash_descs)

static uint64_t rng = 42;

/* A value of a random width: every encoding (fixint, 8..64 bits) comes up. */
static uint64_t rand_width(void)
{
    uint64_t v = moon_test_rand(&rng);
    uint32_t b = (uint32_t)(moon_test_rand(&rng) % 65);

    return b == 64 ? v : v & ((1ull << b) - 1);
}

/* wide: of any width and either sign, in [-2^(bits-1), 2^(bits-1)); else any
 * bit pattern. */
static int64_t rand_signed(int wide, int bits)
{
    int64_t v = (int64_t)(rand_width() >> (65 - bits));

    return !wide ? (int64_t)moon_test_rand(&rng) : moon_test_rand(&rng) & 1 ? -v - 1 : v;
}

/* A message with every field kind. Plain: spans up to max_span long and
 * random bit patterns. Wide: span lengths at msgpack's length boundaries
 * (fix, 8, 16 bits) and values of every integer width. */
static t_all_t *random_all_kinds(uint32_t max_span, int wide)
{
    static const uint32_t lens[] = {0, 1, 15, 16, 31, 32, 255, 256, 300, 65535, 65536};
    uint32_t              n[4]; /* text, blob, tokens, keys */
    t_all_t              *m;
    char                 *text;
    uint8_t              *blob;
    uint32_t             *tok;
    uint64_t             *keys;

    for (int i = 0; i < 4; i++) { /* wide arrays stay at most 256 long */
        n[i] = wide ? lens[moon_test_rand(&rng) % (i < 2 ? MOON_ARRAY_SIZE(lens) : 8)]
                    : (uint32_t)(moon_test_rand(&rng) % (max_span + 1));
    }
    m = moon_msg_new(T_MSG_ALL, n[0] + 1 + n[1] + 4 * n[2] + 8 * n[3] + 32);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    m->a         = (uint8_t)(wide ? rand_width() : moon_test_rand(&rng));
    m->b         = (uint16_t)(wide ? rand_width() : moon_test_rand(&rng));
    m->c         = (uint32_t)(wide ? rand_width() : moon_test_rand(&rng));
    m->d         = wide ? rand_width() : moon_test_rand(&rng);
    m->e         = (int32_t)rand_signed(wide, 32);
    m->f         = rand_signed(wide, 64);
    m->g         = (float)(int32_t)moon_test_rand(&rng) / 7.0f;
    m->h         = (double)(int64_t)moon_test_rand(&rng) / 3.0;
    m->who       = wide ? rand_width() : moon_test_rand(&rng);
    m->hdr.src   = wide ? rand_width() : moon_test_rand(&rng);
    m->hdr.seq   = wide ? rand_width() : moon_test_rand(&rng);
    m->hdr.flags = (uint16_t)(wide ? rand_width() : moon_test_rand(&rng));
    text         = moon_msg_span_alloc(m, &m->text, n[0], 1, 1);
    blob         = moon_msg_span_alloc(m, &m->blob, n[1], 1, 0);
    tok          = moon_msg_span_alloc(m, &m->tokens, n[2], 4, 0);
    keys         = moon_msg_span_alloc(m, &m->keys, n[3], 8, 0);
    CU_ASSERT_FATAL(text && blob && tok && keys);
    for (uint32_t i = 0; i < n[0]; i++) {
        text[i] = (char)('a' + moon_test_rand(&rng) % 26);
    }
    for (uint32_t i = 0; i < n[1]; i++) {
        blob[i] = (uint8_t)moon_test_rand(&rng);
    }
    for (uint32_t i = 0; i < n[2]; i++) {
        tok[i] = (uint32_t)(wide ? rand_width() : moon_test_rand(&rng));
    }
    for (uint32_t i = 0; i < n[3]; i++) {
        keys[i] = wide ? rand_width() : moon_test_rand(&rng);
    }
    return m;
}

static moon_msg_hdr_t *round_trip(const moon_msg_hdr_t *m)
{
    size_t          cap = moon_msg_encoded_bound(m), len = 0;
    char           *buf = malloc(cap);
    moon_msg_hdr_t *out = NULL;

    CU_ASSERT_EQUAL(moon_msg_encode(m, buf, cap, &len), MOON_OK);
    CU_ASSERT(len <= cap);
    CU_ASSERT_EQUAL(moon_msg_decode(buf, len, &out), MOON_OK);
    free(buf);
    return out;
}

static uint64_t obj_uint(const msgpack_object *o)
{
    CU_ASSERT_EQUAL(o->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    return o->via.u64;
}

static int64_t obj_int(const msgpack_object *o)
{
    CU_ASSERT(o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
              o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER);
    return o->via.i64;
}

/* What moon_msg_encode writes, msgpack-c's unpacker reads: the same values. */
static void check_with_msgpack_c(const t_all_t *m, const char *buf, size_t len)
{
    msgpack_unpacked u;
    size_t           off  = 0;
    const char      *text = (const char *)MOON_SPAN_PTR(m, m->text);
    const uint32_t  *tok  = (const uint32_t *)MOON_SPAN_PTR(m, m->tokens);
    const uint64_t  *keys = (const uint64_t *)MOON_SPAN_PTR(m, m->keys);

    msgpack_unpacked_init(&u);
    CU_ASSERT_EQUAL_FATAL(msgpack_unpack_next(&u, buf, len, &off), MSGPACK_UNPACK_SUCCESS);
    CU_ASSERT_EQUAL(off, len);
    CU_ASSERT_EQUAL_FATAL(u.data.type, MSGPACK_OBJECT_ARRAY);
    CU_ASSERT_EQUAL_FATAL(u.data.via.array.size, 4 + 13);
    {
        const msgpack_object *o = u.data.via.array.ptr;
        CU_ASSERT_EQUAL(obj_uint(&o[0]), T_MSG_ALL);
        CU_ASSERT_EQUAL(obj_uint(&o[1]), m->hdr.flags);
        CU_ASSERT_EQUAL(obj_uint(&o[2]), m->hdr.src);
        CU_ASSERT_EQUAL(obj_uint(&o[3]), m->hdr.seq);
        CU_ASSERT_EQUAL(obj_uint(&o[4]), m->a);
        CU_ASSERT_EQUAL(obj_uint(&o[5]), m->b);
        CU_ASSERT_EQUAL(obj_uint(&o[6]), m->c);
        CU_ASSERT_EQUAL(obj_uint(&o[7]), m->d);
        CU_ASSERT_EQUAL(obj_int(&o[8]), m->e);
        CU_ASSERT_EQUAL(obj_int(&o[9]), m->f);
        CU_ASSERT_EQUAL(o[10].type, MSGPACK_OBJECT_FLOAT32);
        CU_ASSERT_EQUAL((float)o[10].via.f64, m->g);
        CU_ASSERT_EQUAL(o[11].type, MSGPACK_OBJECT_FLOAT64);
        CU_ASSERT_EQUAL(o[11].via.f64, m->h);
        CU_ASSERT_EQUAL(obj_uint(&o[12]), m->who);
        CU_ASSERT_EQUAL_FATAL(o[13].type, MSGPACK_OBJECT_STR);
        CU_ASSERT_EQUAL_FATAL(o[13].via.str.size, m->text.n);
        CU_ASSERT(memcmp(o[13].via.str.ptr, text, m->text.n) == 0);
        CU_ASSERT_EQUAL_FATAL(o[14].type, MSGPACK_OBJECT_BIN);
        CU_ASSERT_EQUAL_FATAL(o[14].via.bin.size, m->blob.n);
        CU_ASSERT(memcmp(o[14].via.bin.ptr, MOON_SPAN_PTR(m, m->blob), m->blob.n) == 0);
        CU_ASSERT_EQUAL_FATAL(o[15].type, MSGPACK_OBJECT_ARRAY);
        CU_ASSERT_EQUAL_FATAL(o[15].via.array.size, m->tokens.n);
        for (uint32_t k = 0; k < m->tokens.n; k++) {
            CU_ASSERT_EQUAL(obj_uint(&o[15].via.array.ptr[k]), tok[k]);
        }
        CU_ASSERT_EQUAL_FATAL(o[16].type, MSGPACK_OBJECT_ARRAY);
        CU_ASSERT_EQUAL_FATAL(o[16].via.array.size, m->keys.n);
        for (uint32_t k = 0; k < m->keys.n; k++) {
            CU_ASSERT_EQUAL(obj_uint(&o[16].via.array.ptr[k]), keys[k]);
        }
    }
    msgpack_unpacked_destroy(&u);
}

/* What msgpack-c's packer writes for the same values, this codec reads. */
static void pack_with_msgpack_c(const t_all_t *m, msgpack_sbuffer *sb)
{
    msgpack_packer  pk;
    const uint32_t *tok  = (const uint32_t *)MOON_SPAN_PTR(m, m->tokens);
    const uint64_t *keys = (const uint64_t *)MOON_SPAN_PTR(m, m->keys);

    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 4 + 13);
    msgpack_pack_uint16(&pk, T_MSG_ALL);
    msgpack_pack_uint16(&pk, m->hdr.flags);
    msgpack_pack_uint64(&pk, m->hdr.src);
    msgpack_pack_uint64(&pk, m->hdr.seq);
    msgpack_pack_uint8(&pk, m->a);
    msgpack_pack_uint16(&pk, m->b);
    msgpack_pack_uint32(&pk, m->c);
    msgpack_pack_uint64(&pk, m->d);
    msgpack_pack_int32(&pk, m->e);
    msgpack_pack_int64(&pk, m->f);
    msgpack_pack_float(&pk, m->g);
    msgpack_pack_double(&pk, m->h);
    msgpack_pack_uint64(&pk, m->who);
    msgpack_pack_str_with_body(&pk, MOON_SPAN_PTR(m, m->text), m->text.n);
    msgpack_pack_bin_with_body(&pk, MOON_SPAN_PTR(m, m->blob), m->blob.n);
    msgpack_pack_array(&pk, m->tokens.n);
    for (uint32_t k = 0; k < m->tokens.n; k++) {
        msgpack_pack_uint32(&pk, tok[k]);
    }
    msgpack_pack_array(&pk, m->keys.n);
    for (uint32_t k = 0; k < m->keys.n; k++) {
        msgpack_pack_uint64(&pk, keys[k]);
    }
}

/* The wire format is msgpack as msgpack-c knows it, both ways, at every
 * integer width and every length boundary: msgpack-c's unpacker reads what
 * moon_msg_encode writes, and the codec's own reader decodes what msgpack-c's
 * packer writes for the same values (byte for byte the same encoding). */
static void test_interoperates_with_msgpack_c(void)
{
    for (int i = 0; i < 3000; i++) {
        t_all_t        *m   = random_all_kinds(0, 1);
        size_t          cap = moon_msg_encoded_bound(&m->hdr), len = 0;
        char           *buf = malloc(cap);
        msgpack_sbuffer sb;
        moon_msg_hdr_t *out = NULL;

        CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
        CU_ASSERT_EQUAL_FATAL(moon_msg_encode(&m->hdr, buf, cap, &len), MOON_OK);
        check_with_msgpack_c(m, buf, len);
        msgpack_sbuffer_init(&sb);
        pack_with_msgpack_c(m, &sb);
        CU_ASSERT_EQUAL(sb.size, len);
        CU_ASSERT(sb.size == len && memcmp(sb.data, buf, len) == 0);
        CU_ASSERT_EQUAL_FATAL(moon_msg_decode(sb.data, sb.size, &out), MOON_OK);
        CU_ASSERT(moon_msg_equal(&m->hdr, out));
        moon_msg_release(out);
        msgpack_sbuffer_destroy(&sb);
        free(buf);
        moon_msg_release(&m->hdr);
    }
}

static void test_register_rejects_clashing_ids(void)
{
    CU_ASSERT_EQUAL(moon_msg_register(t_msg_descs), MOON_OK);
    CU_ASSERT_EQUAL(moon_msg_register(t_msg_descs), MOON_OK); /* idempotent */
    CU_ASSERT_EQUAL(moon_msg_register(t_clash_descs), MOON_ERR_EXISTS);
    CU_ASSERT_STRING_EQUAL(moon_msg_name(T_MSG_ALL), "T_MSG_ALL");
    CU_ASSERT_STRING_EQUAL(moon_msg_name(199), "?");
    CU_ASSERT_PTR_NULL(moon_msg_new(199, 0));
}

static moon_msg_hdr_t *image_round_trip(const moon_msg_hdr_t *m)
{
    size_t          n   = moon_msg_image_bytes(m);
    char           *buf = malloc(n + 1);
    moon_msg_hdr_t *out = NULL;

    CU_ASSERT_FATAL(n >= sizeof(moon_msg_hdr_t) && n <= m->size_bytes);
    memcpy(buf, m, n);
    CU_ASSERT_EQUAL(moon_msg_image_decode(buf, n, moon_msg_layout(m->type), &out), MOON_OK);
    free(buf);
    return out;
}

/* Every span of an accepted image lies in the message's tail, an array
 * aligned, a str before its NUL: what a handler may rely on (as on a message
 * decoded from msgpack). */
static void check_spans_inside(const moon_msg_hdr_t *m)
{
    const moon_msg_desc_t *d = moon_msg_desc(m->type);

    CU_ASSERT_FATAL(d != NULL);
    CU_ASSERT(moon_msg_checked_bound(m, NULL) > 0);
    for (uint32_t i = 0; i < d->n_fields; i++) {
        const moon_span_t *span = (const moon_span_t *)((const char *)m + d->fields[i].offset);
        uint32_t           kind = d->fields[i].kind;

        if (kind == MOON_FIELD_str) {
            CU_ASSERT(span->off + span->n < m->size_bytes &&
                      ((const char *)m)[span->off + span->n] == '\0');
        }
        if ((kind == MOON_FIELD_u32s || kind == MOON_FIELD_u64s) && span->n > 0) {
            CU_ASSERT(span->off % (kind == MOON_FIELD_u32s ? 4 : 8) == 0);
        }
        if ((kind == MOON_FIELD_str || kind == MOON_FIELD_bytes || kind == MOON_FIELD_u32s ||
             kind == MOON_FIELD_u64s) &&
            span->n > 0) {
            CU_ASSERT(span->off >= d->struct_bytes);
        }
    }
}

typedef moon_msg_hdr_t *(*trip_fn)(const moon_msg_hdr_t *m);

/* 2000 messages with every field kind (half of them of every integer width
 * and length boundary, when wide) through trip: equal after it, the str
 * intact, the spans as a handler may rely on. */
static void trip_every_field_kind(trip_fn trip, int wide)
{
    for (int i = 0; i < 2000; i++) {
        t_all_t        *m   = random_all_kinds(i < 1000 ? 8 : 300, wide && i % 2);
        moon_msg_hdr_t *out = trip(&m->hdr);

        CU_ASSERT_PTR_NOT_NULL_FATAL(out);
        CU_ASSERT(moon_msg_equal(&m->hdr, out));
        CU_ASSERT_STRING_EQUAL((char *)MOON_SPAN_PTR(out, ((t_all_t *)out)->text),
                               (char *)MOON_SPAN_PTR(m, m->text));
        check_spans_inside(out);
        moon_msg_release(out);
        moon_msg_release(&m->hdr);
    }
}

/* 50 random messages of every registered type (the runtime's included)
 * through trip, equal after it; returns how many types there were. */
static int trip_every_registered_type(trip_fn trip)
{
    moon_runtime_config_t cfg;
    moon_runtime_t       *rt;
    int                   n_types = 0;

    moon_runtime_config_default(&cfg); /* registers the runtime's types */
    cfg.deterministic = 1;
    CU_ASSERT_EQUAL_FATAL(moon_runtime_create(&cfg, &rt), MOON_OK);
    for (uint32_t t = 0; t < MOON_MSG_MAX_TYPES; t++) {
        const moon_msg_desc_t *d = moon_msg_desc(t);

        n_types += d != NULL;
        for (int k = 0; d != NULL && k < 50; k++) {
            moon_msg_hdr_t *m   = moon_test_random_msg(d, &rng);
            moon_msg_hdr_t *out = trip(m);

            CU_ASSERT_PTR_NOT_NULL_FATAL(out);
            CU_ASSERT(moon_msg_equal(m, out));
            moon_msg_release(out);
            moon_msg_release(m);
        }
    }
    moon_runtime_destroy(rt);
    return n_types;
}

static void test_round_trip_every_field_kind(void)
{
    trip_every_field_kind(round_trip, 0);
}

static void test_round_trip_every_registered_type(void)
{
    CU_ASSERT(trip_every_registered_type(round_trip) >= MOON_MSG_SYS_END + 2);
}

static void test_image_round_trip_every_type(void)
{
    trip_every_field_kind(image_round_trip, 1);
    CU_ASSERT(trip_every_registered_type(image_round_trip) >= MOON_MSG_SYS_END + 2);
}

static void test_round_trip_runtime_and_empty_types(void)
{
    moon_runtime_config_t cfg;
    moon_runtime_t       *rt;
    moon_sys_down_t      *down;
    t_none_t             *none;
    moon_msg_hdr_t       *out;

    /* Creating a runtime registers the system types. */
    moon_runtime_config_default(&cfg);
    cfg.deterministic = 1;
    CU_ASSERT_EQUAL_FATAL(moon_runtime_create(&cfg, &rt), MOON_OK);
    for (uint32_t t = 0; t < MOON_MSG_SYS_END; t++) {
        moon_msg_hdr_t *m = moon_msg_new(t, 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        memset((char *)m + sizeof(*m), 0x5a, moon_msg_desc(t)->struct_bytes - sizeof(*m));
        out = round_trip(m);
        CU_ASSERT_PTR_NOT_NULL_FATAL(out);
        CU_ASSERT(moon_msg_equal(m, out));
        moon_msg_release(out);
        moon_msg_release(m);
    }
    down         = moon_msg_new(MOON_MSG_SYS_DOWN, 0);
    down->reason = MOON_ERR_PEER_LOST;
    out          = round_trip(&down->hdr);
    CU_ASSERT_EQUAL(((moon_sys_down_t *)out)->reason, MOON_ERR_PEER_LOST);
    moon_msg_release(out);
    moon_msg_release(&down->hdr);
    none = moon_msg_new(T_MSG_NONE, 0);
    out  = round_trip(&none->hdr);
    CU_ASSERT(moon_msg_equal(&none->hdr, out));
    moon_msg_release(out);
    moon_msg_release(&none->hdr);
    moon_runtime_destroy(rt);
}

static void test_span_alloc_respects_the_tail(void)
{
    t_all_t  *m = moon_msg_new(T_MSG_ALL, 16);
    uint64_t *k;

    CU_ASSERT_EQUAL(moon_msg_set_str(m, &m->text, "0123456789abcdefghij"), MOON_ERR_NO_RESOURCE);
    CU_ASSERT_EQUAL(moon_msg_set_str(m, &m->text, "hello"), MOON_OK);
    k = moon_msg_span_alloc(m, &m->keys, 1, 8, 0);
    CU_ASSERT_PTR_NOT_NULL(k);
    CU_ASSERT_EQUAL((uintptr_t)k % 8, 0);
    CU_ASSERT_PTR_NULL(moon_msg_span_alloc(m, &m->keys, 100, 8, 0));
    moon_msg_release(&m->hdr);
}

static void test_encode_into_small_buffer_is_no_resource(void)
{
    t_all_t *m = random_all_kinds(64, 0);
    char     buf[16];
    size_t   len = 12345;

    CU_ASSERT_EQUAL(moon_msg_encode(&m->hdr, buf, sizeof(buf), &len), MOON_ERR_NO_RESOURCE);
    CU_ASSERT_EQUAL(len, 12345);     /* outputs set on success only */
    m->text.off = m->hdr.size_bytes; /* a span pointing outside the message */
    m->text.n   = 4;
    CU_ASSERT_EQUAL(moon_msg_encode(&m->hdr, buf, sizeof(buf), &len), MOON_ERR_INVALID_PARAM);
    moon_msg_release(&m->hdr);
}

static void test_retain_and_dup(void)
{
    t_all_t *m = random_all_kinds(32, 0);
    t_all_t *c;

    moon_msg_retain(&m->hdr);
    moon_msg_release(&m->hdr); /* still held once */
    c = moon_msg_dup(&m->hdr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT(moon_msg_equal(&m->hdr, &c->hdr));
    moon_msg_release(&m->hdr);
    CU_ASSERT_EQUAL(c->d, c->d); /* c survives m */
    moon_msg_release(&c->hdr);
    moon_msg_release(NULL);
}

static void expect_rejected(const void *buf, size_t len)
{
    moon_msg_hdr_t *out    = NULL;
    moon_status_t   status = moon_msg_decode(buf, len, &out);

    CU_ASSERT(status == MOON_ERR_INVALID_PARAM || status == MOON_OK);
    if (status == MOON_OK) {
        /* A mutation can still be a valid message: it must then re-encode. */
        CU_ASSERT_PTR_NOT_NULL(out);
        moon_msg_release(out);
    }
}

static void test_decode_truncations_and_bit_flips(void)
{
    for (int i = 0; i < 200; i++) {
        t_all_t        *m   = random_all_kinds(40, 0);
        size_t          cap = moon_msg_encoded_bound(&m->hdr), len;
        uint8_t        *buf = malloc(cap + 8);
        moon_msg_hdr_t *out = NULL;

        CU_ASSERT_EQUAL_FATAL(moon_msg_encode(&m->hdr, buf, cap, &len), MOON_OK);
        for (size_t cut = 0; cut < len; cut++) { /* every truncation is rejected */
            CU_ASSERT_EQUAL(moon_msg_decode(buf, cut, &out), MOON_ERR_INVALID_PARAM);
        }
        buf[len] = 0x00; /* trailing garbage is rejected */
        CU_ASSERT_EQUAL(moon_msg_decode(buf, len + 1, &out), MOON_ERR_INVALID_PARAM);
        for (int k = 0; k < 50; k++) {
            size_t  pos  = moon_test_rand(&rng) % len;
            uint8_t save = buf[pos];
            buf[pos] ^= (uint8_t)(1u << (moon_test_rand(&rng) % 8));
            expect_rejected(buf, len);
            buf[pos] = save;
        }
        free(buf);
        moon_msg_release(&m->hdr);
    }
}

static void test_decode_random_bytes_never_crashes(void)
{
    uint8_t buf[512];

    for (int i = 0; i < 200000; i++) {
        size_t len = moon_test_rand(&rng) % sizeof(buf);
        for (size_t k = 0; k < len; k++) {
            buf[k] = (uint8_t)moon_test_rand(&rng);
        }
        if (len > 0 && i % 2 == 0) {
            buf[0] = 0x90 | (uint8_t)(moon_test_rand(&rng) % 16); /* plausible array */
            if (len > 1) {
                buf[1] = (uint8_t)(moon_test_rand(&rng) % 2 ? T_MSG_ALL : MOON_MSG_SYS_DOWN);
            }
        }
        expect_rejected(buf, len);
    }
}

static void test_decode_hostile_size_claims(void)
{
    /* [200, 0, 0, 0, ..., str32 claiming 4 GiB] and array32 claiming 4 G items. */
    uint8_t big_str[]   = {0x9d, 200,  0, 0, 0, 0, 0, 0, 0, 0, 0, 0,    0,    0xca, 0,    0,   0,
                           0,    0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xdb, 0xff, 0xff, 0xff, 0xff};
    uint8_t big_arr[]   = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x00};
    moon_msg_hdr_t *out = NULL;

    CU_ASSERT_EQUAL(moon_msg_decode(big_str, sizeof(big_str), &out), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_msg_decode(big_arr, sizeof(big_arr), &out), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_msg_decode(NULL, 0, &out), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NULL(out);
}

/* The header of an encoding reads even when the rest does not decode (the
 * transport answers such a sender); a cut inside the header does not read. */
static void test_peek_reads_the_header_only(void)
{
    t_all_t    *m   = random_all_kinds(40, 0);
    size_t      cap = moon_msg_encoded_bound(&m->hdr), len, hdr_len = 0;
    uint8_t    *buf = malloc(cap);
    uint32_t    type;
    moon_addr_t src;
    uint64_t    seq;

    m->hdr.src = 0x123456789abcull;
    m->hdr.seq = 77;
    CU_ASSERT_EQUAL_FATAL(moon_msg_encode(&m->hdr, buf, cap, &len), MOON_OK);
    CU_ASSERT_EQUAL(moon_msg_peek(buf, len, &type, &src, &seq), MOON_OK);
    CU_ASSERT_EQUAL(type, T_MSG_ALL);
    CU_ASSERT_EQUAL(src, m->hdr.src);
    CU_ASSERT_EQUAL(seq, 77);
    /* the shortest prefix that peeks is the header: every longer cut peeks and
     * fails to decode, every shorter one fails both */
    while (hdr_len < len && moon_msg_peek(buf, hdr_len, &type, &src, &seq) != MOON_OK) {
        hdr_len++;
    }
    CU_ASSERT(hdr_len > 0 && hdr_len < len);
    for (size_t cut = hdr_len; cut < len; cut++) {
        moon_msg_hdr_t *out = NULL;
        CU_ASSERT_EQUAL(moon_msg_peek(buf, cut, &type, &src, &seq), MOON_OK);
        CU_ASSERT_EQUAL(moon_msg_decode(buf, cut, &out), MOON_ERR_INVALID_PARAM);
    }
    CU_ASSERT_EQUAL(moon_msg_peek(NULL, 0, &type, &src, &seq), MOON_ERR_INVALID_PARAM);
    free(buf);
    moon_msg_release(&m->hdr);
}

/* ---- images ---------------------------------------------------------------- */
/* An empty str reads "" after the trip, as after msgpack; empty spans of
 * other kinds stay empty. */
static void test_image_of_empty_spans(void)
{
    t_all_t        *m = moon_msg_new(T_MSG_ALL, 0);
    moon_msg_hdr_t *out;

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(moon_msg_image_bytes(&m->hdr), sizeof(t_all_t));
    out = image_round_trip(&m->hdr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT_STRING_EQUAL((char *)MOON_SPAN_PTR(out, ((t_all_t *)out)->text), "");
    CU_ASSERT_EQUAL(((t_all_t *)out)->keys.n, 0);
    CU_ASSERT(moon_msg_equal(&m->hdr, out));
    moon_msg_release(out);
    moon_msg_release(&m->hdr);
}

/* A message an image cannot carry as it is (a misaligned array, a str with
 * no NUL, a span over the struct), or one whose image would be mostly unused
 * tail, has no image: it goes as msgpack. */
static void test_image_needs_aligned_arrays_and_nuls(void)
{
    t_all_t *big = moon_msg_new(T_MSG_ALL, 1u << 20);

    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    big->text = (moon_span_t){(uint32_t)big->hdr.size_bytes - 4, 3}; /* at the very end */
    memcpy((char *)big + big->text.off, "xyz", 4);
    CU_ASSERT(moon_msg_encoded_bound(&big->hdr) > 0);
    CU_ASSERT_EQUAL(moon_msg_image_bytes(&big->hdr), 0);
    big->text.off = sizeof(t_all_t);
    memcpy((char *)big + big->text.off, "xyz", 4);
    CU_ASSERT_EQUAL(moon_msg_image_bytes(&big->hdr), sizeof(t_all_t) + 4);
    big->blob = (moon_span_t){sizeof(moon_msg_hdr_t), 8}; /* over the struct */
    CU_ASSERT_EQUAL(moon_msg_image_bytes(&big->hdr), 0);
    moon_msg_release(&big->hdr);

    t_all_t *m = moon_msg_new(T_MSG_ALL, 64);
    char    *text;

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    text = moon_msg_span_alloc(m, &m->text, 3, 1, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    memcpy(text, "abc", 3);
    CU_ASSERT(moon_msg_image_bytes(&m->hdr) > 0);
    m->keys = (moon_span_t){m->text.off + 1, 2}; /* in the message, not 8-aligned */
    CU_ASSERT_EQUAL(moon_msg_image_bytes(&m->hdr), 0);
    m->keys.n = 0;
    text[3]   = 'd'; /* the NUL gone */
    CU_ASSERT_EQUAL(moon_msg_image_bytes(&m->hdr), 0);
    moon_msg_release(&m->hdr);
}

/* A decoded message, duplicated, takes one more span after the ones it came
 * with (a forwarder adding data): they stay intact, from msgpack and from an
 * image alike. */
static void test_decoded_message_takes_a_new_span_after_its_own(void)
{
    for (int i = 0; i < 200; i++) {
        t_all_t        *m = random_all_kinds(40, 0);
        moon_msg_hdr_t *in[2];
        char           *blob;

        m->blob.n = 0; /* the span the copy adds */
        if (i % 2 == 0) {
            m->text.n = 0; /* an empty str points at a NUL the new span must not take */
        }
        in[0] = round_trip(&m->hdr);
        in[1] = image_round_trip(&m->hdr);
        for (int k = 0; k < 2; k++) {
            t_all_t *copy;

            CU_ASSERT_PTR_NOT_NULL_FATAL(in[k]);
            copy = moon_msg_dup(in[k]);
            CU_ASSERT_PTR_NOT_NULL_FATAL(copy);
            blob = moon_msg_span_alloc(copy, &copy->blob, 7, 1, 0);
            if (blob != NULL) { /* room left in the tail */
                memset(blob, 0xaa, 7);
                copy->blob.n = 0;
            }
            CU_ASSERT(moon_msg_equal(&m->hdr, &copy->hdr));
            CU_ASSERT_EQUAL(strlen((char *)MOON_SPAN_PTR(copy, copy->text)), m->text.n);
            moon_msg_release(&copy->hdr);
            moon_msg_release(in[k]);
        }
        moon_msg_release(&m->hdr);
    }
}

static void expect_image_rejected(const void *buf, size_t len, uint32_t layout)
{
    moon_msg_hdr_t *out = NULL;

    CU_ASSERT_EQUAL(moon_msg_image_decode(buf, len, layout, &out), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NULL(out);
}

/* Truncations, another layout, an unknown type, spans outside the image,
 * misaligned or unterminated, and bit flips anywhere: refused, or accepted
 * with every span inside; never a crash (the sanitizer runs see reads). */
static void test_image_bad_bytes(void)
{
    for (int i = 0; i < 300; i++) {
        t_all_t *m      = random_all_kinds(40, 0);
        size_t   n      = moon_msg_image_bytes(&m->hdr);
        uint32_t layout = moon_msg_layout(T_MSG_ALL);
        uint8_t *buf    = malloc(n);
        t_all_t *img    = (t_all_t *)buf;

        CU_ASSERT_FATAL(n > 0);
        memcpy(buf, m, n);
        for (size_t cut = 0; cut < n; cut++) { /* the struct, or the last span, cut */
            expect_image_rejected(buf, cut, layout);
        }
        expect_image_rejected(buf, n, layout ^ 1);
        expect_image_rejected(buf, n, moon_msg_layout(T_MSG_NONE));
        img->hdr.type = 199; /* not registered */
        expect_image_rejected(buf, n, layout);
        img->hdr.type = T_MSG_ALL;
        if (m->keys.n > 0) {
            img->keys.off += 4; /* misaligned */
            expect_image_rejected(buf, n, layout);
            img->keys.off = (uint32_t)n; /* past the end */
            expect_image_rejected(buf, n, layout);
            img->keys.off = 0; /* over the header */
            expect_image_rejected(buf, n, layout);
            img->keys = m->keys;
        }
        if (m->text.n > 0) {
            buf[m->text.off + m->text.n] = 'x'; /* no NUL */
            expect_image_rejected(buf, n, layout);
            buf[m->text.off + m->text.n] = 0;
        }
        /* a span over the struct: one of the span records itself, or all of it */
        img->tokens = (moon_span_t){(uint32_t)offsetof(t_all_t, keys), 2};
        expect_image_rejected(buf, n, layout);
        img->tokens = m->tokens;
        img->blob   = (moon_span_t){(uint32_t)sizeof(moon_msg_hdr_t), (uint32_t)sizeof(t_all_t)};
        expect_image_rejected(buf, n, layout);
        img->blob = m->blob;
        {
            uint8_t *longer = malloc(n + 8); /* bytes past the last span */
            memcpy(longer, buf, n);
            memset(longer + n, 0, 8);
            expect_image_rejected(longer, n + 8, layout);
            free(longer);
        }
        for (int k = 0; k < 50; k++) {
            size_t          pos  = moon_test_rand(&rng) % n;
            uint8_t         save = buf[pos];
            moon_msg_hdr_t *out  = NULL;
            moon_status_t   status;

            buf[pos] ^= (uint8_t)(1u << (moon_test_rand(&rng) % 8));
            status = moon_msg_image_decode(buf, n, layout, &out);
            CU_ASSERT(status == MOON_OK || status == MOON_ERR_INVALID_PARAM);
            if (status == MOON_OK) {
                check_spans_inside(out);
                moon_msg_release(out);
            }
            buf[pos] = save;
        }
        free(buf);
        moon_msg_release(&m->hdr);
    }
    expect_image_rejected(NULL, 0, 1);
}

MOON_TEST_MAIN("msg", NULL, NULL, test_register_rejects_clashing_ids,
               test_round_trip_every_field_kind, test_interoperates_with_msgpack_c,
               test_round_trip_runtime_and_empty_types, test_round_trip_every_registered_type,
               test_span_alloc_respects_the_tail, test_encode_into_small_buffer_is_no_resource,
               test_retain_and_dup, test_decode_truncations_and_bit_flips,
               test_decode_random_bytes_never_crashes, test_decode_hostile_size_claims,
               test_peek_reads_the_header_only, test_image_round_trip_every_type,
               test_image_of_empty_spans, test_image_needs_aligned_arrays_and_nuls,
               test_image_bad_bytes, test_decoded_message_takes_a_new_span_after_its_own)
