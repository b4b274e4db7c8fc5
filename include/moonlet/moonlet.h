/* moonlet/moonlet.h - everything a Moonlet actor program includes. */
#ifndef MOONLET_MOONLET_H
#define MOONLET_MOONLET_H

#include "moonlet/actor.h"
#include "moonlet/alloc.h"
#include "moonlet/defs.h"
#include "moonlet/log.h"
#include "moonlet/msg.h"
#include "moonlet/runtime.h"
#include "moonlet/status.h"
#include "moonlet/supervisor.h"
#include "moonlet/sys_msgs.h"
#include "moonlet/transport.h"

#endif /* MOONLET_MOONLET_H */
