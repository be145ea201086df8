/* src/cpu/cpu_linear.c — fully connected layer on oneDNN matmul, every CPU precision.
 *
 * X (M,K), W (N,K) PyTorch layout, b (N), Y (M,N), all row-major. Transposed operands are
 * expressed through strides, so nothing is copied:
 *   forward         Y (M,N)  = X (M,K)      · Wᵀ (K,N)  strides {1,K}   [+ b]
 *   backward_data   dX (M,K) = dY (M,N)     · W (N,K)                   [+ dX via sum post-op]
 *   backward_weights dW(N,K) = dYᵀ (N,M)    · X (M,K)   dYᵀ strides {1,N}
 *   db (N) = column sums of dY, accumulated in double (cpu_reduce.c).
 * Per precision (the plan's compute path):
 *   FP32  f32 primitives. bench/bench_conv_choice.c chose matmul over inner_product, oneDNN's
 *         default (brgemm) for forward and its "gemm" implementation for both backward
 *         products (docs/BENCHMARKS.md, "Convolution and Linear algorithm choice").
 *   BF16  bf16 × bf16 → f32 primitives (AMX / AVX512-BF16 where the CPU has them), f32 bias.
 *   INT8  s8 × s8 → f32 primitives without output scales (oneDNN 2.6 drops from its AMX/VNNI
 *         brgemm kernels to a slower gemm one when scales are runtime arguments), then one
 *         FP32 epilogue pass applies s_a·s_b (per-column for per-output-channel weights) and
 *         the bias. Backward-weights reduces over the M rows; int32 accumulation of int8
 *         products is exact only up to 2^31/127² = 133,144 terms, so M is split into chunks
 *         of at most that many rows whose f32 results are summed (sum post-op). oneDNN 2.6
 *         runs an s8 matmul with a transposed A (dYᵀ as strides) on its slow gemm kernel
 *         (both kernel figures: docs/BENCHMARKS.md), so dY is transposed into the workspace first
 *         (one byte per element) and the product reads it plainly.
 *   FP16, FP8 (emulated) operands widened to f32 in the workspace, then the FP32 primitives:
 *         the values are exactly those of the format, the arithmetic FP32.
 * Output dtypes (y_dt, dx_dt): F32, or BF16 — every path computes its FP32 Y (bias included)
 * into the workspace, which is then rounded to nearest even into y (qs_f32_to_bf16, the
 * rounding of the straight-through cast it replaces); backward-data the same for a BF16 dx.
 * Workspace: [widened / temporary operands][oneDNN scratchpad][FP32 Y (y_dt BF16) | FP32 dX
 * (dx_dt BF16)], sized for the worst direction. */
#include "cpu/cpu_backend.h"

#include <stdlib.h>

#include "core/numfmt.h"
#include "core/quant_int8.h"

typedef enum linear_path { PATH_F32 = 0, PATH_BF16, PATH_INT8 } linear_path;

typedef struct qs_cpu_linear_plan {
    qs_cpu_plan hdr;
    qs_linear_desc d;
    linear_path path;
    bool emulated;               /* FP16/FP8: widen operands, run PATH_F32 */
    qs_dtype fdt, gdt;           /* operand storage dtypes: forward (X, W), gradient (dY) */
    qs_dnnl_prim fwd;
    qs_dnnl_prim bwd_data;       /* dX = dY·W */
    qs_dnnl_prim bwd_data_acc;   /* dX += dY·W */
    qs_dnnl_prim bwd_weights;    /* dW = dYᵀ·X over the first `chunk` rows */
    qs_dnnl_prim bwd_weights_acc;  /* INT8, M > chunk: dW += next chunk */
    qs_dnnl_prim bwd_weights_tail; /* INT8, M % chunk != 0: dW += last partial chunk */
    int64_t chunk;               /* rows per backward-weights product */
    size_t tmp_bytes;            /* workspace before the scratchpad */
    size_t y_off;                /* y_dt BF16: offset of the FP32 Y (M·N floats); dx_dt BF16: of the
                                  * FP32 dX (M·K floats) */
    size_t ws_bytes;
} qs_cpu_linear_plan_t;

/* A (rows, cols) matrix operand with explicit strides. */
static qs_dnnl_tensor mat(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, qs_dtype dt) {
    return (qs_dnnl_tensor){.ndims = 2, .dims = {rows, cols}, .strides = {row_stride, col_stride},
                            .layout = QS_DNNL_STRIDED, .dt = dt};
}

