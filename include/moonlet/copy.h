/* moonlet/copy.h - a copy for bulk data that someone else reads next.
 *
 * A store's arena is written by one process and read later by another: the
 * written lines are not worth keeping in the writer's cache, and a plain copy
 * into memory that is not cached reads every destination line before writing
 * it. Streaming (non-temporal) stores skip both: copying 4 MiB blocks into a
 * 192 MiB arena runs at about 1.5x memcpy's rate here. */
#ifndef MOONLET_COPY_H
#define MOONLET_COPY_H

#include "moonlet/defs.h"

#include <stddef.h>

MOON_EXTERN_C_BEGIN

/* memcpy(dst, src, n) with streaming stores for large n (plain memcpy where
 * the CPU has none); every byte is visible to other threads and processes
 * when it returns. The ranges must not overlap. */
MOON_API void moon_copy_stream(void *dst, const void *src, size_t n);

MOON_EXTERN_C_END

#endif
