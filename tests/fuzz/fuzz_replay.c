/* tests/fuzz/fuzz_replay.c - replays a fuzz target's corpus without libFuzzer:
 * `fuzz_X_replay DIR` feeds every file of DIR to LLVMFuzzerTestOneInput once
 * and fails when the folder is missing or empty (a corpus that vanished is a
 * test that cannot fail). Crashes and sanitizer reports fail the test by
 * themselves. */
#include "fuzz_target.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int replay_file(const char *path)
{
    FILE    *f = fopen(path, "rb");
    uint8_t *d = NULL;
    long     n;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0 || (d = malloc((size_t)n + 1)) == NULL ||
        fread(d, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "fuzz replay: cannot read %s\n", path);
        if (f != NULL) {
            fclose(f);
        }
        free(d);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(d, (size_t)n);
    free(d);
    return 0;
}

int main(int argc, char **argv)
{
    DIR           *dir;
    struct dirent *e;
    char           path[4096];
    int            n = 0, bad = 0;

    if (argc != 2 || (dir = opendir(argv[1])) == NULL) {
        fprintf(stderr, "usage: %s CORPUS_DIR (an existing folder)\n", argv[0]);
        return 2;
    }
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
        bad |= replay_file(path) != 0;
        n++;
    }
    closedir(dir);
    printf("fuzz replay: %d inputs from %s\n", n, argv[1]);
    return n == 0 || bad ? 1 : 0;
}
