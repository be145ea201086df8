/* src/data/dataset.h — defines: in-memory image datasets (Fashion-MNIST IDX, CIFAR-10 binary,
 * synthetic class patterns) and the sharded, resumable, deterministic batch loader.
 *
 * Data layout: pixels are raw uint8, NHWC (channels-last); the loader normalises them to float
 * (p/255 - mean[c]) / std[c]. All randomness (shuffle, augmentation, synthetic data) comes from
 * Philox (qsync/rng.h) keyed by the seed, so every rank derives the same order without talking. */
#ifndef QSYNC_DATA_DATASET_H
#define QSYNC_DATA_DATASET_H

#include <stdbool.h>
#include <stdint.h>

#include "qsync/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QS_DATASET_MAX_CHANNELS 4

typedef struct qs_dataset {
    char name[32];          /* "fashion-mnist", "cifar10", "synthetic" */
    int64_t n;              /* samples */
    int64_t h, w, c;        /* per-sample shape, channels-last */
    int64_t classes;
    uint8_t *pixels;        /* n*h*w*c raw bytes, NHWC (CIFAR's planar CHW converted to HWC at load) */
    int32_t *labels;        /* n */
    float mean[4], std[4];  /* per-channel normalisation applied by the loader: (p/255 - mean)/std */
    int64_t label_len;      /* labels per sample (1 for classification; T for language modelling) */
    bool raw_bytes;         /* pixels are token bytes handed to the model unnormalised (float(byte)) */
    uint16_t *tokens;       /* token stream of a language-modelling set (pixels/labels NULL then): sample i
                             * is x[t] = tokens[i·T + t], y[t] = tokens[i·T + t + 1], T = c (h = w = 1) */
    int64_t n_tokens;
} qs_dataset;

/* Load a split. name: "fashion-mnist" (dir default /usr/share/datasets/fashion-mnist, files
 * {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz, gzip via zlib, plain uncompressed files accepted too),
 * "cifar10" (dir holds data_batch_1..5.bin / test_batch.bin of the CIFAR-10 binary version; dir required),
 * "synthetic" (dir ignored; deterministic class-dependent patterns so that a model can learn them,
 * options via qs_dataset_synthetic below). dir NULL → default. Errors: a missing Fashion-MNIST file says
 * "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or pass --data-dir";
 * bad magic, truncated file, count mismatch between images and labels, label out of range → QS_ERR_FORMAT with path.
 * *out is overwritten (not freed first); on error it is left zeroed and nothing leaks.
 * "synthetic" through this call: 28×28×1, 10 classes, seed QS_SYNTHETIC_DEFAULT_SEED, 10000 train /
 * 2000 test samples drawn from the same class patterns. */
qs_status qs_dataset_load(const char *name, const char *dir, bool train_split, qs_dataset *out);
qs_status qs_dataset_synthetic(int64_t n, int64_t h, int64_t w, int64_t c, int64_t classes, uint64_t seed, qs_dataset *out);
void qs_dataset_free(qs_dataset *ds);

#define QS_SYNTHETIC_DEFAULT_SEED 0x5EEDull
/* Sample index of the first "synthetic" test sample: test samples come from the same class patterns
 * as the training samples (same seed) but from a disjoint range of sample indices. */
#define QS_SYNTHETIC_TEST_FIRST 0x100000000ll

/* Like qs_dataset_synthetic, but sample i of the result is sample (first + i) of the infinite
 * stream defined by the seed: splits of one synthetic task share the class patterns. label of
 * sample k is k % classes. 1 <= c <= 4, h, w, classes >= 1, n >= 1, first >= 0. */
qs_status qs_dataset_synthetic_range(int64_t n, int64_t h, int64_t w, int64_t c, int64_t classes,
                                     uint64_t seed, int64_t first, qs_dataset *out);

/* Keep only the first n samples (1 <= n <= ds->n), e.g. to train on a subset; the memory is not
 * shrunk. Normalisation constants are kept (they describe the full training split). */
qs_status qs_dataset_truncate(qs_dataset *ds, int64_t n);

/* Per-channel mean and standard deviation of p/255 over all pixels of ds (FP64 accumulation);
 * mean/std get ds->c entries. Used to derive and check the normalisation constants. */
qs_status qs_dataset_channel_stats(const qs_dataset *ds, double *mean, double *std);

typedef struct qs_loader_options {
    int64_t global_batch;   /* samples per step over all ranks */
    int rank, world;        /* this rank takes a disjoint contiguous slice of each global batch */
    uint64_t seed;
    bool shuffle;           /* permutation per epoch derived only from (seed, epoch) */
    bool drop_last;         /* training: drop the incomplete last global batch; eval: false → last batch padded */
    bool augment;           /* random crop (zero padding `crop_pad` then crop back) + horizontal flip */
    int64_t crop_pad;       /* e.g. 4 for CIFAR, 2 for 28×28 */
} qs_loader_options;

/* A loader reads a dataset it does not own: the dataset must outlive the loader and not change. */
typedef struct qs_loader {
    const qs_dataset *ds;
    qs_loader_options opt;
    int64_t epoch;          /* epoch of the next batch (before wrap-around, see batch) */
    int64_t batch;          /* index of the next global batch in `epoch`; == steps means "epoch done" */
    int64_t steps;          /* global batches per epoch */
    int64_t local_batch;    /* samples of this rank per step */
    int64_t local_offset;   /* first position of this rank's slice within a global batch */
    int64_t *perm;          /* n dataset indices in epoch order (identity without shuffle) */
    int64_t perm_epoch;     /* epoch `perm` was built for; -1 = none yet */
    float lut[QS_DATASET_MAX_CHANNELS][256]; /* raw byte → normalised float, per channel */
} qs_loader;

qs_status qs_loader_init(qs_loader *ld, const qs_dataset *ds, const qs_loader_options *opt);
void qs_loader_free(qs_loader *ld);
/* Local batch size of this rank (global_batch split as evenly as possible; ranks < remainder get one more). */
int64_t qs_loader_local_batch(const qs_loader *ld);
/* Take positions [offset, offset + local) of every global batch from now on instead of the
 * even split (unequal per-rank batches, e.g. dynamic batching); the ranks' slices must
 * partition the global batch, which the caller guarantees. */
qs_status qs_loader_set_slice(qs_loader *ld, int64_t offset, int64_t local);
/* Steps per epoch (global batches). */
int64_t qs_loader_steps_per_epoch(const qs_loader *ld);
/* Fill x (local_batch*h*w*c floats, NHWC, normalised) and y (local_batch). *valid = number of real
 * samples (< local_batch only for a padded last eval batch; padding repeats the last sample).
 * Advances the position; when an epoch is exhausted the next call starts the next epoch and
 * *epoch_start is set true for the first batch of every epoch (may be NULL). Augmentation randomness
 * comes from Philox keyed by (seed, epoch, sample index) so it does not depend on rank count or history. */
qs_status qs_loader_next(qs_loader *ld, float *x, int32_t *y, int64_t *valid, bool *epoch_start);
/* Resumable position: (epoch, index of the next global batch in the epoch). */
void qs_loader_get_position(const qs_loader *ld, int64_t *epoch, int64_t *batch_in_epoch);
qs_status qs_loader_set_position(qs_loader *ld, int64_t epoch, int64_t batch_in_epoch);

#ifdef __cplusplus
}
#endif
#endif
