/* cli/bench_gemm.c — `qsync bench gemm` and `qsync bench layer`.
 *
 * gemm: Y (M,N) = X (M,K)·Wᵀ through the backend's Linear forward with operands quantized
 *       beforehand (INT8 includes its scale epilogue: the result is FP32 either way).
 * layer: one training use of a layer — quantize X (round to nearest), quantize W, forward,
 *       quantize dY (stochastic rounding), backward-data, backward-weights — for Linear
 *       shapes and Conv2d shapes; FP32 runs the three products alone.
 * Shapes: 1024³ (the acceptance shape) and those of the built-in models at batch 128: `cnn`
 * (fc1 128×1024×3136, fc2 128×10×1024, conv1 28²·1→32 5×5, conv2 14²·32→64 5×5) and narrow
 * `resnet18` (width 16, 28 px: 3×3 convs 16/32/64/128 channels at 28/14/7/4 px); or, with
 * --size / --shape (o->shape_*), that one Linear shape alone.
 * Device: with o->device_sync (--device cuda[:N]) every buffer — FP32 masters, quantized copies,
 * scales, outputs, workspace — is backend memory (alloc, masters filled on the host once per
 * shape and copied in), and qs_bench_run times batches between stream_syncs; the definition of
 * a timed run is the same on every device (G_*_INCLUDES). A precision whose plan the backend
 * refuses (QS_ERR_UNSUPPORTED: int8 on CUDA, tf32 on the CPU) is skipped with its message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "qsync/tensor.h"

typedef struct gemm_shape { const char *name; int64_t M, N, K; } gemm_shape;
/* Length of the amax histories of --fp8-scaling delayed (the runs before warm-up fill it). */
#define QS_BENCH_AMAX_LEN 8
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

static const char *const G_GEMM_INCLUDES =
    "Y = X·Wᵀ through the backend's Linear forward (linear_forward; FP32 output for every precision, int8 "
    "including its scale epilogue); X and W quantized from their FP32 masters once before timing (not timed; "
    "fp32 and tf32 read the masters); no bias; FLOPs 2·M·N·K per run";
static const char *const G_LAYER_INCLUDES =
    "one training use of the layer from the FP32 masters X, W and dY, timed as one unit: quantize X and W to "
    "the precision's forward operand dtype (round to nearest even; bf16/fp16: a cast; fp8: per-tensor amax, "
    "power-of-two scale, E4M3; int8: per-tensor symmetric), forward Y = X·Wᵀ (FP32 output), quantize dY to "
    "the gradient dtype with stochastic rounding (fp8: E5M2 with its own amax and scale), backward-data "
    "dX = dY·W (FP32 output), backward-weights dW = dYᵀ·X (FP32 output); includes any operand copies the "
    "backend makes inside these ops (CUDA fp8: the transposed copies Wᵀ, Xᵀ, dYᵀ that cuBLASLt's TN-only FP8 "
    "layout needs, written by quantize in the same pass as the operand, as a Linear node keeps them, or made "
    "by the product, zero-padded, where a dimension is not a multiple of 16); fp32 and tf32 run the three "
    "products on the masters (no quantization, no casts); no bias, no optimizer; Conv2d rows the same through "
    "conv_*; FLOPs 3·2·M·N·K per run";

/* The FP32 masters of one shape, on the host, filled once (streams 1, 2, 3) and copied into
 * every case. */
typedef struct masters {
    float *x, *w, *dy;
} masters;

/* One layer at one precision: FP32 masters, quantized copies, plan and workspace; every
 * buffer in backend memory when dev, on the host otherwise. */
