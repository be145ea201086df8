/* src/optim/loss_scale.h — defines: loss scaling for low-precision gradients (FP16 above all):
 * the backward pass runs on loss·scale so that small gradients stay representable; the
 * gradients are then checked for non-finite values, unscaled (·1/scale) before clipping and
 * the optimizer, and an overflowing step is skipped.
 *
 * Modes:
 *  - none:    scale 1, no check (the plain FP32 path, bit for bit).
 *  - static:  a fixed scale; a step with non-finite gradients is skipped, the scale kept.
 *  - dynamic: PyTorch's GradScaler: start at `scale` (default 2^16); an overflow skips the
 *             step and multiplies the scale by backoff_factor (0.5); after growth_interval
 *             (default 2000) consecutive good steps it is multiplied by growth_factor (2).
 *             Powers of two keep scaling and unscaling exact.
 * A skipped step still consumes its batch and advances the learning-rate schedule (as with
 * PyTorch's GradScaler, where scheduler.step() runs regardless); only the optimizer update
 * (and its step count, so AdamW's bias correction) is skipped.
 *
 * Overflow is detected by one sum of squares over the whole gradient buffer (NaN/Inf
 * propagate into it), and also when the backward pass itself fails because a quantizer met a
 * non-finite value (QS_ERR_INVALID_ARG with "non-finite" in the message: S8/FP8 quantization
 * refuses NaN/Inf rather than clamping them). */
#ifndef QSYNC_OPTIM_LOSS_SCALE_H
#define QSYNC_OPTIM_LOSS_SCALE_H

#include <stdbool.h>
#include <stdint.h>
#include "qsync/status.h"
#include "graph/graph.h"
#include "optim/optim.h"

typedef enum qs_loss_scale_mode { QS_LOSS_SCALE_NONE = 0, QS_LOSS_SCALE_STATIC, QS_LOSS_SCALE_DYNAMIC } qs_loss_scale_mode;

#define QS_LOSS_SCALE_INIT 65536.0f          /* 2^16, PyTorch GradScaler's init_scale */
#define QS_LOSS_SCALE_GROWTH_INTERVAL 2000
/* Below this scale a dynamic scaler gives up: the gradients are non-finite for another reason
 * than overflow (the model diverged). 2^-24. */
#define QS_LOSS_SCALE_MIN 5.9604644775390625e-08f

typedef struct qs_loss_scaler {
    qs_loss_scale_mode mode;
    float scale;              /* current scale (1 for none) */
    float growth_factor;      /* 2 */
    float backoff_factor;     /* 0.5 */
    int64_t growth_interval;  /* good steps before growing */
    int64_t good_steps;       /* consecutive finite steps since the scale last changed */
    int64_t skipped;          /* steps skipped for non-finite gradients, in total */
    bool last_skipped;        /* the last step was skipped */
} qs_loss_scaler;

/* mode with initial scale `scale` (ignored for none) and growth interval (≤ 0: the default). */
void qs_loss_scaler_init(qs_loss_scaler *ls, qs_loss_scale_mode mode, float scale, int64_t growth_interval);

/* Parse "none", "dynamic", "dynamic:INIT" or a positive number N (static scale N); INIT and
 * N must be finite and > 0. QS_ERR_INVALID_ARG with the accepted forms otherwise. */
qs_status qs_loss_scaler_parse(const char *text, int64_t growth_interval, qs_loss_scaler *out);

const char *qs_loss_scale_mode_name(qs_loss_scale_mode m);   /* "none", "static", "dynamic" */
/* Parse a mode name; false if unknown. */
bool qs_loss_scale_mode_parse(const char *s, qs_loss_scale_mode *out);

/* The factor to pass to qs_model_backward (1 for none). */
float qs_loss_scaler_factor(const qs_loss_scaler *ls);

/* Check n floats of gradients at `grads` (the whole gradient buffer) for non-finite values
 * with one sum of squares; if finite, multiply them by 1/scale (unless the scale is 1).
 * *finite receives the verdict; *norm (may be NULL) the unscaled global L2 norm (NaN/Inf
 * when not finite). */
qs_status qs_loss_scaler_unscale(const qs_loss_scaler *ls, qs_backend *be, qs_stream *s, float *grads, int64_t n,
                                 bool *finite, double *norm);

/* Record a step's verdict: a finite step counts towards growth (dynamic: the scale grows
 * after growth_interval of them); a non-finite one is counted as skipped and (dynamic) backs
 * the scale off. Fails (QS_ERR_INVALID_ARG, "diverged") when a dynamic scale falls below
 * QS_LOSS_SCALE_MIN. */
qs_status qs_loss_scaler_update(qs_loss_scaler *ls, bool finite);

/* The backward and optimizer half of a training step for model m (after a training forward):
 * backward at the scaler's factor, overflow check and unscaling (skipped for mode none),
 * then qs_optimizer_step with learning rate lr on m's parameters, or no update on overflow;
 * finally qs_loss_scaler_update. *applied (may be NULL) tells whether the optimizer stepped.
 * With m->timing set, the check, unscaling and update are timed into m->optimizer_time.
 * In mode none a failing backward is returned as is; otherwise a "non-finite" quantizer
 * failure counts as overflow (the error is cleared). */
qs_status qs_loss_scaler_step(qs_loss_scaler *ls, qs_model *m, qs_optimizer *o, float lr, bool *applied);

#endif
