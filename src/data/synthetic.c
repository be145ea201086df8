/* src/data/synthetic.c — a learnable synthetic image task: each class has a smooth random
 * pattern (a coarse grid of Philox values, bilinearly upsampled); a sample is 0.65·pattern +
 * 0.35·uniform noise. Everything is a pure function of (seed, shape, classes, sample index), so
 * splits, ranks and reruns agree, and any sample can be generated independently (OpenMP). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/readers.h"
#include "qsync/rng.h"

#define SYN_GRID 4          /* pattern control points per side */
#define SYN_SIGNAL 0.65f    /* weight of the class pattern */
#define SYN_NOISE 0.35f     /* weight of the per-pixel uniform noise */

/* Class patterns, classes×h×w×c floats in [0,1] (caller frees); NULL on OOM. */
static float *make_patterns(int64_t h, int64_t w, int64_t c, int64_t classes, uint64_t seed) {
    float *pat = malloc((size_t)(classes * h * w * c) * sizeof *pat);
    if (!pat) return NULL;
    for (int64_t k = 0; k < classes; k++) {
        qs_rng r;
        qs_rng_init(&r, qs_rng_key(seed, "synthetic-pattern", (uint64_t)k), 0);
        float grid[SYN_GRID][SYN_GRID][QS_DATASET_MAX_CHANNELS];
        for (int gy = 0; gy < SYN_GRID; gy++)
            for (int gx = 0; gx < SYN_GRID; gx++)
                for (int64_t ch = 0; ch < c; ch++) grid[gy][gx][ch] = qs_rng_uniform(&r);
        float *dst = pat + k * h * w * c;
        for (int64_t y = 0; y < h; y++) {
            float fy = h > 1 ? (float)y * (SYN_GRID - 1) / (float)(h - 1) : 0.0f;
            int y0 = (int)fy < SYN_GRID - 1 ? (int)fy : SYN_GRID - 2;
            float ty = fy - (float)y0;
            for (int64_t x = 0; x < w; x++) {
                float fx = w > 1 ? (float)x * (SYN_GRID - 1) / (float)(w - 1) : 0.0f;
                int x0 = (int)fx < SYN_GRID - 1 ? (int)fx : SYN_GRID - 2;
                float tx = fx - (float)x0;
                for (int64_t ch = 0; ch < c; ch++) {
                    float top = grid[y0][x0][ch] * (1 - tx) + grid[y0][x0 + 1][ch] * tx;
                    float bot = grid[y0 + 1][x0][ch] * (1 - tx) + grid[y0 + 1][x0 + 1][ch] * tx;
                    dst[(y * w + x) * c + ch] = top * (1 - ty) + bot * ty;
                }
            }
        }
    }
    return pat;
}

qs_status qs_dataset_synthetic_range(int64_t n, int64_t h, int64_t w, int64_t c, int64_t classes, uint64_t seed,
                                     int64_t first, qs_dataset *out) {
    memset(out, 0, sizeof *out);
    if (c < 1 || c > QS_DATASET_MAX_CHANNELS)
        return QS_FAIL(QS_ERR_INVALID_ARG, "synthetic dataset: %lld channels, supported 1..%d", (long long)c,
                       QS_DATASET_MAX_CHANNELS);
    if (classes < 1 || classes > INT32_MAX)
        return QS_FAIL(QS_ERR_INVALID_ARG, "synthetic dataset: %lld classes, must be 1..%d", (long long)classes, INT32_MAX);
    if (h < 1 || w < 1 || h > 65536 || w > 65536 || first < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "synthetic dataset: image %lld×%lld (each side must be 1..65536), first %lld",
                       (long long)h, (long long)w, (long long)first);
    if (classes * h * w * c > ((int64_t)1 << 32))
        return QS_FAIL(QS_ERR_INVALID_ARG, "synthetic dataset: %lld classes of %lld×%lld×%lld patterns is too large",
                       (long long)classes, (long long)h, (long long)w, (long long)c);
    QS_TRY(qs_dataset_alloc(out, "synthetic", n, h, w, c, classes));
    float *pat = make_patterns(h, w, c, classes, seed);
    if (!pat) {
        qs_dataset_free(out);
        return QS_FAIL(QS_ERR_OOM, "synthetic dataset: cannot allocate %lld class patterns", (long long)classes);
    }
    const int64_t hwc = h * w * c;
#pragma omp parallel for schedule(static) if (n * hwc > (1 << 16))
    for (int64_t i = 0; i < n; i++) {
        int64_t k = first + i;
        int64_t cls = k % classes;
        qs_rng r;
        qs_rng_init(&r, qs_rng_key(seed, "synthetic-sample", (uint64_t)k), 0);
        const float *p = pat + cls * hwc;
        uint8_t *dst = out->pixels + i * hwc;
        for (int64_t j = 0; j < hwc; j++) {
            float v = SYN_SIGNAL * p[j] + SYN_NOISE * qs_rng_uniform(&r);
            int q = (int)lrintf(v * 255.0f);
            dst[j] = (uint8_t)(q < 0 ? 0 : q > 255 ? 255 : q);
        }
        out->labels[i] = (int32_t)cls;
    }
    /* Normalisation from the generator's distribution (same for every split): over balanced
     * labels, E[v] = SIGNAL·mean(pattern) + NOISE/2 and Var[v] = SIGNAL²·Var(pattern) + NOISE²/12. */
    for (int64_t ch = 0; ch < c; ch++) {
        double s = 0, s2 = 0, cnt = (double)(classes * h * w);
        for (int64_t j = ch; j < classes * hwc; j += c) {
            s += pat[j];
            s2 += (double)pat[j] * pat[j];
        }
        double m = s / cnt, var = s2 / cnt - m * m;
        if (var < 0) var = 0;
        out->mean[ch] = (float)(SYN_SIGNAL * m + SYN_NOISE * 0.5);
        out->std[ch] = (float)sqrt((double)SYN_SIGNAL * SYN_SIGNAL * var + (double)SYN_NOISE * SYN_NOISE / 12.0);
    }
    free(pat);
    return QS_OK;
}

qs_status qs_dataset_synthetic(int64_t n, int64_t h, int64_t w, int64_t c, int64_t classes, uint64_t seed,
                               qs_dataset *out) {
    return qs_dataset_synthetic_range(n, h, w, c, classes, seed, 0, out);
}
