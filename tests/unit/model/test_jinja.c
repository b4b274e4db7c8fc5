/* tests/unit/model/test_jinja.c - the chat-template engine: each construct of
 * the subset, the errors (unsupported filter or tag with its line:col,
 * unclosed blocks, raise_exception's message, budgets), mutated templates
 * that must fail cleanly, and the goldens: each family's template
 * (tests/data/jinja) on a set of conversations, against what
 * @huggingface/jinja rendered (make_goldens.mjs). jinja_xcheck.sh runs
 * test_jinja --goldens DIR with goldens it has just regenerated. */
#include "moon_test.h"
#include "moonlet/alloc.h"
#include "moonlet/jinja.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DATA MOON_TEST_DATA_DIR "/jinja"

/* Renders tpl with vars; the output (malloc'd by moon_malloc) or NULL with
 * the status in *st and err filled. */
static char *render(const char *tpl, const char *vars, moon_status_t *st, moon_jinja_error_t *err)
{
    moon_jinja_t *t   = NULL;
    char         *out = NULL;

    *st = moon_jinja_parse(tpl, strlen(tpl), &t, err);
    if (*st != MOON_OK) {
        return NULL;
    }
    *st = moon_jinja_render(t, vars, vars != NULL ? strlen(vars) : 0, &out, NULL, err);
    moon_jinja_destroy(t);
    return out;
}

static void expect(const char *tpl, const char *vars, const char *want)
{
    moon_status_t      st;
    moon_jinja_error_t err;
    char              *out = render(tpl, vars, &st, &err);

    if (st != MOON_OK || strcmp(out, want) != 0) {
        printf("\n  template %s\n  want [%s]\n  got  [%s] (%s at %d:%d)\n", tpl, want,
               out != NULL ? out : "", err.msg, err.line, err.col);
    }
    CU_ASSERT_EQUAL(st, MOON_OK);
    CU_ASSERT(out != NULL && strcmp(out, want) == 0);
    moon_free(out);
}

static void expect_error(const char *tpl, const char *vars, moon_status_t want, int line, int col,
                         const char *msg_part)
{
    moon_status_t      st;
    moon_jinja_error_t err;
    char              *out = render(tpl, vars, &st, &err);

    if (st != want || strstr(err.msg, msg_part) == NULL || (line > 0 && err.line != line) ||
        (col > 0 && err.col != col)) {
        printf("\n  template %s\n  got status %d, %d:%d %s\n", tpl, st, err.line, err.col, err.msg);
    }
    CU_ASSERT_PTR_NULL(out);
    CU_ASSERT_EQUAL(st, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, msg_part));
    if (line > 0) {
        CU_ASSERT_EQUAL(err.line, line);
    }
    if (col > 0) {
        CU_ASSERT_EQUAL(err.col, col);
    }
    moon_free(out);
}

static void test_output_and_literals(void)
{
    expect("a{{ 'b' }}c{{ \"d\" 'e' }}", NULL, "abcde");
    expect("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 3 }}",
           NULL, "7 9 3 -4 1 8");
    expect("{{ 1.5 }} {{ 3 / 2 }} {{ true }} {{ none }} {{ x }}|", NULL, "1.5 1.5 True None |");
    expect("{{ [1, 'a', none] }} {{ {'k': [true]} }}", NULL, "[1, \"a\", null] {\"k\": [true]}");
    expect("{{ 'a' ~ 1 ~ none }} {{ 'x' + 'y' }} {{ 'ab' * 3 }}", NULL, "a1None xy ababab");
    expect("{{ 'a\\n\\t\\'' }}", NULL, "a\n\t'");
}

static void test_whitespace_control(void)
{
    /* trim_blocks and lstrip_blocks, as Hugging Face renders */
    expect("a\n  {% if true %}\nb\n  {% endif %}\nc\n", NULL, "a\nb\nc");
    expect("a  {{- ' b ' -}}  c", NULL, "a b c");
    expect("x {%- if true -%} \n y \n {%- endif %}", NULL, "xy");
    expect("a{# comment #}b {#- c -#} d", NULL, "abd");
}

