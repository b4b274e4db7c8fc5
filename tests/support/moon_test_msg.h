/* tests/support/moon_test_msg.h - a message of any registered type filled
 * with random scalars and spans, for codec round-trip tests of every
 * component's schema. Header-only: the test links the runtime. */
#ifndef MOON_TEST_MSG_H
#define MOON_TEST_MSG_H

#include "moonlet/msg.h"

#include "moon_test.h"

#include <string.h>

static inline moon_msg_hdr_t *moon_test_random_msg(const moon_msg_desc_t *d, uint64_t *rng)
{
    moon_msg_hdr_t *m = moon_msg_new(d->id, 64 * 9 * d->n_fields + 64);

    if (m == NULL) {
        return NULL;
    }
    m->src = moon_test_rand(rng);
    m->seq = moon_test_rand(rng);
    for (uint32_t i = 0; i < d->n_fields; i++) {
        char    *f = (char *)m + d->fields[i].offset;
        uint64_t r = moon_test_rand(rng);
        uint32_t n = (uint32_t)(r % 40);
        uint8_t *p;

        switch (d->fields[i].kind) {
        case MOON_FIELD_u8:
            *(uint8_t *)f = (uint8_t)r;
            break;
        case MOON_FIELD_u16:
            *(uint16_t *)f = (uint16_t)r;
            break;
        case MOON_FIELD_u32:
        case MOON_FIELD_i32:
            memcpy(f, &r, 4);
            break;
        case MOON_FIELD_f32:
            *(float *)f = (float)(int32_t)r;
            break;
        case MOON_FIELD_f64:
            *(double *)f = (double)(int64_t)r / 7.0;
            break;
        case MOON_FIELD_u64:
        case MOON_FIELD_i64:
        case MOON_FIELD_addr:
            memcpy(f, &r, 8);
            break;
        case MOON_FIELD_str:
            p = moon_msg_span_alloc(m, (moon_span_t *)f, n, 1, 1);
            for (uint32_t k = 0; p != NULL && k < n; k++) {
                p[k] = (uint8_t)('a' + k % 26);
            }
            break;
        default: {
            uint32_t elem = d->fields[i].kind == MOON_FIELD_bytes  ? 1
                            : d->fields[i].kind == MOON_FIELD_u32s ? 4
                                                                   : 8;
            p             = moon_msg_span_alloc(m, (moon_span_t *)f, n, elem, 0);
            for (uint32_t k = 0; p != NULL && k < n * elem; k++) {
                p[k] = (uint8_t)moon_test_rand(rng);
            }
        }
        }
    }
    return m;
}

#endif /* MOON_TEST_MSG_H */
