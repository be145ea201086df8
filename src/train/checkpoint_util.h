/* src/train/checkpoint_util.h — defines: the pieces checkpoint.c and checkpoint_rank.c share
 * (table ↔ safetensors copies, metadata fields). Internal to src/train. */
#ifndef QSYNC_TRAIN_CHECKPOINT_UTIL_H
#define QSYNC_TRAIN_CHECKPOINT_UTIL_H

#include <stdint.h>
#include "qsync/status.h"
#include "graph/graph.h"
#include "plan/plan_file.h"
#include "train/safetensors.h"

/* Host copy (qs_host_alloc'ed, caller frees with qs_host_free) of `bytes` of backend memory dev;
 * NULL on failure. */
void *qs_ckpt_download(qs_model *m, const void *dev, size_t bytes);
/* Append one safetensors entry per entry of t (data pointing into host, laid out by t) to out
 * at *n, advancing *n. */
void qs_ckpt_add_table(const qs_table *t, const void *host, qs_st_tensor *out, int *n);
/* Set every int64 buffer (BatchNorm's num_batches_tracked) of the host copy to m->step. */
void qs_ckpt_set_batches_tracked(qs_model *m, void *host_buffers);
/* Copy every entry of t from the file into dev (backend memory laid out by t); each must be
 * present with t's shape and dtype (QS_ERR_MISMATCH naming it otherwise). */
qs_status qs_ckpt_load_table(qs_model *m, const qs_st_file *f, const qs_table *t, void *dev);
/* FP8 delayed scaling (checkpoint_fp8.c): the nodes' amax histories as safetensors entries
 * "fp8_amax_history.<node>" (F32 vectors), appended to out at *n, their data and names in a
 * host copy *host (caller frees with qs_host_free; NULL when there are none); count = how many
 * (out needs that much room). */
int qs_ckpt_fp8_history_count(const qs_model *m);
qs_status qs_ckpt_add_fp8_histories(qs_model *m, void **host, qs_st_tensor *out, int *n);
/* Load every history the model keeps from f; QS_ERR_MISMATCH when one is missing or shaped
 * otherwise, or when f holds histories the model does not keep (other FP8 scaling). */
qs_status qs_ckpt_load_fp8_histories(qs_model *m, const qs_st_file *f);
/* A decimal int64 metadata field (QS_ERR_FORMAT naming the file when missing or malformed). */
qs_status qs_ckpt_meta_i64(const qs_st_file *f, const char *key, int64_t *out);
/* Check the "format" metadata is `format` and "version" is QS_CHECKPOINT_VERSION. */
qs_status qs_ckpt_check_format(const qs_st_file *f, const char *format);
/* The plan in the "plan" metadata of `file`, a qsync safetensors file of metadata format
 * `format` (its "arch" must be present); a file written before plans existed yields the
 * all-fp32 plan of its arch. *out is always left freeable. */
qs_status qs_ckpt_read_plan_file(const char *file, const char *format, qs_plan *out);

#endif
