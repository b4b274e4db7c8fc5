/* launch/cli/moonlet_main.c - the `moonlet` command line: a table of
 * subcommands. Append a row to add one. */
#include "commands.h"

#include <stdio.h>
#include <string.h>

static const moon_cmd_t commands[] = {
    {"config", moon_cmd_config, "print every option of every library, its value and its source"},
    {"convert", moon_cmd_convert, "convert a llama2.c checkpoint + tokenizer into GGUF"},
    {"gen-model", moon_cmd_gen_model,
     "write a random-weight model (llama, qwen2, qwen3) of any shape as GGUF"},
    {"quantize", moon_cmd_quantize,
     "write a GGUF model with its matrices in another type (Q4_K_M)"},
    {"perturb-model", moon_cmd_perturb_model,
     "copy a GGUF model with some tensors changed (a second version for weight pushes)"},
    {"generate", moon_cmd_generate, "generate a continuation of a prompt with a GGUF model"},
    {"serve", moon_cmd_serve, "run a serving cluster (under mpirun: one role per rank)"},
#ifdef MOON_WITH_BATCH
    {"batch", moon_cmd_batch, "answer an openai batch file (jsonl) through a serving cluster"},
#endif
    {"replay", moon_cmd_replay, "replay a Mooncake trace against a simulated cluster"},
    {"calibrate", moon_cmd_calibrate, "time the engine and write a profile fitted to this machine"},
#ifdef MOON_WITH_BENCH
    {"push-weights", moon_cmd_push_weights,
     "push new weights into a running cluster through its gateway (admin route)"},
    {"bench", moon_cmd_bench, "benchmark an OpenAI-compatible server (as vllm bench serve)"},
#endif
};

static void usage(FILE *f)
{
    fprintf(f, "usage: moonlet COMMAND [ARGS...]   (moonlet COMMAND --help; moonlet --version)\n"
               "\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("moonlet %s\n", MOON_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name) == 0) {
            return commands[i].fn(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "moonlet: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
