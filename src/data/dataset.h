/* src/data/dataset.h — defines: in-memory datasets — images (Fashion-MNIST IDX, CIFAR-10 binary,
 * synthetic class patterns) and text (the Debian fortunes corpus as a byte-level language-modelling
 * stream and as a topic classification task, llm.c token files, synthetic token streams) — and the
 * sharded, resumable, deterministic batch loader. docs/DATA.md describes every data name.
 *
 * Image layout: pixels are raw uint8, NHWC (channels-last); the loader normalises them to float
 * (p/255 - mean[c]) / std[c]. Text: a sample is T tokens handed to the model as FP32 token ids,
 * h = w = 1 and c = T (the model's input is (N, T)); raw_bytes is set and nothing is normalised.
 * A language-modelling set keeps one token stream (tokens) instead of pixels and labels: its
 * sample i is the window x[t] = tokens[i·T + t], y[t] = tokens[i·T + t + 1] (label_len = T).
 * All randomness (shuffle, augmentation, synthetic data) comes from Philox (qsync/rng.h) keyed by
 * the seed, so every rank derives the same order without talking. */
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
    char name[32];          /* "fashion-mnist", "cifar10", "synthetic", "fortunes", "fortune-topics", "tokens",
                             * "synthetic-text" */
    int64_t n;              /* samples */
    int64_t h, w, c;        /* per-sample shape, channels-last */
    int64_t classes;
    uint8_t *pixels;        /* n*h*w*c raw bytes, NHWC (CIFAR's planar CHW converted to HWC at load) */
    int32_t *labels;        /* n·label_len (NULL for a token stream: its labels are the next tokens) */
    float mean[4], std[4];  /* per-channel normalisation applied by the loader: (p/255 - mean)/std */
    int64_t label_len;      /* labels per sample (1 for classification; T for language modelling) */
    bool raw_bytes;         /* text: pixels (or tokens) are token ids handed to the model unnormalised
                             * (float(id)); mean/std unused, c is T and not limited to 4 channels */
    uint16_t *tokens;       /* token stream of a language-modelling set (pixels/labels NULL then): sample i
                             * is x[t] = tokens[i·T + t], y[t] = tokens[i·T + t + 1], T = c (h = w = 1) */
    int64_t n_tokens;       /* length of tokens; n = (n_tokens - 1) / T windows */
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
 * 2000 test samples drawn from the same class patterns; "synthetic:HxWxC" another shape.
 * Text (docs/DATA.md):
 *  "fortunes[:T]" (T default 256): byte-level language modelling (vocabulary 256) on the plain fortune
 *    files of dir (default /usr/share/games/fortunes, Debian packages fortunes + fortunes-min), split
 *    at "%" lines; fortune k of the corpus (files sorted by name) is a test fortune when k % 10 == 9;
 *    each split's fortunes, each followed by "\n\n", form its token stream. A missing directory
 *    → QS_ERR_NOT_FOUND naming the Debian packages.
 *  "fortune-topics[:T]" (T default 128): which of QS_FORTUNE_TOPIC_COUNT topical files a fortune
 *    comes from; the fortune's bytes truncated or padded with byte 0 to T; same split by k.
 *  "tokens:PATH[:T[:V]]" (T default 1024, V default 50257, GPT-2's vocabulary; dir ignored): an llm.c
 *    token file (qs_token_file_read) is the training split; the test split is the sibling whose file
 *    name has its last "train" replaced by "val" (QS_ERR_NOT_FOUND naming the rule when absent).
 *  "synthetic-text:V:T": qs_dataset_synthetic_text streams of QS_SYNTHETIC_TEXT_TRAIN_TOKENS(T) /
 *    QS_SYNTHETIC_TEXT_TEST_TOKENS(T) tokens (dir ignored). */
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

/* ---- text ---- */

#define QS_FORTUNES_DEFAULT_DIR "/usr/share/games/fortunes"
#define QS_FORTUNES_DEFAULT_T 256
#define QS_FORTUNE_TOPICS_DEFAULT_T 128
#define QS_FORTUNE_TOPIC_COUNT 9
#define QS_TOKENS_DEFAULT_T 1024
#define QS_TOKENS_DEFAULT_VOCAB 50257     /* GPT-2's BPE vocabulary */
#define QS_TEXT_MAX_T 65536               /* longest sequence a text data name accepts */
#define QS_TOKEN_FILE_MAGIC 20240520      /* llm.c's token files (dev/data/data_common.py) */
#define QS_TOKEN_FILE_VERSION 1           /* uint16 tokens */
#define QS_TOKEN_FILE_HEADER_BYTES 1024   /* 256 little-endian int32 */

/* Class names of "fortune-topics", label k = names[k] (the fortune file's name). */
extern const char *const qs_fortune_topics[QS_FORTUNE_TOPIC_COUNT];

/* Write an llm.c token file atomically (temp file, fsync, rename; src/core/atomic_file.h): a header
 * of 256 little-endian int32 (QS_TOKEN_FILE_MAGIC, QS_TOKEN_FILE_VERSION, n, then zeros) followed by
 * the n tokens as little-endian uint16. 0 <= n <= INT32_MAX (tokens may be NULL when n = 0). */
qs_status qs_token_file_write(const char *path, const uint16_t *tokens, int64_t n);

/* Read an llm.c token file (plain or gzip) into *tokens (malloc'd, caller frees; NULL when *n = 0),
 * checking every token < vocab (1..65536). QS_ERR_FORMAT naming the path: a file shorter than the
 * header ("malformed header"), wrong magic or version, a negative count, fewer tokens than the
 * header declares ("truncated") or bytes after them ("trailing"), a token >= vocab (with its
 * position and byte offset). A missing file → QS_ERR_NOT_FOUND. On error nothing is allocated. */
qs_status qs_token_file_read(const char *path, int64_t vocab, uint16_t **tokens, int64_t *n);

/* A language-modelling dataset over a token stream: takes ownership of tokens (malloc'd; freed here
 * on error too), sample i = window i of T (see the top of this file), classes = vocab, label_len = T,
 * raw_bytes. name is copied into out->name. QS_ERR_INVALID_ARG when T is outside 1..QS_TEXT_MAX_T,
 * vocab outside 2..65536, or the stream is shorter than one window (T + 1 tokens); `what` names the
 * stream's origin in that message (e.g. the file). */
qs_status qs_dataset_token_stream(const char *name, const char *what, uint16_t *tokens, int64_t n_tokens, int64_t T,
                                  int64_t vocab, qs_dataset *out);

/* Synthetic language-modelling stream for timing without a corpus: a fixed random next-token table
 * next[v] (Philox keyed by (seed, "synthetic-text-next")) and a stream where token k+1 is next[token k]
 * with probability 0.8 and a uniform random token otherwise (Philox keyed by (seed,
 * "synthetic-text-stream", stream)). Streams of one seed share the table, so a model learns it on
 * stream 0 (train) and is measured on stream 1 (test): the best possible next-token accuracy is
 * 0.8 + 0.2/V. 2 <= vocab <= 65536, 1 <= T <= QS_TEXT_MAX_T, n_tokens >= T + 1. */
qs_status qs_dataset_synthetic_text(int64_t vocab, int64_t T, int64_t n_tokens, uint64_t seed, uint64_t stream,
                                    qs_dataset *out);
#define QS_SYNTHETIC_TEXT_TRAIN_TOKENS(T) (((T) * 256 > 100000 ? (T) * 256 : 100000) + 1)
#define QS_SYNTHETIC_TEXT_TEST_TOKENS(T) (((T) * 64 > 20000 ? (T) * 64 : 20000) + 1)

/* Check that a model fits the data before running it: input h×w×c, labels per sample, classes.
 * data names the data as the user gave it, arch the model. QS_ERR_MISMATCH with a message naming
 * both, e.g. "model gpt expects sequences of 256 tokens, data fortunes:128 gives 128". */
qs_status qs_dataset_check_model(const qs_dataset *ds, const char *data, const char *arch, int64_t in_h, int64_t in_w,
                                 int64_t in_c, int64_t label_len, int64_t classes);

/* Keep only the first n samples (1 <= n <= ds->n), e.g. to train on a subset; the memory is not
 * shrunk. Normalisation constants are kept (they describe the full training split). */
qs_status qs_dataset_truncate(qs_dataset *ds, int64_t n);

/* Per-channel mean and standard deviation of p/255 over all pixels of ds (FP64 accumulation);
 * mean/std get ds->c entries. Used to derive and check the normalisation constants. Images only
 * (QS_ERR_INVALID_ARG for text). */
qs_status qs_dataset_channel_stats(const qs_dataset *ds, double *mean, double *std);

typedef struct qs_loader_options {
    int64_t global_batch;   /* samples per step over all ranks */
    int rank, world;        /* this rank takes a disjoint contiguous slice of each global batch */
    uint64_t seed;
    bool shuffle;           /* permutation per epoch derived only from (seed, epoch) */
    bool drop_last;         /* training: drop the incomplete last global batch; eval: false → last batch padded */
    bool augment;           /* random crop (zero padding `crop_pad` then crop back) + horizontal flip;
                             * images only (refused for text) */
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

/* Prepare a loader over ds (not owned). QS_ERR_INVALID_ARG for an empty or malformed dataset, a rank
 * outside the world, a global batch smaller than the world or (drop_last) larger than the dataset,
 * augmentation of a text dataset, or an invalid crop padding or normalisation. */
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
/* Fill x (local_batch*h*w*c floats, NHWC, normalised; text: token ids as floats) and y
 * (local_batch*label_len int32: a sample's labels, for a token stream its next tokens). *valid = number of real
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
