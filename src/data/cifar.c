/* src/data/cifar.c — CIFAR-10, binary version (https://www.cs.toronto.edu/~kriz/cifar.html,
 * cifar-10-binary.tar.gz): files of 3073-byte records, 1 label byte (0..9) then a 32×32 image as
 * three 1024-byte planes R, G, B, each row-major. Converted to HWC at load. Plain or gzip files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/datafile.h"
#include "data/readers.h"

#define CIFAR_SIDE 32
#define CIFAR_PLANE (CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_RECORD (1 + 3 * CIFAR_PLANE)
#define CIFAR_CLASSES 10
#define CIFAR_HINT                                                                                  \
    "--data-dir must name the folder holding data_batch_1.bin..data_batch_5.bin and test_batch.bin " \
    "(extract cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html)"

/* Per-channel statistics of p/255 over the 50,000 training images (all 51.2 M pixels per channel,
 * population std): mean (0.4914, 0.4822, 0.4465), std (0.2470, 0.2435, 0.2616), as computed and
 * discussed in https://github.com/kuangliu/pytorch-cifar/issues/19 (the often-copied std
 * (0.2023, 0.1994, 0.2010) is the mean of per-image stds, not the pixel std). Not re-measured on
 * this machine (no CIFAR-10 copy here); qs_dataset_channel_stats reproduces them from the files. */
static const float cifar_mean[3] = {0.4914f, 0.4822f, 0.4465f};
static const float cifar_std[3] = {0.2470f, 0.2435f, 0.2616f};

/* Growable output arrays while the number of records is not yet known. */
typedef struct cifar_acc {
    uint8_t *pixels;
    int32_t *labels;
    int64_t n, cap;
} cifar_acc;

static qs_status acc_reserve(cifar_acc *a, int64_t want) {
    if (want <= a->cap) return QS_OK;
    int64_t cap = a->cap ? a->cap : 10000;
    while (cap < want) cap *= 2;
    uint8_t *p = realloc(a->pixels, (size_t)cap * 3 * CIFAR_PLANE);
    if (!p) return QS_FAIL(QS_ERR_OOM, "cannot allocate %lld CIFAR-10 images", (long long)cap);
    a->pixels = p;
    int32_t *l = realloc(a->labels, (size_t)cap * sizeof *l);
    if (!l) return QS_FAIL(QS_ERR_OOM, "cannot allocate %lld CIFAR-10 labels", (long long)cap);
    a->labels = l;
    a->cap = cap;
    return QS_OK;
}

/* Append every record of one batch file to a. Incomplete record, empty file, label >= 10 →
 * QS_ERR_FORMAT naming the path, record and byte offset. */
static qs_status read_batch_file(const char *path, cifar_acc *a) {
    qs_datafile f;
    QS_TRY(qs_datafile_open(&f, path, CIFAR_HINT));
    uint8_t rec[CIFAR_RECORD];
    qs_status st = QS_OK;
    for (int64_t r = 0;; r++) {
        int64_t got = 0;
        if ((st = qs_datafile_read(&f, rec, CIFAR_RECORD, &got)) != QS_OK) break;
        if (got == 0) {
            if (r == 0) st = QS_FAIL(QS_ERR_FORMAT, "%s: empty file, expected 3073-byte CIFAR-10 records", path);
            break;
        }
        if (got < CIFAR_RECORD) {
            st = QS_FAIL(QS_ERR_FORMAT,
                         "%s: truncated: record %lld (byte offset %lld) has %lld of %d bytes; a CIFAR-10 binary file "
                         "is a sequence of 3073-byte records — download or extract it again",
                         path, (long long)r, (long long)(r * CIFAR_RECORD), (long long)got, CIFAR_RECORD);
            break;
        }
        if (rec[0] >= CIFAR_CLASSES) {
            st = QS_FAIL(QS_ERR_FORMAT,
                         "%s: label %u of record %lld (byte offset %lld) is out of range 0..%d; is this the CIFAR-10 "
                         "binary version (not CIFAR-100 or the Python pickles)?",
                         path, rec[0], (long long)r, (long long)(r * CIFAR_RECORD), CIFAR_CLASSES - 1);
            break;
        }
        if ((st = acc_reserve(a, a->n + 1)) != QS_OK) break;
        uint8_t *dst = a->pixels + a->n * 3 * CIFAR_PLANE;
        const uint8_t *src = rec + 1;
        for (int i = 0; i < CIFAR_PLANE; i++) { /* planar CHW → interleaved HWC */
            dst[3 * i + 0] = src[i];
            dst[3 * i + 1] = src[CIFAR_PLANE + i];
            dst[3 * i + 2] = src[2 * CIFAR_PLANE + i];
        }
        a->labels[a->n++] = rec[0];
    }
    qs_datafile_close(&f);
    return st;
}

qs_status qs_cifar10_load(const char *dir, bool train_split, qs_dataset *out) {
    memset(out, 0, sizeof *out);
    if (!dir)
        return QS_FAIL(QS_ERR_INVALID_ARG, "dataset cifar10 needs a data directory: %s", CIFAR_HINT);
    /* Accept the folder the archive extracts to as well as its parent. */
    char root[QS_DATA_PATH_MAX], probe[QS_DATA_PATH_MAX];
    const char *first = train_split ? "data_batch_1.bin" : "test_batch.bin";
    snprintf(root, sizeof root, "%s", dir);
    QS_TRY(qs_data_join(probe, dir, first));
    if (!qs_data_exists(probe)) {
        char sub[QS_DATA_PATH_MAX];
        QS_TRY(qs_data_join(sub, dir, "cifar-10-batches-bin"));
        QS_TRY(qs_data_join(probe, sub, first));
        if (qs_data_exists(probe)) memcpy(root, sub, sizeof sub);
    }
    cifar_acc a = {0};
    qs_status st = QS_OK;
    int nfiles = train_split ? 5 : 1;
    for (int k = 0; k < nfiles && st == QS_OK; k++) {
        char base[32], path[QS_DATA_PATH_MAX];
        if (train_split)
            snprintf(base, sizeof base, "data_batch_%d.bin", k + 1);
        else
            snprintf(base, sizeof base, "test_batch.bin");
        st = qs_data_join(path, root, base);
        if (st == QS_OK) st = read_batch_file(path, &a);
    }
    if (st != QS_OK) {
        free(a.pixels);
        free(a.labels);
        return st;
    }
    snprintf(out->name, sizeof out->name, "cifar10");
    out->n = a.n;
    out->h = out->w = CIFAR_SIDE;
    out->c = 3;
    out->classes = CIFAR_CLASSES;
    out->label_len = 1;
    out->pixels = a.pixels;
    out->labels = a.labels;
    for (int k = 0; k < 3; k++) {
        out->mean[k] = cifar_mean[k];
        out->std[k] = cifar_std[k];
    }
    out->std[3] = 1.0f;
    return QS_OK;
}
