/* actors/serve/decode.h - the decode instance actor (see decode.c). Spawn with
 * moon_spawn(rt, &moon_decode_ops, &args, ...), args a
 * moon_serve_instance_args_t with role MOON_SERVE_ROLE_DECODE. */
#ifndef MOON_ACTORS_DECODE_H
#define MOON_ACTORS_DECODE_H

#include "moonlet/actor.h"

MOON_API extern const moon_actor_ops_t moon_decode_ops;

#endif /* MOON_ACTORS_DECODE_H */