typedef struct layer_case {
    qs_backend *be;
    bool conv, dev;
    qs_precision prec;
    void *plan, *ws;
    int64_t xr, xc, wr, wc, yr, yc;  /* X, W, Y/dY as 2-D (rows, cols) */
    float *x, *w, *dy, *y, *dx, *dw;
    void *qx, *qw, *qdy;
    void *tx, *tw, *tdy;   /* transposed FP8 copies, when the backend reads them (else NULL) */
    float *amax;           /* FP8 delayed scaling: three amax histories (QS_BENCH_AMAX_LEN + 1
                              floats each, 16 floats apart), else NULL */
    float *dscales;        /* dev: the three dequantization scales, 16 floats (64 B) apart */
    float sx, sw, sdy;     /* host: the three scales */
    uint64_t step;
} layer_case;

/* Where the scale of operand `which` (0 x, 1 w, 2 dy) lives: backend memory when dev. */
static float *scale_of(layer_case *c, int which) {
    if (c->dev) return c->dscales + 16 * which;
    return which == 0 ? &c->sx : which == 1 ? &c->sw : &c->sdy;
}

static qs_operand op_of(const void *data, qs_dtype dt, const float *scale) {
    bool scaled = dt == QS_S8 || dt == QS_F8E4M3 || dt == QS_F8E5M2;
    return (qs_operand){.data = data, .dt = dt, .scale = scaled ? scale : NULL};
}

/* Operand `which` (0 x, 1 w, 2 dy) quantized into the case's buffers (and its transposed
 * copy when the case keeps one; with its amax history when the case has them); FP32 keeps
 * the master. */
static qs_status quant(layer_case *c, int which, const qs_sr *sr) {
    const float *src[3] = {c->x, c->w, c->dy};
    void *dst[3] = {c->qx, c->qw, c->qdy}, *dst_t[3] = {c->tx, c->tw, c->tdy};
    const int64_t rows[3] = {c->xr, c->wr, c->yr}, cols[3] = {c->xc, c->wc, c->yc};
    qs_dtype dt = qs_precision_operand_dtype(c->prec, which == 2);
    if (dt == QS_F32) return QS_OK;
    const qs_quant_delayed dl = {.amax = c->amax ? c->amax + 16 * which : NULL, .len = QS_BENCH_AMAX_LEN,
                                 .slot = (int)(c->step % QS_BENCH_AMAX_LEN), .record = true};
    return c->be->ops->quantize(c->be, NULL, rows[which], cols[which], src[which], NULL, dt, dst[which],
                                scale_of(c, which), false, sr, dst_t[which], c->amax ? &dl : NULL);
}

static qs_operand operand(layer_case *c, int which) { /* 0 x, 1 w, 2 dy */
    qs_dtype dt = qs_precision_operand_dtype(c->prec, which == 2);
    const float *master = which == 0 ? c->x : which == 1 ? c->w : c->dy;
    void *q = which == 0 ? c->qx : which == 1 ? c->qw : c->qdy;
    if (dt == QS_F32) return qs_operand_f32(master);
    qs_operand op = op_of(q, dt, scale_of(c, which));
    op.data_t = which == 0 ? c->tx : which == 1 ? c->tw : c->tdy;
    return op;
}

static qs_status run_forward(void *ctx) {
    layer_case *c = ctx;
    qs_operand x = operand(c, 0), w = operand(c, 1);
    const qs_backend_ops *o = c->be->ops;
    return c->conv ? o->conv_forward(c->be, c->plan, NULL, &x, &w, NULL, c->y, c->ws)
                   : o->linear_forward(c->be, c->plan, NULL, &x, &w, NULL, c->y, c->ws);
}

