/* moonlet/msg.h - typed messages: the wire header, variable-length spans, the
 * X-macro schema that generates each type's id, struct and codec descriptor,
 * allocation, reference counting and msgpack encode/decode.
 *
 * A component (the runtime, the serving actors, a user program) declares its
 * messages in one list and claims a range of ids, so user programs add types
 * without touching runtime/:
 *
 *   #define EX_PING_FIELDS(F, T) F(T, u64, count) F(T, str, note)
 *   #define EX_MSGS(X) X(EX_MSG_PING, ex_ping_t, EX_PING_FIELDS)
 *   MOON_MSG_DECLARE(EX_MSGS, 128, EX_MSG_END)      -- in the header
 *   MOON_MSG_DEFINE(EX_MSGS, ex_msg_descs)          -- in one .c
 *   moon_msg_register(ex_msg_descs);                -- once at start-up
 *
 * Thread-safety: allocation, release and codecs are safe from any thread;
 * registration is process-wide and serialised internally. */
#ifndef MOONLET_MSG_H
#define MOONLET_MSG_H

#include "moonlet/defs.h"
#include "moonlet/status.h"

MOON_EXTERN_C_BEGIN

/* Actor address: rank (20 bits) | slot (24 bits) | generation (20 bits). 0 is never valid. */
typedef uint64_t moon_addr_t;
#define MOON_ADDR_NONE ((moon_addr_t)0)

/* The message-id map of the whole tree: one range [BASE, BASE + SIZE) per
 * owner, in id order. A component declares its list with
 * MOON_MSG_DECLARE_IN(LIST, RANGE, END), which fails to compile when the list
 * outgrows its range; the asserts below keep the ranges apart. Registering an
 * id twice still fails at run time (moon_msg_register: MOON_ERR_EXISTS). */
#define MOON_MSG_MAX_TYPES 256
#define MOON_MSG_RANGES(R)                                                                         \
    R(RUNTIME, 0, 16)  /* runtime system messages (sys_msgs.h) */                                  \
    R(WEIGHTS, 16, 16) /* weight-sync broadcaster */                                               \
    R(STORE, 32, 32)   /* KV store protocol (actors/store) */                                      \
    R(SERVE, 64, 48)   /* serving protocol (actors/proto) */                                       \
    R(DIST, 112, 8)    /* distributed runtime (dist.h) */                                          \
    R(GATEWAY, 120, 8) /* HTTP gateway bridge (actors/gateway) */                                  \
    R(USER, 128, 64)   /* user programs and examples */                                            \
    R(HOOKS, 192, 8)   /* the plugin API's own: filters and observers (plugin.h) */                \
    R(PLUGIN, 200, 56) /* plugins loaded into a cluster */
#define MOON_MSG_RANGE_ENUM_(_name, _base, _size)                                                  \
    MOON_MSG_RANGE_##_name##_BASE = (_base), MOON_MSG_RANGE_##_name##_END = (_base) + (_size),
enum { MOON_MSG_RANGES(MOON_MSG_RANGE_ENUM_) };
MOON_STATIC_ASSERT(MOON_MSG_RANGE_RUNTIME_END <= MOON_MSG_RANGE_WEIGHTS_BASE &&
                       MOON_MSG_RANGE_WEIGHTS_END <= MOON_MSG_RANGE_STORE_BASE &&
                       MOON_MSG_RANGE_STORE_END <= MOON_MSG_RANGE_SERVE_BASE &&
                       MOON_MSG_RANGE_SERVE_END <= MOON_MSG_RANGE_DIST_BASE &&
                       MOON_MSG_RANGE_DIST_END <= MOON_MSG_RANGE_GATEWAY_BASE &&
                       MOON_MSG_RANGE_GATEWAY_END <= MOON_MSG_RANGE_USER_BASE &&
                       MOON_MSG_RANGE_USER_END <= MOON_MSG_RANGE_HOOKS_BASE &&
                       MOON_MSG_RANGE_HOOKS_END <= MOON_MSG_RANGE_PLUGIN_BASE &&
                       MOON_MSG_RANGE_PLUGIN_END <= MOON_MSG_MAX_TYPES,
                   "message-id ranges overlap or pass MOON_MSG_MAX_TYPES");
#define MOON_MSG_USER_BASE MOON_MSG_RANGE_USER_BASE
/* Largest message (struct + spans) the codec accepts from the wire. */
#define MOON_MSG_MAX_BYTES (16u << 20)

