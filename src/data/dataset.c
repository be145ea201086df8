/* src/data/dataset.c — qs_dataset_load dispatch (data names), allocation, freeing, the model
 * check and channel statistics. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/readers.h"

#define SYN_TRAIN_N 10000
#define SYN_TEST_N 2000

#define QS_DATA_NAMES                                                                                             \
    "fashion-mnist, cifar10, synthetic, synthetic:HxWxC, fortunes[:T], fortune-topics[:T], tokens:PATH[:T[:V]], " \
    "synthetic-text:V:T"

/* Parse a decimal integer that makes up all of s (no sign, no spaces) into *v; false otherwise. */
static bool parse_count(const char *s, long long *v) {
    if (!*s || strlen(s) > 18) return false;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p)) return false;
    *v = strtoll(s, NULL, 10);
    return true;
}

/* The sequence length of "<base>" or "<base>:T" (tail = the text after base) into *T:
 * default_T without a tail, else T in 1..QS_TEXT_MAX_T; QS_ERR_INVALID_ARG naming the form. */
static qs_status parse_text_T(const char *name, const char *base, const char *tail, int64_t default_T, int64_t *T) {
    long long v = default_T;
    if (*tail && (tail[0] != ':' || !parse_count(tail + 1, &v) || v < 1 || v > QS_TEXT_MAX_T))
        return QS_FAIL(QS_ERR_INVALID_ARG, "dataset '%s': expected %s or %s:T with a sequence length T in 1..%d "
                       "(e.g. %s:%lld)", name, base, base, QS_TEXT_MAX_T, base, (long long)default_T);
    *T = v;
    return QS_OK;
}

/* "synthetic-text:V:T" (tail = the text after "synthetic-text"). */
static qs_status load_synthetic_text(const char *name, const char *tail, bool train_split, qs_dataset *out) {
    long long V = 0, T = 0;
    char buf[64];
    const char *colon = tail[0] == ':' ? strchr(tail + 1, ':') : NULL;
    bool ok = colon && (size_t)(colon - tail - 1) < sizeof buf;
    if (ok) {
        memcpy(buf, tail + 1, (size_t)(colon - tail - 1));
        buf[colon - tail - 1] = 0;
        ok = parse_count(buf, &V) && parse_count(colon + 1, &T);
    }
    if (!ok || V < 2 || V > 65536 || T < 1 || T > QS_TEXT_MAX_T)
        return QS_FAIL(QS_ERR_INVALID_ARG, "dataset '%s': expected synthetic-text:V:T with a vocabulary V in 2..65536 "
                       "and a sequence length T in 1..%d (e.g. synthetic-text:50257:1024)", name, QS_TEXT_MAX_T);
    int64_t n = train_split ? QS_SYNTHETIC_TEXT_TRAIN_TOKENS((int64_t)T) : QS_SYNTHETIC_TEXT_TEST_TOKENS((int64_t)T);
    return qs_dataset_synthetic_text(V, T, n, QS_SYNTHETIC_DEFAULT_SEED, train_split ? 0 : 1, out);
}

qs_status qs_dataset_load(const char *name, const char *dir, bool train_split, qs_dataset *out) {
    if (!out) return QS_FAIL(QS_ERR_INVALID_ARG, "qs_dataset_load: out is NULL");
    memset(out, 0, sizeof *out);
    if (!name) return QS_FAIL(QS_ERR_INVALID_ARG, "qs_dataset_load: dataset name is NULL");
    if (strcmp(name, "fashion-mnist") == 0) return qs_fashion_mnist_load(dir, train_split, out);
    if (strcmp(name, "cifar10") == 0) return qs_cifar10_load(dir, train_split, out);
    int64_t T = 0;
    if (strncmp(name, "fortunes", 8) == 0 && (name[8] == 0 || name[8] == ':')) {
        QS_TRY(parse_text_T(name, "fortunes", name + 8, QS_FORTUNES_DEFAULT_T, &T));
        return qs_fortunes_load(dir, T, train_split, out);
    }
    if (strncmp(name, "fortune-topics", 14) == 0 && (name[14] == 0 || name[14] == ':')) {
        QS_TRY(parse_text_T(name, "fortune-topics", name + 14, QS_FORTUNE_TOPICS_DEFAULT_T, &T));
        return qs_fortune_topics_load(dir, T, train_split, out);
    }
    if (strncmp(name, "tokens:", 7) == 0) return qs_tokens_load(name + 7, train_split, out);
    if (strncmp(name, "synthetic-text", 14) == 0 && (name[14] == 0 || name[14] == ':'))
        return load_synthetic_text(name, name + 14, train_split, out);
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
    return QS_FAIL(QS_ERR_NOT_FOUND, "unknown dataset '%s'; known datasets: " QS_DATA_NAMES " (docs/DATA.md)", name);
}

void qs_dataset_free(qs_dataset *ds) {
    if (!ds) return;
    free(ds->pixels);
    free(ds->labels);
    free(ds->tokens);
    memset(ds, 0, sizeof *ds);
}

