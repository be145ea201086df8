/* cli/precision_args.h — defines: checking and translating the precision options that several
 * commands share (--precision, --plan, --grad-rounding, --weight-scales, --fp8-scaling). */
#ifndef QSYNC_CLI_PRECISION_ARGS_H
#define QSYNC_CLI_PRECISION_ARGS_H

#include "graph/precision_setup.h"

/* --precision, --plan, --grad-rounding and --weight-scales of command cmd into *p, *gr and
 * *ws; 0, or 2 after printing a usage error naming the option. */
int qs_cli_precision_options(const char *cmd, const char *precision, const char *plan, const char *grad_rounding,
                             const char *weight_scales, qs_precision *p, qs_grad_rounding *gr, qs_weight_scales *ws);
/* --fp8-scaling MODE of command cmd into *history (qs_fp8_scaling_parse); 0, or 2 after a
 * usage message. */
int qs_cli_fp8_scaling(const char *cmd, const char *mode, int *history);

#endif
