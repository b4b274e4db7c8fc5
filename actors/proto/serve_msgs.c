/* actors/proto/serve_msgs.c - descriptor table of the serving protocol. */
#include "moonlet/serve_msgs.h"

MOON_MSG_DEFINE(MOON_SERVE_MSGS, moon_serve_msg_descs)

moon_status_t moon_serve_msgs_register(void)
{
    return moon_msg_register(moon_serve_msg_descs);
}

uint64_t moon_serve_choice_seed(uint64_t seed, uint32_t i)
{
    uint64_t z = seed + (uint64_t)i * 0x9e3779b97f4a7c15ull;

    if (i == 0) {
        return seed; /* n = 1 samples as before */
    }
    /* splitmix64's finaliser: neighbouring seeds give unrelated streams */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

const char *moon_finish_str(uint32_t finish)
{
    static const char *const names[] = {"stop", "length", "cancelled", "rejected", "error"};

    return finish < MOON_ARRAY_SIZE(names) ? names[finish] : "?";
}
