/* src/optim/schedule.h — defines: learning-rate schedules as closed forms of the step index
 * (so resuming from a checkpoint needs only the step), and their parsing from a string.
 *
 * lr(step), step = 0, 1, ... counting the updates already applied (the lr for the next one):
 *  - warm-up: for step < warmup_steps, lr = base_lr · step / warmup_steps (linear from 0);
 *  - then with t = step - warmup_steps:
 *    constant: base_lr;
 *    step:     base_lr · gamma^floor(t / step_size)            (PyTorch StepLR);
 *    cosine:   min_lr + (base_lr - min_lr)·(1 + cos(π·t/T))/2 with T = total_steps -
 *              warmup_steps, and min_lr for t >= T              (CosineAnnealingLR's closed
 *              form over one half period; it does not rise again).
 * The unit of "step" is the caller's: optimizer steps, or epochs if the caller passes epochs. */
#ifndef QSYNC_OPTIM_SCHEDULE_H
#define QSYNC_OPTIM_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>
#include "qsync/status.h"

typedef enum qs_lr_kind { QS_LR_CONSTANT = 0, QS_LR_STEP, QS_LR_COSINE } qs_lr_kind;

typedef struct qs_lr_schedule {
    qs_lr_kind kind;
    float base_lr;
    int64_t warmup_steps;   /* 0 = no warm-up */
    int64_t total_steps;    /* cosine: the step at which min_lr is reached (warm-up included) */
    int64_t step_size;      /* step: decay every step_size steps */
    float gamma;            /* step: decay factor */
    float min_lr;           /* cosine: final learning rate */
} qs_lr_schedule;

/* The learning rate for `step` (negative steps are treated as 0). Never fails; call
 * qs_lr_schedule_check first. */
float qs_lr_at(const qs_lr_schedule *s, int64_t step);

/* Parse the kind part: "constant", "step:STEP_SIZE:GAMMA" (e.g. "step:30:0.1"),
 * "cosine" or "cosine:MIN_LR". Sets kind and its parameters in *out and leaves base_lr,
 * warmup_steps and total_steps as they are (the caller sets them from other options).
 * QS_ERR_INVALID_ARG with the offending text and the accepted forms otherwise. */
qs_status qs_lr_schedule_parse(const char *text, qs_lr_schedule *out);

/* Check a filled schedule: base_lr finite >= 0, warmup_steps >= 0, step_size > 0 and
 * gamma > 0 for "step", total_steps > warmup_steps and 0 <= min_lr <= base_lr for "cosine". */
qs_status qs_lr_schedule_check(const qs_lr_schedule *s);

/* Writes the schedule as parse accepts it ("step:30:0.1"), for logs and checkpoints. */
void qs_lr_schedule_format(const qs_lr_schedule *s, char *buf, size_t cap);

#endif
