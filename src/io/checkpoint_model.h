/* src/io/checkpoint_model.h — defines: the model file of a checkpoint (model.safetensors):
 * weights and buffers with PyTorch state_dict names and layouts (conv OIHW), and metadata
 * format "qsync.model", version, arch, model options ("config"), step and plan (the
 * per-layer precisions as compact plan JSON, docs/PLANS.md). Written atomically; read back
 * into a model that has the same tensors. Also the table <-> safetensors pieces that the
 * other checkpoint files (train/checkpoint.c, train/checkpoint_rank.c) share. */
#ifndef QSYNC_IO_CHECKPOINT_MODEL_H
#define QSYNC_IO_CHECKPOINT_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "qsync/status.h"
#include "graph/graph.h"
#include "graph/tensor_access.h"
#include "io/plan_file.h"
#include "io/safetensors.h"
#include "models/models.h"

#define QS_CHECKPOINT_VERSION 1
#define QS_MODEL_FILE "model.safetensors" /* inside a checkpoint directory */

/* The model file inside `path` (a checkpoint directory or a .safetensors file) into buf. */
void qs_checkpoint_model_path(const char *path, char *buf, size_t cap);
/* Write m's parameters and buffers to the model file `path` (atomically), with arch, m's
 * config, `step` and m's plan in its metadata. */
qs_status qs_checkpoint_model_save(const char *path, qs_model *m, const char *arch, int64_t step);
/* Read arch and options from a model file's metadata (path: directory or file). */
qs_status qs_checkpoint_read_arch(const char *path, char *arch, size_t cap, qs_model_options *opt);
/* The precision plan a model file was trained with (metadata "plan"; path: directory or
 * file). A checkpoint written before plans existed yields the all-fp32 plan of its arch. The
 * plan's origin names the file. */
qs_status qs_checkpoint_read_plan(const char *path, qs_plan *out);
/* Load weights and buffers into a set-up model; every tensor of the model must be present with
 * the same shape and dtype, and the file must hold no other tensor (QS_ERR_MISMATCH naming it). */
qs_status qs_checkpoint_load_model(const char *path, qs_model *m);

/* Append one safetensors entry per entry of t (data pointing into host, laid out by t) to out
 * at *n, advancing *n. */
void qs_ckpt_add_table(const qs_table *t, const void *host, qs_st_tensor *out, int *n);
/* Set every int64 buffer (BatchNorm's num_batches_tracked) of the host copy to m->step. */
void qs_ckpt_set_batches_tracked(qs_model *m, void *host_buffers);
/* Copy every entry of m's table `which` (parameters or buffers) from the file into the model
 * (qs_model_table_write_entry, each waited for); each must be present with the entry's shape
 * and dtype (QS_ERR_MISMATCH naming it otherwise). */
qs_status qs_ckpt_load_table(qs_model *m, const qs_st_file *f, qs_model_table which);
/* A decimal int64 metadata field (QS_ERR_FORMAT naming the file when missing or malformed). */
qs_status qs_ckpt_meta_i64(const qs_st_file *f, const char *key, int64_t *out);
/* Check the "format" metadata is `format` and "version" is QS_CHECKPOINT_VERSION. */
qs_status qs_ckpt_check_format(const qs_st_file *f, const char *format);
/* The plan in the "plan" metadata of `file`, a qsync safetensors file of metadata format
 * `format` (its "arch" must be present); a file written before plans existed yields the
 * all-fp32 plan of its arch. *out is always left freeable. */
qs_status qs_ckpt_read_plan_file(const char *file, const char *format, qs_plan *out);

#endif
