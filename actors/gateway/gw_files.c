/* actors/gateway/gw_files.c - the file store (see gw_files.h): an array of
 * file objects under a mutex, each mirrored by ID.json beside ID.data. */
#include "gw_files.h"

#include "gw_buf.h"
#include "gw_json.h"
#include "moonlet/alloc.h"
#include "moonlet/hash.h"
#include "moonlet/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct moon_gw_files {
    pthread_mutex_t      mu;
    char                *dir;   /* DATA_DIR/files */
    moon_gw_file_info_t *items; /* (n), oldest first */
    size_t               n, cap;
    uint64_t             counter; /* makes ids unique within a second */
};

static char *path_of(const moon_gw_files_t *f, const char *id, const char *ext)
{
    size_t n = strlen(f->dir) + strlen(id) + strlen(ext) + 3;
    char  *p = moon_malloc(n);

    if (p != NULL) {
        snprintf(p, n, "%s/%s%s", f->dir, id, ext);
    }
    return p;
}

/* Writes len bytes to path through path.tmp, fsynced, then renamed. */
static moon_status_t write_atomic(const char *path, const char *data, size_t len, int *errno_p)
{
    size_t        n   = strlen(path) + 5;
    char         *tmp = moon_malloc(n);
    int           fd;
    size_t        off    = 0;
    moon_status_t status = MOON_OK;

    if (tmp == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    snprintf(tmp, n, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        status = MOON_ERR_IO;
    }
    while (status == MOON_OK && off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            if (w == 0) {
                errno = ENOSPC;
            }
            status = MOON_ERR_IO;
            break;
        }
        off += (size_t)w;
    }
    if (status == MOON_OK && fsync(fd) != 0) {
        status = MOON_ERR_IO;
    }
    if (status != MOON_OK) {
        int e = errno;
        MOON_ERROR("files: writing %s failed: %s", tmp, strerror(e));
        if (errno_p != NULL) {
            *errno_p = e;
        }
    }
    if (fd >= 0) {
        close(fd);
    }
    if (status == MOON_OK && rename(tmp, path) != 0) {
        MOON_ERROR("files: renaming %s failed: %s", tmp, strerror(errno));
        status = MOON_ERR_IO;
    }
    if (status != MOON_OK) {
        unlink(tmp);
    }
    moon_free(tmp);
    return status;
}

char *moon_gw_file_json(const moon_gw_file_info_t *info, size_t *len_p)
{
    cJSON *o = cJSON_CreateObject();
    char  *text;

    if (o == NULL) {
        return NULL;
    }
    cJSON_AddStringToObject(o, "id", info->id);
    cJSON_AddStringToObject(o, "object", "file");
    cJSON_AddNumberToObject(o, "bytes", (double)info->bytes);
    cJSON_AddNumberToObject(o, "created_at", (double)info->created_at);
    cJSON_AddStringToObject(o, "filename", info->filename);
    cJSON_AddStringToObject(o, "purpose", info->purpose);
    cJSON_AddStringToObject(o, "status", "processed");
    cJSON_AddNullToObject(o, "status_details");
    text = moon_gw_json_print(o, len_p);
    cJSON_Delete(o);
    return text;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    moon_gw_utf8_copy(dst, cap, src != NULL ? src : "");
}

/* Reads ID.json into info. */
static moon_status_t load_meta(const moon_gw_files_t *f, const char *name,
                               moon_gw_file_info_t *info)
{
    char         *path = path_of(f, name, "");
    FILE         *in   = path != NULL ? fopen(path, "r") : NULL;
    char          buf[4096];
    size_t        n;
    cJSON        *root;
    const char   *s;
    double        v;
    moon_status_t status = MOON_ERR_CORRUPT;

    moon_free(path);
    if (in == NULL) {
        return MOON_ERR_IO;
    }
    n = fread(buf, 1, sizeof(buf) - 1, in);
    fclose(in);
    buf[n] = '\0';
    root   = cJSON_ParseWithLength(buf, n);
    memset(info, 0, sizeof(*info));
    if (root != NULL && moon_gw_json_str(root, "id", &s) == 1 && strlen(s) < sizeof(info->id)) {
        copy_str(info->id, sizeof(info->id), s);
        if (moon_gw_json_str(root, "filename", &s) == 1) {
            copy_str(info->filename, sizeof(info->filename), s);
        }
        if (moon_gw_json_str(root, "purpose", &s) == 1) {
            copy_str(info->purpose, sizeof(info->purpose), s);
        }
        if (moon_gw_json_num(root, "bytes", &v) == 1) {
            info->bytes = (uint64_t)v;
        }
        if (moon_gw_json_num(root, "created_at", &v) == 1) {
            info->created_at = (int64_t)v;
        }
        status = MOON_OK;
    }
    cJSON_Delete(root);
    return status;
}

