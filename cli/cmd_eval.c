/* cli/cmd_eval.c — `qsync eval`. */
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "commands.h"
#include "precision_args.h"
#include "options.h"
#include "train/trainer.h"

int qs_cmd_eval(int argc, char **argv) {
    qs_eval_config c;
    qs_eval_config_defaults(&c);
    const char *precision = "fp32", *grad_rounding = NULL, *weight_scales = NULL;
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
        {"precision", QS_CLI_STR, &precision, "P", "precision of every Linear/Conv2d/MatMul: fp32 (default), bf16, int8, fp16, fp8"},
        {"plan", QS_CLI_STR, &c.plan, "FILE", "per-layer precisions from a plan file or a checkpoint (its training plan)"},
        {"allow-emulated", QS_CLI_FLAG, &c.allow_emulated, NULL, "permit precisions the backend only emulates (on the cpu: fp16, fp8, and bf16/int8 without AVX-512 BF16/VNNI; `qsync models` lists them)"},
        {"grad-rounding", QS_CLI_STR, &grad_rounding, "R", "stochastic or nearest (no effect on evaluation)"},
        {"weight-scales", QS_CLI_STR, &weight_scales, "S", "INT8 weight scales: tensor (default) or channel"},
        {"json", QS_CLI_FLAG, &json, NULL, "print the result as JSON"},
    };
    int rc = qs_cli_parse(argc, argv, 2, opts, (int)(sizeof opts / sizeof opts[0]), "eval",
                          "Evaluate a checkpoint on the test split of a dataset.");
    if (rc) return rc == 1 ? 0 : rc;
    if (!c.checkpoint) {
        fprintf(stderr, "qsync eval: --checkpoint is required\n");
        return 2;
    }
    if ((rc = qs_cli_precision_options("eval", precision, c.plan, grad_rounding, weight_scales, &c.precision,
                                       &c.grad_rounding, &c.weight_scales)))
        return rc;
    if (c.batch < 1) {
        fprintf(stderr, "qsync eval: --batch must be ≥ 1\n");
        return 2;
    }
    qs_logger lg;
    qs_logger_init(&lg, 0, 1, QS_LOG_INFO);
    c.log = &lg;
    qs_eval_result r;
    if (qs_eval_run(&c, &r) != QS_OK) return qs_cmd_fail("eval");
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "accuracy", r.accuracy);
        cJSON_AddNumberToObject(o, "loss", r.loss);
        cJSON_AddNumberToObject(o, "samples", (double)r.samples);
        if (r.precision) cJSON_AddItemToObject(o, "precision", r.precision);
        char *s = cJSON_Print(o);
        puts(s);
        free(s);
        cJSON_Delete(o);
    } else {
        printf("test accuracy %.2f%% (%lld samples), loss %.4f\n", 100.0 * r.accuracy, (long long)r.samples, r.loss);
        printf("precisions: %s\n", r.precision_line);
        cJSON_Delete(r.precision);
    }
    return 0;
}
