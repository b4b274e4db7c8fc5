/* runtime/dist/dist_wire.h - the distributed runtime's wire format: frames (a
 * 16-byte header, then records) and records (destination, length, message).
 * Pure layout and inline encoders; no state. */
#ifndef MOON_RUNTIME_DIST_WIRE_H
#define MOON_RUNTIME_DIST_WIRE_H

#include "moonlet/msg.h"

#include <string.h>

/* Frames and records; name ops are in dist_names.c, region descriptors in
 * dist_bulk.c. */
#define FRAME_MAGIC 0x4d44u /* "MD" */
enum {
    FRAME_BATCH       = 1, /* records */
    FRAME_CREDIT      = 2, /* credits only */
    FRAME_HEARTBEAT   = 3,
    FRAME_GOODBYE     = 4,
    FRAME_REGION_GONE = 5, /* u64 region id: its owner deregistered it */
};

typedef struct {
    uint16_t magic;
    uint8_t  kind;
    uint8_t  pad;
    uint32_t src_rank;
    uint32_t credits; /* returned to the receiver of this frame */
    uint32_t n_records;
} frame_hdr_t;
_Static_assert(sizeof(frame_hdr_t) == 16, "frame header size changed");

/* A record: the destination and the length of the message that follows (its
 * type, source and sequence number are inside it). 12 bytes on the wire,
 * unaligned: with the frame header, a small message fits UCX's short active
 * message (under 100 bytes on shared memory), which costs half as many
 * instructions to send as a buffered one. The message is msgpack, or, to a
 * peer of this host (dist_peer_t.images), its image (msg_internal.h): the
 * length's top bit set, the payload its type's u32 layout, then the image. */
typedef struct {
    uint64_t to;
    uint32_t len;   /* of the payload */
    int      image; /* the payload is a layout and an image */
} rec_hdr_t;
#define REC_BYTES 12u
#define REC_IMAGE 0x80000000u /* in the length on the wire */

/* A record's bytes at most: a message as its image of `image` bytes, or
 * (image 0) as msgpack of encoded bound `bound`. */
static inline size_t record_need(size_t image, size_t bound)
{
    return REC_BYTES + (image > 0 ? 4 + image : bound);
}

static inline void rec_write(char *p, moon_addr_t to, uint32_t len, int image)
{
    len |= image ? REC_IMAGE : 0;
    memcpy(p, &to, 8);
    memcpy(p + 8, &len, 4);
}

static inline rec_hdr_t rec_read(const char *p)
{
    rec_hdr_t rec;

    memcpy(&rec.to, p, 8);
    memcpy(&rec.len, p + 8, 4);
    rec.image = (rec.len & REC_IMAGE) != 0;
    rec.len &= ~REC_IMAGE;
    return rec;
}

#endif /* MOON_RUNTIME_DIST_WIRE_H */
