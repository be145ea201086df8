/* cli/options.h — defines: table-driven command-line option parsing for the subcommands
 * (`--name value` or `--name=value`; flags take no value), with precise errors. */
#ifndef QSYNC_CLI_OPTIONS_H
#define QSYNC_CLI_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum qs_cli_type { QS_CLI_STR, QS_CLI_I64, QS_CLI_U64, QS_CLI_INT, QS_CLI_FLOAT, QS_CLI_DOUBLE, QS_CLI_FLAG, QS_CLI_NOFLAG } qs_cli_type;

typedef struct qs_cli_opt {
    const char *name;   /* without the leading "--" */
    qs_cli_type type;   /* QS_CLI_NOFLAG stores false into a bool */
    void *dest;         /* const char **, int64_t *, uint64_t *, int *, float *, double *, bool * */
    const char *arg;    /* value placeholder for help, e.g. "N" */
    const char *help;
} qs_cli_opt;

/* Parse argv[first..argc) against opts. Returns 0, or 2 after printing an error naming the
 * option and the expected value to stderr. `--help` prints usage and returns 1. */
int qs_cli_parse(int argc, char **argv, int first, const qs_cli_opt *opts, int n, const char *cmd,
                 const char *summary);
void qs_cli_usage(FILE *f, const char *cmd, const char *summary, const qs_cli_opt *opts, int n);

/* --device: "cpu" → *cuda false; "cuda" → device 0; "cuda:N" → device N. False for anything else. */
bool qs_cli_parse_device(const char *text, bool *cuda, int *device);

#endif
