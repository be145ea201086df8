/* src/data/dataset.c — qs_dataset_load dispatch, allocation, freeing and channel statistics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/readers.h"

#define SYN_TRAIN_N 10000
#define SYN_TEST_N 2000

qs_status qs_dataset_load(const char *name, const char *dir, bool train_split, qs_dataset *out) {
    if (!out) return QS_FAIL(QS_ERR_INVALID_ARG, "qs_dataset_load: out is NULL");
    memset(out, 0, sizeof *out);
    if (!name) return QS_FAIL(QS_ERR_INVALID_ARG, "qs_dataset_load: dataset name is NULL");
    if (strcmp(name, "fashion-mnist") == 0) return qs_fashion_mnist_load(dir, train_split, out);
    if (strcmp(name, "cifar10") == 0) return qs_cifar10_load(dir, train_split, out);
    long long h = 28, w = 28, c = 1;
    if (strncmp(name, "synthetic:", 10) == 0) { /* synthetic:HxWxC */
        char tail;
        if (sscanf(name + 10, "%lldx%lldx%lld%c", &h, &w, &c, &tail) != 3 || h < 1 || w < 1 || h > 4096 || w > 4096 ||
            c < 1 || c > QS_DATASET_MAX_CHANNELS)
            return QS_FAIL(QS_ERR_INVALID_ARG, "dataset '%s': the synthetic shape must be HxWxC, sides 1..4096 and "
                           "1..%d channels (e.g. synthetic:32x32x3)", name, QS_DATASET_MAX_CHANNELS);
        name = "synthetic";
    }
    if (strcmp(name, "synthetic") == 0)
        return qs_dataset_synthetic_range(train_split ? SYN_TRAIN_N : SYN_TEST_N, h, w, c, 10,
                                          QS_SYNTHETIC_DEFAULT_SEED, train_split ? 0 : QS_SYNTHETIC_TEST_FIRST, out);
    return QS_FAIL(QS_ERR_NOT_FOUND, "unknown dataset '%s'; known datasets: fashion-mnist, cifar10, synthetic, "
                   "synthetic:HxWxC", name);
}

void qs_dataset_free(qs_dataset *ds) {
    if (!ds) return;
    free(ds->pixels);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

qs_status qs_dataset_alloc(qs_dataset *out, const char *name, int64_t n, int64_t h, int64_t w, int64_t c,
                           int64_t classes) {
    memset(out, 0, sizeof *out);
    if (n < 1 || h < 1 || w < 1 || c < 1 || c > QS_DATASET_MAX_CHANNELS || classes < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "dataset %s: invalid shape n=%lld h=%lld w=%lld c=%lld classes=%lld (need all >= 1, c <= %d)",
                       name, (long long)n, (long long)h, (long long)w, (long long)c, (long long)classes,
                       QS_DATASET_MAX_CHANNELS);
    int64_t per = h * w * c;
    if (per > ((int64_t)1 << 32) || n > (((int64_t)1 << 40) / per))
        return QS_FAIL(QS_ERR_INVALID_ARG, "dataset %s: %lld samples of %lld bytes exceed the 1 TiB limit", name,
                       (long long)n, (long long)per);
    out->pixels = malloc((size_t)(n * per));
    out->labels = malloc((size_t)n * sizeof *out->labels);
    if (!out->pixels || !out->labels) {
        qs_dataset_free(out);
        return QS_FAIL(QS_ERR_OOM, "dataset %s: cannot allocate %lld samples of %lld bytes", name, (long long)n,
                       (long long)per);
    }
    snprintf(out->name, sizeof out->name, "%s", name);
    out->n = n;
    out->h = h;
    out->w = w;
    out->c = c;
    out->classes = classes;
    for (int k = 0; k < 4; k++) out->std[k] = 1.0f;
    return QS_OK;
}

qs_status qs_dataset_truncate(qs_dataset *ds, int64_t n) {
    if (!ds || n < 1 || n > ds->n)
        return QS_FAIL(QS_ERR_INVALID_ARG, "cannot keep %lld samples of dataset '%s' with %lld samples (need 1..%lld)",
                       (long long)n, ds ? ds->name : "(null)", ds ? (long long)ds->n : 0LL, ds ? (long long)ds->n : 0LL);
    ds->n = n;
    return QS_OK;
}

qs_status qs_dataset_channel_stats(const qs_dataset *ds, double *mean, double *std) {
    if (!ds || !ds->pixels || ds->n < 1 || ds->c < 1 || ds->c > QS_DATASET_MAX_CHANNELS || !mean || !std)
        return QS_FAIL(QS_ERR_INVALID_ARG, "qs_dataset_channel_stats: empty dataset or NULL output");
    /* Exact per-channel byte histograms, then FP64 moments: no rounding drift over 10^8 pixels. */
    int64_t hist[QS_DATASET_MAX_CHANNELS][256];
    memset(hist, 0, sizeof hist);
    const int64_t c = ds->c, total = ds->n * ds->h * ds->w * c;
    const uint8_t *p = ds->pixels;
    if (c == 1) {
        for (int64_t i = 0; i < total; i++) hist[0][p[i]]++;
    } else {
        for (int64_t i = 0; i < total; i += c)
            for (int64_t ch = 0; ch < c; ch++) hist[ch][p[i + ch]]++;
    }
    for (int64_t ch = 0; ch < c; ch++) {
        double cnt = 0, s = 0;
        for (int v = 0; v < 256; v++) {
            cnt += (double)hist[ch][v];
            s += (double)hist[ch][v] * (v / 255.0);
        }
        double m = s / cnt, var = 0;
        for (int v = 0; v < 256; v++) var += (double)hist[ch][v] * (v / 255.0 - m) * (v / 255.0 - m);
        mean[ch] = m;
        std[ch] = sqrt(var / cnt);
    }
    return QS_OK;
}
