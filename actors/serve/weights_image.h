/* actors/weights_image.h - the trainer's side of a weight push (MPMD: a
 * trainer rank in the same MPI job as the cluster, examples/weights_trainer.c).
 * An image is a GGUF checkpoint held in a registered region of the trainer's
 * process: a copy of a base checkpoint whose tensors the trainer overwrites
 * by name from its own memory, then pushes; the broadcaster gets the image
 * one-sided (no file) and streams it to every instance like a file push.
 * Not thread-safe: one thread owns an image. */
#ifndef MOON_ACTORS_WEIGHTS_IMAGE_H
#define MOON_ACTORS_WEIGHTS_IMAGE_H

#include "moonlet/dist.h"
#include "moonlet/gguf.h"
#include "moonlet/weights_client.h"

typedef struct moon_weights_image moon_weights_image_t;

/* Reads the GGUF at base_path into a region registered with dist (owned by
 * the image). MOON_ERR_NOT_FOUND / MOON_ERR_IO: the file; MOON_ERR_CORRUPT:
 * not a GGUF; MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_weights_image_create(moon_dist_t *dist, const char *base_path,
                                                 moon_weights_image_t **img_p);
/* Frees the image and its region. NULL: no-op. Not while a push of it runs. */
MOON_API void moon_weights_image_destroy(moon_weights_image_t *img);
/* Overwrites tensor name with bytes bytes of data (the tensor's stored type,
 * borrowed for the call). Refused, the image unchanged, with a line in
 * why (may be NULL; why_len bytes): MOON_ERR_NOT_FOUND no tensor of that
 * name, MOON_ERR_INVALID_PARAM bytes is not the tensor's size, or an F32
 * tensor given a NaN or an infinity; MOON_ERR_NO_RESOURCE a push of the
 * image is under way (its outcome not read yet). */
MOON_API moon_status_t moon_weights_image_set(moon_weights_image_t *img, const char *name,
                                              const void *data, size_t bytes, char *why,
                                              size_t why_len);
/* The tensor name as the image describes it (data points into the image,
 * valid until destroy); NULL: no such tensor. */
MOON_API const moon_gguf_tensor_t *moon_weights_image_tensor(const moon_weights_image_t *img,
                                                             const char                 *name);
/* The whole image (a GGUF file's bytes). */
MOON_API void moon_weights_image_bytes(const moon_weights_image_t *img, const void **data_p,
                                       size_t *len_p);
/* Pushes the image as version (0: the serving one + 1) with MOON_WEIGHTS_F_*
 * flags through client and waits at most timeout_ns for its outcome. The
 * image tells which bytes were set since its last push: a broadcaster that
 * took that push gets only those (res_p->read_bytes says how many). The
 * image must not change meanwhile (set refuses). MOON_OK: *res_p holds the
 * outcome (res_p->status says whether the cluster runs it now);
 * MOON_ERR_TIMED_OUT: no outcome yet (the image stays locked until
 * moon_weights_image_wait returns one). */
MOON_API moon_status_t moon_weights_push_image(moon_weights_client_t *client,
                                               moon_weights_image_t *img, uint64_t version,
                                               uint32_t flags, uint64_t timeout_ns,
                                               moon_weights_result_t *res_p);
/* Waits again for the outcome of a push that timed out. */
MOON_API moon_status_t moon_weights_image_wait(moon_weights_client_t *client,
                                               moon_weights_image_t *img, uint64_t timeout_ns,
                                               moon_weights_result_t *res_p);

#endif /* MOON_ACTORS_WEIGHTS_IMAGE_H */
