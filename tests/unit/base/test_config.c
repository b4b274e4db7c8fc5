/* tests/unit/runtime/test_config.c - configuration tables: strict parsing of
 * every type, precedence (flag > caller > env > default), every error path,
 * positional arguments, help, values and markdown output. */
#include "moonlet/alloc.h"
#include "moonlet/config.h"

#include "moon_test.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int         verbose;
    uint32_t    count;
    uint64_t    big;
    double      ratio;
    uint64_t    bytes;
    const char *name;
    int         mode;
} opts_t;

static const char *const mode_choices[] = {"fast", "slow", "auto", NULL};

static const moon_config_field_t opt_fields[] = {
    {"verbose", MOON_CONFIG_BOOL, MOON_CONFIG_AT(opts_t, verbose), .dflt = "0", .doc = "talk more"},
    {"count", MOON_CONFIG_U32, MOON_CONFIG_AT(opts_t, count), .dflt = "8", .doc = "how many",
     .min = 1, .max = 100},
    {"big", MOON_CONFIG_U64, MOON_CONFIG_AT(opts_t, big), .dflt = "0", .doc = "a large number"},
    {"ratio", MOON_CONFIG_DOUBLE, MOON_CONFIG_AT(opts_t, ratio), .dflt = "0.5", .doc = "a fraction",
     .dmax = 1},
    {"bytes", MOON_CONFIG_SIZE, MOON_CONFIG_AT(opts_t, bytes), .dflt = "256k",
     .doc = "a buffer size", .min = 4096, .max = 1ull << 30},
    {"name", MOON_CONFIG_STRING, MOON_CONFIG_AT(opts_t, name), .dflt = NULL, .doc = "a label"},
    {"mode", MOON_CONFIG_ENUM, MOON_CONFIG_AT(opts_t, mode), .dflt = "auto", .doc = "the mode",
     .choices = mode_choices},
    MOON_CONFIG_END,
};
static const moon_config_table_t opt_table = {"test", "options of the test", "MOONTEST_",
                                              opt_fields};

typedef struct {
    uint32_t other;
} other_t;
static const moon_config_field_t other_fields[] = {
    {"other", MOON_CONFIG_U32, MOON_CONFIG_AT(other_t, other), .dflt = "3", .doc = "flags only"},
    MOON_CONFIG_END,
};
static const moon_config_table_t other_table = {"other", "a second table", NULL, other_fields};

static const char *const env_names[] = {"MOONTEST_VERBOSE", "MOONTEST_COUNT", "MOONTEST_BIG",
                                        "MOONTEST_RATIO",   "MOONTEST_BYTES", "MOONTEST_NAME",
                                        "MOONTEST_MODE",    "MOONTEST_OTHER"};

static void clear_env(void)
{
    for (size_t i = 0; i < MOON_ARRAY_SIZE(env_names); i++) {
        unsetenv(env_names[i]);
    }
}

/* A parser over opt_table (at its defaults, or as the caller left o). */
static moon_config_t *make(opts_t *o, int fill_defaults)
{
    moon_config_t *cfg = NULL;

    if (fill_defaults) {
        CU_ASSERT_EQUAL_FATAL(moon_config_defaults(&opt_table, o), MOON_OK);
    }
    CU_ASSERT_EQUAL_FATAL(moon_config_create(&cfg), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_config_add(cfg, &opt_table, o), MOON_OK);
    return cfg;
}

/* Parses argv (NULL-terminated, argv[0] included) into a fresh opts_t. */
static moon_status_t parse_args(opts_t *o, moon_config_t **cfg_p, const char **argv)
{
    int argc = 0;

    while (argv[argc] != NULL) {
        argc++;
    }
    *cfg_p = make(o, 1);
    return moon_config_parse(*cfg_p, argc, (char **)argv);
}