static void test_conditionals(void)
{
    const char *t = "{% if n == 1 %}one{% elif n == 2 %}two{% elif n is none %}none{% else %}many"
                    "{% endif %}";

    expect(t, "{\"n\":1}", "one");
    expect(t, "{\"n\":2}", "two");
    expect(t, "{\"n\":null}", "none");
    expect(t, "{\"n\":9}", "many");
    expect("{{ 'y' if x else 'n' }}{{ 'z' if not x }}", "{\"x\":[]}", "nz");
    expect("{{ a and b }} {{ a or b }} {{ not a }}", "{\"a\":0,\"b\":\"s\"}", "0 s True");
    expect("{{ 1 < 2 }}{{ 2 <= 1 }}{{ 'a' < 'b' }}{{ 1 != 1.0 }}{{ 3 >= 3 }}", NULL,
           "TrueFalseTrueFalseTrue");
    expect("{{ 'b' in 'abc' }}{{ 2 in [1,2] }}{{ 'k' in {'k':1} }}{{ 3 not in [1] }}", NULL,
           "TrueTrueTrueTrue");
}

static void test_loops(void)
{
    expect("{% for x in xs %}{{ loop.index0 }}{{ loop.index }}{{ x }}"
           "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %};{% endfor %}",
           "{\"xs\":[\"a\",\"b\",\"c\"]}", "01aF;12b;23cL;");
    expect("{% for x in [] %}x{% else %}empty{% endfor %}", NULL, "empty");
    expect("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", "{\"d\":{\"a\":1,\"b\":2}}",
           "a=1,b=2,");
    expect("{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}", "{\"d\":{\"a\":1}}", "a1");
    expect("{% for x in range(5) if x is odd %}{{ x }}{{ loop.length }}{% endfor %}", NULL, "1232");
    expect("{% for x in range(9) %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}"
           "{% continue %}{% endif %}{{ x }}{% endfor %}",
           NULL, "02");
    /* a set inside a loop does not leak out; a namespace carries it */
    expect("{% set n = 0 %}{% set ns = namespace(n=0) %}{% for x in [1,2] %}{% set n = n + x %}"
           "{% set ns.n = ns.n + x %}{% endfor %}{{ n }} {{ ns.n }}",
           NULL, "0 3");
    expect("{% for m in ms[::-1] %}{{ m }}{% endfor %}{{ ms[1:] }}{{ ms[-1] }}{{ ms[:-1] }}",
           "{\"ms\":[1,2,3]}", "321[2, 3]3[1, 2]");
}

static void test_set_and_macros(void)
{
    expect("{% set x = 'a' %}{% set y %}[{{ x }}]{% endset %}{{ y }}{{ y | length }}", NULL,
           "[a]3");
    expect("{% macro greet(name, p='Hi') %}{{ p }} {{ name }}{% endmacro %}"
           "{{ greet('Ann') }}, {{ greet('Bo', p='Yo') }}, {{ greet(name='Cy') }}",
           NULL, "Hi Ann, Yo Bo, Hi Cy");
}