/* One timed layer run (G_LAYER_INCLUDES). */
static qs_status run_layer(void *ctx) {
    layer_case *c = ctx;
    const qs_backend_ops *o = c->be->ops;
    qs_sr sr = {.key = 3, .counter = ++c->step};
    QS_TRY(quant(c, 0, NULL));
    QS_TRY(quant(c, 1, NULL));
    QS_TRY(run_forward(c));
    QS_TRY(quant(c, 2, &sr));
    qs_operand x = operand(c, 0), w = operand(c, 1), dy = operand(c, 2);
    if (c->conv) {
        QS_TRY(o->conv_backward_data(c->be, c->plan, NULL, &dy, &w, c->dx, false, c->ws));
        return o->conv_backward_weights(c->be, c->plan, NULL, &dy, &x, c->dw, NULL, c->ws);
    }
    QS_TRY(o->linear_backward_data(c->be, c->plan, NULL, &dy, &w, c->dx, false, c->ws));
    return o->linear_backward_weights(c->be, c->plan, NULL, &dy, &x, c->dw, NULL, c->ws);
}

static void buf_free(layer_case *c, void *p) {
    if (!p) return;
    if (c->dev) c->be->ops->free(c->be, p);
    else qs_host_free(p);
}

/* `bytes` of zeroed memory where the case keeps its buffers. */
static qs_status buf_alloc(layer_case *c, size_t bytes, void **p) {
    *p = NULL;
    if (c->dev) return c->be->ops->alloc(c->be, bytes, p);
    *p = qs_host_alloc(bytes);
    return *p ? QS_OK : QS_FAIL(QS_ERR_OOM, "bench: out of host memory for %zu bytes", bytes);
}

static void case_free(layer_case *c) {
    if (c->plan) c->be->ops->plan_destroy(c->be, c->plan);
    void *bufs[] = {c->ws, c->x, c->w, c->dy, c->y, c->dx, c->dw, c->qx, c->qw, c->qdy, c->tx, c->tw, c->tdy, c->dscales,
                    c->amax};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) buf_free(c, bufs[i]);
    memset(c, 0, sizeof *c);
}

/* n floats into *p, a copy of src (NULL: zeros). */
static qs_status alloc_f(layer_case *c, float **p, int64_t n, const float *src) {
    const size_t bytes = (size_t)n * sizeof(float);
    QS_TRY(buf_alloc(c, bytes, (void **)p));
    if (!src) return QS_OK;
    if (c->dev) return c->be->ops->copy_h2d(c->be, NULL, *p, src, bytes);
    memcpy(*p, src, bytes);
    return QS_OK;
}

/* The three (rows, cols) views of a shape: X, W, Y/dY. */
static qs_status shape_dims(const gemm_shape *ls, const conv_shape *cs, qs_precision p, qs_conv_desc *cd,
                            int64_t dims[6]) {
    if (cs) {
        *cd = (qs_conv_desc){.N = cs->N, .H = cs->H, .W = cs->H, .C = cs->C, .K = cs->K, .R = cs->R, .S = cs->R,
                             .stride_h = cs->stride, .stride_w = cs->stride, .pad_h = cs->pad, .pad_w = cs->pad,
                             .prec = p};
        QS_TRY(qs_conv_desc_finish(cd));
        const int64_t v[6] = {cd->N * cd->H * cd->W, cd->C, cd->K, cd->C * cd->R * cd->S, cd->N * cd->P * cd->Q, cd->K};
        memcpy(dims, v, sizeof v);
    } else {
        const int64_t v[6] = {ls->M, ls->K, ls->N, ls->K, ls->M, ls->N};
        memcpy(dims, v, sizeof v);
    }
    return QS_OK;
}

/* Plan and buffers for a Linear (cs NULL) or Conv2d shape, masters copied from m;
 * QS_ERR_UNSUPPORTED passes through. On failure the caller frees the case. */