/* One matmul C (m,n) f32 = A (m,k) · B (k,n) [+ bias (1,n)] [+ C]; C row-major with leading
 * dimension ldc. */
static qs_status linear_matmul(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, qs_dnnl_tensor a, qs_dnnl_tensor b,
                               int64_t ldc, bool bias, bool accumulate, const char *prefer, const char *what) {
    const int64_t m = a.dims[0], n = b.dims[1];
    qs_dnnl_tensor c = mat(m, n, ldc, 1, QS_F32), bt = mat(1, n, n, 1, QS_F32);
    return qs_dnnl_matmul_create(p, ctx, &a, &b, bias ? &bt : NULL, &c, accumulate, prefer, what);
}

void qs_cpu_linear_plan_destroy(void *plan) {
    qs_cpu_linear_plan_t *lp = plan;
    if (!lp) return;
    qs_dnnl_prim_destroy(&lp->fwd);
    qs_dnnl_prim_destroy(&lp->bwd_data);
    qs_dnnl_prim_destroy(&lp->bwd_data_acc);
    qs_dnnl_prim_destroy(&lp->bwd_weights);
    qs_dnnl_prim_destroy(&lp->bwd_weights_acc);
    qs_dnnl_prim_destroy(&lp->bwd_weights_tail);
    free(lp);
}

/* Build the primitives of the plan's path; operands of dtype cdt. */
static qs_status linear_build(qs_cpu_linear_plan_t *lp, const qs_dnnl_ctx *ctx) {
    const int64_t M = lp->d.M, N = lp->d.N, K = lp->d.K;
    const qs_dtype cdt = lp->path == PATH_BF16 ? QS_BF16 : lp->path == PATH_INT8 ? QS_S8 : QS_F32;
    const bool int8 = lp->path == PATH_INT8, fused_bias = lp->d.has_bias && !int8;
    const char *bwd_prefer = lp->path == PATH_F32 ? "gemm" : NULL;
    const qs_dnnl_tensor x = mat(M, K, K, 1, cdt), wt = mat(K, N, 1, K, cdt), w = mat(N, K, K, 1, cdt);
    const qs_dnnl_tensor dy = mat(M, N, N, 1, cdt);
    lp->chunk = int8 && M > QS_CPU_INT8_EXACT_TERMS ? QS_CPU_INT8_EXACT_TERMS : M;
    QS_TRY(linear_matmul(&lp->fwd, ctx, x, wt, N, fused_bias, false, NULL, "linear forward matmul"));
    QS_TRY(linear_matmul(&lp->bwd_data, ctx, dy, w, K, false, false, bwd_prefer, "linear backward-data matmul"));
    if (!int8) /* INT8 accumulates in its epilogue instead */
        QS_TRY(linear_matmul(&lp->bwd_data_acc, ctx, dy, w, K, false, true, bwd_prefer,
                             "linear backward-data matmul (accumulate)"));
    /* dYᵀ (N, rows): element (n, m) at m·N + n as a strided view of dY, or — INT8 — at
     * n·M + m in the transposed copy; X rows (rows, K) */
    const int64_t c = lp->chunk, tail = M % c;
    const int64_t dyt_rs = int8 ? M : 1, dyt_cs = int8 ? 1 : N;
    QS_TRY(linear_matmul(&lp->bwd_weights, ctx, mat(N, c, dyt_rs, dyt_cs, cdt), mat(c, K, K, 1, cdt), K, false, false,
                         bwd_prefer, "linear backward-weights matmul"));
    if (M > c)
        QS_TRY(linear_matmul(&lp->bwd_weights_acc, ctx, mat(N, c, dyt_rs, dyt_cs, cdt), mat(c, K, K, 1, cdt), K, false,
                             true, NULL, "linear backward-weights matmul (accumulating chunk)"));
    if (M > c && tail)
        QS_TRY(linear_matmul(&lp->bwd_weights_tail, ctx, mat(N, tail, dyt_rs, dyt_cs, cdt), mat(tail, K, K, 1, cdt), K,
                             false, true, NULL, "linear backward-weights matmul (last chunk)"));
    /* temporaries: emulated operands widened (two at most per direction); INT8 dX when
     * accumulating */
    size_t f = sizeof(float), tmp = 0;
    if (lp->emulated) tmp = f * (size_t)qs_cpu_max_size(qs_cpu_max_size(M * K + N * K, M * N + N * K), M * N + M * K);
    if (int8) tmp = qs_cpu_max_size(f * (size_t)(M * K), (size_t)(M * N)); /* dX temp | dYᵀ */
    tmp = qs_cpu_align(tmp);
    size_t scratch = qs_cpu_max_size(qs_cpu_max_size(lp->fwd.scratch_bytes, lp->bwd_data.scratch_bytes),
                            qs_cpu_max_size(lp->bwd_data_acc.scratch_bytes, lp->bwd_weights.scratch_bytes));
    scratch = qs_cpu_max_size(scratch, qs_cpu_max_size(lp->bwd_weights_acc.scratch_bytes, lp->bwd_weights_tail.scratch_bytes));
    if (lp->d.has_bias) scratch = qs_cpu_max_size(scratch, (size_t)N * sizeof(double));
    lp->tmp_bytes = tmp;
    lp->y_off = tmp + qs_cpu_align(scratch);
    const size_t narrow = qs_cpu_max_size(lp->d.y_dt == QS_BF16 ? (size_t)(M * N) : 0,  /* FP32 Y */
                                 lp->d.dx_dt == QS_BF16 ? (size_t)(M * K) : 0); /* FP32 dX */
    lp->ws_bytes = lp->y_off + qs_cpu_align(f * narrow);
    return QS_OK;
}

