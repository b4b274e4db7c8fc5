/* actors/instance/calib_cache.c - the calibration cache: one small text file
 * per key, "calib-<hash>.txt", holding the key's text and the six fitted
 * coefficients (printed exactly, %.17g). */
#include "calib_cache.h"

#include "moonlet/hash.h"
#include "moonlet/log.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CALIB_FORMAT "moonlet-calibration 1"

static _Atomic unsigned tmp_seq;

/* The CPU's model name from /proc/cpuinfo ("?" elsewhere): a fit timed on
 * one processor says little about another. */
static void cpu_model(char *buf, size_t cap)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char  line[256];

    snprintf(buf, cap, "?");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon != NULL) {
            colon += strspn(colon + 1, " \t") + 1;
            colon[strcspn(colon, "\n|")] = '\0'; /* '|' separates the key's fields */
            snprintf(buf, cap, "%s", colon);
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
}

size_t moon_calib_key_text(const moon_calib_key_t *key, char *buf, size_t cap)
{
    char cpu[128];
    long pus = sysconf(_SC_NPROCESSORS_ONLN);
    int  n;

    cpu_model(cpu, sizeof(cpu));
    n = snprintf(buf, cap,
                 CALIB_FORMAT " | model %016llx | backend %u | threads %u | pin %u | batch %u | "
                              "chunk %u | ctx %u | fit %s%s | cpu %s | pus %ld",
                 (unsigned long long)key->model_id, (unsigned)key->backend, key->threads, key->pin,
                 key->max_batch, key->prefill_chunk, key->ctx, key->prefill ? "prefill" : "",
                 key->decode ? "decode" : "", cpu, pus);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* The key's file: its hash names it, not a defence (the file holds the
 * whole key, checked on reading). */
static int file_of(const char *dir, const char *text, char *path, size_t cap)
{
    int n =
        snprintf(path, cap, "%s/calib-%016llx.txt", dir, (unsigned long long)moon_hash_str(text));

    return n > 0 && (size_t)n < cap;
}

moon_status_t moon_calib_cache_load(const char *dir, const moon_calib_key_t *key,
                                    moon_sched_cost_t *cost)
{
    char   text[512], line[600], path[4096];
    double c[6];
    FILE  *f;
    int    ok;

    if (key->model_id == 0 || moon_calib_key_text(key, text, sizeof(text)) == 0 ||
        !file_of(dir, text, path, sizeof(path)) || (f = fopen(path, "r")) == NULL) {
        return MOON_ERR_NOT_FOUND;
    }
    ok = fgets(line, sizeof(line), f) != NULL && strcspn(line, "\n") == strlen(text) &&
         strncmp(line, text, strlen(text)) == 0 &&
         fscanf(f, "%lf %lf %lf %lf %lf %lf", &c[0], &c[1], &c[2], &c[3], &c[4], &c[5]) == 6;
    fclose(f);
    for (int i = 0; ok && i < 6; i++) {
        ok = isfinite(c[i]);
    }
    if (!ok) {
        MOON_WARN("calibration cache: %s is not this engine's fit or does not parse; "
                  "calibrating again",
                  path);
        return MOON_ERR_NOT_FOUND;
    }
    if (key->prefill) {
        cost->a0 = c[0], cost->a1 = c[1], cost->a2 = c[2];
    }
    if (key->decode) {
        cost->d0 = c[3], cost->d1 = c[4], cost->d2 = c[5];
    }
    MOON_INFO("calibration from %s (delete it to time the engine again)", path);
    return MOON_OK;
}

moon_status_t moon_calib_cache_store(const char *dir, const moon_calib_key_t *key,
                                     const moon_sched_cost_t *cost)
{
    char  text[512], path[4096], tmp[4200];
    FILE *f;
    int   ok;

    if (key->model_id == 0 || moon_calib_key_text(key, text, sizeof(text)) == 0 ||
        !file_of(dir, text, path, sizeof(path))) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        MOON_WARN("calibration cache: cannot create %s: %s", dir, strerror(errno));
        return MOON_ERR_IO;
    }
    /* one name per writer: ranks of one host, and instances of one process,
     * may file the same key at once */
    snprintf(tmp, sizeof(tmp), "%s.%ld.%u.tmp", path, (long)getpid(),
             atomic_fetch_add(&tmp_seq, 1));
    f  = fopen(tmp, "w");
    ok = f != NULL && fprintf(f, "%s\n%.17g %.17g %.17g %.17g %.17g %.17g\n", text, cost->a0,
                              cost->a1, cost->a2, cost->d0, cost->d1, cost->d2) > 0;
    ok = f != NULL && fclose(f) == 0 && ok && rename(tmp, path) == 0;
    if (!ok) {
        MOON_WARN("calibration cache: cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return MOON_ERR_IO;
    }
    return MOON_OK;
}