static qs_status case_init(layer_case *c, const qs_bench_opts *o, qs_precision p, const gemm_shape *ls,
                           const conv_shape *cs, const masters *m) {
    memset(c, 0, sizeof *c);
    c->be = o->be;
    c->dev = o->device_sync;
    c->prec = p;
    qs_backend *be = o->be;
    size_t wsb = 0;
    qs_conv_desc d;
    int64_t dims[6];
    QS_TRY(shape_dims(ls, cs, p, &d, dims));
    c->xr = dims[0], c->xc = dims[1], c->wr = dims[2], c->wc = dims[3], c->yr = dims[4], c->yc = dims[5];
    if (cs) {
        c->conv = true;
        QS_TRY(be->ops->conv_plan(be, &d, &c->plan, &wsb));
    } else {
        qs_linear_desc ld = {.M = ls->M, .N = ls->N, .K = ls->K, .prec = p};
        QS_TRY(be->ops->linear_plan(be, &ld, &c->plan, &wsb));
    }
    QS_TRY(buf_alloc(c, wsb ? wsb : 64, &c->ws));
    QS_TRY(alloc_f(c, &c->x, c->xr * c->xc, m->x));
    QS_TRY(alloc_f(c, &c->w, c->wr * c->wc, m->w));
    QS_TRY(alloc_f(c, &c->dy, c->yr * c->yc, m->dy));
    QS_TRY(alloc_f(c, &c->y, c->yr * c->yc, NULL));
    QS_TRY(alloc_f(c, &c->dx, c->xr * c->xc, NULL));
    QS_TRY(alloc_f(c, &c->dw, c->wr * c->wc, NULL));
    /* low-precision copies: at most 2 bytes per element for any precision */
    QS_TRY(buf_alloc(c, (size_t)(c->xr * c->xc) * 2, &c->qx));
    QS_TRY(buf_alloc(c, (size_t)(c->wr * c->wc) * 2, &c->qw));
    QS_TRY(buf_alloc(c, (size_t)(c->yr * c->yc) * 2, &c->qdy));
    if (!cs && p == QS_PREC_FP8 && be->fp8_wants_transposed) { /* what a Linear node keeps (gemm_quant.h) */
        QS_TRY(buf_alloc(c, (size_t)(c->xr * c->xc), &c->tx));
        QS_TRY(buf_alloc(c, (size_t)(c->wr * c->wc), &c->tw));
        QS_TRY(buf_alloc(c, (size_t)(c->yr * c->yc), &c->tdy));
    }
    if (c->dev) QS_TRY(buf_alloc(c, 3 * 16 * sizeof(float), (void **)&c->dscales));
    if (o->fp8_delayed && p == QS_PREC_FP8) QS_TRY(buf_alloc(c, 3 * 16 * sizeof(float), (void **)&c->amax)); /* zeroed */
    /* gemm mode times the product alone: quantize once here */
    QS_TRY(quant(c, 0, NULL));
    QS_TRY(quant(c, 1, NULL));
    qs_sr sr = {.key = 3};
    QS_TRY(quant(c, 2, &sr));
    return c->dev ? be->ops->stream_sync(be, NULL) : QS_OK;
}

/* FLOPs of one timed run: the forward product (gemm) or all three (layer). */
static double case_flops(const layer_case *c, bool layer) {
    double f = 2.0 * (double)c->yr * (double)c->yc * (double)c->wc;
    return layer ? 3 * f : f;
}

static void masters_free(masters *m) {
    qs_host_free(m->x);
    qs_host_free(m->w);
    qs_host_free(m->dy);
    memset(m, 0, sizeof *m);
}

/* The shape's FP32 masters on the host: X stream 1, W stream 2, dY stream 3 (as every case
 * always had them). */
static qs_status masters_init(masters *m, const gemm_shape *ls, const conv_shape *cs) {
    memset(m, 0, sizeof *m);
    qs_conv_desc d;
    int64_t dims[6];
    QS_TRY(shape_dims(ls, cs, QS_PREC_FP32, &d, dims));
    float **dst[3] = {&m->x, &m->w, &m->dy};
    for (int i = 0; i < 3; i++) {
        const int64_t n = dims[2 * i] * dims[2 * i + 1];
        *dst[i] = qs_host_alloc((size_t)n * sizeof(float));
        if (!*dst[i]) return QS_FAIL(QS_ERR_OOM, "bench: out of host memory for a %lld x %lld master",
                                     (long long)dims[2 * i], (long long)dims[2 * i + 1]);
        qs_bench_fill(*dst[i], n, (uint64_t)i + 1);
    }
    return QS_OK;
}