typedef struct {            /* first member of every message */
    uint16_t    type;       /* message id */
    uint16_t    flags;      /* MOON_MSG_F_* */
    uint32_t    size_bytes; /* whole message, header and spans included */
    moon_addr_t src;        /* sender actor; MOON_ADDR_NONE from outside any actor */
    uint64_t    seq;        /* per-sender sequence number */
} moon_msg_hdr_t;
MOON_STATIC_ASSERT(sizeof(moon_msg_hdr_t) == 24, "wire header size changed");

#define MOON_MSG_F_SYSTEM 0x1u /* runtime control message */

/* A variable-length field: n elements stored at byte offset off from the start
 * of the message, inside the same allocation (relocation-free: a message can be
 * copied or decoded without fixing pointers). */
typedef struct {
    uint32_t off;
    uint32_t n;
} moon_span_t;

#define MOON_SPAN_PTR(_msg, _span) ((void *)((char *)(_msg) + (_span).off))

/* Field kinds: name, C type. str holds n chars plus a NUL kept in the span. */
#define MOON_FIELD_CTYPE_u8 uint8_t
#define MOON_FIELD_CTYPE_u16 uint16_t
#define MOON_FIELD_CTYPE_u32 uint32_t
#define MOON_FIELD_CTYPE_u64 uint64_t
#define MOON_FIELD_CTYPE_i32 int32_t
#define MOON_FIELD_CTYPE_i64 int64_t
#define MOON_FIELD_CTYPE_f32 float
#define MOON_FIELD_CTYPE_f64 double
#define MOON_FIELD_CTYPE_addr moon_addr_t
#define MOON_FIELD_CTYPE_str moon_span_t
#define MOON_FIELD_CTYPE_bytes moon_span_t
#define MOON_FIELD_CTYPE_u32s moon_span_t
#define MOON_FIELD_CTYPE_u64s moon_span_t

typedef enum {
    MOON_FIELD_u8,
    MOON_FIELD_u16,
    MOON_FIELD_u32,
    MOON_FIELD_u64,
    MOON_FIELD_i32,
    MOON_FIELD_i64,
    MOON_FIELD_f32,
    MOON_FIELD_f64,
    MOON_FIELD_addr,
    MOON_FIELD_str,
    MOON_FIELD_bytes,
    MOON_FIELD_u32s,
    MOON_FIELD_u64s,
} moon_field_kind_t;

typedef struct {
    const char *name;
    uint32_t    kind;   /* moon_field_kind_t */
    uint32_t    offset; /* offsetof(struct, field) */
} moon_msg_field_t;

typedef struct {
    uint32_t                id;
    const char             *name;
    uint32_t                struct_bytes;
    uint32_t                n_fields;
    const moon_msg_field_t *fields;
} moon_msg_desc_t;

/* ---- schema generators ---------------------------------------------------- */
#define MOON_MSG_ID_(_id, _T, _F) _id,
#define MOON_MSG_FIELD_DECL_(_T, _kind, _name) MOON_FIELD_CTYPE_##_kind _name;
#define MOON_MSG_STRUCT_(_id, _T, _F)                                                              \
    typedef struct {                                                                               \
        moon_msg_hdr_t hdr;                                                                        \
        _F(MOON_MSG_FIELD_DECL_, _T)                                                               \
    } _T;
