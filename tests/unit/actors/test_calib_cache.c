/* tests/unit/actors/test_calib_cache.c - the calibration cache: a fit filed
 * under its key comes back exactly; another key, a damaged file or an
 * unknown model is a miss; an unwritable folder is an error, not a crash. */
#include "calib_cache.h"
#include "moon_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[64];

static int setup(void)
{
    snprintf(g_dir, sizeof(g_dir), "/tmp/moon_calib_XXXXXX");
    return mkdtemp(g_dir) != NULL ? 0 : -1;
}

static int teardown(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static moon_calib_key_t key_of(void)
{
    return (moon_calib_key_t){.model_id      = 0x1234abcdull,
                              .backend       = MOON_BACKEND_CPU,
                              .threads       = 2,
                              .pin           = 1,
                              .max_batch     = 32,
                              .prefill_chunk = 128,
                              .ctx           = 512,
                              .prefill       = 1,
                              .decode        = 1};
}

static const moon_sched_cost_t g_fit = {
    .a0 = 1e-4, .a1 = 6.6e-6 / 3, .a2 = 4.5e-8, .d0 = 6.5e-6, .d1 = 1.5e-5, .d2 = 1.75e-7};

static void test_round_trip(void)
{
    moon_calib_key_t  k   = key_of();
    moon_sched_cost_t got = {0};

    CU_ASSERT_EQUAL(moon_calib_cache_load(g_dir, &k, &got), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL_FATAL(moon_calib_cache_store(g_dir, &k, &g_fit), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_calib_cache_load(g_dir, &k, &got), MOON_OK);
    /* printed with 17 digits: the same doubles */
    CU_ASSERT(got.a0 == g_fit.a0 && got.a1 == g_fit.a1 && got.a2 == g_fit.a2);
    CU_ASSERT(got.d0 == g_fit.d0 && got.d1 == g_fit.d1 && got.d2 == g_fit.d2);
    /* a prefill-only key fills only a0..a2 */
    k.decode = 0;
    CU_ASSERT_EQUAL_FATAL(moon_calib_cache_store(g_dir, &k, &g_fit), MOON_OK);
    got = (moon_sched_cost_t){.d0 = 7.0};
    CU_ASSERT_EQUAL_FATAL(moon_calib_cache_load(g_dir, &k, &got), MOON_OK);
    CU_ASSERT(got.a2 == g_fit.a2 && got.d0 == 7.0 && got.d1 == 0.0);
}

static void test_other_keys_miss(void)
{
    moon_calib_key_t  k = key_of(), o;
    moon_sched_cost_t got;
    char              a[512], b[512];

    CU_ASSERT_EQUAL_FATAL(moon_calib_cache_store(g_dir, &k, &g_fit), MOON_OK);
    /* each field the times depend on changes the key */
    for (int f = 0; f < 8; f++) {
        o = k;
        switch (f) {
        case 0:
            o.model_id++;
            break;
        case 1:
            o.backend = MOON_BACKEND_REF;
            break;
        case 2:
            o.threads = 4;
            break;
        case 3:
            o.pin = 0;
            break;
        case 4:
            o.max_batch = 64;
            break;
        case 5:
            o.prefill_chunk = 256;
            break;
        case 6:
            o.ctx = 4096;
            break;
        default:
            o.prefill = 0;
            break;
        }
        CU_ASSERT_NOT_EQUAL(moon_calib_key_text(&o, a, sizeof(a)), 0);
        CU_ASSERT_NOT_EQUAL(moon_calib_key_text(&k, b, sizeof(b)), 0);
        CU_ASSERT(strcmp(a, b) != 0);
        CU_ASSERT_EQUAL(moon_calib_cache_load(g_dir, &o, &got), MOON_ERR_NOT_FOUND);
    }
    /* an unknown model (id 0) is never filed nor found */
    o          = k;
    o.model_id = 0;
    CU_ASSERT_EQUAL(moon_calib_cache_store(g_dir, &o, &g_fit), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_calib_cache_load(g_dir, &o, &got), MOON_ERR_NOT_FOUND);
    /* a key too long for its buffer: 0, not a cut key */
    CU_ASSERT_EQUAL(moon_calib_key_text(&k, a, 16), 0);
}

/* Rewrites every cache file in the folder with text. */
static void damage(const char *text)
{
    char  cmd[256];
    FILE *f;

    snprintf(cmd, sizeof(cmd), "ls %s/calib-*.txt", g_dir);
    f = popen(cmd, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    while (fgets(cmd, sizeof(cmd), f) != NULL) {
        FILE *w;
        cmd[strcspn(cmd, "\n")] = '\0';
        w                       = fopen(cmd, "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(w);
        fputs(text, w);
        fclose(w);
    }
    pclose(f);
}

static void test_damaged_files_miss(void)
{
    moon_calib_key_t  k = key_of();
    moon_sched_cost_t got;
    char              text[512], line[700];
    const char       *bad[4];

    CU_ASSERT_EQUAL_FATAL(moon_calib_cache_store(g_dir, &k, &g_fit), MOON_OK);
    CU_ASSERT_NOT_EQUAL_FATAL(moon_calib_key_text(&k, text, sizeof(text)), 0);
    bad[0] = "";
    snprintf(line, sizeof(line), "%s\n1 2 3\n", text); /* cut short */
    bad[1] = line;
    bad[2] = "moonlet-calibration 1 | another key\n1 2 3 4 5 6\n";
    bad[3] = NULL;
    for (int i = 0; bad[i] != NULL; i++) {
        damage(bad[i]);
        CU_ASSERT_EQUAL(moon_calib_cache_load(g_dir, &k, &got), MOON_ERR_NOT_FOUND);
    }
    snprintf(line, sizeof(line), "%s\n1 2 nan 4 5 6\n", text);
    damage(line);
    CU_ASSERT_EQUAL(moon_calib_cache_load(g_dir, &k, &got), MOON_ERR_NOT_FOUND);
    /* filed again, it reads back */
    CU_ASSERT_EQUAL_FATAL(moon_calib_cache_store(g_dir, &k, &g_fit), MOON_OK);
    CU_ASSERT_EQUAL(moon_calib_cache_load(g_dir, &k, &got), MOON_OK);
}

static void test_unwritable_folder(void)
{
    moon_calib_key_t k = key_of();
    char             file[96];
    FILE            *f;

    /* a folder under a plain file cannot be made */
    snprintf(file, sizeof(file), "%s/plain", g_dir);
    f = fopen(file, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fclose(f);
    strcat(file, "/cache");
    CU_ASSERT_EQUAL(moon_calib_cache_store(file, &k, &g_fit), MOON_ERR_IO);
}

MOON_TEST_MAIN("calib_cache", setup, teardown, test_round_trip, test_other_keys_miss,
               test_damaged_files_miss, test_unwritable_folder)
