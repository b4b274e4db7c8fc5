/* actors/weights_msgs.c - descriptor table of the weight-sync protocol. */
#include "moonlet/weights_msgs.h"

MOON_MSG_DEFINE(MOON_WEIGHTS_MSGS, moon_weights_msg_descs)

moon_status_t moon_weights_msgs_register(void)
{
    return moon_msg_register(moon_weights_msg_descs);
}