static void test_filters(void)
{
    expect("{{ '  a b  ' | trim }}|{{ 'Ab' | upper }}{{ 'Ab' | lower }}|{{ 'x' | length }}"
           "{{ 'été' | length }}",
           NULL, "a b|ABab|13");
    expect("{{ x | default('d') }}{{ '' | default('e', true) }}{{ 'v' | d('f') }}", NULL, "dev");
    expect("{{ ['a','b'] | join(', ') }}|{{ [1,2] | join }}|{{ 3 | string ~ 'x' }}", NULL,
           "a, b|12|3x");
    expect("{{ 'a-b-c' | replace('-', '+') }}{{ [3,1] | first }}{{ [3,1] | last }}"
           "{{ [1,2] | reverse | list }}",
           NULL, "a+b+c31[2, 1]");
    expect("{{ {'a': 'é\"\\n', 'b': [1, 2.5, true, none]} | tojson }}", NULL,
           "{\"a\": \"é\\\"\\n\", \"b\": [1, 2.5, true, null]}");
    expect("{{ {'a': [1]} | tojson(indent=2) }}", NULL, "{\n  \"a\": [\n    1\n  ]\n}");
    expect("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | join }}"
           "{{ ms | rejectattr('role', 'equalto', 'user') | list | length }}",
           "{\"ms\":[{\"role\":\"user\",\"c\":\"a\"},{\"role\":\"bot\",\"c\":\"b\"},"
           "{\"role\":\"user\",\"c\":\"c\"}]}",
           "ac1");
    expect("{{ 'ab' | capitalize }}{{ 'a b' | title }}{{ '3' | int + 1 }}{{ (-2) | abs }}{{ -2 | "
           "abs }}",
           NULL, "AbA B42-2");
}

static void test_methods_and_tests(void)
{
    expect("{{ ' x '.strip() }}{{ 'xxaxx'.lstrip('x') }}{{ 'a\\n'.rstrip() }}"
           "{{ 'a,b,c'.split(',') }}{{ 'a b  c'.split() | length }}",
           NULL, "xaxxa[\"a\", \"b\", \"c\"]3");
    expect("{{ 'hello'.startswith('he') }}{{ 'hello'.endswith('lo') }}"
           "{{ 'hello'.startswith(('x', 'h')) }}{{ 'AbC'.upper() }}{{ 'a'.replace('a', 'b') }}",
           NULL, "TrueTrueTrueABCb");
    expect("{{ d.get('a') }}{{ d.get('z', 0) }}{{ d.keys() | list }}{{ d['a'] }}{{ d.a }}",
           "{\"d\":{\"a\":1}}", "10[\"a\"]11");
    expect("{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ x is string }}"
           "{{ d is mapping }}{{ l is iterable }}{{ n is none }}{{ x is not none }}"
           "{{ 1 is number }}{{ 4 is divisibleby 2 }}{{ 'a' is equalto 'a' }}",
           "{\"x\":\"s\",\"d\":{},\"l\":[],\"n\":null}",
           "TrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrue");
    expect("{{ 'x' is false }}{{ false is false }}{{ true is true }}{{ not x is defined }}",
           "{\"x\":1}", "FalseTrueTrueFalse");
    expect("{{ strftime_now('%Y') | length }}", NULL, "4");
}

