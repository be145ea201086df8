/* cli/cmd_eval.c — `qsync eval`. */
#include <stdio.h>

#include "commands.h"
#include "options.h"
#include "train/trainer.h"

int qs_cmd_eval(int argc, char **argv) {
    qs_eval_config c = {.data = "fashion-mnist", .batch = 256};
    bool json = false;
    qs_cli_opt opts[] = {
        {"checkpoint", QS_CLI_STR, &c.checkpoint, "PATH", "checkpoint directory or model.safetensors (required)"},
        {"data", QS_CLI_STR, &c.data, "NAME", "dataset (default fashion-mnist)"},
        {"data-dir", QS_CLI_STR, &c.data_dir, "DIR", "dataset directory"},
        {"batch", QS_CLI_I64, &c.batch, "N", "batch size (default 256)"},
        {"eval-subset", QS_CLI_I64, &c.eval_subset, "N", "first N test samples only"},
        {"threads", QS_CLI_INT, &c.threads, "N", "compute threads"},
        {"logits-out", QS_CLI_STR, &c.logits_out, "FILE", "write logits and labels as safetensors"},
        {"no-fuse", QS_CLI_FLAG, &c.no_fuse, NULL, "keep BatchNorm and ReLU as separate ops"},
        {"json", QS_CLI_FLAG, &json, NULL, "print the result as JSON"},
    };
    int rc = qs_cli_parse(argc, argv, 2, opts, (int)(sizeof opts / sizeof opts[0]), "eval",
                          "Evaluate a checkpoint on the test split of a dataset.");
    if (rc) return rc == 1 ? 0 : rc;
    if (!c.checkpoint) {
        fprintf(stderr, "qsync eval: --checkpoint is required\n");
        return 2;
    }
    if (c.batch < 1) {
        fprintf(stderr, "qsync eval: --batch must be ≥ 1\n");
        return 2;
    }
    qs_logger lg;
    qs_logger_init(&lg, 0, 1, QS_LOG_INFO);
    c.log = &lg;
    qs_eval_result r;
    if (qs_eval_run(&c, &r) != QS_OK) return qs_cmd_fail("eval");
    if (json)
        printf("{\"accuracy\": %.6f, \"loss\": %.6f, \"samples\": %lld}\n", r.accuracy, r.loss, (long long)r.samples);
    else
        printf("test accuracy %.2f%% (%lld samples), loss %.4f\n", 100.0 * r.accuracy, (long long)r.samples, r.loss);
    return 0;
}