/* Record a refused case: printed as n/a (tables) and listed under "skipped" (JSON). */
static void note_skip(qs_bench_opts *o, const char *kind, const char *name, qs_precision p, const char *why) {
    if (!o->json) printf("  %-22s %-5s n/a: %s\n", name, qs_precision_name(p), why);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "kind", kind);
    cJSON_AddStringToObject(r, "shape", name);
    cJSON_AddStringToObject(r, "precision", qs_precision_name(p));
    cJSON_AddStringToObject(r, "reason", why);
    cJSON_AddItemToArray(o->skipped, r);
}

/* Time every precision on one shape, interleaved; print and record. */
static qs_status bench_shape(qs_bench_opts *o, const char *kind, const char *name, const gemm_shape *ls,
                             const conv_shape *cs, bool layer) {
    layer_case cases[QS_BENCH_MAX_PRECS];
    qs_bench_fn fns[QS_BENCH_MAX_PRECS];
    void *ctxs[QS_BENCH_MAX_PRECS];
    int idx[QS_BENCH_MAX_PRECS], n = 0;
    masters m;
    qs_status st = masters_init(&m, ls, cs);
    for (int i = 0; i < o->n_precs && st == QS_OK; i++) {
        st = case_init(&cases[n], o, o->precs[i], ls, cs, &m);
        if (st != QS_OK) {
            if (st == QS_ERR_UNSUPPORTED) { /* reported as n/a */
                note_skip(o, kind, name, o->precs[i], qs_last_error());
                st = QS_OK;
            }
            case_free(&cases[n]);
            continue;
        }
        fns[n] = layer ? run_layer : run_forward;
        ctxs[n] = &cases[n];
        idx[n++] = i;
    }
    masters_free(&m);
    qs_bench_stat stats[QS_BENCH_MAX_PRECS];
    if (st == QS_OK) st = qs_bench_run(o, n, fns, ctxs, stats);
    double fp32_ms = 0, bf16_ms = 0;
    for (int j = 0; j < n && st == QS_OK; j++) {
        if (cases[j].prec == QS_PREC_FP32) fp32_ms = stats[j].median_ms;
        if (cases[j].prec == QS_PREC_BF16) bf16_ms = stats[j].median_ms;
    }
    for (int j = 0; j < n && st == QS_OK; j++) {
        qs_precision p = o->precs[idx[j]];
        double gf = case_flops(&cases[j], layer) / (stats[j].median_ms * 1e6);
        double ratio = fp32_ms > 0 ? fp32_ms / stats[j].median_ms : 0;
        double rbf = bf16_ms > 0 ? bf16_ms / stats[j].median_ms : 0;
        if (!o->json && !o->device_sync)
            printf("  %-22s %-5s %-8s %9.3f ms  (min %.3f, max %.3f)  %8.1f GFLOP/s  x%.2f vs fp32\n", name,
                   qs_precision_name(p), qs_bench_support(o, p), stats[j].median_ms, stats[j].min_ms, stats[j].max_ms,
                   gf, ratio);
        else if (!o->json) {
            char rb[32] = "", rf[32] = "";
            if (rbf > 0) snprintf(rb, sizeof rb, "  x%.3f vs bf16", rbf);
            if (ratio > 0) snprintf(rf, sizeof rf, "  x%.2f vs fp32", ratio);
            printf("  %-22s %-5s %-8s %9.4f ms  (min %.4f, max %.4f; %d runs/sample)  %7.1f TFLOP/s%s%s\n", name,
                   qs_precision_name(p), qs_bench_support(o, p), stats[j].median_ms, stats[j].min_ms, stats[j].max_ms,
                   stats[j].inner, gf / 1e3, rb, rf);
        }
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "kind", kind);
        cJSON_AddStringToObject(r, "shape", name);
        if (ls) {
            cJSON_AddNumberToObject(r, "M", (double)ls->M);
            cJSON_AddNumberToObject(r, "N", (double)ls->N);
            cJSON_AddNumberToObject(r, "K", (double)ls->K);
        }
        cJSON_AddStringToObject(r, "precision", qs_precision_name(p));
        cJSON_AddStringToObject(r, "support", qs_bench_support(o, p));
        cJSON_AddNumberToObject(r, "median_ms", stats[j].median_ms);
        cJSON_AddNumberToObject(r, "min_ms", stats[j].min_ms);
        cJSON_AddNumberToObject(r, "max_ms", stats[j].max_ms);
        cJSON_AddNumberToObject(r, "runs_per_sample", stats[j].inner);
        cJSON_AddNumberToObject(r, "flops", case_flops(&cases[j], layer));
        cJSON_AddNumberToObject(r, "gflops", gf);
        cJSON_AddNumberToObject(r, "tflops", gf / 1e3);
        if (fp32_ms > 0) cJSON_AddNumberToObject(r, "speedup_vs_fp32", ratio);
        if (bf16_ms > 0) cJSON_AddNumberToObject(r, "speedup_vs_bf16", rbf);
        cJSON_AddItemToArray(o->rows, r);
    }
    for (int j = 0; j < n; j++) case_free(&cases[j]);
    return st;
}

