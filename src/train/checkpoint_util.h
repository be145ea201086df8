/* src/train/checkpoint_util.h — defines: the pieces checkpoint.c and checkpoint_rank.c share
 * (table ↔ safetensors copies, metadata fields). Internal to src/train. */
#ifndef QSYNC_TRAIN_CHECKPOINT_UTIL_H
#define QSYNC_TRAIN_CHECKPOINT_UTIL_H

#include <stdint.h>
#include "qsync/status.h"
#include "graph/graph.h"
#include "io/plan_file.h"
#include "io/checkpoint_model.h"
#include "io/safetensors.h"

/* FP8 delayed scaling (checkpoint_fp8.c): the nodes' amax histories as safetensors entries
 * "fp8_amax_history.<node>" (F32 vectors), appended to out at *n, their data and names in a
 * host copy *host (caller frees with qs_host_free; NULL when there are none); count = how many
 * (out needs that much room). */
int qs_ckpt_fp8_history_count(const qs_model *m);
qs_status qs_ckpt_add_fp8_histories(qs_model *m, void **host, qs_st_tensor *out, int *n);
/* Load every history the model keeps from f; QS_ERR_MISMATCH when one is missing or shaped
 * otherwise, or when f holds histories the model does not keep (other FP8 scaling). */
qs_status qs_ckpt_load_fp8_histories(qs_model *m, const qs_st_file *f);

#endif
