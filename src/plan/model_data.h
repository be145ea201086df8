/* src/plan/model_data.h — defines: the set-up that the analysis jobs (`qsync sensitivity`, and
 * the same steps as `qsync indicate`) share: a dataset's training split, a built-in model at its
 * input shape (freshly initialised with the seed, or a checkpoint's model and weights, checked
 * against the requested model, width and the data), set up at FP32 on the CPU backend (or a GPU) for one
 * batch size, and a shuffled, non-augmenting loader over the training split. */
#ifndef QSYNC_PLAN_MODEL_DATA_H
#define QSYNC_PLAN_MODEL_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "core/backend.h"
#include "data/dataset.h"
#include "graph/graph.h"
#include "qsync/status.h"

typedef struct qs_model_data_request {
    const char *model;           /* built-in model; may be NULL with a checkpoint (then its model) */
    int64_t width;               /* 0 = the architecture's default (or the checkpoint's) */
    const char *data, *data_dir; /* data_dir may be NULL */
    const char *checkpoint;      /* NULL: fresh weights */
    int64_t batch;               /* ≥ 1, at most the training split's size */
    uint64_t seed;               /* initialisation and batch order */
    int threads;                 /* 0 = OpenMP's default */
    bool cuda;                   /* the CUDA backend on cuda_device instead of the CPU one */
    int cuda_device;
} qs_model_data_request;

typedef struct qs_model_data {
    char arch[32];  /* the model's architecture */
    qs_dataset ds;  /* the training split */
    qs_backend *be;
    qs_model *m;    /* set up for the batch, every layer at FP32, not fused */
    qs_loader ld;   /* over ds, shuffled by the seed, no augmentation, whole batches */
    bool have_ds, have_ld;
} qs_model_data;

/* Load, build and set up everything r asks for into *out; release with qs_model_data_close
 * (also after a failure). Errors name the mismatch: --model or --width against the checkpoint,
 * the model's input shape, labels per sample or classes against the data
 * (qs_dataset_check_model), a batch larger than the training split. */
qs_status qs_model_data_open(const qs_model_data_request *r, qs_model_data *out);
void qs_model_data_close(qs_model_data *d);

/* The next training batch of the qs_model_data ctx (a qs_indicator_batch_fn): x gets
 * batch·in_h·in_w·in_c floats, y the batch·label_len labels. */
qs_status qs_model_data_next(void *ctx, float *x, int32_t *y);

#endif
