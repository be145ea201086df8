/* cli/bench_gemm.c — `qsync bench gemm` and `qsync bench layer`.
 *
 * gemm: Y (M,N) = X (M,K)·Wᵀ through the backend's Linear forward with operands quantized
 *       beforehand (INT8 includes its scale epilogue: the result is FP32 either way).
 * layer: one training use of a layer — quantize X (round to nearest), quantize W, forward,
 *       quantize dY (stochastic rounding), backward-data, backward-weights — for Linear
 *       shapes and Conv2d shapes; FP32 runs the three products alone.
 * Shapes: 1024³ (the acceptance shape) and those of the built-in models at batch 128: `cnn`
 * (fc1 128×1024×3136, fc2 128×10×1024, conv1 28²·1→32 5×5, conv2 14²·32→64 5×5) and narrow
 * `resnet18` (width 16, 28 px: 3×3 convs 16/32/64/128 channels at 28/14/7/4 px). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "qsync/tensor.h"

typedef struct gemm_shape { const char *name; int64_t M, N, K; } gemm_shape;
static const gemm_shape g_linear_shapes[] = {
    {"square 1024^3", 1024, 1024, 1024},
    {"cnn fc1", 128, 1024, 3136},
    {"cnn fc2", 128, 10, 1024},
};
typedef struct conv_shape { const char *name; int64_t N, H, C, K, R, stride, pad; } conv_shape;
static const conv_shape g_conv_shapes[] = {
    {"cnn conv1", 128, 28, 1, 32, 5, 1, 2},      {"cnn conv2", 128, 14, 32, 64, 5, 1, 2},
    {"resnet18-w16 28px", 128, 28, 16, 16, 3, 1, 1}, {"resnet18-w16 14px", 128, 14, 32, 32, 3, 1, 1},
    {"resnet18-w16 7px", 128, 7, 64, 64, 3, 1, 1},   {"resnet18-w16 4px", 128, 4, 128, 128, 3, 1, 1},
};

/* One layer at one precision: FP32 masters, quantized copies, plan and workspace. */
typedef struct layer_case {
    qs_backend *be;
    bool conv;
    qs_precision prec;
    void *plan, *ws;
    int64_t xr, xc, wr, wc, yr, yc;  /* X, W, Y/dY as 2-D (rows, cols) */
    float *x, *w, *dy, *y, *dx, *dw;
    void *qx, *qw, *qdy;
    float sx, sw, sdy;
    uint64_t step;
    bool gemm_only;
} layer_case;

static qs_operand op_of(const void *data, qs_dtype dt, const float *scale) {
    bool scaled = dt == QS_S8 || dt == QS_F8E4M3 || dt == QS_F8E5M2;
    return (qs_operand){.data = data, .dt = dt, .scale = scaled ? scale : NULL};
}

/* quantize into the case's buffer; FP32 keeps the master */
static qs_status quant(layer_case *c, const float *src, int64_t r, int64_t k, bool grad, void *dst, float *scale,
                       const qs_sr *sr) {
    qs_dtype dt = qs_precision_operand_dtype(c->prec, grad);
    if (dt == QS_F32) return QS_OK;
    return c->be->ops->quantize(c->be, NULL, r, k, src, NULL, dt, dst, scale, false, sr);
}

static qs_operand operand(layer_case *c, int which) { /* 0 x, 1 w, 2 dy */
    qs_dtype dt = qs_precision_operand_dtype(c->prec, which == 2);
    const float *master = which == 0 ? c->x : which == 1 ? c->w : c->dy;
    void *q = which == 0 ? c->qx : which == 1 ? c->qw : c->qdy;
    const float *s = which == 0 ? &c->sx : which == 1 ? &c->sw : &c->sdy;
    return dt == QS_F32 ? qs_operand_f32(master) : op_of(q, dt, s);
}

static qs_status run_forward(void *ctx) {
    layer_case *c = ctx;
    qs_operand x = operand(c, 0), w = operand(c, 1);
    const qs_backend_ops *o = c->be->ops;
    return c->conv ? o->conv_forward(c->be, c->plan, NULL, &x, &w, NULL, c->y, c->ws)
                   : o->linear_forward(c->be, c->plan, NULL, &x, &w, NULL, c->y, c->ws);
}

