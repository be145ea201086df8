/* src/train/checkpoint_rank.h — defines: the per-rank part of a checkpoint written under
 * mpirun, and the marker that says the whole checkpoint is complete.
 *   rank-<r>.safetensors  rank r's buffers (BatchNorm running statistics: every rank normalizes
 *                         its own slice of the batch, so they differ between ranks), metadata:
 *                         format "qsync.rank", version, arch, rank, world, step, plan (the
 *                         rank's own per-layer precisions, which differ between device types),
 *                         batch_split (every rank's local batch, "b0,b1,...").
 *   complete.json         {"format": "qsync-checkpoint", "version": 1, "step": N, "world": W}
 * Order (src/train/train_checkpoints.c): rank 0 removes complete.json; every rank writes its
 * rank file and rank 0 model.safetensors and state.safetensors (all atomically); the ranks
 * meet; rank 0 writes complete.json. A directory without the marker, or whose files name
 * another step than the marker, was being written when the job stopped: resume refuses it.
 * Single-process runs write neither (model and state alone are the whole checkpoint). The
 * ranks must share the directory. */
#ifndef QSYNC_TRAIN_CHECKPOINT_RANK_H
#define QSYNC_TRAIN_CHECKPOINT_RANK_H

#include <stddef.h>
#include <stdint.h>
#include "qsync/status.h"
#include "graph/graph.h"
#include "io/plan_file.h"

/* What a rank file records besides the buffers. */
typedef struct qs_rank_state {
    int64_t step;
    char batch_split[256]; /* "b0,b1,...": the ranks' local batches when it was written */
} qs_rank_state;

/* dir/rank-<rank>.safetensors into buf. */
void qs_checkpoint_rank_path(const char *dir, int rank, char *buf, size_t cap);
/* Write this rank's file (buffers at step m->step's count of BatchNorm forwards, plan, split). */
qs_status qs_checkpoint_rank_save(const char *dir, qs_model *m, const char *arch, int rank, int world, int64_t step,
                                  const char *batch_split);
/* Load this rank's buffers from its file into a set-up model and return what it records; the
 * file must be rank `rank` of `world` (QS_ERR_MISMATCH otherwise, QS_ERR_IO/NOT_FOUND when it is
 * absent). */
qs_status qs_checkpoint_rank_load(const char *dir, qs_model *m, int rank, int world, qs_rank_state *out);
/* The plan this rank trained with, from its rank file; QS_ERR_NOT_FOUND (no error recorded)
 * when the directory has no file for it (a single-process checkpoint). */
qs_status qs_checkpoint_rank_read_plan(const char *dir, int rank, qs_plan *out);

/* Remove dir/complete.json (absent is fine). */
qs_status qs_checkpoint_marker_clear(const char *dir);
/* Write dir/complete.json atomically. */
qs_status qs_checkpoint_marker_write(const char *dir, int64_t step, int world);
/* Check dir/complete.json exists, is well-formed and names `step` and `world`. */
qs_status qs_checkpoint_marker_check(const char *dir, int64_t step, int world);

#endif