/* The error of parsing argv must contain every string of want (NULL-ended). */
static void expect_error(const char **argv, const char *want1, const char *want2)
{
    opts_t         o;
    moon_config_t *cfg;

    CU_ASSERT_EQUAL(parse_args(&o, &cfg, argv), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NOT_NULL(strstr(moon_config_error(cfg), want1));
    if (want2 != NULL) {
        CU_ASSERT_PTR_NOT_NULL(strstr(moon_config_error(cfg), want2));
    }
    if (strstr(moon_config_error(cfg), want1) == NULL ||
        (want2 != NULL && strstr(moon_config_error(cfg), want2) == NULL)) {
        fprintf(stderr, "unexpected error: %s\n", moon_config_error(cfg));
    }
    moon_config_destroy(cfg);
}

static void test_defaults_fill_every_type(void)
{
    opts_t o;

    memset(&o, 0xff, sizeof(o));
    CU_ASSERT_EQUAL_FATAL(moon_config_defaults(&opt_table, &o), MOON_OK);
    CU_ASSERT_EQUAL(o.verbose, 0);
    CU_ASSERT_EQUAL(o.count, 8);
    CU_ASSERT_EQUAL(o.big, 0);
    CU_ASSERT_DOUBLE_EQUAL(o.ratio, 0.5, 0);
    CU_ASSERT_EQUAL(o.bytes, 256u << 10);
    CU_ASSERT_PTR_NULL(o.name);
    CU_ASSERT_EQUAL(o.mode, 2);
}

static void test_parse_every_type(void)
{
    const char *argv[] = {"prog",    "--verbose", "--count", "100",  "--big=18446744073709551615",
                          "--ratio", "1e-1",      "--bytes", "1MiB", "--name=",
                          "--mode",  "SLOW",      NULL};
    opts_t      o;
    moon_config_t *cfg;

    CU_ASSERT_EQUAL_FATAL(parse_args(&o, &cfg, argv), MOON_OK);
    CU_ASSERT_EQUAL(o.verbose, 1);
    CU_ASSERT_EQUAL(o.count, 100);
    CU_ASSERT_EQUAL(o.big, UINT64_MAX);
    CU_ASSERT_DOUBLE_EQUAL(o.ratio, 0.1, 1e-12);
    CU_ASSERT_EQUAL(o.bytes, 1u << 20);
    CU_ASSERT_STRING_EQUAL(o.name, "");
    CU_ASSERT_EQUAL(o.mode, 1);
    CU_ASSERT_EQUAL(moon_config_source(cfg, "count"), MOON_CONFIG_SRC_FLAG);
    CU_ASSERT_EQUAL(moon_config_source(cfg, "nope"), -1);
    CU_ASSERT_EQUAL(moon_config_n_args(cfg), 0);
    CU_ASSERT_STRING_EQUAL(moon_config_error(cfg), "");
    moon_config_destroy(cfg);
}

static void test_bool_forms_and_negation(void)
{
    const char    *on[]  = {"prog", "--verbose=yes", NULL};
    const char    *off[] = {"prog", "--verbose", "--no-verbose", NULL};
    const char    *eq[]  = {"prog", "--verbose=OFF", NULL};
    opts_t         o;
    moon_config_t *cfg;

    CU_ASSERT_EQUAL(parse_args(&o, &cfg, on), MOON_OK);
    CU_ASSERT_EQUAL(o.verbose, 1);
    moon_config_destroy(cfg);
    CU_ASSERT_EQUAL(parse_args(&o, &cfg, off), MOON_OK);
    CU_ASSERT_EQUAL(o.verbose, 0);
    moon_config_destroy(cfg);
    CU_ASSERT_EQUAL(parse_args(&o, &cfg, eq), MOON_OK);
    CU_ASSERT_EQUAL(o.verbose, 0);
    moon_config_destroy(cfg);
}

static void test_size_units(void)
{
    static const struct {
        const char *text;
        uint64_t    bytes;
    } cases[] = {{"4096", 4096},   {"8k", 8192},     {"8K", 8192},       {"8kb", 8192},
                 {"2m", 2u << 20}, {"1g", 1u << 30}, {"1GiB", 1u << 30}, {"4096b", 4096}};

    for (size_t i = 0; i < MOON_ARRAY_SIZE(cases); i++) {
        const char    *argv[] = {"prog", "--bytes", cases[i].text, NULL};
        opts_t         o;
        moon_config_t *cfg;
        CU_ASSERT_EQUAL(parse_args(&o, &cfg, argv), MOON_OK);
        CU_ASSERT_EQUAL(o.bytes, cases[i].bytes);
        moon_config_destroy(cfg);
    }
}

static void test_positionals_and_double_dash(void)
{
    const char    *argv[] = {"prog", "a", "--count", "5", "-", "b", "--", "--count", "-x", NULL};
    opts_t         o;
    moon_config_t *cfg;

    CU_ASSERT_EQUAL_FATAL(parse_args(&o, &cfg, argv), MOON_OK);
    CU_ASSERT_EQUAL(o.count, 5);
    CU_ASSERT_EQUAL_FATAL(moon_config_n_args(cfg), 5);
    CU_ASSERT_STRING_EQUAL(moon_config_arg(cfg, 0), "a");
    CU_ASSERT_STRING_EQUAL(moon_config_arg(cfg, 1), "-");
    CU_ASSERT_STRING_EQUAL(moon_config_arg(cfg, 2), "b");
    CU_ASSERT_STRING_EQUAL(moon_config_arg(cfg, 3), "--count");
    CU_ASSERT_STRING_EQUAL(moon_config_arg(cfg, 4), "-x");
    CU_ASSERT_PTR_NULL(moon_config_arg(cfg, 5));
    CU_ASSERT_PTR_NULL(moon_config_arg(cfg, -1));
    moon_config_destroy(cfg);
}

static void test_value_may_start_with_dash(void)
{
    const char    *argv[] = {"prog", "--name", "-", "--mode", "fast", NULL};
    opts_t         o;
    moon_config_t *cfg;

    CU_ASSERT_EQUAL_FATAL(parse_args(&o, &cfg, argv), MOON_OK);
    CU_ASSERT_STRING_EQUAL(o.name, "-");
    CU_ASSERT_EQUAL(o.mode, 0);
    moon_config_destroy(cfg);
}

static void test_help_flag(void)
{
    const char    *argv[] = {"prog", "--help", NULL};
    const char    *argh[] = {"prog", "-h", NULL};
    opts_t         o;
    moon_config_t *cfg;

    CU_ASSERT_EQUAL(parse_args(&o, &cfg, argv), MOON_OK);
    CU_ASSERT(moon_config_help_requested(cfg));
    moon_config_destroy(cfg);
    CU_ASSERT_EQUAL(parse_args(&o, &cfg, argh), MOON_OK);
    CU_ASSERT(moon_config_help_requested(cfg));
    moon_config_destroy(cfg);
}

static void test_precedence_flag_caller_env_default(void)
{
    const char    *argv[] = {"prog", "--big", "9", NULL};
    opts_t         o;
    moon_config_t *cfg;

    clear_env();
    setenv("MOONTEST_COUNT", "40", 1);   /* count: env over the default */
    setenv("MOONTEST_RATIO", "0.25", 1); /* ratio: the caller wins over env */
    setenv("MOONTEST_BIG", "7", 1);      /* big: the flag wins over env */
    setenv("MOONTEST_MODE", "fast", 1);  /* mode: pinned by moon_config_set at its default */
    CU_ASSERT_EQUAL_FATAL(moon_config_defaults(&opt_table, &o), MOON_OK);
    o.ratio = 0.75;
    cfg     = make(&o, 0);
    CU_ASSERT_EQUAL(moon_config_source(cfg, "ratio"), MOON_CONFIG_SRC_CALLER);
    CU_ASSERT_EQUAL(moon_config_set(cfg, "mode", "auto"), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_config_parse(cfg, 3, (char **)argv), MOON_OK);
    CU_ASSERT_EQUAL(o.count, 40);
    CU_ASSERT_DOUBLE_EQUAL(o.ratio, 0.75, 0);
    CU_ASSERT_EQUAL(o.big, 9);
    CU_ASSERT_EQUAL(o.mode, 2);
    CU_ASSERT_EQUAL(o.bytes, 256u << 10);
    CU_ASSERT_EQUAL(moon_config_source(cfg, "count"), MOON_CONFIG_SRC_ENV);
    CU_ASSERT_EQUAL(moon_config_source(cfg, "ratio"), MOON_CONFIG_SRC_CALLER);
    CU_ASSERT_EQUAL(moon_config_source(cfg, "big"), MOON_CONFIG_SRC_FLAG);
    CU_ASSERT_EQUAL(moon_config_source(cfg, "mode"), MOON_CONFIG_SRC_CALLER);
    CU_ASSERT_EQUAL(moon_config_source(cfg, "bytes"), MOON_CONFIG_SRC_DEFAULT);
    CU_ASSERT_STRING_EQUAL(moon_config_source_str(MOON_CONFIG_SRC_ENV), "env");
    CU_ASSERT_STRING_EQUAL(moon_config_source_str((moon_config_source_t)9), "?");
    moon_config_destroy(cfg);
    clear_env();
}

static void test_set_errors(void)
{
    opts_t         o;
    moon_config_t *cfg = make(&o, 1);

    CU_ASSERT_EQUAL(moon_config_set(cfg, "nope", "1"), MOON_ERR_NOT_FOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(moon_config_error(cfg), "nope"));
    CU_ASSERT_EQUAL(moon_config_set(cfg, "count", "0"), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NOT_NULL(strstr(moon_config_error(cfg), "[1, 100]"));
    CU_ASSERT_EQUAL(o.count, 8); /* a refused value changes nothing */
    CU_ASSERT_EQUAL(moon_config_set(NULL, "count", "1"), MOON_ERR_INVALID_PARAM);
    moon_config_destroy(cfg);
}

static void test_malformed_values_name_the_flag(void)
{
    const char *abc[]   = {"prog", "--count", "abc", NULL};
    const char *x5[]    = {"prog", "--count", "5x", NULL};
    const char *neg[]   = {"prog", "--count", "-1", NULL};
    const char *plus[]  = {"prog", "--count", "+5", NULL};
    const char *space[] = {"prog", "--count", " 5", NULL};
    const char *empty[] = {"prog", "--count=", NULL};
    const char *range[] = {"prog", "--count", "101", NULL};
    const char *zero[]  = {"prog", "--count", "0", NULL};
    const char *over[]  = {"prog", "--big", "18446744073709551616", NULL};
    const char *hex[]   = {"prog", "--big", "0x10", NULL};
    const char *inf[]   = {"prog", "--ratio", "inf", NULL};
    const char *nan[]   = {"prog", "--ratio", "nan", NULL};
    const char *two[]   = {"prog", "--ratio", "2", NULL};
    const char *dneg[]  = {"prog", "--ratio=-0.5", NULL};
    const char *dtail[] = {"prog", "--ratio", "0.5x", NULL};
    const char *unit[]  = {"prog", "--bytes", "1q", NULL};
    const char *small[] = {"prog", "--bytes", "1k", NULL};
    const char *huge[]  = {"prog", "--bytes", "99999999999t", NULL};
    const char *mode[]  = {"prog", "--mode", "bogus", NULL};
    const char *bval[]  = {"prog", "--verbose=maybe", NULL};

    expect_error(abc, "--count: 'abc'", "[1, 100]");
    expect_error(x5, "--count: '5x'", "[1, 100]");
    expect_error(neg, "--count: '-1'", "[1, 100]");
    expect_error(plus, "--count: '+5'", NULL);
    expect_error(space, "--count: ' 5'", NULL);
    expect_error(empty, "--count: ''", NULL);
    expect_error(range, "--count: '101'", "[1, 100]");
    expect_error(zero, "--count: '0'", NULL);
    expect_error(over, "--big: '18446744073709551616'", "an integer >= 0");
    expect_error(hex, "--big: '0x10'", NULL);
    expect_error(inf, "--ratio: 'inf'", "[0, 1]");
    expect_error(nan, "--ratio: 'nan'", NULL);
    expect_error(two, "--ratio: '2'", "[0, 1]");
    expect_error(dneg, "--ratio: '-0.5'", NULL);
    expect_error(dtail, "--ratio: '0.5x'", NULL);
    expect_error(unit, "--bytes: '1q'", "[4k, 1g]");
    expect_error(small, "--bytes: '1k'", "[4k, 1g]");
    expect_error(huge, "--bytes", NULL);
    expect_error(mode, "--mode: 'bogus'", "fast|slow|auto");
    expect_error(bval, "--verbose: 'maybe'", "true/false");
}

static void test_unknown_and_missing(void)
{
    const char *unknown[] = {"prog", "--colour", "red", NULL};
    const char *unk_eq[]  = {"prog", "--colour=red", NULL};
    const char *shortf[]  = {"prog", "-p", "Once", NULL};
    const char *missing[] = {"prog", "--count", NULL};
    const char *no_u32[]  = {"prog", "--no-count", NULL};
    const char *no_eq[]   = {"prog", "--no-verbose=1", NULL};

    expect_error(unknown, "unknown option '--colour'", NULL);
    expect_error(unk_eq, "unknown option '--colour'", NULL);
    expect_error(shortf, "unknown option '-p'", NULL);
    expect_error(missing, "--count needs a value", "[1, 100]");
    expect_error(no_u32, "unknown option '--no-count'", NULL);
    expect_error(no_eq, "unknown option '--no-verbose'", NULL);
}

static void test_malformed_env_names_the_variable(void)
{
    opts_t         o;
    moon_config_t *cfg;

    clear_env();
    setenv("MOONTEST_BYTES", "12x", 1);
    cfg = make(&o, 1);
    CU_ASSERT_EQUAL(moon_config_parse(cfg, 0, NULL), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NOT_NULL(strstr(moon_config_error(cfg), "MOONTEST_BYTES: '12x'"));
    moon_config_destroy(cfg);
    CU_ASSERT_EQUAL(moon_config_defaults(&opt_table, &o), MOON_OK);
    CU_ASSERT_EQUAL(moon_config_load_env(&opt_table, &o), MOON_ERR_INVALID_PARAM);
    /* a library's one-shot: the defaults stay whole when a variable is bad */
    o.count = 99;
    o.bytes = 1;
    CU_ASSERT_EQUAL(moon_config_from_env(&opt_table, &o), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(o.count, 8);
    CU_ASSERT_EQUAL(o.bytes, 256 << 10);
    CU_ASSERT_EQUAL(moon_config_from_env(NULL, &o), MOON_ERR_INVALID_PARAM);
    setenv("MOONTEST_BYTES", "8k", 1);
    CU_ASSERT_EQUAL(moon_config_load_env(&opt_table, &o), MOON_OK);
    CU_ASSERT_EQUAL(o.bytes, 8192);
    setenv("MOONTEST_COUNT", "3", 1);
    CU_ASSERT_EQUAL(moon_config_from_env(&opt_table, &o), MOON_OK);
    CU_ASSERT_EQUAL(o.count, 3);
    CU_ASSERT_EQUAL(o.bytes, 8192);
    clear_env();
}

/* What print writes for cfg, as a string in buf; 0 if no stream opens. */
static int print_to(void (*print)(const moon_config_t *, FILE *), const moon_config_t *cfg,
                    char *buf, size_t n)
{
    FILE *f = fmemopen(buf, n, "w");

    if (f == NULL) {
        return 0;
    }
    print(cfg, f);
    fclose(f);
    return 1;
}

static void test_two_tables_and_flag_only_table(void)
{
    opts_t         o;
    other_t        x;
    moon_config_t *cfg;
    const char    *argv[] = {"prog", "--other", "4", "--count", "2", NULL};
    char           buf[4096];

    clear_env();
    setenv("MOONTEST_OTHER", "9", 1); /* the table has no prefix: never read */
    cfg = make(&o, 1);
    CU_ASSERT_EQUAL_FATAL(moon_config_defaults(&other_table, &x), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_config_add(cfg, &other_table, &x), MOON_OK);
    CU_ASSERT_EQUAL(moon_config_parse(cfg, 0, NULL), MOON_OK);
    CU_ASSERT_EQUAL(x.other, 3);
    CU_ASSERT_EQUAL(moon_config_parse(cfg, 5, (char **)argv), MOON_OK);
    CU_ASSERT_EQUAL(x.other, 4);
    CU_ASSERT_EQUAL(o.count, 2);
    /* help lists both tables, in order, with defaults, ranges, choices, env */
    CU_ASSERT_FATAL(print_to(moon_config_print_help, cfg, buf, sizeof(buf)));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "test options (options of the test):"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "other options (a second table):"));
    CU_ASSERT(strstr(buf, "test options") < strstr(buf, "other options"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "--[no-]verbose"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "--count N"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "default 8; an integer in [1, 100]; env MOONTEST_COUNT"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "default 256k; a size"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "one of fast|slow|auto"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "default unset; a string"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "flags only"));
    CU_ASSERT_PTR_NULL(strstr(buf, "MOONTEST_OTHER"));
    /* values and their sources */
    CU_ASSERT_FATAL(print_to(moon_config_print_values, cfg, buf, sizeof(buf)));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "count"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "flag\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "256k"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "(unset)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "auto"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "false"));
    /* markdown: one table per table */
    CU_ASSERT_FATAL(print_to(moon_config_print_markdown, cfg, buf, sizeof(buf)));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "**test** (options of the test)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "| `--count` | `MOONTEST_COUNT` | `8` |"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "| `--other` | - | `3` |"));
    moon_config_destroy(cfg);
    clear_env();
}