qs_status qs_cpu_linear_plan(qs_backend *be, const qs_linear_desc *d, void **plan, size_t *workspace) {
    if (!d || !plan || !workspace) return QS_FAIL(QS_ERR_INVALID_ARG, "linear_plan: NULL descriptor or output");
    *plan = NULL;
    *workspace = 0;
    if (d->M < 1 || d->N < 1 || d->K < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "linear_plan: M=%lld N=%lld K=%lld must all be >= 1", (long long)d->M,
                       (long long)d->N, (long long)d->K);
    QS_TRY(qs_cpu_prec_check(be, d->prec, "linear_plan"));
    QS_TRY(qs_gemm_out_dtype_check("linear_plan", d->y_dt, d->dx_dt));
    qs_cpu_linear_plan_t *lp = calloc(1, sizeof *lp);
    if (!lp) return QS_FAIL(QS_ERR_OOM, "linear_plan: out of memory for the plan");
    lp->hdr.kind = QS_CPU_PLAN_LINEAR;
    lp->hdr.prec = d->prec;
    lp->d = *d;
    lp->fdt = qs_precision_operand_dtype(d->prec, false);
    lp->gdt = qs_precision_operand_dtype(d->prec, true);
    lp->emulated = qs_cpu_prec_of(be, d->prec) == QS_PREC_EMULATED;
    lp->path = lp->emulated ? PATH_F32 : d->prec == QS_PREC_BF16 ? PATH_BF16 : d->prec == QS_PREC_INT8 ? PATH_INT8 : PATH_F32;
    qs_status st = linear_build(lp, &qs_cpu_be(be)->dnnl);
    if (st != QS_OK) {
        qs_cpu_linear_plan_destroy(lp);
        return qs_error_wrap(st, "linear_plan (%s, M=%lld N=%lld K=%lld): ", qs_precision_name(d->prec),
                             (long long)d->M, (long long)d->N, (long long)d->K);
    }
    *plan = lp;
    *workspace = lp->ws_bytes;
    return QS_OK;
}

static qs_status ws_check(const qs_cpu_linear_plan_t *lp, const void *ws, const char *what) {
    if (lp->ws_bytes && !ws)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the plan needs %zu bytes of workspace but ws is NULL", what,
                       lp->ws_bytes);
    return QS_OK;
}

/* FP32 views of two operands a (ra, ca) and b (rb, cb) for an emulated plan (widened into the
 * workspace), or their own data otherwise. */
static qs_status operands_in(qs_backend *be, const qs_cpu_linear_plan_t *lp, const qs_operand *a, int64_t ra,
                             int64_t ca, const qs_operand *b, int64_t rb, int64_t cb, void *ws, void **pa,
                             void **pb) {
    *pa = (void *)a->data;
    *pb = (void *)b->data;
    if (!lp->emulated) return QS_OK;
    float *fa, *fb, *w = ws;
    QS_TRY(qs_cpu_widen(be, ra, ca, a, &fa, w));
    QS_TRY(qs_cpu_widen(be, rb, cb, b, &fb, w + ra * ca));
    *pa = fa;
    *pb = fb;
    return QS_OK;
}

