/* actors/serve/prefill.h - the prefill instance actor (see prefill.c). Spawn with
 * moon_spawn(rt, &moon_prefill_ops, &args, ...), args a
 * moon_serve_instance_args_t with role MOON_SERVE_ROLE_PREFILL. */
#ifndef MOON_ACTORS_PREFILL_H
#define MOON_ACTORS_PREFILL_H

#include "moonlet/actor.h"

MOON_API extern const moon_actor_ops_t moon_prefill_ops;

#endif /* MOON_ACTORS_PREFILL_H */
