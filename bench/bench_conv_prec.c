/* bench/bench_conv_prec.c — the CPU backend's 2-D convolution at FP32, BF16 and INT8 on the
 * convolution shapes of the built-in models (cnn; resnet18 with width 16 at 28×28), batch 128
 * by default: per shape and direction the median time of `reps` interleaved repetitions
 * (after one warm-up) of the backend op as a training step calls it — operands already in the
 * precision's storage dtype, INT8 including its scale/bias epilogue and chunked reductions —,
 * and separately the cost of producing those operands with ops->quantize (X and W round to
 * nearest, dY with stochastic rounding, as the layers do). The recipe the plan chose per
 * direction (qs_cpu_conv_impl_name) is printed with each row.
 * Output: a table on stdout; with --json FILE also one JSON object per line:
 *   {"bench":"conv_prec","shape":"cnn.conv2","N":128,...,"dir":"fwd","prec":"int8",
 *    "support":"native","median_ms":...,"impl":"..."}
 *   {"bench":"conv_prec_quantize","shape":...,"prec":"int8","operand":"dy","median_ms":...}
 * Usage: bench_conv_prec [--threads T (0 = OpenMP default)] [--reps R (default 9)]
 *                        [--batch N (default 128)] [--json FILE] [--only SUBSTRING] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backends.h"
#include "core/timer.h"
#include "cpu/cpu_backend.h"
#include "qsync/rng.h"
#include "qsync/tensor.h"
#include "bench_util.h"

#define NPREC 3
static const qs_precision g_prec[NPREC] = {QS_PREC_FP32, QS_PREC_BF16, QS_PREC_INT8};
static int g_reps = 9;
static FILE *g_json;

static void *balloc(size_t bytes) {
    void *p = qs_host_alloc(bytes ? bytes : 64);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static void fill(float *p, int64_t n, uint64_t seed, float amp) {
    qs_rng r;
    qs_rng_init(&r, seed, 0);
    for (int64_t i = 0; i < n; i++) p[i] = (qs_rng_uniform(&r) * 2.0f - 1.0f) * amp;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Everything one precision of one shape needs. */
typedef struct prec_run {
    qs_backend *be;
    qs_precision p;
    qs_conv_desc d;
    void *plan, *ws;
    qs_operand x, w, dy;
    float *xs, *ws_, *dys;     /* scales */
    float *y, *dx, *dw, *db, *b;
    const float *fx, *fw, *fdy; /* FP32 sources (quantize timing) */
    void *qbuf;                 /* quantize destination for timing */
    int op;                     /* what run() does: 0 fwd, 1 bwd-data, 2 bwd-weights, 3/4/5 quantize x/w/dy */
} prec_run;

static void run(prec_run *r) {
    qs_backend *be = r->be;
    const qs_backend_ops *o = be->ops;
    qs_stream *s = o->default_stream(be);
    const qs_conv_desc *d = &r->d;
    const qs_dtype fdt = qs_precision_operand_dtype(r->p, false), gdt = qs_precision_operand_dtype(r->p, true);
    float sc[1024];
    switch (r->op) {
    case 0: CHECK(o->conv_forward(be, r->plan, s, &r->x, &r->w, r->b, r->y, r->ws)); break;
    case 1: CHECK(o->conv_backward_data(be, r->plan, s, &r->dy, &r->w, r->dx, false, r->ws)); break;
    case 2: CHECK(o->conv_backward_weights(be, r->plan, s, &r->dy, &r->x, r->dw, r->db, r->ws)); break;
    case 3: CHECK(o->quantize(be, s, d->N * d->H * d->W, d->C, r->fx, NULL, fdt, r->qbuf, sc, false, NULL, NULL, NULL)); break;
    case 4: CHECK(o->quantize(be, s, d->K, d->C * d->R * d->S, r->fw, NULL, fdt, r->qbuf, sc, false, NULL, NULL, NULL)); break;
    case 5: {
        qs_sr sr = {.key = 5, .counter = 1, .offset = 0};
        CHECK(o->quantize(be, s, d->N * d->P * d->Q, d->K, r->fdy, NULL, gdt, r->qbuf, sc, false, &sr, NULL, NULL));
        break;
    }
    }
}