static void *scratch_of(const qs_cpu_linear_plan_t *lp, void *ws) { return ws ? (char *)ws + lp->tmp_bytes : NULL; }

/* The FP32 forward result Y = X·Wᵀ + b into y (M·N floats) on the plan's path. */
static qs_status linear_forward_f32(qs_backend *be, qs_cpu_linear_plan_t *lp, const qs_operand *x,
                                    const qs_operand *w, const float *b, float *y, void *ws) {
    const int64_t M = lp->d.M, N = lp->d.N, K = lp->d.K;
    void *px, *pw;
    QS_TRY(operands_in(be, lp, x, M, K, w, N, K, ws, &px, &pw));
    const qs_dnnl_ctx *ctx = &qs_cpu_be(be)->dnnl;
    if (lp->path != PATH_INT8) { /* argument order as created: SRC, WEIGHTS, [BIAS,] DST */
        void *h[4] = {px, pw, lp->d.has_bias ? (void *)b : (void *)y, y};
        return qs_dnnl_prim_exec(&lp->fwd, ctx, h, scratch_of(lp, ws), "linear forward");
    }
    void *h[3] = {px, pw, y};
    QS_TRY(qs_dnnl_prim_exec(&lp->fwd, ctx, h, scratch_of(lp, ws), "linear forward (int8)"));
    const float sx = x->scale[0];
    qs_cpu_epilogue(M, N, y, w->per_row ? sx : sx * w->scale[0], w->per_row ? w->scale : NULL,
                    lp->d.has_bias ? b : NULL, y, false);
    return QS_OK;
}

/* y = x·wᵀ + b in the plan's y_dt: F32 directly, BF16 as the FP32 result (in the workspace)
 * rounded to nearest even. */
qs_status qs_cpu_linear_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *x,
                                const qs_operand *w, const float *b, void *y, void *ws) {
    QS_TRY(qs_cpu_plan_check(plan, QS_CPU_PLAN_LINEAR, "linear_forward"));
    qs_cpu_linear_plan_t *lp = plan;
    QS_TRY(qs_cpu_operand_check(x, lp->fdt, false, "linear_forward x"));
    QS_TRY(qs_cpu_operand_check(w, lp->fdt, true, "linear_forward w"));
    if (!y || (lp->d.has_bias && !b))
        return QS_FAIL(QS_ERR_INVALID_ARG, "linear_forward: NULL y or (planned with bias) b");
    QS_TRY(ws_check(lp, ws, "linear_forward"));
    if (lp->d.y_dt != QS_BF16) return linear_forward_f32(be, lp, x, w, b, y, ws);
    float *yf = (float *)((char *)ws + lp->y_off);
    QS_TRY(linear_forward_f32(be, lp, x, w, b, yf, ws));
    return qs_f32_to_bf16(lp->d.M * lp->d.N, yf, y, NULL);
}

/* dx (M,K, FP32) = dy·w, or dx += that with accumulate (arguments checked). */
static qs_status linear_backward_data_f32(qs_backend *be, qs_cpu_linear_plan_t *lp, const qs_operand *dy,
                                          const qs_operand *w, float *dx, bool accumulate, void *ws) {
    const int64_t M = lp->d.M, N = lp->d.N, K = lp->d.K;
    void *pdy, *pw;
    QS_TRY(operands_in(be, lp, dy, M, N, w, N, K, ws, &pdy, &pw));
    const qs_dnnl_ctx *ctx = &qs_cpu_be(be)->dnnl;
    if (lp->path != PATH_INT8) {
        void *h[3] = {pdy, pw, dx};
        return qs_dnnl_prim_exec(accumulate ? &lp->bwd_data_acc : &lp->bwd_data, ctx, h, scratch_of(lp, ws),
                                 "linear backward-data");
    }
    float *acc = accumulate ? (float *)ws : dx;
    void *h[3] = {pdy, pw, acc};
    QS_TRY(qs_dnnl_prim_exec(&lp->bwd_data, ctx, h, scratch_of(lp, ws), "linear backward-data (int8)"));
    qs_cpu_epilogue(M, K, acc, dy->scale[0] * w->scale[0], NULL, NULL, dx, accumulate);
    return QS_OK;
}

/* dx (M,K) in the plan's dx_dt = dy·w: F32 directly (or accumulated), BF16 as the FP32 result
 * (in the workspace, where a BF16 y's FP32 Y goes in forward) rounded to nearest even. */
