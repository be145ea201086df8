/* src/cuda/cuda_conv_plan.c — defines: the choice of one path per direction of a CUDA convolution
 * plan (qs_cuda_conv_impl_name reports it). Per precision, the candidates in order of preference;
 * the first that builds runs, unless benchmarking (QS_CUDNN_BENCHMARK=1): then every built one is
 * timed end to end (conversions and epilogue included) on scratch buffers and the fastest kept.
 *   FP32  LEGACY, FMA math.          TF32  LEGACY, TF32 math.
 *   BF16  the 16-bit-output GRAPH (the FP32 sums rounded once to BF16, widened by the epilogue: the
 *         engines PyTorch's BF16 convolutions use; QS_CUDNN_BF16_OUT=0 turns it off), then forward:
 *         the FP32-output GRAPH, LEGACY TF32 on widened operands; backward: the other way round.
 *   FP16  the same without the 16-bit output (FP16's range may not hold the sums).
 *   FP8   forward: the E4M3 GRAPH with an FP32 output first; then as BF16, on operands widened to
 *         BF16 (every FP8 value is exactly a BF16 value).
 * All paths compute the same arithmetic — exact products of the stored values (BF16, FP16 and FP8
 * values are exactly TF32 values), FP32 sums — except the 16-bit output's one rounding (which
 * test_cuda_ops budgets) and Hopper's FP8 MMA, which accumulates with fewer than 24 bits
 * (negligible next to E4M3's own rounding, but not bit-faithful FP32 sums).
 * Workspace, per direction (regions 256-byte aligned; the plan reports the maximum):
 *   [A: first operand widened (x fwd / dY bwd), when the path widens it]
 *   [B: W transposed to KRSC / widened (fwd, bwd-data; unless 1x1 or C == 1 with W used as
 *       stored) | X widened (bwd-weights, when widened)]
 *   [T: staging, cuda_conv_run.c]  [cuDNN workspace of the chosen algorithm / plan]
 * T for backward-data is reserved even if the caller never accumulates (the plan cannot know). */
#include "cuda/cuda_conv_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* n rounded up to the workspace alignment. */
static size_t align_up(size_t n) { return (n + QS_CONV_WS_ALIGN - 1) / QS_CONV_WS_ALIGN * QS_CONV_WS_ALIGN; }

/* A candidate path of a direction. */
typedef struct conv_cand {
    qs_cuda_conv_engine eng;
    qs_dtype a, b; /* dtypes cuDNN reads */
    bool tf32;     /* LEGACY: TF32 math */
    qs_dtype out;  /* GRAPH: dtype cuDNN writes (F32 or BF16) */
} conv_cand;

/* Lay out the workspace regions of a built direction. */
static void dir_layout(const qs_cuda_conv_plan_t *cp, int dir, qs_cuda_conv_dir *cd) {
    const qs_conv_desc *d = &cp->d;
    size_t sz_a = cd->cvt_a ? (size_t)qs_cuda_conv_numel_a(d, dir) * qs_dtype_size(cd->run_a) : 0;
    size_t sz_b = cd->cvt_b ? (size_t)qs_cuda_conv_numel_b(d, dir) * qs_dtype_size(cd->run_b) : 0;
    const size_t sz_t = cd->use_t ? (size_t)qs_cuda_conv_numel_out(d, dir) * qs_dtype_size(cd->out_dt) : 0;
    cd->off_a = 0;
    cd->off_b = cd->off_a + align_up(sz_a);
    cd->off_t = cd->off_b + align_up(sz_b);
    cd->off_dnn = cd->off_t + align_up(sz_t);
    cd->total = cd->off_dnn + align_up(cd->dnn_ws);
}

