/* src/train/checkpoint.h — defines: checkpoints as a directory of two safetensors files.
 *   model.safetensors  weights and buffers with PyTorch state_dict names and layouts (conv
 *                      OIHW), metadata: format "qsync.model", version, arch, model options,
 *                      step, plan (the per-layer precisions as compact plan JSON, see
 *                      docs/PLANS.md). Loadable by tools/safetensors_torch.py into
 *                      tools/torch_models.py.
 *   state.safetensors  optimizer state ("<param>.momentum_buffer" / ".exp_avg" /
 *                      ".exp_avg_sq"), metadata: format "qsync.state", version, step, epoch,
 *                      batch_in_epoch, seed, global_batch, data, optimizer kind and step,
 *                      loss scaling (mode, scale, good steps, skipped steps).
 * Both are written atomically (temp file, fsync, rename): model first, then state; the state
 * names the step of the model it belongs to and resume refuses a pair that disagrees. */
#ifndef QSYNC_TRAIN_CHECKPOINT_H
#define QSYNC_TRAIN_CHECKPOINT_H

#include <stdint.h>
#include "qsync/status.h"
#include "graph/graph.h"
#include "models/models.h"
#include "optim/optim.h"
#include "io/checkpoint_model.h"
#include "io/plan_file.h"

typedef struct qs_train_state {
    int64_t step;            /* optimizer steps done */
    int64_t epoch;           /* loader position of the next batch */
    int64_t batch_in_epoch;
    uint64_t seed;
    int64_t global_batch;
    int64_t world;           /* ranks that trained it (1 when absent: older checkpoints) */
    char data[32];
    /* loss scaling (optim/loss_scale.h); a zeroed state means mode none, scale 1 */
    char loss_scale_mode[16];    /* "none", "static", "dynamic"; "" = none */
    float loss_scale;
    int64_t loss_scale_good_steps;
    int64_t skipped_steps;
} qs_train_state;

/* Write dir/model.safetensors and dir/state.safetensors (dir is created if missing). o may be
 * NULL (then no state file is written). */
qs_status qs_checkpoint_save(const char *dir, qs_model *m, const char *arch, const qs_model_options *opt,
                             const qs_optimizer *o, const qs_train_state *ts);
/* Load optimizer state and trainer position from dir/state.safetensors; checks it belongs to
 * the model file's step. */
qs_status qs_checkpoint_load_state(const char *dir, qs_model *m, qs_optimizer *o, qs_train_state *ts);

#endif
