/* launch/lib/libmoonlet.c - libmoonlet.so: the runtime and the serving stack
 * (runtime, model, store, scheduler, serving actors, plugins) as one shared
 * library for programs built against the installed package
 * (cmake/MoonInstall.cmake). It exports only what MOON_API marks; this file
 * adds the one thing the static libraries do not have: the version. */
#include "moonlet/plugin.h"

MOON_API const char *moon_version(void);
const char          *moon_version(void)
{
    return MOON_VERSION;
}