static qs_status run_layer(void *ctx) {
    layer_case *c = ctx;
    const qs_backend_ops *o = c->be->ops;
    qs_sr sr = {.key = 3, .counter = ++c->step};
    QS_TRY(quant(c, c->x, c->xr, c->xc, false, c->qx, &c->sx, NULL));
    QS_TRY(quant(c, c->w, c->wr, c->wc, false, c->qw, &c->sw, NULL));
    QS_TRY(run_forward(c));
    QS_TRY(quant(c, c->dy, c->yr, c->yc, true, c->qdy, &c->sdy, &sr));
    qs_operand x = operand(c, 0), w = operand(c, 1), dy = operand(c, 2);
    if (c->conv) {
        QS_TRY(o->conv_backward_data(c->be, c->plan, NULL, &dy, &w, c->dx, false, c->ws));
        return o->conv_backward_weights(c->be, c->plan, NULL, &dy, &x, c->dw, NULL, c->ws);
    }
    QS_TRY(o->linear_backward_data(c->be, c->plan, NULL, &dy, &w, c->dx, false, c->ws));
    return o->linear_backward_weights(c->be, c->plan, NULL, &dy, &x, c->dw, NULL, c->ws);
}

static void case_free(layer_case *c) {
    if (c->plan) c->be->ops->plan_destroy(c->be, c->plan);
    void *bufs[] = {c->ws, c->x, c->w, c->dy, c->y, c->dx, c->dw, c->qx, c->qw, c->qdy};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) qs_host_free(bufs[i]);
    memset(c, 0, sizeof *c);
}

static qs_status alloc_f(float **p, int64_t n, uint64_t fill) {
    *p = qs_host_alloc((size_t)n * sizeof(float));
    if (!*p) return QS_FAIL(QS_ERR_OOM, "bench: out of memory");
    if (fill) qs_bench_fill(*p, n, fill);
    return QS_OK;
}

/* Plan and buffers for a Linear (cs NULL) or Conv2d shape; QS_ERR_UNSUPPORTED passes through. */
static qs_status case_init(layer_case *c, qs_backend *be, qs_precision p, const gemm_shape *ls, const conv_shape *cs) {
    memset(c, 0, sizeof *c);
    c->be = be;
    c->prec = p;
    size_t wsb = 0;
    if (cs) {
        qs_conv_desc d = {.N = cs->N, .H = cs->H, .W = cs->H, .C = cs->C, .K = cs->K, .R = cs->R, .S = cs->R,
                          .stride_h = cs->stride, .stride_w = cs->stride, .pad_h = cs->pad, .pad_w = cs->pad, .prec = p};
        QS_TRY(qs_conv_desc_finish(&d));
        c->conv = true;
        c->xr = d.N * d.H * d.W, c->xc = d.C, c->wr = d.K, c->wc = d.C * d.R * d.S, c->yr = d.N * d.P * d.Q, c->yc = d.K;
        QS_TRY(be->ops->conv_plan(be, &d, &c->plan, &wsb));
    } else {
        qs_linear_desc d = {.M = ls->M, .N = ls->N, .K = ls->K, .prec = p};
        c->xr = ls->M, c->xc = ls->K, c->wr = ls->N, c->wc = ls->K, c->yr = ls->M, c->yc = ls->N;
        QS_TRY(be->ops->linear_plan(be, &d, &c->plan, &wsb));
    }
    c->ws = qs_host_alloc(wsb ? wsb : 64);
    QS_TRY(alloc_f(&c->x, c->xr * c->xc, 1));
    QS_TRY(alloc_f(&c->w, c->wr * c->wc, 2));
    QS_TRY(alloc_f(&c->dy, c->yr * c->yc, 3));
    QS_TRY(alloc_f(&c->y, c->yr * c->yc, 0));
    QS_TRY(alloc_f(&c->dx, c->xr * c->xc, 0));
    QS_TRY(alloc_f(&c->dw, c->wr * c->wc, 0));
    /* low-precision copies: at most 2 bytes per element for any precision */
    c->qx = qs_host_alloc((size_t)(c->xr * c->xc) * 2);
    c->qw = qs_host_alloc((size_t)(c->wr * c->wc) * 2);
    c->qdy = qs_host_alloc((size_t)(c->yr * c->yc) * 2);
    if (!c->ws || !c->qx || !c->qw || !c->qdy) return QS_FAIL(QS_ERR_OOM, "bench: out of memory");
    /* gemm mode times the product alone: quantize once here */
    QS_TRY(quant(c, c->x, c->xr, c->xc, false, c->qx, &c->sx, NULL));
    QS_TRY(quant(c, c->w, c->wr, c->wc, false, c->qw, &c->sw, NULL));
    qs_sr sr = {.key = 3};
    return quant(c, c->dy, c->yr, c->yc, true, c->qdy, &c->sdy, &sr);
}

/* FLOPs of one timed run: the forward product (gemm) or all three (layer). */
static double case_flops(const layer_case *c, bool layer) {
    double f = 2.0 * (double)c->yr * (double)c->yc * (double)c->wc;
    return layer ? 3 * f : f;
}

