/* runtime/msg/msg_codec.c - msgpack encode/decode of registered message types,
 * driven by the field tables the schema macros generate.
 *
 * Encoding uses msgpack-c's packer. Decoding uses a small bounds-checked reader
 * instead of msgpack-c's unpacker: input comes from the wire and may be
 * hostile, and the unpacker sizes its zone from the counts the input claims
 * (a 5-byte header can ask for gigabytes). The reader checks every claim
 * against the input it has, so an allocation is never larger than what the
 * input bounds: a message type without array fields decodes in one pass into
 * a message sized from the input's length (a str or bytes field decodes to at
 * most its encoded size); one with arrays (whose elements may decode to 8
 * bytes from 1) is validated and measured first, then allocated and filled. */
#include "msg_internal.h"

#include "moonlet/log.h"
#include "moonlet/reader.h"

#include <msgpack.h>
#include <string.h>

#define HDR_ITEMS 4 /* type, flags, src, seq */

/* ---- encode --------------------------------------------------------------- */
typedef struct {
    char  *buf;
    size_t cap, len;
    int    overflow;
} out_buf_t;

static int out_write(void *data, const char *bytes, size_t len)
{
    out_buf_t *o = data;

    if (o->overflow || len > o->cap - o->len) {
        o->overflow = 1;
        return -1;
    }
    memcpy(o->buf + o->len, bytes, len);
    o->len += len;
    return 0;
}

static int span_ok(const moon_msg_hdr_t *msg, moon_span_t span, uint64_t elem_bytes)
{
    return (uint64_t)span.off + (uint64_t)span.n * elem_bytes <= msg->size_bytes &&
           (span.n == 0 || span.off >= sizeof(moon_msg_hdr_t));
}

static int is_span(uint32_t kind)
{
    return kind == MOON_FIELD_str || kind == MOON_FIELD_bytes || kind == MOON_FIELD_u32s ||
           kind == MOON_FIELD_u64s;
}

/* A span kind's element bytes (its alignment too); 1 for the others. */
static uint32_t span_align(uint32_t kind)
{
    return kind == MOON_FIELD_u64s ? 8 : (kind == MOON_FIELD_u32s ? 4 : 1);
}

/* The scalar kinds, once for the encoder, the decoder and scalar_bytes: the
 * C type, its msgpack packer, the decoder's reader (uint, sint or real) and
 * the range it accepts. */
#define SCALAR_KINDS(X)                                                                            \
    X(u8, uint8_t, msgpack_pack_uint8, uint, 0, UINT8_MAX)                                         \
    X(u16, uint16_t, msgpack_pack_uint16, uint, 0, UINT16_MAX)                                     \
    X(u32, uint32_t, msgpack_pack_uint32, uint, 0, UINT32_MAX)                                     \
    X(u64, uint64_t, msgpack_pack_uint64, uint, 0, UINT64_MAX)                                     \
    X(addr, uint64_t, msgpack_pack_uint64, uint, 0, UINT64_MAX)                                    \
    X(i32, int32_t, msgpack_pack_int32, sint, INT32_MIN, INT32_MAX)                                \
    X(i64, int64_t, msgpack_pack_int64, sint, INT64_MIN, INT64_MAX)                                \
    X(f32, float, msgpack_pack_float, real, 0, 0)                                                  \
    X(f64, double, msgpack_pack_double, real, 0, 0)

/* Bytes of a scalar field kind; 0 for span kinds. */
static size_t scalar_bytes(uint32_t kind)
{
    switch (kind) {
#define SCALAR_BYTES_(kind, type, pack, reader, lo, hi)                                            \
    case MOON_FIELD_##kind:                                                                        \
        return sizeof(type);
        SCALAR_KINDS(SCALAR_BYTES_)
#undef SCALAR_BYTES_
    default:
        return 0;
    }
}

/* One non-empty span as an image carries it: in the tail (past the struct,
 * where a handler's writes to one span cannot reach another's record),
 * within the first `limit` bytes, its array aligned to its element, a str
 * followed by its NUL. The image's end after it, or 0. */