/* Operand handling, staging and workspace layout of a built path with inputs c->a, c->b. */
static void dir_finish(const qs_cuda_conv_plan_t *cp, int dir, qs_cuda_conv_dir *cd, const conv_cand *c) {
    const qs_conv_desc *d = &cp->d;
    const qs_dtype a_store = dir == QS_CONV_FWD ? cp->fdt : cp->gdt, b_store = cp->fdt;
    cd->run_a = c->a;
    cd->run_b = c->b;
    cd->cvt_a = cd->run_a != a_store;
    /* W is transposed unless KRSC and OIHW coincide (1x1 kernels, or C == 1) */
    const bool w_same = d->R * d->S == 1 || d->C == 1;
    cd->cvt_b = cd->run_b != b_store || (dir != QS_CONV_BWD_WEIGHTS && !w_same);
    cd->scaled = qs_cuda_conv_is_fp8(a_store) || qs_cuda_conv_is_fp8(b_store);
    if (cd->eng == QS_CONV_ENG_LEGACY) cd->out_dt = QS_F32;
    /* a BF16 y or dX takes a BF16 result as it is when nothing is left to apply (no FP8 scale, no
     * bias); anything else is staged: a 16-bit result is widened (F32 output) or re-rounded after
     * the bias (BF16 y), an FP32 result bound for a BF16 output is narrowed by the epilogue. An
     * F32 dX keeps T for accumulating where beta cannot (a BF16 dX never accumulates). */
    const bool n16 = qs_cuda_conv_out_dtype(d, dir) == QS_BF16;
    cd->direct = n16 && cd->out_dt == QS_BF16 && !cd->scaled && !(dir == QS_CONV_FWD && d->has_bias);
    cd->use_t = (cd->out_dt != QS_F32 || n16) && !cd->direct;
    if (dir == QS_CONV_BWD_DATA && !n16) cd->use_t = cd->use_t || cd->eng == QS_CONV_ENG_GRAPH || cd->scaled;
    if (dir == QS_CONV_BWD_WEIGHTS) cd->use_t = cd->use_t || (d->R * d->S > 1 && d->C > 1);
    if (n16) {
        const size_t L = strlen(cd->impl);
        snprintf(cd->impl + L, sizeof cd->impl - L, "; bf16 %s %s", dir == QS_CONV_FWD ? "y" : "dx",
                 cd->direct ? "written directly" : "from the epilogue");
    }
    dir_layout(cp, dir, cd);
}

/* Time the built paths of direction dir end to end (operand conversion, cuDNN, epilogue, as
 * a call runs them) on zeroed scratch operands: 1 warm-up + 3 runs each. Returns the index of
 * the fastest (0 when nothing could be timed); ms[i] is its time per call, or -1. */
static int time_paths(qs_backend *be, qs_cuda_conv_plan_t *cp, int dir, qs_cuda_conv_dir *paths, int n, cudaStream_t st,
                      float *ms) {
    const qs_conv_desc *d = &cp->d;
    const qs_dtype a_dt = dir == QS_CONV_FWD ? cp->fdt : cp->gdt, b_dt = cp->fdt;
    size_t wmax = 0;
    for (int i = 0; i < n; i++) {
        ms[i] = -1.0f;
        wmax = paths[i].total > wmax ? paths[i].total : wmax;
    }
    const size_t sa = (size_t)qs_cuda_conv_numel_a(d, dir) * qs_dtype_size(a_dt), sb = (size_t)qs_cuda_conv_numel_b(d, dir) * qs_dtype_size(b_dt);
    /* the output as a call gets it: Y in the plan's y_dt, dX in its dx_dt, dW in FP32 */
    const size_t so = (size_t)qs_cuda_conv_numel_out(d, dir) * qs_dtype_size(qs_cuda_conv_out_dtype(d, dir));
    static const float ones[2] = {1.0f, 1.0f};
    qs_cuda_conv_scratch sc;
    int best = 0;
    const qs_cuda_conv_dir saved = cp->dir[dir];
    if (qs_cuda_conv_scratch_open(&sc, sa, sb, so, sizeof ones, wmax, st) &&
        cudaMemcpyAsync(sc.scale, ones, sizeof ones, cudaMemcpyHostToDevice, st) == cudaSuccess) {
        const qs_operand oa = {sc.a, a_dt, (const float *)sc.scale, false, NULL},
                         ob = {sc.b, b_dt, (const float *)sc.scale + 1, false, NULL};
        for (int i = 0; i < n; i++) {
            cp->dir[dir] = paths[i];
            if (qs_cuda_conv_run(be, cp, dir, NULL, &oa, &ob, NULL, sc.o, false, sc.w) != QS_OK) { /* warm-up */
                qs_error_clear();
                continue;
            }
            bool ok = cudaEventRecord(sc.e0, st) == cudaSuccess;
            for (int r = 0; ok && r < 3; r++)
                ok = qs_cuda_conv_run(be, cp, dir, NULL, &oa, &ob, NULL, sc.o, false, sc.w) == QS_OK;
            if (!ok) qs_error_clear();
            ok = ok && cudaEventRecord(sc.e1, st) == cudaSuccess && cudaEventSynchronize(sc.e1) == cudaSuccess;
            float t = 0.0f;
            if (!ok || cudaEventElapsedTime(&t, sc.e0, sc.e1) != cudaSuccess) continue;
            ms[i] = t / 3.0f;
            if (ms[best] < 0.0f || ms[i] < ms[best]) best = i;
        }
    }
    cp->dir[dir] = saved;
    qs_cuda_conv_scratch_close(&sc, st);
    return best;
}

/* Contract: cuda_conv_plan.h. Build every path of direction dir that cuDNN supports (FP32/TF32: the one legacy path; BF16,
 * FP16, FP8: the graph path(s) and the widened TF32 legacy path — numerically the same
 * arithmetic), time them when there are several, and keep the fastest. */