static void test_errors(void)
{
    expect_error("ab\n{{ x | frobnicate }}", NULL, MOON_ERR_UNSUPPORTED, 2, 8,
                 "unsupported filter 'frobnicate'");
    expect_error("{% if x is prime %}{% endif %}", NULL, MOON_ERR_UNSUPPORTED, 1, 12,
                 "unsupported test 'prime'");
    expect_error("x\n  {% include 'other' %}", NULL, MOON_ERR_UNSUPPORTED, 2, 6,
                 "unsupported tag 'include'");
    expect_error("{% for x in y recursive %}{% endfor %}", NULL, MOON_ERR_UNSUPPORTED, 1, 0,
                 "recursive");
    expect_error("a\n{% if x %}b{% for y in z %}", NULL, MOON_ERR_INVALID_PARAM, 2, 12,
                 "unclosed 'for' block");
    expect_error("{% if x %}b", NULL, MOON_ERR_INVALID_PARAM, 1, 1, "unclosed 'if' block");
    expect_error("{{ 'abc }}", NULL, MOON_ERR_INVALID_PARAM, 1, 4, "unterminated string");
    expect_error("{{ x ", NULL, MOON_ERR_INVALID_PARAM, 0, 0, "unclosed '{{'");
    expect_error("{% endif %}", NULL, MOON_ERR_INVALID_PARAM, 1, 4, "unexpected 'endif'");
    expect_error("{{ 1 + }}", NULL, MOON_ERR_INVALID_PARAM, 1, 8, "expected an expression");
    expect_error("{% bogus %}", NULL, MOON_ERR_INVALID_PARAM, 1, 4, "unknown tag 'bogus'");
    /* run time */
    expect_error("ok\n{{ raise_exception('Roles must alternate') }}", NULL, MOON_ERR_INVALID_PARAM,
                 2, 0, "Roles must alternate");
    expect_error("{{ 1 // 0 }}", NULL, MOON_ERR_INVALID_PARAM, 1, 0, "division by zero");
    expect_error("{{ 'a'.nomethod() }}", NULL, MOON_ERR_INVALID_PARAM, 1, 0, "no method");
    expect_error("{% set x.y = 1 %}", NULL, MOON_ERR_INVALID_PARAM, 1, 0, "not a namespace");
    expect_error("x", "[1]", MOON_ERR_INVALID_PARAM, 0, 0, "not a JSON object");
    expect_error("x", "{\"a\":", MOON_ERR_INVALID_PARAM, 0, 0, "not a JSON object");
    /* budgets: a runaway loop, a huge string, a macro calling itself */
    expect_error("{% for i in range(100000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                 NULL, MOON_ERR_NO_RESOURCE, 0, 0, "ran past");
    expect_error("{{ 'x' * 1000000000 }}", NULL, MOON_ERR_NO_RESOURCE, 0, 0, "");
    expect_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, MOON_ERR_NO_RESOURCE, 0,
                 0, "deeply");
}

/* Every prefix of a real template and every single-byte change of it either
 * parses or fails with a status: no crash, no leak (ASan runs this too). */
static void test_mutations(void)
{
    size_t   len;
    char    *src = moon_test_read_file(DATA "/qwen3.jinja", &len);
    char    *buf;
    uint64_t seed = 28;
    int      ok = 0, failed = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(src);
    buf = malloc(len + 1);
    for (size_t cut = 0; cut < len; cut += 7) {
        moon_jinja_t *t = NULL;
        if (moon_jinja_parse(src, cut, &t, NULL) == MOON_OK) {
            ok++;
            moon_jinja_destroy(t);
        } else {
            failed++;
        }
    }
    for (int i = 0; i < 2000; i++) {
        static const char bytes[] = "{}%#-|.()[]'\"x =,:~+";
        moon_jinja_t     *t       = NULL;
        char             *out     = NULL;
        memcpy(buf, src, len);
        for (int k = 0; k < 3; k++) {
            buf[moon_test_rand(&seed) % len] = bytes[moon_test_rand(&seed) % (sizeof(bytes) - 1)];
        }
        if (moon_jinja_parse(buf, len, &t, NULL) == MOON_OK) {
            const char *vars = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                               "\"add_generation_prompt\":true}";
            if (moon_jinja_render(t, vars, strlen(vars), &out, NULL, NULL) == MOON_OK) {
                moon_free(out);
            }
            moon_jinja_destroy(t);
            ok++;
        } else {
            failed++;
        }
    }
    CU_ASSERT(ok > 0 && failed > 0);
    free(buf);
    free(src);
}

