/* launch/cli/commands.h - the `moonlet` subcommands. Each takes the arguments
 * after its name (argv[0] is the subcommand name) and returns the process
 * exit status. To add one: declare it here and add a row to the table in
 * moonlet_main.c. */
#ifndef MOON_LAUNCH_COMMANDS_H
#define MOON_LAUNCH_COMMANDS_H

typedef int (*moon_cmd_fn)(int argc, char **argv);

typedef struct {
    const char *name;
    moon_cmd_fn fn;
    const char *help; /* one line */
} moon_cmd_t;

/* every library's options, values and sources (launch/cli/cmd_config.c) */
int moon_cmd_config(int argc, char **argv);

/* model engine (launch/cli/cmd_model.c) */
int moon_cmd_convert(int argc, char **argv);
int moon_cmd_gen_model(int argc, char **argv);
int moon_cmd_perturb_model(int argc, char **argv);
int moon_cmd_quantize(int argc, char **argv);
int moon_cmd_generate(int argc, char **argv);

/* serving (launch/cli/cmd_serve.c) */
int moon_cmd_serve(int argc, char **argv);
/* an OpenAI batch file through a cluster (launch/cli/cmd_batch.c) */
int moon_cmd_batch(int argc, char **argv);
/* trace replay (launch/cli/cmd_replay.c) */
int moon_cmd_replay(int argc, char **argv);
/* a profile fitted to this machine (launch/cli/cmd_calibrate.c) */
int moon_cmd_calibrate(int argc, char **argv);
/* serving benchmark client (launch/cli/cmd_bench.c; built with libcurl and cJSON) */
int moon_cmd_bench(int argc, char **argv);
/* weight pushes through a gateway's admin route (launch/cmd_push_weights.c; libcurl) */
int moon_cmd_push_weights(int argc, char **argv);

#endif /* MOON_LAUNCH_COMMANDS_H */
