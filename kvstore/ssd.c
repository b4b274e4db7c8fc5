/* kvstore/ssd.c - SSD tier file I/O with pread/pwrite (kvstore/ssd.h). */
#include "ssd.h"

#include "moonlet/log.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

moon_status_t moon_kv_ssd_open(moon_kv_ssd_t *ssd, const char *path, size_t slot_bytes,
                               uint32_t n_slots)
{
    int fd;

    if (ssd == NULL || path == NULL || slot_bytes == 0 || n_slots == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        MOON_ERROR("kv ssd tier: open %s failed: %s", path, strerror(errno));
        return MOON_ERR_IO;
    }
    ssd->fd         = fd;
    ssd->slot_bytes = slot_bytes;
    ssd->n_slots    = n_slots;
    return MOON_OK;
}

void moon_kv_ssd_close(moon_kv_ssd_t *ssd)
{
    if (ssd == NULL || ssd->fd < 0) {
        return;
    }
    if (close(ssd->fd) != 0) {
        MOON_WARN("kv ssd tier: close failed: %s", strerror(errno));
    }
    ssd->fd = -1;
}

static moon_status_t ssd_io(moon_kv_ssd_t *ssd, int write, uint32_t slot, void *bytes,
                            size_t n_bytes)
{
    off_t  off  = (off_t)slot * (off_t)ssd->slot_bytes;
    size_t done = 0;

    if (slot >= ssd->n_slots || n_bytes > ssd->slot_bytes) {
        return MOON_ERR_INVALID_PARAM;
    }
    while (done < n_bytes) {
        ssize_t ret = write
                          ? pwrite(ssd->fd, (char *)bytes + done, n_bytes - done, off + (off_t)done)
                          : pread(ssd->fd, (char *)bytes + done, n_bytes - done, off + (off_t)done);

        if (ret < 0 && errno == EINTR) {
            continue;
        }
        if (ret <= 0) {
            MOON_ERROR("kv ssd tier: %s of %zu bytes at slot %u failed: %s",
                       write ? "pwrite" : "pread", n_bytes, slot,
                       ret < 0 ? strerror(errno) : "short transfer");
            return MOON_ERR_IO;
        }
        done += (size_t)ret;
    }
    return MOON_OK;
}

moon_status_t moon_kv_ssd_write(moon_kv_ssd_t *ssd, uint32_t slot, const void *bytes,
                                size_t n_bytes)
{
    return ssd_io(ssd, 1, slot, (void *)(uintptr_t)bytes, n_bytes);
}

moon_status_t moon_kv_ssd_read(moon_kv_ssd_t *ssd, uint32_t slot, void *bytes, size_t n_bytes)
{
    return ssd_io(ssd, 0, slot, bytes, n_bytes);
}
