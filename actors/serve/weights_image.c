/* actors/weights_image.c - a trainer's checkpoint image (weights_image.h):
 * the base file read once into a registered region, its GGUF parsed in
 * place so tensors are found by name, and a push that hands the broadcaster
 * the region's descriptor. */
#include "weights_image.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct moon_weights_image {
    moon_dist_t        *dist; /* borrowed */
    void               *data; /* (len) the GGUF image, inside reg */
    size_t              len;
    moon_dist_region_t *reg;
    moon_gguf_t        *gguf;     /* parsed over data */
    uint64_t            push_req; /* 0: no push of it under way */
    /* what changed since the last push (generation gen; 0: never pushed):
     * (offset, length) pairs, so the broadcaster gets only those bytes
     * (after one RL step of a few tensors, a small part of the image) */
    uint64_t  id, gen;
    uint64_t *changed;
    uint32_t  n_changed, cap_changed;
    int       all_changed; /* more ranges than one push can name */
};

/* Unique in the job: the rank, then a count of this process's images. */
static uint64_t next_image_id(moon_dist_t *dist)
{
    static atomic_uint_fast64_t count;

    return ((uint64_t)moon_dist_rank(dist) + 1) << 40 | (atomic_fetch_add(&count, 1) + 1);
}

/* Bytes [off, off + len) changed: merged into the last range when they
 * touch it (a trainer sets tensors in file order). */
static void note_change(moon_weights_image_t *img, uint64_t off, uint64_t len)
{
    uint64_t *last = img->n_changed > 0 ? &img->changed[2 * (img->n_changed - 1)] : NULL;

    if (img->all_changed) {
        return;
    }
    if (last != NULL && off >= last[0] && off <= last[0] + last[1]) {
        last[1] = MOON_MAX(last[1], off + len - last[0]);
        return;
    }
    if (img->n_changed == img->cap_changed) {
        uint32_t  cap = img->cap_changed ? 2 * img->cap_changed : 16;
        uint64_t *more =
            cap <= MOON_DIST_IOV_MAX ? moon_realloc(img->changed, (size_t)cap * 16) : NULL;
        if (more == NULL) {
            img->all_changed = 1; /* the next push gets the whole image */
            return;
        }
        img->changed     = more;
        img->cap_changed = cap;
    }
    img->changed[2 * img->n_changed]     = off;
    img->changed[2 * img->n_changed + 1] = len;
    img->n_changed++;
}