/* In a header: the ids (BASE, BASE+1, ...; END is one past the last) and structs. */
#define MOON_MSG_DECLARE(_LIST, _BASE, _END)                                                       \
    enum { _END##_FIRST_ = (_BASE)-1, _LIST(MOON_MSG_ID_) _END };                                  \
    MOON_STATIC_ASSERT((_END) <= MOON_MSG_MAX_TYPES, "message ids out of range");                  \
    _LIST(MOON_MSG_STRUCT_)
/* The same in RANGE of the id map (RUNTIME, STORE, ...): ids from its base, and
 * a compile error when the list passes its end. */
#define MOON_MSG_DECLARE_IN(_LIST, _RANGE, _ENDID)                                                 \
    MOON_MSG_DECLARE(_LIST, MOON_MSG_RANGE_##_RANGE##_BASE, _ENDID)                                \
    MOON_STATIC_ASSERT((int)(_ENDID) <= (int)MOON_MSG_RANGE_##_RANGE##_END,                        \
                       "message list outgrew its range of the id map (moonlet/msg.h)");

#define MOON_MSG_FIELD_ENTRY_(_T, _kind, _name)                                                    \
    {#_name, MOON_FIELD_##_kind, (uint32_t)offsetof(_T, _name)},
#define MOON_MSG_FIELDS_(_id, _T, _F)                                                              \
    static const moon_msg_field_t _T##_fields_[] = {_F(MOON_MSG_FIELD_ENTRY_, _T){NULL, 0, 0}};
#define MOON_MSG_DESC_(_id, _T, _F)                                                                \
    {_id, #_id, (uint32_t)sizeof(_T), (uint32_t)(MOON_ARRAY_SIZE(_T##_fields_) - 1), _T##_fields_},
/* In one .c file: the descriptor table, terminated by an entry with name NULL. */
#define MOON_MSG_DEFINE(_LIST, _descs)                                                             \
    _LIST(MOON_MSG_FIELDS_)                                                                        \
    const moon_msg_desc_t _descs[] = {_LIST(MOON_MSG_DESC_){0, NULL, 0, 0, NULL}};

/* ---- registry ------------------------------------------------------------- */
/* Registers a descriptor table (terminated by name == NULL); the table is
 * borrowed for the life of the process. Registering the same table twice is a
 * no-op. MOON_ERR_EXISTS: an id is already taken by another table (nothing
 * registered); MOON_ERR_INVALID_PARAM: an id >= MOON_MSG_MAX_TYPES. */
MOON_API moon_status_t moon_msg_register(const moon_msg_desc_t *descs);
/* Descriptor of a registered id, NULL if none. */
MOON_API const moon_msg_desc_t *moon_msg_desc(uint32_t type);
/* Name of a type for logs; never NULL ("?" when unregistered). */
MOON_API const char *moon_msg_name(uint32_t type);

/* ---- allocation ----------------------------------------------------------- */
/* New message of a registered type with tail_bytes of room for spans; the
 * struct is zeroed, hdr.type/size_bytes set. Returns NULL when out of memory or
 * the type is unknown. The caller owns it until moon_send() returns MOON_OK. */
MOON_API void *moon_msg_new(uint32_t type, size_t tail_bytes);
/* Reserves n elements of elem_bytes in the message's tail, points *span at it
 * and returns the memory (aligned to elem_bytes, at most 8), or NULL if the
 * tail is too small. str spans: pass n = strlen and copy the text; the NUL
 * after it is reserved and zeroed for you. */
MOON_API void *moon_msg_span_alloc(void *msg, moon_span_t *span, uint32_t n, uint32_t elem_bytes,
                                   int is_str);
/* Copies a NUL-terminated string into a str span; MOON_ERR_NO_RESOURCE if it
 * does not fit the tail. */
MOON_API moon_status_t moon_msg_set_str(void *msg, moon_span_t *span, const char *text);
/* Takes one more reference; each reference is dropped by moon_msg_release. */
MOON_API void moon_msg_retain(const moon_msg_hdr_t *msg);
/* Drops a reference; frees the message with the last one. NULL: no-op. */
MOON_API void moon_msg_release(const moon_msg_hdr_t *msg);
/* Deep copy (spans included); NULL when out of memory. */
MOON_API void *moon_msg_dup(const moon_msg_hdr_t *msg);
/* Returns this thread's cached free messages to the shared pool (worker threads
 * call it when they exit). */
MOON_API void moon_msg_cache_flush(void);

/* ---- codec ---------------------------------------------------------------- */
/* Upper bound of the encoded size of msg. */
MOON_API size_t moon_msg_encoded_bound(const moon_msg_hdr_t *msg);
/* Encodes msg as a msgpack array [type, flags, src, seq, field...] into buf.
 * MOON_ERR_NO_RESOURCE: cap too small; MOON_ERR_INVALID_PARAM: unregistered
 * type or a span outside the message. *len_p is set on success only. */
MOON_API moon_status_t moon_msg_encode(const moon_msg_hdr_t *msg, void *buf, size_t cap,
                                       size_t *len_p);
/* Decodes len bytes into a new message owned by the caller. Every malformed,
 * truncated, oversized or trailing-garbage input returns MOON_ERR_INVALID_PARAM
 * and leaves nothing allocated (no allocation is larger than the input
 * bounds); MOON_ERR_NO_MEMORY if allocation fails. Never reads outside
 * [buf, buf + len). */
MOON_API moon_status_t moon_msg_decode(const void *buf, size_t len, moon_msg_hdr_t **msg_p);
/* Reads only the header of an encoding (type, source, sequence number), e.g.
 * to answer the sender of a message that does not decode. MOON_OK if the
 * header reads; the type need not be registered. */
MOON_API moon_status_t moon_msg_peek(const void *buf, size_t len, uint32_t *type_p,
                                     moon_addr_t *src_p, uint64_t *seq_p);
/* 1 when both messages have the same type, header and field values (spans
 * compared by content). */
MOON_API int moon_msg_equal(const moon_msg_hdr_t *a, const moon_msg_hdr_t *b);

MOON_EXTERN_C_END

#endif /* MOONLET_MSG_H */
