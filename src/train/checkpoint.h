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
#include "plan/plan_file.h"

#define QS_CHECKPOINT_VERSION 1

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
/* The model file inside `path` (a checkpoint directory or a .safetensors file) into buf. */
void qs_checkpoint_model_path(const char *path, char *buf, size_t cap);
/* Read arch and options from a model file's metadata (path: directory or file). */
qs_status qs_checkpoint_read_arch(const char *path, char *arch, size_t cap, qs_model_options *opt);
/* The precision plan a model file was trained with (metadata "plan"; path: directory or
 * file). A checkpoint written before plans existed yields the all-fp32 plan of its arch. The
 * plan's origin names the file. */
qs_status qs_checkpoint_read_plan(const char *path, qs_plan *out);
/* Load weights and buffers into a set-up model; every tensor of the model must be present with
 * the same shape and dtype, and the file must hold no other tensor (QS_ERR_MISMATCH naming it). */
qs_status qs_checkpoint_load_model(const char *path, qs_model *m);
/* Load optimizer state and trainer position from dir/state.safetensors; checks it belongs to
 * the model file's step. */
qs_status qs_checkpoint_load_state(const char *dir, qs_model *m, qs_optimizer *o, qs_train_state *ts);

#endif