moon_status_t moon_weights_image_create(moon_dist_t *dist, const char *base_path,
                                        moon_weights_image_t **img_p)
{
    moon_weights_image_t *img;
    struct stat           st;
    moon_status_t         status;
    size_t                done = 0;
    int                   fd;

    if (dist == NULL || base_path == NULL || img_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    fd = open(base_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        MOON_ERROR("weights image: cannot read %s: %s", base_path,
                   fd < 0 ? strerror(errno) : "not a file");
        status = fd < 0 && errno == ENOENT ? MOON_ERR_NOT_FOUND : MOON_ERR_IO;
        goto err_close;
    }
    img = moon_calloc(1, sizeof(*img));
    if (img == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto err_close;
    }
    img->dist = dist;
    img->id   = next_image_id(dist);
    img->len  = (size_t)st.st_size;
    status    = moon_dist_region_alloc(dist, img->len, &img->data, &img->reg);
    if (status != MOON_OK) {
        goto err_free;
    }
    while (done < img->len) {
        ssize_t n = read(fd, (char *)img->data + done, img->len - done);
        if (n <= 0) {
            MOON_ERROR("weights image: reading %s failed", base_path);
            status = MOON_ERR_IO;
            goto err_dereg;
        }
        done += (size_t)n;
    }
    status = moon_gguf_open_memory(img->data, img->len, &img->gguf);
    if (status != MOON_OK) {
        MOON_ERROR("weights image: %s is not a gguf file", base_path);
        goto err_dereg;
    }
    close(fd);
    *img_p = img;
    return MOON_OK;

err_dereg:
    moon_dist_region_deregister(dist, img->reg);
err_free:
    moon_free(img);
err_close:
    if (fd >= 0) {
        close(fd);
    }
    return status;
}

void moon_weights_image_destroy(moon_weights_image_t *img)
{
    if (img == NULL) {
        return;
    }
    if (img->push_req != 0) {
        MOON_WARN("weights image: freed while a push of it may still read it");
    }
    moon_gguf_close(img->gguf);
    moon_dist_region_deregister(img->dist, img->reg);
    moon_free(img->changed);
    moon_free(img);
}

const moon_gguf_tensor_t *moon_weights_image_tensor(const moon_weights_image_t *img,
                                                    const char                 *name)
{
    return img != NULL && name != NULL ? moon_gguf_find_tensor(img->gguf, name) : NULL;
}

void moon_weights_image_bytes(const moon_weights_image_t *img, const void **data_p, size_t *len_p)
{
    *data_p = img->data;
    *len_p  = img->len;
}

static moon_status_t refuse(moon_status_t status, char *why, size_t why_len, const char *fmt,
                            const char *name, unsigned long long a, unsigned long long b)
{
    char line[256];

    snprintf(line, sizeof(line), fmt, name, a, b);
    MOON_ERROR("weights image: %s", line);
    if (why != NULL && why_len > 0) {
        snprintf(why, why_len, "%s", line);
    }
    return status;
}

moon_status_t moon_weights_image_set(moon_weights_image_t *img, const char *name, const void *data,
                                     size_t bytes, char *why, size_t why_len)
{
    const moon_gguf_tensor_t *t;

    if (img == NULL || name == NULL || data == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (img->push_req != 0) {
        return refuse(MOON_ERR_NO_RESOURCE, why, why_len,
                      "tensor %s not set: a push of the image is under way (req %llu)%.0llu", name,
                      (unsigned long long)img->push_req, 0);
    }
    t = moon_gguf_find_tensor(img->gguf, name);
    if (t == NULL) {
        return refuse(MOON_ERR_NOT_FOUND, why, why_len,
                      "the checkpoint has no tensor named %s%.0llu%.0llu", name, 0, 0);
    }
    if (bytes != t->bytes) {
        return refuse(MOON_ERR_INVALID_PARAM, why, why_len,
                      "tensor %s holds %llu bytes, %llu were given", name,
                      (unsigned long long)t->bytes, (unsigned long long)bytes);
    }
    if (t->type == MOON_GGML_F32) {
        for (uint64_t e = 0; e < t->n_elems; e++) {
            float v;
            memcpy(&v, (const char *)data + e * 4, 4);
            if (!isfinite(v)) {
                return refuse(MOON_ERR_INVALID_PARAM, why, why_len,
                              "tensor %s: element %llu is not finite%.0llu", name,
                              (unsigned long long)e, 0);
            }
        }
    }
    /* t->data points into img->data: the region the broadcaster reads */
    memcpy((char *)img->data + ((const char *)t->data - (const char *)img->data), data, bytes);
    note_change(img, (uint64_t)((const char *)t->data - (const char *)img->data), bytes);
    return MOON_OK;
}

moon_status_t moon_weights_image_wait(moon_weights_client_t *client, moon_weights_image_t *img,
                                      uint64_t timeout_ns, moon_weights_result_t *res_p)
{
    moon_status_t status;

    if (client == NULL || img == NULL || res_p == NULL || img->push_req == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = moon_weights_client_wait(client, img->push_req, timeout_ns, res_p);
    if (status == MOON_OK) {
        img->push_req = 0;
    }
    return status;
}

moon_status_t moon_weights_push_image(moon_weights_client_t *client, moon_weights_image_t *img,
                                      uint64_t version, uint32_t flags, uint64_t timeout_ns,
                                      moon_weights_result_t *res_p)
{
    moon_status_t status;

    if (client == NULL || img == NULL || res_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (img->push_req != 0) {
        return MOON_ERR_NO_RESOURCE;
    }
    {
        /* never pushed, or too many changes to name: the whole image */
        int                    whole = img->gen == 0 || img->all_changed;
        moon_weights_changes_t ch    = {.image  = img->id,
                                        .gen    = img->gen + 1,
                                        .base   = whole ? 0 : img->gen,
                                        .ranges = img->changed,
                                        .n      = whole ? 0 : img->n_changed};
        status = moon_weights_push_region_changed(client, img->reg, img->len, version, flags, &ch,
                                                  &img->push_req);
    }
    if (status != MOON_OK) {
        img->push_req = 0;
        return status;
    }
    /* sent: the next push counts changes from this one (a broadcaster that
     * did not take this one gets the whole image then) */
    img->gen++;
    img->n_changed   = 0;
    img->all_changed = 0;
    return moon_weights_image_wait(client, img, timeout_ns, res_p);
}
