/* cli/main.c — `qsync <command> [options]`. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "qsync/status.h"

static void qs_main_help(FILE *f) {
    fputs("qsync — synchronous data-parallel training with per-operator precision\n\n"
          "usage: qsync <command> [options]   (qsync <command> --help for its options)\n\n"
          "commands:\n"
          "  train       train a built-in model on a dataset (data-parallel under mpirun)\n"
          "  eval        evaluate a checkpoint on a dataset's test split\n"
          "  models      list the built-in models, or print one's layers, shapes, parameters and FLOPs\n"
          "  bench       measure GEMM, layer, quantization and training-step throughput per precision\n"
          "  profile     measure a model's per-op costs at every precision for the predictor\n"
          "  simulate    predict a cluster's iteration time and memory for a precision plan from profiles\n"
          "  indicate    measure per layer and precision how much quantizing it hurts (the indicator)\n"
          "  sensitivity quantize one layer at a time and rank the indicator against the measured harm\n"
          "  plan        choose per device type the precisions that keep a hybrid cluster in step\n"
          "  run         the whole pipeline on a cluster: profile, indicate, plan, train against baselines, report\n"
          "  help        show this help\n",
          f);
}

int qs_cmd_fail(const char *cmd) {
    fprintf(stderr, "qsync %s: error: %s\n", cmd, qs_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        qs_main_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "train") == 0) return qs_cmd_train(argc, argv);
    if (strcmp(cmd, "eval") == 0) return qs_cmd_eval(argc, argv);
    if (strcmp(cmd, "models") == 0) return qs_cmd_models(argc, argv);
    if (strcmp(cmd, "bench") == 0) return qs_cmd_bench(argc, argv);
    if (strcmp(cmd, "profile") == 0) return qs_cmd_profile(argc, argv);
    if (strcmp(cmd, "simulate") == 0) return qs_cmd_simulate(argc, argv);
    if (strcmp(cmd, "indicate") == 0) return qs_cmd_indicate(argc, argv);
    if (strcmp(cmd, "sensitivity") == 0) return qs_cmd_sensitivity(argc, argv);
    if (strcmp(cmd, "plan") == 0) return qs_cmd_plan(argc, argv);
    if (strcmp(cmd, "run") == 0) return qs_cmd_run(argc, argv);
    fprintf(stderr, "qsync: unknown command '%s' (commands: train, eval, models, bench, profile, simulate, indicate, sensitivity, plan, run, help)\n", cmd);
    return 2;
}