static uint64_t image_span_end(const moon_msg_hdr_t *msg, const moon_msg_desc_t *d,
                               moon_span_t span, uint32_t elem, int is_str, uint64_t limit)
{
    uint64_t end = (uint64_t)span.off + (uint64_t)span.n * elem + (is_str ? 1 : 0);

    if (span.off < d->struct_bytes || end > limit || span.off % elem != 0 ||
        (is_str && ((const char *)msg)[end - 1] != '\0')) {
        return 0;
    }
    return end;
}

/* Images much larger than their msgpack (a tail reserved and left mostly
 * unused) go as msgpack: sending the gaps would cost more than encoding. */
static uint64_t image_worth_it(uint64_t image, size_t bound)
{
    return image <= MOON_MSG_MAX_BYTES && image <= 2 * (uint64_t)bound + 64 ? image : 0;
}

/* The encoded bound of msg, of type d; with check, 0 (logged) if a span lies
 * outside the message. image_p, when not NULL: the bytes of msg's image (its
 * bytes up to the end of its last span), or 0 if a span is not as an image
 * carries it (image_span_end). */
static size_t bound_of(const moon_msg_hdr_t *msg, const moon_msg_desc_t *d, int check,
                       size_t *image_p)
{
    size_t   bound = 5 + HDR_ITEMS * 9;
    uint64_t image = d->struct_bytes;

    for (uint32_t i = 0; i < d->n_fields; i++) {
        const moon_span_t *span = (const moon_span_t *)((const char *)msg + d->fields[i].offset);
        uint32_t           elem;

        if (!is_span(d->fields[i].kind)) {
            bound += 9; /* a scalar's widest msgpack */
            continue;
        }
        elem = span_align(d->fields[i].kind);
        bound += 5 + (size_t)span->n * (elem == 1 ? 1 : elem + 1); /* an int: tag and bytes */
        if (check && !span_ok(msg, *span, elem)) {
            MOON_ERROR("send %s: field %s: span outside the message", d->name, d->fields[i].name);
            return 0;
        }
        if (image_p != NULL && image != 0 && span->n > 0) {
            uint64_t end = image_span_end(msg, d, *span, elem, d->fields[i].kind == MOON_FIELD_str,
                                          msg->size_bytes);
            image        = end == 0 ? 0 : MOON_MAX(image, end);
        }
    }
    if (image_p != NULL) {
        *image_p = (size_t)image_worth_it(image, bound);
    }
    return bound;
}

size_t moon_msg_encoded_bound(const moon_msg_hdr_t *msg)
{
    const moon_msg_desc_t *d = moon_msg_desc(msg->type);

    return d != NULL ? bound_of(msg, d, 0, NULL) : 5 + HDR_ITEMS * 9;
}

size_t moon_msg_checked_bound(const moon_msg_hdr_t *msg, size_t *image_p)
{
    const moon_msg_desc_t *d = moon_msg_desc(msg->type);

    if (d == NULL) {
        MOON_ERROR("send: message type %u is not registered", msg->type);
        return 0;
    }
    return bound_of(msg, d, 1, image_p);
}

size_t moon_msg_image_bytes(const moon_msg_hdr_t *msg)
{
    const moon_msg_desc_t *d     = moon_msg_desc(msg->type);
    size_t                 image = 0;

    if (d != NULL) {
        (void)bound_of(msg, d, 0, &image);
    }
    return image;
}

