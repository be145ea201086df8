/* src/data/readers.h — defines: internal entry points behind qs_dataset_load (one reader per
 * file format) and the allocation helper they share. Not part of the public API. */
#ifndef QSYNC_DATA_READERS_H
#define QSYNC_DATA_READERS_H

#include <stdbool.h>
#include <stdint.h>

#include "data/dataset.h"
#include "qsync/status.h"

/* Zero *out, set its name and shape, and allocate pixels (n*h*w*c) and labels (n).
 * QS_ERR_INVALID_ARG for non-positive sizes, QS_ERR_OOM when allocation fails. */
qs_status qs_dataset_alloc(qs_dataset *out, const char *name, int64_t n, int64_t h, int64_t w, int64_t c,
                           int64_t classes);

/* Zero *out and allocate a text classification set: n samples of T token bytes (pixels, h = w = 1,
 * c = T), one label each, raw_bytes set. Errors as qs_dataset_alloc. */
qs_status qs_dataset_alloc_text(qs_dataset *out, const char *name, int64_t n, int64_t T, int64_t classes);

/* Readers behind qs_dataset_load (dir already defaulted where a default exists). */
qs_status qs_fashion_mnist_load(const char *dir, bool train_split, qs_dataset *out);
qs_status qs_cifar10_load(const char *dir, bool train_split, qs_dataset *out);
/* "fortunes" and "fortune-topics" with sequence length T (1..QS_TEXT_MAX_T; dir NULL → default). */
qs_status qs_fortunes_load(const char *dir, int64_t T, bool train_split, qs_dataset *out);
qs_status qs_fortune_topics_load(const char *dir, int64_t T, bool train_split, qs_dataset *out);
/* "tokens:SPEC", spec = PATH[:T[:V]] (the text after "tokens:"). */
qs_status qs_tokens_load(const char *spec, bool train_split, qs_dataset *out);

#endif
