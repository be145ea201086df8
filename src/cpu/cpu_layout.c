/* src/cpu/cpu_layout.c — NHWC <-> NCHW conversion (FP32): a batch of 2-D transposes,
 * tiled so that reads and writes both stay within cache lines. */
#include "cpu/cpu_backend.h"

#define QS_TILE 32

/* For each of `batch` matrices: dst (cols, rows) = src (rows, cols)ᵀ, or dst += srcᵀ. */
static void batched_transpose(int64_t batch, int64_t rows, int64_t cols, const float *src, float *dst,
                              bool accumulate) {
    const int64_t rt = (rows + QS_TILE - 1) / QS_TILE;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < batch; b++)
        for (int64_t ti = 0; ti < rt; ti++) {
            const float *s = src + b * rows * cols;
            float *d = dst + b * rows * cols;
            int64_t r0 = ti * QS_TILE, r1 = r0 + QS_TILE < rows ? r0 + QS_TILE : rows;
            for (int64_t c0 = 0; c0 < cols; c0 += QS_TILE) {
                int64_t c1 = c0 + QS_TILE < cols ? c0 + QS_TILE : cols;
                for (int64_t c = c0; c < c1; c++)
                    for (int64_t r = r0; r < r1; r++) {
                        float v = s[r * cols + c];
                        d[c * rows + r] = accumulate ? d[c * rows + r] + v : v;
                    }
            }
        }
}

static qs_status layout_check(const char *what, int64_t N, int64_t H, int64_t W, int64_t C, const float *x,
                              const float *y) {
    if (N < 0 || H < 0 || W < 0 || C < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: negative dimension in (%lld,%lld,%lld,%lld)", what, (long long)N,
                       (long long)H, (long long)W, (long long)C);
    return qs_cpu_args_check(what, N * H * W * C, 2, (const void *[]){x, y});
}

/* x (N,H,W,C) → y (N,C,H,W); x and y must not overlap. */
qs_status qs_cpu_nhwc_to_nchw(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t W, int64_t C,
                              const float *x, float *y) {
    QS_TRY(layout_check("nhwc_to_nchw", N, H, W, C, x, y));
    batched_transpose(N, H * W, C, x, y, false);
    return QS_OK;
}

/* x (N,C,H,W) → y (N,H,W,C), or y += ...; x and y must not overlap. */
qs_status qs_cpu_nchw_to_nhwc(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t W, int64_t C,
                              const float *x, float *y, bool accumulate) {
    QS_TRY(layout_check("nchw_to_nhwc", N, H, W, C, x, y));
    batched_transpose(N, C, H * W, x, y, accumulate);
    return QS_OK;
}
