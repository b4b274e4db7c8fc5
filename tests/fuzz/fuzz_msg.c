/* tests/fuzz/fuzz_msg.c - libFuzzer target for the message decoder: bytes
 * from the wire (a peer's frame) decoded against every registered schema of
 * the tree (runtime, dist, store, serving), re-encoded when
 * they decode, and decoded again: the two must be equal (moon_msg_equal: same
 * header and field values; their allocations may differ in size, the first
 * decode sizes its tail by the input). */
#include "fuzz_target.h"
#include "moonlet/serve_msgs.h"
#include "moonlet/store_msgs.h"

#include "moonlet/dist.h"
#include "moonlet/log.h"
#include "moonlet/msg.h"

#include <stdlib.h>
#include <string.h>

static void register_all(void)
{
    static int done;

    if (!done) {
        moon_log_set_level(0);
        moon_msg_register(moon_dist_msg_descs);
        moon_store_msgs_register();
        moon_serve_msgs_register();
        done = 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    moon_msg_hdr_t *msg = NULL, *again = NULL;
    size_t          bound;
    uint8_t        *buf;
    size_t          used = 0;

    register_all();
    if (moon_msg_decode(data, size, &msg) != MOON_OK) {
        return 0;
    }
    bound = moon_msg_encoded_bound(msg);
    buf   = malloc(bound ? bound : 1);
    if (buf != NULL && moon_msg_encode(msg, buf, bound, &used) == MOON_OK) {
        /* what we encode we decode, to the same message */
        if (moon_msg_decode(buf, used, &again) != MOON_OK || !moon_msg_equal(msg, again)) {
            abort();
        }
        moon_msg_release(again);
    }
    free(buf);
    moon_msg_release(msg);
    return 0;
}
