/* actors/proto/serve_msgs.c - descriptor table of the serving protocol. */
#include "moonlet/serve_msgs.h"

MOON_MSG_DEFINE(MOON_SERVE_MSGS, moon_serve_msg_descs)

moon_status_t moon_serve_msgs_register(void)
{
    return moon_msg_register(moon_serve_msg_descs);
}

const char *moon_finish_str(uint32_t finish)
{
    static const char *const names[] = {"stop", "length", "cancelled", "rejected", "error"};

    return finish < MOON_ARRAY_SIZE(names) ? names[finish] : "?";
}