qs_status qs_dataset_alloc_text(qs_dataset *out, const char *name, int64_t n, int64_t T, int64_t classes) {
    memset(out, 0, sizeof *out);
    if (n < 1 || T < 1 || T > QS_TEXT_MAX_T || classes < 1 || n > ((int64_t)1 << 40) / T)
        return QS_FAIL(QS_ERR_INVALID_ARG, "dataset %s: invalid shape n=%lld T=%lld classes=%lld (need n, classes >= 1, "
                       "T in 1..%d, n·T at most 1 TiB)", name, (long long)n, (long long)T, (long long)classes,
                       QS_TEXT_MAX_T);
    out->pixels = malloc((size_t)(n * T));
    out->labels = malloc((size_t)n * sizeof *out->labels);
    if (!out->pixels || !out->labels) {
        qs_dataset_free(out);
        return QS_FAIL(QS_ERR_OOM, "dataset %s: cannot allocate %lld sequences of %lld bytes", name, (long long)n,
                       (long long)T);
    }
    snprintf(out->name, sizeof out->name, "%s", name);
    out->n = n;
    out->h = out->w = 1;
    out->c = T;
    out->classes = classes;
    out->label_len = 1;
    out->raw_bytes = true;
    for (int k = 0; k < 4; k++) out->std[k] = 1.0f;
    return QS_OK;
}

qs_status qs_dataset_token_stream(const char *name, const char *what, uint16_t *tokens, int64_t n_tokens, int64_t T,
                                  int64_t vocab, qs_dataset *out) {
    memset(out, 0, sizeof *out);
    if (T < 1 || T > QS_TEXT_MAX_T || vocab < 2 || vocab > 65536) {
        free(tokens);
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: sequence length %lld and vocabulary %lld: need T in 1..%d and a "
                       "vocabulary of 2..65536 (tokens are uint16)", what, (long long)T, (long long)vocab,
                       QS_TEXT_MAX_T);
    }
    if (!tokens || n_tokens < T + 1) {
        free(tokens);
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: %lld tokens, fewer than one window of T + 1 = %lld (T inputs and the "
                       "next token); use a shorter sequence length", what, (long long)n_tokens, (long long)(T + 1));
    }
    snprintf(out->name, sizeof out->name, "%s", name);
    out->tokens = tokens;
    out->n_tokens = n_tokens;
    out->n = (n_tokens - 1) / T;
    out->h = out->w = 1;
    out->c = T;
    out->classes = vocab;
    out->label_len = T;
    out->raw_bytes = true;
    for (int k = 0; k < 4; k++) out->std[k] = 1.0f;
    return QS_OK;
}

qs_status qs_dataset_check_model(const qs_dataset *ds, const char *data, const char *arch, int64_t in_h, int64_t in_w,
                                 int64_t in_c, int64_t label_len, int64_t classes) {
    const char *d = data ? data : ds->name;
    if (ds->raw_bytes && (in_h != 1 || in_w != 1))
        return QS_FAIL(QS_ERR_MISMATCH, "model %s expects %lldx%lldx%lld images, data %s gives sequences of %lld tokens",
                       arch, (long long)in_h, (long long)in_w, (long long)in_c, d, (long long)ds->c);
    if (ds->raw_bytes && in_c != ds->c)
        return QS_FAIL(QS_ERR_MISMATCH, "model %s expects sequences of %lld tokens, data %s gives %lld", arch,
                       (long long)in_c, d, (long long)ds->c);
    if (in_h != ds->h || in_w != ds->w || in_c != ds->c)
        return QS_FAIL(QS_ERR_MISMATCH, "model %s expects %lldx%lldx%lld inputs, data %s gives %lldx%lldx%lld", arch,
                       (long long)in_h, (long long)in_w, (long long)in_c, d, (long long)ds->h, (long long)ds->w,
                       (long long)ds->c);
    if (label_len != ds->label_len)
        return QS_FAIL(QS_ERR_MISMATCH, "model %s predicts %lld label%s per sample (%s), data %s gives %lld (%s)", arch,
                       (long long)label_len, label_len == 1 ? "" : "s",
                       label_len == 1 ? "a classifier" : "a language model: one per position", d,
                       (long long)ds->label_len,
                       ds->label_len == 1 ? "one class per sample" : "the next token of every position");
    if (classes != ds->classes)
        return QS_FAIL(QS_ERR_MISMATCH, "model %s has %lld output classes, data %s has %lld%s", arch, (long long)classes,
                       d, (long long)ds->classes, ds->tokens ? " (its vocabulary size)" : "");
    return QS_OK;
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
    out->label_len = 1;
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
    if (!ds || !ds->pixels || ds->raw_bytes || ds->n < 1 || ds->c < 1 || ds->c > QS_DATASET_MAX_CHANNELS || !mean ||
        !std)
        return QS_FAIL(QS_ERR_INVALID_ARG, "qs_dataset_channel_stats: empty dataset, text dataset or NULL output");
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