qs_status qs_cpu_linear_backward_data(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                      const qs_operand *w, void *dx, bool accumulate, void *ws) {
    QS_TRY(qs_cpu_plan_check(plan, QS_CPU_PLAN_LINEAR, "linear_backward_data"));
    qs_cpu_linear_plan_t *lp = plan;
    QS_TRY(qs_cpu_operand_check(dy, lp->gdt, false, "linear_backward_data dy"));
    QS_TRY(qs_cpu_operand_check(w, lp->fdt, false, "linear_backward_data w"));
    if (!dx) return QS_FAIL(QS_ERR_INVALID_ARG, "linear_backward_data: NULL dx");
    QS_TRY(qs_dx_accumulate_check("linear_backward_data", lp->d.dx_dt, accumulate));
    QS_TRY(ws_check(lp, ws, "linear_backward_data"));
    if (lp->d.dx_dt != QS_BF16) return linear_backward_data_f32(be, lp, dy, w, dx, accumulate, ws);
    float *dxf = (float *)((char *)ws + lp->y_off);
    QS_TRY(linear_backward_data_f32(be, lp, dy, w, dxf, false, ws));
    return qs_f32_to_bf16(lp->d.M * lp->d.K, dxf, dx, NULL);
}

qs_status qs_cpu_linear_backward_weights(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                         const qs_operand *x, float *dw, float *db, void *ws) {
    QS_TRY(qs_cpu_plan_check(plan, QS_CPU_PLAN_LINEAR, "linear_backward_weights"));
    qs_cpu_linear_plan_t *lp = plan;
    QS_TRY(qs_cpu_operand_check(dy, lp->gdt, false, "linear_backward_weights dy"));
    QS_TRY(qs_cpu_operand_check(x, lp->fdt, false, "linear_backward_weights x"));
    if (!dw) return QS_FAIL(QS_ERR_INVALID_ARG, "linear_backward_weights: NULL dw");
    QS_TRY(qs_bias_grad_check(dy->dt, db, lp->d.has_bias, "linear_backward_weights"));
    QS_TRY(ws_check(lp, ws, "linear_backward_weights"));
    const int64_t M = lp->d.M, N = lp->d.N, K = lp->d.K;
    void *pdy, *px;
    QS_TRY(operands_in(be, lp, dy, M, N, x, M, K, ws, &pdy, &px));
    const qs_dnnl_ctx *ctx = &qs_cpu_be(be)->dnnl;
    void *scratch = scratch_of(lp, ws);
    const size_t esz = qs_dtype_size(lp->emulated ? QS_F32 : lp->fdt);
    size_t dyt_col = (size_t)N * esz; /* bytes between columns r and r+1 of dYᵀ */
    if (lp->path == PATH_INT8) {
        qs_cpu_transpose_s8(M, N, pdy, ws);
        pdy = ws;
        dyt_col = 1;
    }
    for (int64_t r0 = 0; r0 < M; r0 += lp->chunk) {
        qs_dnnl_prim *p = r0 == 0 ? &lp->bwd_weights : r0 + lp->chunk <= M ? &lp->bwd_weights_acc : &lp->bwd_weights_tail;
        /* rows r0.. of dY (its transpose's columns) and of X */
        void *h[3] = {(char *)pdy + (size_t)r0 * dyt_col, (char *)px + (size_t)(r0 * K) * esz, dw};
        QS_TRY(qs_dnnl_prim_exec(p, ctx, h, scratch, "linear backward-weights"));
    }
    if (lp->path == PATH_INT8) qs_cpu_epilogue(N, K, dw, dy->scale[0] * x->scale[0], NULL, NULL, dw, false);
    if (!db) return QS_OK;
    double *sum = scratch;
    QS_TRY(qs_cpu_colsums(M, N, dy->data, NULL, NULL, NULL, NULL, sum, NULL));
    for (int64_t n = 0; n < N; n++) db[n] = (float)sum[n];
    return QS_OK;
}

const char *qs_cpu_linear_impl_name(const void *plan, int dir) {
    const qs_cpu_linear_plan_t *lp = plan;
    if (!lp || lp->hdr.kind != QS_CPU_PLAN_LINEAR) return "?";
    return qs_dnnl_prim_impl(dir == 0 ? &lp->fwd : dir == 1 ? &lp->bwd_data : &lp->bwd_weights);
}