moon_status_t moon_msg_encode(const moon_msg_hdr_t *msg, void *buf, size_t cap, size_t *len_p)
{
    const moon_msg_desc_t *d = moon_msg_desc(msg->type);
    out_buf_t              o = {buf, cap, 0, 0};
    msgpack_packer         pk;
    uint32_t               i;

    if (d == NULL) {
        MOON_ERROR("encode: message type %u is not registered", msg->type);
        return MOON_ERR_INVALID_PARAM;
    }
    msgpack_packer_init(&pk, &o, out_write);
    msgpack_pack_array(&pk, HDR_ITEMS + d->n_fields);
    msgpack_pack_uint16(&pk, msg->type);
    msgpack_pack_uint16(&pk, msg->flags);
    msgpack_pack_uint64(&pk, msg->src);
    msgpack_pack_uint64(&pk, msg->seq);
    for (i = 0; i < d->n_fields; i++) {
        const char        *f    = (const char *)msg + d->fields[i].offset;
        const moon_span_t *span = (const moon_span_t *)f; /* read in span cases only */
        const char        *data = (const char *)msg;

        switch (d->fields[i].kind) {
#define ENCODE_SCALAR_(kind, type, pack, reader, lo, hi)                                           \
    case MOON_FIELD_##kind:                                                                        \
        pack(&pk, *(const type *)f);                                                               \
        break;
            SCALAR_KINDS(ENCODE_SCALAR_)
#undef ENCODE_SCALAR_
        case MOON_FIELD_str:
        case MOON_FIELD_bytes:
            if (!span_ok(msg, *span, 1)) {
                goto bad_span;
            }
            data += span->off;
            if (d->fields[i].kind == MOON_FIELD_str) {
                msgpack_pack_str_with_body(&pk, data, span->n);
            } else {
                msgpack_pack_bin_with_body(&pk, data, span->n);
            }
            break;
        case MOON_FIELD_u32s:
        case MOON_FIELD_u64s: {
            size_t elem = d->fields[i].kind == MOON_FIELD_u32s ? 4 : 8;

            if (!span_ok(msg, *span, elem)) {
                goto bad_span;
            }
            data += span->off;
            msgpack_pack_array(&pk, span->n);
            for (uint32_t k = 0; k < span->n; k++) {
                uint64_t v = 0;
                uint32_t w;

                if (elem == 4) {
                    memcpy(&w, data + 4 * (size_t)k, 4);
                    v = w;
                } else {
                    memcpy(&v, data + 8 * (size_t)k, 8);
                }
                msgpack_pack_uint64(&pk, v); /* packs the smallest int that holds v */
            }
            break;
        }
        }
    }
    if (o.overflow) {
        return MOON_ERR_NO_RESOURCE;
    }
    *len_p = o.len;
    return MOON_OK;

bad_span:
    MOON_ERROR("encode %s: field %s: span outside the message", d->name, d->fields[i].name);
    return MOON_ERR_INVALID_PARAM;
}

/* ---- decode --------------------------------------------------------------- */
/* The reader (moonlet/reader.h) returns MOON_OK (0) or an error: the rd_*
 * helpers below keep its convention, 0 or nonzero. */
typedef moon_reader_t rd_t;

#define BE16(x) MOON_READER_BE16(x)
#define BE32(x) MOON_READER_BE32(x)
#define BE64(x) MOON_READER_BE64(x)

/* Any msgpack integer; *neg set when it is negative (value then in *i). */
static int rd_int(rd_t *r, uint64_t *u, int64_t *i, int *neg)
{
    const uint8_t *b;
    uint64_t       v;

    if (moon_reader_take(r, 1, &b) != 0) {
        return -1;
    }
    *neg = 0;
    if (b[0] <= 0x7f) {
        *u = b[0];
        return 0;
    }
    if (b[0] >= 0xe0) {
        *neg = 1;
        *i   = (int8_t)b[0];
        return 0;
    }
    switch (b[0]) {
    case 0xcc:
        return moon_reader_be(r, 1, u);
    case 0xcd:
        return moon_reader_be(r, 2, u);
    case 0xce:
        return moon_reader_be(r, 4, u);
    case 0xcf:
        return moon_reader_be(r, 8, u);
    case 0xd0: /* int 8, 16, 32, 64 */
    case 0xd1:
    case 0xd2:
    case 0xd3: {
        unsigned shift = 64 - 8 * (1u << (b[0] - 0xd0)); /* sign-extends from the top byte */

        if (moon_reader_be(r, (size_t)1 << (b[0] - 0xd0), &v))
            return -1;
        *i = (int64_t)(v << shift) >> shift;
        break;
    }
    default:
        return -1;
    }
    if (*i >= 0) {
        *u = (uint64_t)*i;
    } else {
        *neg = 1;
    }
    return 0;
}

static MOON_NOINLINE int rd_uint_general(rd_t *r, uint64_t max, uint64_t *out)
{
    uint64_t u = 0;
    int64_t  i = 0;
    int      neg;

    if (rd_int(r, &u, &i, &neg) != 0 || neg || u > max) {
        return -1;
    }
    *out = u;
    return 0;
}

