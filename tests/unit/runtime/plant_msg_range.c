/* tests/unit/runtime/plant_msg_range.c - a message list that outgrows its
 * range of the id map must not compile (test_msg_range_build builds this
 * with MOON_PLANT and expects the range assert). Without MOON_PLANT the same
 * list fits, so the normal build proves the macro itself compiles. */
#include "moonlet/msg.h"

#define P_FIELDS(F, T) F(T, u64, n)
#ifdef MOON_PLANT
/* Nine messages in the eight ids of the GATEWAY range. */
#define P_MSGS(X)                                                                                  \
    X(P_0, p0_t, P_FIELDS)                                                                         \
    X(P_1, p1_t, P_FIELDS)                                                                         \
    X(P_2, p2_t, P_FIELDS)                                                                         \
    X(P_3, p3_t, P_FIELDS)                                                                         \
    X(P_4, p4_t, P_FIELDS)                                                                         \
    X(P_5, p5_t, P_FIELDS)                                                                         \
    X(P_6, p6_t, P_FIELDS)                                                                         \
    X(P_7, p7_t, P_FIELDS)                                                                         \
    X(P_8, p8_t, P_FIELDS)
#else
#define P_MSGS(X) X(P_0, p0_t, P_FIELDS)
#endif
MOON_MSG_DECLARE_IN(P_MSGS, GATEWAY, P_END)

int moon_plant_msg_range(void);
int moon_plant_msg_range(void)
{
    return P_END;
}