typedef struct {
    uint64_t wrong;
} bad_t;

static void test_malformed_tables_refused(void)
{
    static const moon_config_field_t size_rows[] = {
        {"wrong", MOON_CONFIG_U32, MOON_CONFIG_AT(bad_t, wrong), .dflt = "1", .doc = "x"},
        MOON_CONFIG_END};
    static const moon_config_field_t dflt_rows[] = {
        {"wrong", MOON_CONFIG_U64, MOON_CONFIG_AT(bad_t, wrong), .dflt = "1x", .doc = "x"},
        MOON_CONFIG_END};
    static const moon_config_field_t name_rows[] = {
        {"Wrong_name", MOON_CONFIG_U64, MOON_CONFIG_AT(bad_t, wrong), .dflt = "1", .doc = "x"},
        MOON_CONFIG_END};
    static const moon_config_field_t dup_rows[] = {
        {"count", MOON_CONFIG_U64, MOON_CONFIG_AT(bad_t, wrong), .dflt = "1", .doc = "x"},
        MOON_CONFIG_END};
    static const moon_config_table_t bad_size = {"bad", "x", NULL, size_rows};
    static const moon_config_table_t bad_dflt = {"bad", "x", NULL, dflt_rows};
    static const moon_config_table_t bad_name = {"bad", "x", NULL, name_rows};
    static const moon_config_table_t dup      = {"dup", "x", NULL, dup_rows};
    bad_t                            b        = {0};
    opts_t                           o;
    moon_config_t                   *cfg = make(&o, 1);

    CU_ASSERT_EQUAL(moon_config_defaults(&bad_size, &b), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_config_defaults(&bad_dflt, &b), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_config_defaults(&bad_name, &b), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_config_defaults(NULL, &b), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_config_add(cfg, &bad_size, &b), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_config_add(cfg, &dup, &b), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(moon_config_error(cfg), "--count declared by tables test and dup"));
    CU_ASSERT_EQUAL(moon_config_add(cfg, &opt_table, &o), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_config_add(cfg, NULL, &o), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_config_parse(cfg, -1, NULL), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_config_create(NULL), MOON_ERR_INVALID_PARAM);
    moon_config_destroy(cfg);
    moon_config_destroy(NULL);
}