qs_status qs_cuda_conv_build_dir(qs_backend *be, qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, cudaStream_t stream) {
    const qs_conv_desc *d = &cp->d;
    const qs_dtype a_store = dir == QS_CONV_FWD ? cp->fdt : cp->gdt, b_store = cp->fdt;
    /* candidates in order of preference (the first that builds runs unless benchmarking) */
    const conv_cand legacy_tf32 = {QS_CONV_ENG_LEGACY, QS_F32, QS_F32, true, QS_F32};
    const bool b16 = qs_cuda_conv_bf16_out();
    conv_cand c[4];
    int nc = 0;
    switch (d->prec) {
    case QS_PREC_FP32: c[nc++] = (conv_cand){QS_CONV_ENG_LEGACY, QS_F32, QS_F32, false, QS_F32}; break;
    case QS_PREC_TF32: c[nc++] = legacy_tf32; break;
    case QS_PREC_BF16:
    case QS_PREC_FP16: /* FP16 keeps FP32 outputs: its sums may exceed FP16's range */
        if (b16 && d->prec == QS_PREC_BF16) c[nc++] = (conv_cand){QS_CONV_ENG_GRAPH, a_store, b_store, false, QS_BF16};
        if (dir != QS_CONV_FWD) c[nc++] = legacy_tf32;
        c[nc++] = (conv_cand){QS_CONV_ENG_GRAPH, a_store, b_store, false, QS_F32};
        if (dir == QS_CONV_FWD) c[nc++] = legacy_tf32;
        break;
    case QS_PREC_FP8:
        if (dir == QS_CONV_FWD) c[nc++] = (conv_cand){QS_CONV_ENG_GRAPH, QS_F8E4M3, QS_F8E4M3, false, QS_F32};
        if (b16) c[nc++] = (conv_cand){QS_CONV_ENG_GRAPH, QS_BF16, QS_BF16, false, QS_BF16};
        if (dir != QS_CONV_FWD) c[nc++] = legacy_tf32;
        c[nc++] = (conv_cand){QS_CONV_ENG_GRAPH, QS_BF16, QS_BF16, false, QS_F32};
        if (dir == QS_CONV_FWD) c[nc++] = legacy_tf32;
        break;
    default:
        return QS_FAIL(QS_ERR_INTERNAL, "conv_plan: no cuDNN path for precision %s", qs_precision_name(d->prec));
    }
    qs_cuda_conv_dir built[4];
    memset(built, 0, sizeof built);
    int nb = 0;
    char why[768];
    why[0] = 0;
    qs_status st = QS_ERR_INTERNAL;
    for (int i = 0; i < nc; i++) {
        qs_cuda_conv_dir *cd = &built[nb];
        st = c[i].eng == QS_CONV_ENG_LEGACY ? qs_cuda_conv_legacy_build(cp, dir, h, c[i].tf32, cd)
                                    : qs_cuda_conv_graph_build(cp, dir, h, stream, c[i].a, c[i].b, c[i].out, cd);
        if (st == QS_OK) {
            dir_finish(cp, dir, cd, &c[i]);
            nb++;
            continue;
        }
        /* remember why, and go on with the other (numerically equivalent) paths */
        snprintf(why, sizeof why, "%s", qs_last_error());
        qs_error_clear();
        qs_cuda_conv_dir_clear(cd);
    }
    if (nb == 0) return QS_FAIL(st, "%s", why);
    int best = 0; /* fixed preference: the first path built */
    if (nb > 1 && qs_cuda_conv_benchmark()) {
        float ms[4];
        best = time_paths(be, cp, dir, built, nb, stream, ms);
        char tail[96];
        int len = snprintf(tail, sizeof tail, "; %.4f ms, fastest of %d paths (others", (double)ms[best], nb);
        for (int i = 0; i < nb && len > 0 && (size_t)len < sizeof tail; i++)
            if (i != best) len += snprintf(tail + len, sizeof tail - (size_t)len, " %.4f", (double)ms[i]);
        if (len > 0 && (size_t)len < sizeof tail - 1) snprintf(tail + len, sizeof tail - (size_t)len, ")");
        qs_cuda_conv_dir *cd = &built[best];
        size_t L = strlen(cd->impl), T = strlen(tail);
        if (L + T >= sizeof cd->impl) T = sizeof cd->impl - 1 - L;
        memcpy(cd->impl + L, tail, T);
        cd->impl[L + T] = 0;
    }
    cp->dir[dir] = built[best];
    for (int i = 0; i < nb; i++)
        if (i != best) qs_cuda_conv_dir_clear(&built[i]);
    return QS_OK;
}