/* One family's goldens in dir: 0 when all match. */
static int check_family(const char *dir, const char *name, const char *bos, const char *eos,
                        char **convs, size_t n_convs)
{
    char               path[512];
    char              *src, *gold, *line, *save = NULL;
    moon_jinja_t      *t = NULL;
    moon_jinja_error_t err;
    size_t             len, i = 0;
    int                bad = 0;

    snprintf(path, sizeof(path), "%s/%s.jinja", DATA, name);
    src = moon_test_read_file(path, &len);
    snprintf(path, sizeof(path), "%s/%s.golden", dir, name);
    gold = moon_test_read_file(path, NULL);
    if (src == NULL || gold == NULL) {
        printf("%s: cannot read the template or %s\n", name, path);
        free(src);
        free(gold);
        return 1;
    }
    if (moon_jinja_parse(src, len, &t, &err) != MOON_OK) {
        printf("%s: %d:%d %s\n", name, err.line, err.col, err.msg);
        free(src);
        free(gold);
        return 1;
    }
    for (line = strtok_r(gold, "\n", &save); line != NULL && i < n_convs;
         line = strtok_r(NULL, "\n", &save), i++) {
        cJSON        *want = cJSON_Parse(line), *vars = cJSON_Parse(convs[i]);
        char         *vtext, *out                     = NULL;
        moon_status_t st;

        if (strcmp(bos, "-") != 0) {
            cJSON_AddStringToObject(vars, "bos_token", bos);
        }
        if (strcmp(eos, "-") != 0) {
            cJSON_AddStringToObject(vars, "eos_token", eos);
        }
        vtext = cJSON_PrintUnformatted(vars);
        st    = moon_jinja_render(t, vtext, strlen(vtext), &out, NULL, &err);
        if (cJSON_IsString(want)) {
            if (st != MOON_OK || strcmp(out, want->valuestring) != 0) {
                printf("%s, conversation %zu differs:\n  want [%s]\n  got  [%s] %s\n", name, i + 1,
                       want->valuestring, out != NULL ? out : "", st != MOON_OK ? err.msg : "");
                bad++;
            }
        } else {
            cJSON *msg = cJSON_GetObjectItem(want, "error");
            if (st != MOON_ERR_INVALID_PARAM || !cJSON_IsString(msg) ||
                strcmp(err.msg, msg->valuestring) != 0) {
                printf("%s, conversation %zu: want the error [%s], got %d [%s]\n", name, i + 1,
                       cJSON_IsString(msg) ? msg->valuestring : "?", st, err.msg);
                bad++;
            }
        }
        moon_free(out);
        cJSON_free(vtext);
        cJSON_Delete(vars);
        cJSON_Delete(want);
    }
    if (i != n_convs) {
        printf("%s: %zu goldens for %zu conversations\n", name, i, n_convs);
        bad++;
    }
    moon_jinja_destroy(t);
    free(src);
    free(gold);
    return bad;
}

/* Every family of families.txt against the goldens in dir; the number that differ. */
static int check_goldens(const char *dir)
{
    char  *convs_text = moon_test_read_file(DATA "/conversations.jsonl", NULL);
    char  *fams       = moon_test_read_file(DATA "/families.txt", NULL);
    char  *convs[64], *save = NULL, *line;
    size_t n   = 0;
    int    bad = 0, families = 0;

    if (convs_text == NULL || fams == NULL) {
        free(convs_text);
        free(fams);
        return 1;
    }
    for (line = strtok_r(convs_text, "\n", &save); line != NULL && n < 64;
         line = strtok_r(NULL, "\n", &save)) {
        convs[n++] = line;
    }
    save = NULL;
    for (line = strtok_r(fams, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char name[64], bos[64], eos[64];
        if (sscanf(line, "%63s %63s %63s", name, bos, eos) == 3) {
            bad += check_family(dir, name, bos, eos, convs, n);
            families++;
        }
    }
    printf("jinja goldens in %s: %d families, %zu conversations, %d differ\n", dir, families, n,
           bad);
    free(convs_text);
    free(fams);
    return bad + (families == 0);
}

static void test_goldens(void)
{
    CU_ASSERT_EQUAL(check_goldens(DATA), 0);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--goldens") == 0) {
        return check_goldens(argv[2]) == 0 ? 0 : 1;
    }
    return MOON_TEST_RUN("jinja", NULL, NULL, test_output_and_literals, test_whitespace_control,
                         test_conditionals, test_loops, test_set_and_macros, test_filters,
                         test_methods_and_tests, test_errors, test_mutations, test_goldens);
}
