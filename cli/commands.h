/* cli/commands.h — defines: the subcommand entry points. Each returns the process exit code:
 * 0 success, 1 a runtime error (message printed), 2 a usage error. */
#ifndef QSYNC_CLI_COMMANDS_H
#define QSYNC_CLI_COMMANDS_H

int qs_cmd_train(int argc, char **argv);
int qs_cmd_eval(int argc, char **argv);
int qs_cmd_models(int argc, char **argv);
int qs_cmd_bench(int argc, char **argv);
int qs_cmd_profile(int argc, char **argv);
int qs_cmd_simulate(int argc, char **argv);
int qs_cmd_indicate(int argc, char **argv);
int qs_cmd_sensitivity(int argc, char **argv);
int qs_cmd_plan(int argc, char **argv);
int qs_cmd_run(int argc, char **argv);

/* Check and translate the precision options shared by train and eval (--precision, --plan,
 * --grad-rounding, --weight-scales); 0, or 2 after printing a usage error naming the option. */
#include <stdbool.h>
#include "plan/plan_file.h"
int qs_cli_precision_options(const char *cmd, const char *precision, const char *plan, const char *grad_rounding,
                             const char *weight_scales, qs_precision *p, qs_grad_rounding *gr, qs_weight_scales *ws);
/* --fp8-scaling MODE of command cmd into *history (qs_fp8_scaling_parse); 0, or 2 after a
 * usage message. */
int qs_cli_fp8_scaling(const char *cmd, const char *mode, int *history);

/* Print "qsync <cmd>: error: <last error>" to stderr and return 1. */
int qs_cmd_fail(const char *cmd);

#endif