static qs_status bench_products(qs_bench_opts *o, bool layer) {
    o->includes = layer ? G_LAYER_INCLUDES : G_GEMM_INCLUDES;
    if (!o->json && !o->device_sync)
        printf("%s: %s, %d reps (median), ratios in the same run\n", layer ? "layer" : "gemm",
               layer ? "forward + backward-data + backward-weights incl. quantization" : "Y = X·Wᵀ, operands pre-quantized",
               o->reps);
    else if (!o->json)
        printf("%s on %s: %s.\nTiming: median (min, max) of %d samples per case, precisions interleaved; a sample = "
               "stream_sync, clock, a batch of runs (runs/sample below), stream_sync, clock, divided by the batch; "
               "before them one run per case and %d untimed batches. Ratios: bf16 (fp32) median / this median, "
               "same run.\n",
               layer ? "layer" : "gemm", o->device, layer ? G_LAYER_INCLUDES : G_GEMM_INCLUDES, o->reps, o->warmup);
    if (!o->json && o->fp8_delayed)
        printf("fp8: delayed scaling — each tensor's scale from the amax history of the previous %d runs (no amax pass), "
               "its own amax recorded in the same pass as the cast\n", QS_BENCH_AMAX_LEN);
    const bool one = o->shape_m > 0;
    gemm_shape custom = {"", o->shape_m, o->shape_n, o->shape_k};
    char cname[64];
    if (one) {
        if (o->shape_m == o->shape_n && o->shape_n == o->shape_k)
            snprintf(cname, sizeof cname, "square %lld^3", (long long)o->shape_m);
        else
            snprintf(cname, sizeof cname, "%lldx%lldx%lld", (long long)o->shape_m, (long long)o->shape_n,
                     (long long)o->shape_k);
        custom.name = cname;
    }
    const size_t n_lin = one ? 1 : sizeof g_linear_shapes / sizeof *g_linear_shapes;
    for (size_t i = 0; i < n_lin; i++) {
        char name[64];
        const gemm_shape *s = one ? &custom : &g_linear_shapes[i];
        snprintf(name, sizeof name, "%s", s->name);
        if (!o->json) printf("linear %s: M=%lld N=%lld K=%lld\n", s->name, (long long)s->M, (long long)s->N, (long long)s->K);
        QS_TRY(bench_shape(o, "linear", name, s, NULL, layer));
    }
    if (!layer || one) return QS_OK;
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