/* An unsigned integer no larger than max. Inline fast path for the formats
 * an encoder writes for unsigned values (positive fixint, uint 8..64); the
 * rest (non-negative values in int formats) takes the general reader. */
static inline int rd_uint_max(rd_t *r, uint64_t max, uint64_t *out)
{
    const uint8_t *p    = r->p;
    size_t         left = (size_t)(r->end - p);
    uint64_t       v;

    if (MOON_UNLIKELY(left == 0)) {
        return -1;
    }
    if (p[0] <= 0x7f) {
        v    = p[0];
        r->p = p + 1;
    } else if (p[0] >= 0xcc && p[0] <= 0xcf) {
        size_t n = (size_t)1 << (p[0] - 0xcc);

        if (MOON_UNLIKELY(left <= n)) {
            return -1;
        }
        switch (n) {
        case 1:
            v = p[1];
            break;
        case 2: {
            uint16_t x;
            memcpy(&x, p + 1, 2);
            v = BE16(x);
            break;
        }
        case 4: {
            uint32_t x;
            memcpy(&x, p + 1, 4);
            v = BE32(x);
            break;
        }
        default: {
            uint64_t x;
            memcpy(&x, p + 1, 8);
            v = BE64(x);
            break;
        }
        }
        r->p = p + 1 + n;
    } else {
        return rd_uint_general(r, max, out);
    }
    if (MOON_UNLIKELY(v > max)) {
        return -1;
    }
    *out = v;
    return 0;
}

static int rd_sint(rd_t *r, int64_t min, int64_t max, int64_t *out)
{
    uint64_t u = 0;
    int64_t  i = 0;
    int      neg;

    if (rd_int(r, &u, &i, &neg) != 0) {
        return -1;
    }
    if (!neg) {
        if (u > (uint64_t)max) {
            return -1;
        }
        i = (int64_t)u;
    }
    if (i < min || i > max) {
        return -1;
    }
    *out = i;
    return 0;
}

static int rd_float(rd_t *r, double *out)
{
    const uint8_t *b;
    uint64_t       v;

    if (moon_reader_take(r, 1, &b) != 0) {
        return -1;
    }
    if (b[0] == 0xca) {
        float    f;
        uint32_t w;
        if (moon_reader_be(r, 4, &v) != 0) {
            return -1;
        }
        w = (uint32_t)v;
        memcpy(&f, &w, 4);
        *out = f;
        return 0;
    }
    if (b[0] == 0xcb) {
        if (moon_reader_be(r, 8, &v) != 0) {
            return -1;
        }
        memcpy(out, &v, 8);
        return 0;
    }
    return -1;
}

/* str (want_str) or bin header; returns the body. */
static inline int rd_blob(rd_t *r, int want_str, const uint8_t **body, uint32_t *n)
{
    const uint8_t *b;
    uint64_t       len;

    if (moon_reader_take(r, 1, &b) != 0) {
        return -1;
    }
    if (want_str && b[0] >= 0xa0 && b[0] <= 0xbf) {
        len = b[0] & 0x1f;
    } else if (want_str && b[0] >= 0xd9 && b[0] <= 0xdb) {
        if (moon_reader_be(r, (size_t)1 << (b[0] - 0xd9), &len))
            return -1;
    } else if (!want_str && b[0] >= 0xc4 && b[0] <= 0xc6) {
        if (moon_reader_be(r, (size_t)1 << (b[0] - 0xc4), &len))
            return -1;
    } else {
        return -1;
    }
    if (len > MOON_MSG_MAX_BYTES || moon_reader_take(r, (size_t)len, body) != 0) {
        return -1;
    }
    *n = (uint32_t)len;
    return 0;
}