/* Median ms of op for every precision, repetitions interleaved so load changes hit all. */
static void time_op(prec_run *rs, int op, double *out) {
    double t[NPREC][64];
    const int n = g_reps < 64 ? g_reps : 64;
    for (int i = 0; i < NPREC; i++) rs[i].op = op, run(&rs[i]);
    for (int k = 0; k < n; k++)
        for (int i = 0; i < NPREC; i++) {
            double t0 = qs_now_ms();
            run(&rs[i]);
            t[i][k] = qs_now_ms() - t0;
        }
    for (int i = 0; i < NPREC; i++) out[i] = median(t[i], n);
}

static void prec_init(prec_run *r, qs_backend *be, qs_precision p, qs_conv_desc d, const float *x, const float *w,
                      const float *dy, const float *b) {
    memset(r, 0, sizeof *r);
    r->be = be;
    r->p = p;
    d.prec = p;
    r->d = d;
    size_t wsb = 0;
    CHECK(be->ops->conv_plan(be, &d, &r->plan, &wsb));
    r->ws = balloc(wsb);
    const qs_dtype fdt = qs_precision_operand_dtype(p, false), gdt = qs_precision_operand_dtype(p, true);
    const int64_t nx = d.N * d.H * d.W * d.C, nw = d.K * d.C * d.R * d.S, ny = d.N * d.P * d.Q * d.K;
    qs_stream *s = be->ops->default_stream(be);
    void *qx = balloc((size_t)nx * qs_dtype_size(fdt)), *qw = balloc((size_t)nw * qs_dtype_size(fdt));
    void *qdy = balloc((size_t)ny * qs_dtype_size(gdt));
    r->xs = balloc(sizeof(float)), r->ws_ = balloc(sizeof(float)), r->dys = balloc(sizeof(float));
    qs_sr sr = {.key = 5, .counter = 1, .offset = 0};
    CHECK(be->ops->quantize(be, s, d.N * d.H * d.W, d.C, x, NULL, fdt, qx, r->xs, false, NULL, NULL, NULL));
    CHECK(be->ops->quantize(be, s, d.K, d.C * d.R * d.S, w, NULL, fdt, qw, r->ws_, false, NULL, NULL, NULL));
    CHECK(be->ops->quantize(be, s, d.N * d.P * d.Q, d.K, dy, NULL, gdt, qdy, r->dys, false, &sr, NULL, NULL));
    const bool scaled = fdt == QS_S8 || fdt == QS_F8E4M3;
    r->x = (qs_operand){qx, fdt, scaled ? r->xs : NULL, false, NULL};
    r->w = (qs_operand){qw, fdt, scaled ? r->ws_ : NULL, false, NULL};
    r->dy = (qs_operand){qdy, gdt, scaled ? r->dys : NULL, false, NULL};
    r->y = balloc((size_t)ny * sizeof(float));
    r->dx = balloc((size_t)nx * sizeof(float));
    r->dw = balloc((size_t)nw * sizeof(float));
    r->b = d.has_bias ? (float *)b : NULL;
    r->db = d.has_bias && gdt == QS_F32 ? balloc((size_t)d.K * sizeof(float)) : NULL;
    r->fx = x, r->fw = w, r->fdy = dy;
    r->qbuf = balloc((size_t)(nx > ny ? nx : ny) * sizeof(float));
}

static void prec_free(prec_run *r) {
    r->be->ops->plan_destroy(r->be, r->plan);
    void *bufs[] = {r->ws, (void *)r->x.data, (void *)r->w.data, (void *)r->dy.data, r->xs, r->ws_, r->dys,
                    r->y, r->dx, r->dw, r->db, r->qbuf};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) qs_host_free(bufs[i]);
}