/* Time every precision on one shape, interleaved; print and record. */
static qs_status bench_shape(qs_bench_opts *o, const char *kind, const char *name, const gemm_shape *ls,
                             const conv_shape *cs, bool layer) {
    layer_case cases[QS_BENCH_MAX_PRECS];
    qs_bench_fn fns[QS_BENCH_MAX_PRECS];
    void *ctxs[QS_BENCH_MAX_PRECS];
    int idx[QS_BENCH_MAX_PRECS], n = 0;
    qs_status st = QS_OK;
    for (int i = 0; i < o->n_precs && st == QS_OK; i++) {
        st = case_init(&cases[n], o->be, o->precs[i], ls, cs);
        if (st == QS_ERR_UNSUPPORTED) { /* reported as n/a */
            if (!o->json) printf("  %-22s %-5s n/a: %s\n", name, qs_precision_name(o->precs[i]), qs_last_error());
            case_free(&cases[n]);
            st = QS_OK;
            continue;
        }
        fns[n] = layer ? run_layer : run_forward;
        ctxs[n] = &cases[n];
        idx[n++] = i;
    }
    qs_bench_stat stats[QS_BENCH_MAX_PRECS];
    if (st == QS_OK) st = qs_bench_run(o, n, fns, ctxs, stats);
    double fp32_ms = 0;
    for (int j = 0; j < n && st == QS_OK; j++)
        if (cases[j].prec == QS_PREC_FP32) fp32_ms = stats[j].median_ms;
    for (int j = 0; j < n && st == QS_OK; j++) {
        qs_precision p = o->precs[idx[j]];
        double gf = case_flops(&cases[j], layer) / (stats[j].median_ms * 1e6);
        double ratio = fp32_ms > 0 ? fp32_ms / stats[j].median_ms : 0;
        if (!o->json)
            printf("  %-22s %-5s %-8s %9.3f ms  (min %.3f, max %.3f)  %8.1f GFLOP/s  x%.2f vs fp32\n", name,
                   qs_precision_name(p), qs_bench_support(o, p), stats[j].median_ms, stats[j].min_ms, stats[j].max_ms,
                   gf, ratio);
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "kind", kind);
        cJSON_AddStringToObject(r, "shape", name);
        cJSON_AddStringToObject(r, "precision", qs_precision_name(p));
        cJSON_AddStringToObject(r, "support", qs_bench_support(o, p));
        cJSON_AddNumberToObject(r, "median_ms", stats[j].median_ms);
        cJSON_AddNumberToObject(r, "min_ms", stats[j].min_ms);
        cJSON_AddNumberToObject(r, "max_ms", stats[j].max_ms);
        cJSON_AddNumberToObject(r, "gflops", gf);
        if (fp32_ms > 0) cJSON_AddNumberToObject(r, "speedup_vs_fp32", ratio);
        cJSON_AddItemToArray(o->rows, r);
    }
    for (int j = 0; j < n; j++) case_free(&cases[j]);
    return st;
}

static qs_status bench_products(qs_bench_opts *o, bool layer) {
    if (!o->json)
        printf("%s: %s, %d reps (median), ratios in the same run\n", layer ? "layer" : "gemm",
               layer ? "forward + backward-data + backward-weights incl. quantization" : "Y = X·Wᵀ, operands pre-quantized",
               o->reps);
    for (size_t i = 0; i < sizeof g_linear_shapes / sizeof *g_linear_shapes; i++) {
        char name[64];
        const gemm_shape *s = &g_linear_shapes[i];
        snprintf(name, sizeof name, "%s", s->name);
        if (!o->json) printf("linear %s: M=%lld N=%lld K=%lld\n", s->name, (long long)s->M, (long long)s->N, (long long)s->K);
        QS_TRY(bench_shape(o, "linear", name, s, NULL, layer));
    }
    if (!layer) return QS_OK;
    for (size_t i = 0; i < sizeof g_conv_shapes / sizeof *g_conv_shapes; i++) {
        const conv_shape *s = &g_conv_shapes[i];
        if (!o->json)
            printf("conv %s: N=%lld %lldx%lld C=%lld K=%lld %lldx%lld\n", s->name, (long long)s->N, (long long)s->H,
                   (long long)s->H, (long long)s->C, (long long)s->K, (long long)s->R, (long long)s->R);
        QS_TRY(bench_shape(o, "conv2d", s->name, NULL, s, true));
    }
    return QS_OK;
}

qs_status qs_bench_gemm(qs_bench_opts *o) { return bench_products(o, false); }
qs_status qs_bench_layer(qs_bench_opts *o) { return bench_products(o, true); }
