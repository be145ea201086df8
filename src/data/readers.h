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

/* Readers behind qs_dataset_load (dir already defaulted where a default exists). */
qs_status qs_fashion_mnist_load(const char *dir, bool train_split, qs_dataset *out);
qs_status qs_cifar10_load(const char *dir, bool train_split, qs_dataset *out);

#endif