static void test_table_limit(void)
{
    static other_t      xs[17];
    moon_config_t      *cfg = NULL;
    moon_config_field_t rows[17][2];
    moon_config_table_t tables[17];
    char                names[17][16];

    CU_ASSERT_EQUAL_FATAL(moon_config_create(&cfg), MOON_OK);
    for (int i = 0; i < 17; i++) {
        snprintf(names[i], sizeof(names[i]), "o%d", i);
        rows[i][0] = (moon_config_field_t){names[i], MOON_CONFIG_U32,
                                           MOON_CONFIG_AT(other_t, other), .dflt = "1", .doc = "x"};
        rows[i][1] = (moon_config_field_t)MOON_CONFIG_END;
        tables[i]  = (moon_config_table_t){names[i], "x", NULL, rows[i]};
        CU_ASSERT_EQUAL(moon_config_add(cfg, &tables[i], &xs[i]),
                        i < 16 ? MOON_OK : MOON_ERR_NO_RESOURCE);
    }
    moon_config_destroy(cfg);
}

static void test_allocation_failures(void)
{
    opts_t         o;
    moon_config_t *cfg    = NULL;
    const char    *argv[] = {"prog", "--count", "3", NULL};

    moon_fault_fail_after(1);
    CU_ASSERT_EQUAL(moon_config_create(&cfg), MOON_ERR_NO_MEMORY);
    CU_ASSERT_PTR_NULL(cfg);
    moon_fault_reset();
    CU_ASSERT_EQUAL_FATAL(moon_config_defaults(&opt_table, &o), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_config_create(&cfg), MOON_OK);
    moon_fault_fail_after(1);
    CU_ASSERT_EQUAL(moon_config_add(cfg, &opt_table, &o), MOON_ERR_NO_MEMORY);
    moon_fault_reset();
    CU_ASSERT_EQUAL_FATAL(moon_config_add(cfg, &opt_table, &o), MOON_OK);
    moon_fault_fail_after(1);
    CU_ASSERT_EQUAL(moon_config_parse(cfg, 3, (char **)argv), MOON_ERR_NO_MEMORY);
    moon_fault_reset();
    CU_ASSERT_EQUAL(moon_config_parse(cfg, 3, (char **)argv), MOON_OK);
    CU_ASSERT_EQUAL(o.count, 3);
    moon_config_destroy(cfg);
    moon_fault_fail_after(1);
    CU_ASSERT_EQUAL(moon_config_load_env(&opt_table, &o), MOON_ERR_NO_MEMORY);
    moon_fault_reset();
}

static void test_foreign_env(void)
{
    setenv("MOONTEST_FOREIGN", "x", 1);
    CU_ASSERT_STRING_EQUAL(moon_config_foreign_env("MOONTEST_FOREIGN"), "x");
    unsetenv("MOONTEST_FOREIGN");
    CU_ASSERT_PTR_NULL(moon_config_foreign_env("MOONTEST_FOREIGN"));
    CU_ASSERT_PTR_NULL(moon_config_foreign_env(NULL));
}

MOON_TEST_MAIN("config", NULL, NULL, test_defaults_fill_every_type, test_parse_every_type,
               test_bool_forms_and_negation, test_size_units, test_positionals_and_double_dash,
               test_value_may_start_with_dash, test_help_flag,
               test_precedence_flag_caller_env_default, test_set_errors,
               test_malformed_values_name_the_flag, test_unknown_and_missing,
               test_malformed_env_names_the_variable, test_two_tables_and_flag_only_table,
               test_malformed_tables_refused, test_table_limit, test_allocation_failures,
               test_foreign_env)