static const char *dir_name[3] = {"fwd", "bwd_data", "bwd_weights"};

static void bench_shape(qs_backend *be, const char *name, qs_conv_desc d) {
    CHECK(qs_conv_desc_finish(&d));
    const int64_t nx = d.N * d.H * d.W * d.C, nw = d.K * d.C * d.R * d.S, ny = d.N * d.P * d.Q * d.K;
    float *x = balloc((size_t)nx * sizeof(float)), *w = balloc((size_t)nw * sizeof(float));
    float *dy = balloc((size_t)ny * sizeof(float)), *b = balloc((size_t)d.K * sizeof(float));
    fill(x, nx, 1, 2.0f);
    fill(w, nw, 2, 0.2f);
    fill(dy, ny, 3, 0.01f);
    fill(b, d.K, 4, 0.1f);
    prec_run rs[NPREC];
    for (int i = 0; i < NPREC; i++) prec_init(&rs[i], be, g_prec[i], d, x, w, dy, b);
    const double gflop = 2.0 * (double)(d.N * d.P * d.Q) * (double)(d.K * d.C * d.R * d.S) * 1e-9;
    for (int dir = 0; dir < 3; dir++) {
        double t[NPREC];
        time_op(rs, dir, t);
        printf("%-25s %-11s %8.3f %8.3f %8.3f   %5.2fx %5.2fx  %6.1f  | %s | %s\n", name, dir_name[dir], t[0], t[1],
               t[2], t[0] / t[1], t[0] / t[2], gflop / (t[2] * 1e-3), qs_cpu_conv_impl_name(rs[1].plan, dir),
               qs_cpu_conv_impl_name(rs[2].plan, dir));
        for (int i = 0; g_json && i < NPREC; i++)
            fprintf(g_json,
                    "{\"bench\":\"conv_prec\",\"shape\":\"%s\",\"N\":%lld,\"H\":%lld,\"W\":%lld,\"C\":%lld,\"K\":%lld,"
                    "\"R\":%lld,\"S\":%lld,\"stride\":%lld,\"pad\":%lld,\"dir\":\"%s\",\"prec\":\"%s\","
                    "\"support\":\"%s\",\"reps\":%d,\"median_ms\":%.4f,\"gflop\":%.4f,\"impl\":\"%s\"}\n",
                    name, (long long)d.N, (long long)d.H, (long long)d.W, (long long)d.C, (long long)d.K,
                    (long long)d.R, (long long)d.S, (long long)d.stride_h, (long long)d.pad_h, dir_name[dir],
                    qs_precision_name(g_prec[i]), qs_prec_support_name(be->ops->precision_support(be, g_prec[i])),
                    g_reps, t[i], gflop, qs_cpu_conv_impl_name(rs[i].plan, dir));
    }
    /* quantization of the operands (FP32: a copy) */
    double q[3][NPREC];
    for (int k = 0; k < 3; k++) time_op(rs, 3 + k, q[k]);
    printf("%-25s %-11s %8.3f %8.3f %8.3f   (quantize x + w + dy; dy with stochastic rounding)\n", name, "quantize",
           q[0][0] + q[1][0] + q[2][0], q[0][1] + q[1][1] + q[2][1], q[0][2] + q[1][2] + q[2][2]);
    static const char *opn[3] = {"x", "w", "dy"};
    for (int k = 0; g_json && k < 3; k++)
        for (int i = 0; i < NPREC; i++)
            fprintf(g_json,
                    "{\"bench\":\"conv_prec_quantize\",\"shape\":\"%s\",\"prec\":\"%s\",\"operand\":\"%s\","
                    "\"reps\":%d,\"median_ms\":%.4f}\n",
                    name, qs_precision_name(g_prec[i]), opn[k], g_reps, q[k][i]);
    for (int i = 0; i < NPREC; i++) prec_free(&rs[i]);
    qs_host_free(x), qs_host_free(w), qs_host_free(dy), qs_host_free(b);
}

