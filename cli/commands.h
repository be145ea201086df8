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

/* Print "qsync <cmd>: error: <last error>" to stderr and return 1. */
int qs_cmd_fail(const char *cmd);

#endif
