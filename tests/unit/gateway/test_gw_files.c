/* tests/unit/gateway/test_gw_files.c - the Batch API's pieces without a
 * cluster: multipart/form-data bodies (good, quoted, malformed) and the file
 * store (put, read, list, delete, reopen, an unfinished upload removed). */
#include "gw_files.h"
#include "gw_multipart.h"
#include "moon_test.h"
#include "moonlet/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CT "multipart/form-data; boundary=XyZ"

static void test_multipart_parts(void)
{
    static const char body[] = "--XyZ\r\n"
                               "Content-Disposition: form-data; name=\"purpose\"\r\n\r\n"
                               "batch\r\n"
                               "--XyZ\r\n"
                               "Content-Disposition: form-data; name=\"file\"; "
                               "filename=\"in \\\"a\\\".jsonl\"\r\n"
                               "Content-Type: application/octet-stream\r\n\r\n"
                               "{\"a\":1}\r\n--X\r\n"
                               "--XyZ--\r\n";
    moon_gw_part_t    parts[4];
    unsigned          n   = 0;
    const char       *why = NULL;

    CU_ASSERT_EQUAL_FATAL(moon_gw_multipart_parse(CT, body, sizeof(body) - 1, parts, 4, &n, &why),
                          MOON_OK);
    CU_ASSERT_EQUAL_FATAL(n, 2);
    CU_ASSERT_STRING_EQUAL(parts[0].name, "purpose");
    CU_ASSERT_FALSE(parts[0].has_filename);
    CU_ASSERT_EQUAL(parts[0].len, 5);
    CU_ASSERT_NSTRING_EQUAL(parts[0].data, "batch", 5);
    CU_ASSERT_STRING_EQUAL(parts[1].name, "file");
    CU_ASSERT_TRUE(parts[1].has_filename);
    CU_ASSERT_STRING_EQUAL(parts[1].filename, "in \"a\".jsonl");
    /* a line that starts like the delimiter but is not it stays data */
    CU_ASSERT_EQUAL(parts[1].len, strlen("{\"a\":1}\r\n--X"));
    /* a quoted boundary */
    CU_ASSERT_EQUAL(moon_gw_multipart_parse("multipart/form-data; boundary=\"XyZ\"", body,
                                            sizeof(body) - 1, parts, 4, &n, &why),
                    MOON_OK);
    CU_ASSERT_EQUAL(n, 2);
}

static void test_multipart_refused(void)
{
    static const char ok[]     = "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n"
                                 "--XyZ--\r\n";
    static const char open[]   = "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx";
    static const char noname[] = "--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--\r\n";
    moon_gw_part_t    parts[1];
    unsigned          n   = 0;
    const char       *why = NULL;

    CU_ASSERT_EQUAL(
        moon_gw_multipart_parse("application/json", ok, sizeof(ok) - 1, parts, 1, &n, &why),
        MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NOT_NULL(why);
    CU_ASSERT_EQUAL(
        moon_gw_multipart_parse("multipart/form-data", ok, sizeof(ok) - 1, parts, 1, &n, &why),
        MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gw_multipart_parse(NULL, ok, sizeof(ok) - 1, parts, 1, &n, &why),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gw_multipart_parse(CT, open, sizeof(open) - 1, parts, 1, &n, &why),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gw_multipart_parse(CT, noname, sizeof(noname) - 1, parts, 1, &n, &why),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gw_multipart_parse(CT, "", 0, parts, 1, &n, &why), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gw_multipart_parse(CT, ok, sizeof(ok) - 1, parts, 0, &n, &why),
                    MOON_ERR_INVALID_PARAM); /* more parts than room */
    CU_ASSERT_EQUAL(moon_gw_multipart_parse(CT, ok, sizeof(ok) - 1, parts, 1, &n, &why), MOON_OK);
}

static void test_store_survives_reopen(void)
{
    char                dir[] = "/tmp/moon_gw_files_XXXXXX";
    moon_gw_files_t    *f     = NULL;
    moon_gw_file_info_t a, b, got;
    char               *data = NULL, *list, *path = NULL, cmd[128];
    size_t              len = 0;
    FILE               *stray;

    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    CU_ASSERT_EQUAL_FATAL(moon_gw_files_open(dir, &f), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_gw_files_put(f, "a.jsonl", "batch", "abc\n", 4, &a, NULL), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_gw_files_put(f, "b.jsonl", "batch", "", 0, &b, NULL), MOON_OK);
    CU_ASSERT_STRING_NOT_EQUAL(a.id, b.id);
    CU_ASSERT_EQUAL(strncmp(a.id, "file-", 5), 0);
    CU_ASSERT_EQUAL(moon_gw_files_read(f, a.id, &data, &len), MOON_OK);
    CU_ASSERT_EQUAL(len, 4);
    CU_ASSERT_STRING_EQUAL(data, "abc\n");
    moon_free(data);
    CU_ASSERT_EQUAL(moon_gw_files_get(f, "file-nope", &got), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_gw_files_delete(f, b.id), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_files_delete(f, b.id), MOON_ERR_NOT_FOUND);
    moon_gw_files_close(f);
    /* an upload killed before its object was written */
    snprintf(cmd, sizeof(cmd), "%s/files/file-stray.data", dir);
    stray = fopen(cmd, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(stray);
    fputs("half", stray);
    fclose(stray);
    f = NULL;
    CU_ASSERT_EQUAL_FATAL(moon_gw_files_open(dir, &f), MOON_OK);
    CU_ASSERT_EQUAL(access(cmd, F_OK), -1);
    CU_ASSERT_EQUAL(moon_gw_files_get(f, a.id, &got), MOON_OK);
    CU_ASSERT_STRING_EQUAL(got.filename, "a.jsonl");
    CU_ASSERT_STRING_EQUAL(got.purpose, "batch");
    CU_ASSERT_EQUAL(got.bytes, 4);
    CU_ASSERT_EQUAL(moon_gw_files_get(f, b.id, &got), MOON_ERR_NOT_FOUND);
    list = moon_gw_files_list_json(f, NULL, &len);
    CU_ASSERT_PTR_NOT_NULL(strstr(list, a.id));
    CU_ASSERT_PTR_NULL(strstr(list, b.id));
    moon_free(list);
    /* adopt: a file moved in under a given id, twice (a finalize run again) */
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof(cmd), "%s/out.tmp", dir);
        stray = fopen(cmd, "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(stray);
        fputs("xy", stray);
        fclose(stray);
        CU_ASSERT_EQUAL(
            moon_gw_files_adopt(f, "file-x-output", "o.jsonl", "batch_output", cmd, &got), MOON_OK);
    }
    list = moon_gw_files_list_json(f, "batch_output", &len);
    CU_ASSERT_PTR_NOT_NULL(strstr(list, "file-x-output"));
    CU_ASSERT_PTR_NULL(strstr(strstr(list, "file-x-output") + 1, "file-x-output\""));
    CU_ASSERT_PTR_NULL(strstr(list, a.id));
    moon_free(list);
    CU_ASSERT_EQUAL(moon_gw_files_path(f, "file-x-output", &path), MOON_OK);
    moon_free(path);
    moon_gw_files_close(f);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

MOON_TEST_MAIN("gw_files", NULL, NULL, test_multipart_parts, test_multipart_refused,
               test_store_survives_reopen);