static inline int rd_array(rd_t *r, uint32_t *n)
{
    const uint8_t *b;
    uint64_t       len;

    if (moon_reader_take(r, 1, &b) != 0) {
        return -1;
    }
    if (b[0] >= 0x90 && b[0] <= 0x9f) {
        len = b[0] & 0x0f;
    } else if (b[0] == 0xdc) {
        if (moon_reader_be(r, 2, &len))
            return -1;
    } else if (b[0] == 0xdd) {
        if (moon_reader_be(r, 4, &len))
            return -1;
    } else {
        return -1;
    }
    /* Every element takes at least one byte: a claim beyond the input is a lie. */
    if (len > (uint64_t)(r->end - r->p)) {
        return -1;
    }
    *n = (uint32_t)len;
    return 0;
}

/* One pass over the fields. msg NULL: validate and add up the tail into *tail;
 * else fill msg, still validating (the caller sized msg for the tail: measured
 * by a first pass, or bounded by the input's length). */
static int decode_fields(rd_t *r, const moon_msg_desc_t *d, moon_msg_hdr_t *msg, uint64_t *tail)
{
    uint64_t off = msg != NULL ? d->struct_bytes : 0;

    for (uint32_t i = 0; i < d->n_fields; i++) {
        uint32_t       kind = d->fields[i].kind;
        char          *f    = msg != NULL ? (char *)msg + d->fields[i].offset : NULL;
        uint64_t       u;
        int64_t        s;
        double         x;
        const uint8_t *body;
        uint32_t       n;

        switch (kind) {
/* each reader leaves its value in u, s or x */
#define READ_uint(lo, hi) rd_uint_max(r, hi, &u)
#define READ_sint(lo, hi) rd_sint(r, lo, hi, &s)
#define READ_real(lo, hi) rd_float(r, &x)
#define VALUE_uint u
#define VALUE_sint s
#define VALUE_real x
#define DECODE_SCALAR_(kind, type, pack, reader, lo, hi)                                           \
    case MOON_FIELD_##kind:                                                                        \
        if (READ_##reader(lo, hi))                                                                 \
            return -1;                                                                             \
        if (f)                                                                                     \
            *(type *)f = (type)VALUE_##reader;                                                     \
        break;
            SCALAR_KINDS(DECODE_SCALAR_)
#undef DECODE_SCALAR_
#undef READ_uint
#undef READ_sint
#undef READ_real
#undef VALUE_uint
#undef VALUE_sint
#undef VALUE_real
        case MOON_FIELD_str:
        case MOON_FIELD_bytes: {
            int is_str = kind == MOON_FIELD_str;

            if (rd_blob(r, is_str, &body, &n))
                return -1;
            if (f && off + n + (uint64_t)is_str > msg->size_bytes) {
                return -1; /* the input changed since it was measured */
            }
            if (f) {
                moon_span_t *span = (moon_span_t *)f;
                span->off         = (uint32_t)off;
                span->n           = n;
                memcpy((char *)msg + off, body, n);
                if (is_str) {
                    ((char *)msg)[off + n] = '\0';
                }
            }
            off += (uint64_t)n + (uint64_t)is_str;
            break;
        }
        case MOON_FIELD_u32s:
        case MOON_FIELD_u64s: {
            uint32_t a   = span_align(kind);
            uint64_t max = a == 4 ? UINT32_MAX : UINT64_MAX;
            char    *dst;

            if (rd_array(r, &n))
                return -1;
            off = (off + a - 1) & ~(uint64_t)(a - 1);
            if (msg != NULL && off + (uint64_t)n * a > msg->size_bytes) {
                return -1; /* the input changed since it was measured */
            }
            dst = msg != NULL ? (char *)msg + off : NULL;
            for (uint32_t k = 0; k < n; k++) {
                if (rd_uint_max(r, max, &u))
                    return -1;
                if (dst != NULL && a == 4) {
                    uint32_t v = (uint32_t)u;
                    memcpy(dst + 4 * (size_t)k, &v, 4);
                } else if (dst != NULL) {
                    memcpy(dst + 8 * (size_t)k, &u, 8);
                }
            }
            if (f) {
                ((moon_span_t *)f)->off = (uint32_t)off;
                ((moon_span_t *)f)->n   = n;
            }
            off += (uint64_t)n * a;
            break;
        }
        default:
            return -1;
        }
        if (off > MOON_MSG_MAX_BYTES) {
            return -1;
        }
    }
    if (msg == NULL) {
        /* Worst-case alignment padding: 7 bytes per span field. */
        *tail = off + 7u * d->n_fields;
    } else {
        moon_msg_env(msg)->tail_used = (uint32_t)off; /* a span added later goes after */
    }
    return 0;
}

/* The header items every encoding starts with; 0 if they read. */
static inline int rd_header(rd_t *r, uint32_t *n_items, uint64_t *type, uint64_t *flags,
                            uint64_t *src, uint64_t *seq)
{
    return rd_array(r, n_items) || *n_items < HDR_ITEMS || rd_uint_max(r, UINT16_MAX, type) ||
                   rd_uint_max(r, UINT16_MAX, flags) || rd_uint_max(r, UINT64_MAX, src) ||
                   rd_uint_max(r, UINT64_MAX, seq)
               ? -1
               : 0;
}

moon_status_t moon_msg_peek(const void *buf, size_t len, uint32_t *type_p, moon_addr_t *src_p,
                            uint64_t *seq_p)
{
    rd_t     r = {buf, (const uint8_t *)buf + len};
    uint32_t n_items;
    uint64_t type, flags, src, seq;

    if (buf == NULL || rd_header(&r, &n_items, &type, &flags, &src, &seq) != 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    *type_p = (uint32_t)type;
    *src_p  = src;
    *seq_p  = seq;
    return MOON_OK;
}

static int has_arrays(const moon_msg_desc_t *d)
{
    for (uint32_t i = 0; i < d->n_fields; i++) {
        if (d->fields[i].kind == MOON_FIELD_u32s || d->fields[i].kind == MOON_FIELD_u64s) {
            return 1;
        }
    }
    return 0;
}

moon_status_t moon_msg_decode(const void *buf, size_t len, moon_msg_hdr_t **msg_p)
{
    rd_t                   r = {buf, (const uint8_t *)buf + len};
    rd_t                   fields_start;
    uint32_t               n_items;
    uint64_t               type, flags, src, seq, tail = 0;
    const moon_msg_desc_t *d;
    moon_msg_hdr_t        *msg;

    if (buf == NULL || rd_header(&r, &n_items, &type, &flags, &src, &seq) != 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    d = moon_msg_desc((uint32_t)type);
    if (d == NULL || n_items != HDR_ITEMS + d->n_fields) {
        return MOON_ERR_INVALID_PARAM;
    }
    fields_start = r;
    if (!has_arrays(d)) {
        /* bytes and strs take at least one header byte each (the NUL's room);
         * 8 per field covers the alignment of what follows */
        tail = (uint64_t)(r.end - r.p) + 8u * d->n_fields;
        if (d->struct_bytes + tail <= MOON_MSG_MAX_BYTES) {
            msg = moon_msg_new_for_decode(d, tail);
            if (msg == NULL) {
                return MOON_ERR_NO_MEMORY;
            }
            if (decode_fields(&r, d, msg, NULL) != 0 || r.p != r.end) {
                moon_msg_release(msg);
                return MOON_ERR_INVALID_PARAM;
            }
            goto done;
        }
    }
    if (decode_fields(&r, d, NULL, &tail) != 0 || r.p != r.end ||
        d->struct_bytes + tail > MOON_MSG_MAX_BYTES) {
        return MOON_ERR_INVALID_PARAM;
    }
    msg = moon_msg_new_for_decode(d, tail);
    if (msg == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    /* A second read of the input, which may be memory its sender can still
     * write (a shared ring): the fill checks its writes against msg's size. */
    r = fields_start;
    if (decode_fields(&r, d, msg, NULL) != 0 || r.p != r.end) {
        moon_msg_release(msg);
        return MOON_ERR_INVALID_PARAM;
    }
done:
    msg->flags = (uint16_t)flags;
    msg->src   = src;
    msg->seq   = seq;
    *msg_p     = msg;
    return MOON_OK;
}

int moon_msg_equal(const moon_msg_hdr_t *a, const moon_msg_hdr_t *b)
{
    const moon_msg_desc_t *d = moon_msg_desc(a->type);

    if (a->type != b->type || a->flags != b->flags || a->src != b->src || a->seq != b->seq ||
        d == NULL) {
        return 0;
    }
    for (uint32_t i = 0; i < d->n_fields; i++) {
        const char *fa   = (const char *)a + d->fields[i].offset;
        const char *fb   = (const char *)b + d->fields[i].offset;
        size_t      size = scalar_bytes(d->fields[i].kind);
        moon_span_t sa, sb;

        if (size != 0) {
            if (memcmp(fa, fb, size) != 0) {
                return 0;
            }
            continue;
        }
        memcpy(&sa, fa, sizeof(sa));
        memcpy(&sb, fb, sizeof(sb));
        size = span_align(d->fields[i].kind);
        if (sa.n != sb.n ||
            memcmp((const char *)a + sa.off, (const char *)b + sb.off, (size_t)sa.n * size) != 0) {
            return 0;
        }
    }
    return 1;
}

/* ---- images --------------------------------------------------------------- */
moon_status_t moon_msg_image_decode(const void *buf, size_t len, uint32_t layout,
                                    moon_msg_hdr_t **msg_p)
{
    const moon_msg_desc_t *d;
    moon_msg_hdr_t         hdr, *msg;
    uint32_t               size;
    uint64_t               extent;

    if (buf == NULL || len < sizeof(hdr) || len > MOON_MSG_MAX_BYTES) {
        return MOON_ERR_INVALID_PARAM;
    }
    memcpy(&hdr, buf, sizeof(hdr));
    d = moon_msg_desc(hdr.type);
    if (d == NULL || layout != moon_msg_layout(hdr.type) || len < d->struct_bytes) {
        return MOON_ERR_INVALID_PARAM; /* another schema, or not a message of ours */
    }
    /* one byte more: the NUL empty strs point at */
    msg = moon_msg_new_for_decode(d, len - d->struct_bytes + 1);
    if (msg == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    /* Checked from here on is our copy only: buf may be memory the sender can
     * still write (a shared ring). The type and the size are ours too. */
    size = msg->size_bytes;
    memcpy(msg, buf, len);
    msg->type          = (uint16_t)d->id;
    msg->size_bytes    = size;
    ((char *)msg)[len] = '\0';
    extent             = d->struct_bytes;
    for (uint32_t i = 0; i < d->n_fields; i++) {
        const moon_span_t *span = (const moon_span_t *)((char *)msg + d->fields[i].offset);
        uint32_t           kind = d->fields[i].kind;
        uint64_t           end;

        if (!is_span(kind) || span->n == 0) {
            continue;
        }
        end = image_span_end(msg, d, *span, span_align(kind), kind == MOON_FIELD_str, len);
        if (end == 0) {
            goto bad;
        }
        extent = MOON_MAX(extent, end);
    }
    if (extent != len) {
        goto bad; /* bytes past the last span: not an image the sender makes */
    }
    moon_msg_env(msg)->tail_used = (uint32_t)len + 1; /* a span added later goes after the NUL */
    /* Empty spans point where decoding msgpack would leave them (a str at a
     * NUL: it reads ""), after every check: their records are in the struct,
     * which no span of an accepted image overlaps. */
    for (uint32_t i = 0; i < d->n_fields; i++) {
        moon_span_t *span = (moon_span_t *)((char *)msg + d->fields[i].offset);

        if (is_span(d->fields[i].kind) && span->n == 0) {
            span->off = d->fields[i].kind == MOON_FIELD_str ? (uint32_t)len : d->struct_bytes;
        }
    }
    *msg_p = msg;
    return MOON_OK;

bad:
    moon_msg_release(msg);
    return MOON_ERR_INVALID_PARAM;
}

moon_status_t moon_msg_image_peek(const void *buf, size_t len, uint32_t *type_p, moon_addr_t *src_p,
                                  uint64_t *seq_p)
{
    moon_msg_hdr_t hdr;

    if (buf == NULL || len < sizeof(hdr)) {
        return MOON_ERR_INVALID_PARAM;
    }
    memcpy(&hdr, buf, sizeof(hdr));
    *type_p = hdr.type;
    *src_p  = hdr.src;
    *seq_p  = hdr.seq;
    return MOON_OK;
}