static qs_conv_desc conv(int64_t N, int64_t H, int64_t C, int64_t K, int64_t R, int64_t stride, int64_t pad,
                         bool bias) {
    return (qs_conv_desc){.N = N, .H = H, .W = H, .C = C, .K = K, .R = R, .S = R, .stride_h = stride,
                          .stride_w = stride, .pad_h = pad, .pad_w = pad, .has_bias = bias};
}

int main(int argc, char **argv) {
    int threads = 0;
    int64_t N = 128;
    const char *json = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) N = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr,
                    "usage: %s [--threads T] [--reps R] [--batch N] [--json FILE] [--only SUBSTRING]\n"
                    "unknown or incomplete argument '%s'\n",
                    argv[0], argv[i]);
            return 2;
        }
    }
    if (g_reps < 1) g_reps = 1;
    if (N < 1) N = 1;
    if (json && !(g_json = fopen(json, "w"))) {
        fprintf(stderr, "cannot write %s\n", json);
        return 1;
    }
    qs_backend *be = NULL;
    CHECK(qs_backend_cpu_create(threads, &be));
    printf("# bench_conv_prec: threads=%d (0 = OpenMP default), batch %lld, median of %d interleaved reps after 1 "
           "warm-up; ms\n# support: bf16 %s, int8 %s; int8 kernels exact (VNNI/AMX): %s\n",
           threads, (long long)N, g_reps, qs_prec_support_name(be->ops->precision_support(be, QS_PREC_BF16)),
           qs_prec_support_name(be->ops->precision_support(be, QS_PREC_INT8)), qs_dnnl_int8_exact() ? "yes" : "no");
    printf("%-25s %-11s %8s %8s %8s   %6s %6s  %6s  | %s | %s\n", "shape", "direction", "fp32", "bf16", "int8",
           "bf16", "int8", "int8", "bf16 recipe", "int8 recipe");
    printf("%-25s %-11s %8s %8s %8s   %6s %6s  %6s  |\n", "", "", "ms", "ms", "ms", "speedup", "speedup", "GOP/s");
    struct {
        const char *name;
        qs_conv_desc d;
    } shapes[] = {
        {"cnn.conv1 28 1>32 5x5", conv(N, 28, 1, 32, 5, 1, 2, true)},
        {"cnn.conv2 14 32>64 5x5", conv(N, 14, 32, 64, 5, 1, 2, true)},
        {"r18.conv1 28 1>16 3x3", conv(N, 28, 1, 16, 3, 1, 1, false)},
        {"r18.l1 28 16>16 3x3", conv(N, 28, 16, 16, 3, 1, 1, false)},
        {"r18.l2 28 16>32 3x3 s2", conv(N, 28, 16, 32, 3, 2, 1, false)},
        {"r18.l2.ds 28 16>32 1x1s2", conv(N, 28, 16, 32, 1, 2, 0, false)},
        {"r18.l2 14 32>32 3x3", conv(N, 14, 32, 32, 3, 1, 1, false)},
        {"r18.l3 14 32>64 3x3 s2", conv(N, 14, 32, 64, 3, 2, 1, false)},
        {"r18.l3.ds 14 32>64 1x1s2", conv(N, 14, 32, 64, 1, 2, 0, false)},
        {"r18.l3 7 64>64 3x3", conv(N, 7, 64, 64, 3, 1, 1, false)},
        {"r18.l4 7 64>128 3x3 s2", conv(N, 7, 64, 128, 3, 2, 1, false)},
        {"r18.l4.ds 7 64>128 1x1s2", conv(N, 7, 64, 128, 1, 2, 0, false)},
        {"r18.l4 4 128>128 3x3", conv(N, 4, 128, 128, 3, 1, 1, false)},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!only || strstr(shapes[i].name, only)) bench_shape(be, shapes[i].name, shapes[i].d);
    be->ops->destroy(be);
    if (g_json) fclose(g_json);
    return 0;
}
