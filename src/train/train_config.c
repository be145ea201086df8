/* src/train/train_config.c — defines: the defaults of `qsync train`'s configuration and the
 * precision options and plan loading it shares with `qsync eval` (train/trainer.h). */
#include "train/trainer.h"

#include <string.h>
#include <sys/stat.h>

#include "graph/precision.h"
#include "io/cluster.h"
#include "train/checkpoint.h"

/* Contract: train/trainer.h (the defaults it lists). */
void qs_train_config_defaults(qs_train_config *c) {
    memset(c, 0, sizeof *c);
    c->model = "cnn";
    c->data = "fashion-mnist";
    c->epochs = 1;
    c->batch = 128;
    c->bucket_bytes = (size_t)25 << 20;
    c->collective_timeout_s = 300;
    c->rebalance_every = 20;
    c->optim.kind = QS_OPTIM_SGD;
    c->optim.lr = 0.1f;
    c->optim.momentum = 0.9f;
    c->optim.nesterov = true;
    c->optim.weight_decay = 5e-4f;
    c->optim.beta1 = 0.9;
    c->optim.beta2 = 0.999;
    c->optim.eps = 1e-8f;
    c->lr_schedule = "cosine";
    c->warmup_steps = -1;
    c->seed = 1;
    c->log_every = 50;
    c->precision = QS_PREC_FP32;
    c->grad_rounding = QS_GRAD_ROUND_UNSET;
    c->weight_scales = QS_WEIGHT_SCALES_UNSET;
    c->emulation_calibration_steps = QS_CLUSTER_DEFAULT_CALIBRATION_STEPS;
}

/* A plan file, or a checkpoint (a directory or a .safetensors file) whose recorded plan is taken. */
qs_status qs_train_load_plan(const char *path, qs_plan *out) {
    struct stat sb;
    size_t n = strlen(path);
    bool ckpt = (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) ||
                (n > 12 && strcmp(path + n - 12, ".safetensors") == 0);
    return ckpt ? qs_checkpoint_read_plan(path, out) : qs_plan_read(path, out);
}

/* Default options with the run's uniform precision and the shared precision fields. */
void qs_train_precision_options(qs_precision precision, bool allow_emulated, qs_grad_rounding gr, qs_weight_scales ws,
                         qs_precision_options *out) {
    qs_precision_options_default(out);
    out->uniform = precision;
    out->allow_emulated = allow_emulated;
    out->grad_rounding = gr;
    out->weight_scales = ws;
}