static moon_status_t index_add(moon_gw_files_t *f, const moon_gw_file_info_t *info)
{
    for (size_t i = 0; i < f->n; i++) {
        if (strcmp(f->items[i].id, info->id) == 0) {
            f->items[i] = *info;
            return MOON_OK;
        }
    }
    if (f->n == f->cap) {
        size_t               cap   = f->cap ? f->cap * 2 : 16;
        moon_gw_file_info_t *items = moon_realloc(f->items, cap * sizeof(*items));
        if (items == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        f->items = items;
        f->cap   = cap;
    }
    f->items[f->n++] = *info;
    return MOON_OK;
}

static int by_created(const void *a, const void *b)
{
    const moon_gw_file_info_t *x = a, *y = b;

    if (x->created_at != y->created_at) {
        return x->created_at < y->created_at ? -1 : 1;
    }
    return strcmp(x->id, y->id);
}

/* Reads every ID.json; removes the .data and .tmp entries no object names. */
static moon_status_t scan(moon_gw_files_t *f)
{
    DIR           *d = opendir(f->dir);
    struct dirent *e;
    moon_status_t  status = MOON_OK;

    if (d == NULL) {
        MOON_ERROR("files: cannot read %s: %s", f->dir, strerror(errno));
        return MOON_ERR_IO;
    }
    while (status == MOON_OK && (e = readdir(d)) != NULL) {
        size_t              n = strlen(e->d_name);
        moon_gw_file_info_t info;

        if (n > 5 && strcmp(e->d_name + n - 5, ".json") == 0) {
            if (load_meta(f, e->d_name, &info) == MOON_OK) {
                status = index_add(f, &info);
            } else {
                MOON_WARN("files: %s/%s is not a file object: skipped", f->dir, e->d_name);
            }
        }
    }
    rewinddir(d);
    while (status == MOON_OK && (e = readdir(d)) != NULL) {
        size_t n     = strlen(e->d_name);
        int    known = 0;
        char   id[64];

        if (n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0) {
            known = 0;
        } else if (n > 5 && n - 5 < sizeof(id) && strcmp(e->d_name + n - 5, ".data") == 0) {
            memcpy(id, e->d_name, n - 5);
            id[n - 5] = '\0';
            for (size_t i = 0; i < f->n && !known; i++) {
                known = strcmp(f->items[i].id, id) == 0;
            }
        } else {
            continue;
        }
        if (!known) {
            char *p = path_of(f, e->d_name, "");
            MOON_INFO("files: removing %s/%s (an upload that did not finish)", f->dir, e->d_name);
            if (p != NULL) {
                unlink(p);
            }
            moon_free(p);
        }
    }
    closedir(d);
    if (f->n > 1) { /* an empty store has no array yet (NULL) */
        qsort(f->items, f->n, sizeof(*f->items), by_created);
    }
    return status;
}

moon_status_t moon_gw_files_open(const char *dir, moon_gw_files_t **files_p)
{
    moon_gw_files_t *f = moon_calloc(1, sizeof(*f));
    size_t           n = strlen(dir) + 8;
    moon_status_t    status;

    if (f == NULL || (f->dir = moon_malloc(n)) == NULL) {
        moon_free(f);
        return MOON_ERR_NO_MEMORY;
    }
    snprintf(f->dir, n, "%s/files", dir);
    if ((mkdir(dir, 0755) != 0 && errno != EEXIST) ||
        (mkdir(f->dir, 0755) != 0 && errno != EEXIST)) {
        MOON_ERROR("files: cannot make %s: %s", f->dir, strerror(errno));
        moon_free(f->dir);
        moon_free(f);
        return MOON_ERR_IO;
    }
    pthread_mutex_init(&f->mu, NULL);
    status = scan(f);
    if (status != MOON_OK) {
        moon_gw_files_close(f);
        return status;
    }
    MOON_INFO("files: %zu file(s) in %s", f->n, f->dir);
    *files_p = f;
    return MOON_OK;
}

void moon_gw_files_close(moon_gw_files_t *files)
{
    if (files == NULL) {
        return;
    }
    pthread_mutex_destroy(&files->mu);
    moon_free(files->items);
    moon_free(files->dir);
    moon_free(files);
}

/* Writes the object's .json and indexes it (the .data is in place). */
static moon_status_t commit(moon_gw_files_t *f, const moon_gw_file_info_t *info, int *errno_p)
{
    size_t        len  = 0;
    char         *json = moon_gw_file_json(info, &len);
    char         *path = path_of(f, info->id, ".json");
    moon_status_t status;

    status =
        json == NULL || path == NULL ? MOON_ERR_NO_MEMORY : write_atomic(path, json, len, errno_p);
    if (status == MOON_OK) {
        pthread_mutex_lock(&f->mu);
        status = index_add(f, info);
        pthread_mutex_unlock(&f->mu);
    }
    moon_free(json);
    moon_free(path);
    return status;
}

moon_status_t moon_gw_files_put(moon_gw_files_t *files, const char *filename, const char *purpose,
                                const char *data, size_t len, moon_gw_file_info_t *info_p,
                                int *errno_p)
{
    moon_gw_file_info_t info;
    struct timespec     ts;
    uint64_t            seed[3];
    char               *path;
    moon_status_t       status;

    memset(&info, 0, sizeof(info));
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&files->mu);
    seed[0] = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    seed[1] = ++files->counter;
    seed[2] = (uint64_t)getpid();
    pthread_mutex_unlock(&files->mu);
    snprintf(info.id, sizeof(info.id), "file-%016llx%08llx",
             (unsigned long long)moon_hash_bytes(seed, sizeof(seed)),
             (unsigned long long)(moon_hash_bytes_seeded(seed, sizeof(seed), 7) & 0xffffffffu));
    copy_str(info.filename, sizeof(info.filename), filename);
    copy_str(info.purpose, sizeof(info.purpose), purpose);
    info.bytes      = len;
    info.created_at = (int64_t)ts.tv_sec;
    path            = path_of(files, info.id, ".data");
    if (path == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    status = write_atomic(path, data, len, errno_p);
    if (status == MOON_OK) {
        status = commit(files, &info, errno_p);
        if (status != MOON_OK) {
            unlink(path);
        }
    }
    moon_free(path);
    if (status == MOON_OK && info_p != NULL) {
        *info_p = info;
    }
    return status;
}

moon_status_t moon_gw_files_adopt(moon_gw_files_t *files, const char *id, const char *filename,
                                  const char *purpose, const char *path,
                                  moon_gw_file_info_t *info_p)
{
    moon_gw_file_info_t info;
    struct stat         st;
    char               *dst;
    moon_status_t       status;

    memset(&info, 0, sizeof(info));
    if (strlen(id) >= sizeof(info.id) || stat(path, &st) != 0) {
        MOON_ERROR("files: cannot adopt %s as %s: %s", path, id,
                   strlen(id) >= sizeof(info.id) ? "id too long" : strerror(errno));
        return MOON_ERR_IO;
    }
    copy_str(info.id, sizeof(info.id), id);
    copy_str(info.filename, sizeof(info.filename), filename);
    copy_str(info.purpose, sizeof(info.purpose), purpose);
    info.bytes      = (uint64_t)st.st_size;
    info.created_at = (int64_t)time(NULL);
    dst             = path_of(files, id, ".data");
    if (dst == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    if (rename(path, dst) != 0) {
        MOON_ERROR("files: moving %s to %s failed: %s", path, dst, strerror(errno));
        moon_free(dst);
        return MOON_ERR_IO;
    }
    moon_free(dst);
    status = commit(files, &info, NULL);
    if (status == MOON_OK && info_p != NULL) {
        *info_p = info;
    }
    return status;
}

moon_status_t moon_gw_files_get(moon_gw_files_t *files, const char *id, moon_gw_file_info_t *info_p)
{
    moon_status_t status = MOON_ERR_NOT_FOUND;

    pthread_mutex_lock(&files->mu);
    for (size_t i = 0; i < files->n; i++) {
        if (strcmp(files->items[i].id, id) == 0) {
            if (info_p != NULL) {
                *info_p = files->items[i];
            }
            status = MOON_OK;
            break;
        }
    }
    pthread_mutex_unlock(&files->mu);
    return status;
}

moon_status_t moon_gw_files_path(moon_gw_files_t *files, const char *id, char **path_p)
{
    moon_status_t status = moon_gw_files_get(files, id, NULL);

    if (status != MOON_OK) {
        return status;
    }
    *path_p = path_of(files, id, ".data");
    return *path_p != NULL ? MOON_OK : MOON_ERR_NO_MEMORY;
}

moon_status_t moon_gw_files_read(moon_gw_files_t *files, const char *id, char **data_p,
                                 size_t *len_p)
{
    char         *path = NULL;
    FILE         *in;
    struct stat   st;
    char         *data;
    moon_status_t status = moon_gw_files_path(files, id, &path);

    if (status != MOON_OK) {
        return status;
    }
    in = fopen(path, "rb");
    if (in == NULL || fstat(fileno(in), &st) != 0) {
        MOON_ERROR("files: cannot read %s: %s", path, strerror(errno));
        if (in != NULL) {
            fclose(in);
        }
        moon_free(path);
        return MOON_ERR_IO;
    }
    data = moon_malloc((size_t)st.st_size + 1);
    if (data == NULL) {
        status = MOON_ERR_NO_MEMORY;
    } else if (fread(data, 1, (size_t)st.st_size, in) != (size_t)st.st_size) {
        MOON_ERROR("files: reading %s failed", path);
        moon_free(data);
        status = MOON_ERR_IO;
    } else {
        data[st.st_size] = '\0';
        *data_p          = data;
        *len_p           = (size_t)st.st_size;
    }
    fclose(in);
    moon_free(path);
    return status;
}

moon_status_t moon_gw_files_delete(moon_gw_files_t *files, const char *id)
{
    moon_status_t status = MOON_ERR_NOT_FOUND;
    char         *meta   = path_of(files, id, ".json");
    char         *data   = path_of(files, id, ".data");

    if (meta == NULL || data == NULL) {
        moon_free(meta);
        moon_free(data);
        return MOON_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&files->mu);
    for (size_t i = 0; i < files->n; i++) {
        if (strcmp(files->items[i].id, id) == 0) {
            /* the object first: a kill between the two leaves a .data the next open removes */
            unlink(meta);
            unlink(data);
            memmove(&files->items[i], &files->items[i + 1],
                    (files->n - i - 1) * sizeof(*files->items));
            files->n--;
            status = MOON_OK;
            break;
        }
    }
    pthread_mutex_unlock(&files->mu);
    moon_free(meta);
    moon_free(data);
    return status;
}

char *moon_gw_files_list_json(moon_gw_files_t *files, const char *purpose, size_t *len_p)
{
    moon_gw_buf_t buf;
    char         *text  = NULL;
    int           first = 1;

    moon_gw_buf_init(&buf);
    moon_gw_buf_puts(&buf, "{\"object\":\"list\",\"data\":[");
    pthread_mutex_lock(&files->mu);
    for (size_t i = files->n; i-- > 0;) {
        char *one;
        if (purpose != NULL && strcmp(files->items[i].purpose, purpose) != 0) {
            continue;
        }
        one = moon_gw_file_json(&files->items[i], NULL);
        if (one == NULL) {
            buf.failed = 1;
            break;
        }
        moon_gw_buf_puts(&buf, first ? "" : ",");
        moon_gw_buf_puts(&buf, one);
        moon_free(one);
        first = 0;
    }
    pthread_mutex_unlock(&files->mu);
    moon_gw_buf_puts(&buf, "],\"has_more\":false}");
    if (moon_gw_buf_take(&buf, &text, len_p) != MOON_OK) {
        return NULL;
    }
    return text;
}
