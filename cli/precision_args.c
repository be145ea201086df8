/* cli/precision_args.c — the precision options shared by train, eval and run (see
 * precision_args.h). */
#include "precision_args.h"

#include <stdio.h>

int qs_cli_precision_options(const char *cmd, const char *precision, const char *plan, const char *grad_rounding,
                             const char *weight_scales, qs_precision *p, qs_grad_rounding *gr, qs_weight_scales *ws) {
    if (!qs_precision_parse(precision, p)) {
        fprintf(stderr, "qsync %s: --precision must be one of fp32, bf16, fp16, fp8, int8 (tf32 on GPUs) (got '%s')\n",
                cmd, precision);
        return 2;
    }
    if (plan && *p != QS_PREC_FP32) {
        fprintf(stderr, "qsync %s: --plan and --precision %s are mutually exclusive: a plan gives every layer its "
                "precision (set \"default\": \"%s\" in it for the layers it does not list)\n", cmd, precision, precision);
        return 2;
    }
    *gr = QS_GRAD_ROUND_UNSET;
    *ws = QS_WEIGHT_SCALES_UNSET;
    if (grad_rounding && !qs_grad_rounding_parse(grad_rounding, gr)) {
        fprintf(stderr, "qsync %s: --grad-rounding must be stochastic or nearest (got '%s')\n", cmd, grad_rounding);
        return 2;
    }
    if (weight_scales && !qs_weight_scales_parse(weight_scales, ws)) {
        fprintf(stderr, "qsync %s: --weight-scales must be tensor or channel (got '%s')\n", cmd, weight_scales);
        return 2;
    }
    return 0;
}

int qs_cli_fp8_scaling(const char *cmd, const char *mode, int *history) {
    if (qs_fp8_scaling_parse(mode, history)) return 0;
    fprintf(stderr, "qsync %s: --fp8-scaling must be current, delayed or delayed:N with N in 1..%d (got '%s')\n", cmd,
            QS_FP8_AMAX_HISTORY_MAX, mode);
    return 2;
}
