/* model/gguf/gguf_internal.h - what the GGUF reader (gguf.c) and writer
 * (gguf_writer.c) share: the magic and the sizes of scalar value types. */
#ifndef MOON_MODEL_GGUF_INTERNAL_H
#define MOON_MODEL_GGUF_INTERNAL_H

#include "moonlet/gguf.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */

/* Bytes of one value of scalar type t; 0 for strings, arrays and bad types. */
size_t moon_gguf_scalar_bytes(moon_gguf_type_t t);

#endif /* MOON_MODEL_GGUF_INTERNAL_H */
