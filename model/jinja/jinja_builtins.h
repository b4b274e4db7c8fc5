/* model/jinja/jinja_builtins.h - the evaluator's state and the built-in
 * filters, tests, methods and global functions it calls. */
#ifndef MOON_MODEL_JINJA_BUILTINS_H
#define MOON_MODEL_JINJA_BUILTINS_H

#include "jinja_internal.h"

/* Arguments of a call: positional, then keyword. */
typedef struct {
    jj_value_t  *pos;
    size_t       n_pos;
    const char **kw;
    jj_value_t  *kwv;
    size_t       n_kw;
} jj_args_t;

typedef struct jj_eval jj_eval_t;

/* Stops the render at node `at` (may be NULL) with status and a message. */
_Noreturn void jj_eval_fail(jj_eval_t *e, const jj_node_t *at, moon_status_t status,
                            const char *fmt, ...) __attribute__((format(printf, 4, 5)));
jj_arena_t    *jj_eval_arena(jj_eval_t *e);
/* Counts one step of work against the render's budget. */
void jj_eval_step(jj_eval_t *e, const jj_node_t *at);

int jj_filter_known(const char *name);
int jj_test_known(const char *name);
/* positional argument i, else keyword kw, else NULL */
const jj_value_t *jj_arg(const jj_args_t *args, size_t i, const char *kw);

jj_value_t jj_filter(jj_eval_t *e, const jj_node_t *at, const char *name, jj_value_t v,
                     const jj_args_t *args);
int        jj_test(jj_eval_t *e, const jj_node_t *at, const char *name, const jj_value_t *v,
                   const jj_args_t *args);
/* v.name(args): string, dict and list methods */
jj_value_t jj_method(jj_eval_t *e, const jj_node_t *at, jj_value_t *self, const char *name,
                     const jj_args_t *args);
/* 1 when strings, lists and dicts have a method of that name */
int jj_has_method(const jj_value_t *self, const char *name);
/* raise_exception, namespace, range, strftime_now */
jj_value_t jj_call_func(jj_eval_t *e, const jj_node_t *at, const char *name, const jj_args_t *args);
int        jj_is_func(const char *name);

/* The value as a string value (Jinja's str()). */
jj_value_t jj_to_str(jj_eval_t *e, const jj_value_t *v);

#endif /* MOON_MODEL_JINJA_BUILTINS_H */
