/* actors/gateway/gw_files.h - the file store behind /v1/files: uploaded batch
 * inputs and the batches' output and error files, kept under DIR/files/ so a
 * server restarted on the same --data-dir lists them again.
 *
 * Each file is two entries: ID.data (its bytes) and ID.json (its OpenAI file
 * object). Both are written to a temporary name, fsynced and renamed, data
 * first: a file exists once its .json does, and a .data without one (a kill
 * during an upload) is removed at the next open. The index lives in memory,
 * under a mutex: any thread. */
#ifndef MOON_ACTORS_GW_FILES_H
#define MOON_ACTORS_GW_FILES_H

#include "moonlet/defs.h"
#include "moonlet/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct moon_gw_files moon_gw_files_t;

/* One file's object ({"id","object":"file","bytes","created_at","filename",
 * "purpose","status":"processed"}). */
typedef struct {
    char     id[64];
    char     filename[256];
    char     purpose[32];
    uint64_t bytes;
    int64_t  created_at; /* unix seconds */
} moon_gw_file_info_t;

/* Opens (creating it) DIR/files and reads its index. dir borrowed for the
 * call. MOON_ERR_IO (logged): the folder cannot be made or read;
 * MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_files_open(const char *dir, moon_gw_files_t **files_p);
/* Frees the index (the files stay on disk). NULL: no-op. */
void moon_gw_files_close(moon_gw_files_t *files);

/* Stores data[0..len) as a new file; *info_p (optional) gets its object.
 * MOON_ERR_IO (logged; errno ENOSPC: the disk is full, *errno_p gets it):
 * nothing stored; MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_files_put(moon_gw_files_t *files, const char *filename, const char *purpose,
                                const char *data, size_t len, moon_gw_file_info_t *info_p,
                                int *errno_p);
/* Moves the file at path (on the same file system, e.g. a batch's folder)
 * into the store under id (an id already there is replaced: a finalizing
 * step run again stores the same file once). MOON_ERR_IO (logged). */
moon_status_t moon_gw_files_adopt(moon_gw_files_t *files, const char *id, const char *filename,
                                  const char *purpose, const char *path,
                                  moon_gw_file_info_t *info_p);
/* The object of id. MOON_ERR_NOT_FOUND. */
moon_status_t moon_gw_files_get(moon_gw_files_t *files, const char *id,
                                moon_gw_file_info_t *info_p);
/* The path of id's bytes (moon_malloc'd; valid until it is deleted).
 * MOON_ERR_NOT_FOUND, MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_files_path(moon_gw_files_t *files, const char *id, char **path_p);
/* id's bytes, moon_malloc'd (NUL-terminated beyond len). MOON_ERR_NOT_FOUND,
 * MOON_ERR_IO (logged), MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_files_read(moon_gw_files_t *files, const char *id, char **data_p,
                                 size_t *len_p);
/* Deletes id. MOON_ERR_NOT_FOUND. */
moon_status_t moon_gw_files_delete(moon_gw_files_t *files, const char *id);

/* The file object as JSON (moon_malloc'd, NULL when out of memory). */
char *moon_gw_file_json(const moon_gw_file_info_t *info, size_t *len_p);
/* {"object":"list","data":[...],"has_more":false}, newest first; purpose
 * NULL: all. moon_malloc'd, NULL when out of memory. */
char *moon_gw_files_list_json(moon_gw_files_t *files, const char *purpose, size_t *len_p);

#endif /* MOON_ACTORS_GW_FILES_H */
