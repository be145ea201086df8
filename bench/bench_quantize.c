/* bench/bench_quantize.c — throughput of the number-format conversions and quantizers of
 * src/core (numfmt.h, quant_int8.h, quant_sr.h): for each conversion and rounding mode
 * (rne / sr), with one thread and with all OpenMP threads, the median time of `reps` runs
 * (after one warm-up) over n elements, as elements per second.
 * Output: one JSON line per measurement:
 *   {"bench":"quantize","op":"f32_to_int8","mode":"sr","path":"avx512","threads":1,
 *    "n":4194304,"reps":7,"median_ms":...,"gelem_per_s":...}
 * "path" says which random-word generator SR used (avx512 or scalar; the scalar one is
 * also measured as op "f32_to_int8", path "scalar", to show what vectorising buys).
 * Usage: bench_quantize [n (default 4194304)] [reps (default 7, at least 5)] */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/numfmt.h"
#include "core/quant_int8.h"
#include "core/quant_sr.h"
#include "core/timer.h"
#include "qsync/rng.h"
#include "qsync/tensor.h"
#include "bench_util.h"


typedef struct ctx {
    int64_t n, rows, cols;
    float *x, *y;
    uint16_t *h;
    uint8_t *b;
    int8_t *q;
    uint32_t *r;
    float *scales;
    float scale;
    qs_sr sr;
} ctx;

typedef void (*op_fn)(ctx *c, const qs_sr *sr);

static void op_bf16(ctx *c, const qs_sr *sr) { CHECK(qs_f32_to_bf16(c->n, c->x, c->h, sr)); }
static void op_f16(ctx *c, const qs_sr *sr) { CHECK(qs_f32_to_f16(c->n, c->x, c->h, sr)); }
static void op_bf16_f32(ctx *c, const qs_sr *sr) { CHECK(qs_bf16_to_f32(c->n, c->h, c->y)); }
static void op_f16_f32(ctx *c, const qs_sr *sr) { CHECK(qs_f16_to_f32(c->n, c->h, c->y)); }
static void op_e4m3(ctx *c, const qs_sr *sr) { CHECK(qs_f32_to_fp8(QS_F8E4M3, c->n, c->x, 100.0f, c->b, sr)); }
static void op_e5m2(ctx *c, const qs_sr *sr) { CHECK(qs_f32_to_fp8(QS_F8E5M2, c->n, c->x, 100.0f, c->b, sr)); }
static void op_e4m3_f32(ctx *c, const qs_sr *sr) { CHECK(qs_fp8_to_f32(QS_F8E4M3, c->n, c->b, 100.0f, c->y)); }
static void op_int8(ctx *c, const qs_sr *sr) { CHECK(qs_int8_quantize(c->n, c->x, c->scale, c->q, sr)); }
static void op_int8_tensor(ctx *c, const qs_sr *sr) {
    float s;
    CHECK(qs_int8_quantize_tensor(c->n, c->x, c->q, &s, sr));
}
static void op_int8_rows(ctx *c, const qs_sr *sr) {
    CHECK(qs_int8_quantize_rows_auto(c->rows, c->cols, c->x, c->q, c->scales, sr));
}
static void op_int8_deq(ctx *c, const qs_sr *sr) { CHECK(qs_int8_dequantize(c->n, c->q, c->scale, c->y)); }
static void op_amax(ctx *c, const qs_sr *sr) {
    float a;
    CHECK(qs_amax_f32(c->n, c->x, &a));
}
/* the random words alone, one thread (qs_sr_bits is serial) */
static void op_bits(ctx *c, const qs_sr *sr) { qs_sr_bits(sr, 0, c->n, c->r); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int g_reps = 7;

static void measure(ctx *c, const char *name, op_fn fn, int sr_mode, int threads, const char *path) {
    double t[64];
    omp_set_num_threads(threads);
    const qs_sr *sr = sr_mode ? &c->sr : NULL;
    fn(c, sr); /* warm-up */
    for (int i = 0; i < g_reps; i++) {
        double t0 = qs_now_ms();
        fn(c, sr);
        t[i] = qs_now_ms() - t0;
    }
    qsort(t, (size_t)g_reps, sizeof t[0], cmp_double);
    double med = g_reps % 2 ? t[g_reps / 2] : 0.5 * (t[g_reps / 2 - 1] + t[g_reps / 2]);
    printf("{\"bench\":\"quantize\",\"op\":\"%s\",\"mode\":\"%s\",\"path\":\"%s\",\"threads\":%d,\"n\":%lld,"
           "\"reps\":%d,\"median_ms\":%.4f,\"gelem_per_s\":%.4f}\n",
           name, sr_mode ? "sr" : "rne", sr_mode ? path : "n/a", threads, (long long)c->n, g_reps, med,
           (double)c->n / (med * 1e-3) / 1e9);
    fflush(stdout);
}

int main(int argc, char **argv) {
    ctx c = {0};
    c.n = argc > 1 ? atoll(argv[1]) : (int64_t)1 << 22;
    if (argc > 2) g_reps = atoi(argv[2]);
    if (g_reps < 5) g_reps = 5;
    if (g_reps > 64) g_reps = 64;
    c.cols = 1024;
    c.rows = c.n / c.cols;
    c.n = c.rows * c.cols;
    if (c.n <= 0) {
        fprintf(stderr, "usage: bench_quantize [n >= 1024] [reps >= 5]\n");
        return 2;
    }
    c.x = qs_host_alloc((size_t)c.n * 4);
    c.y = qs_host_alloc((size_t)c.n * 4);
    c.h = qs_host_alloc((size_t)c.n * 2);
    c.b = qs_host_alloc((size_t)c.n);
    c.q = qs_host_alloc((size_t)c.n);
    c.r = qs_host_alloc((size_t)c.n * 4);
    c.scales = qs_host_alloc((size_t)c.rows * 4);
    if (!c.x || !c.y || !c.h || !c.b || !c.q || !c.r || !c.scales) {
        fprintf(stderr, "out of memory for n = %lld\n", (long long)c.n);
        return 1;
    }
    qs_rng g;
    qs_rng_init(&g, qs_rng_key(1, "bench_quantize", 0), 0);
    for (int64_t i = 0; i < c.n; i++) c.x[i] = qs_rng_normal(&g);
    float amax;
    CHECK(qs_amax_f32(c.n, c.x, &amax));
    CHECK(qs_int8_scale_from_amax(amax, &c.scale));
    CHECK(qs_f32_to_bf16(c.n, c.x, c.h, NULL));
    CHECK(qs_f32_to_fp8(QS_F8E4M3, c.n, c.x, 100.0f, c.b, NULL));
    CHECK(qs_int8_quantize(c.n, c.x, c.scale, c.q, NULL));
    c.sr = (qs_sr){qs_rng_key(1, "sr", 0), 1, 0, NULL};
    const char *vpath = qs_sr_vector_available() ? "avx512" : "scalar";

    const struct {
        const char *name;
        op_fn fn;
        int modes; /* 1 rne, 2 sr, 3 both */
    } ops[] = {
        {"f32_to_int8", op_int8, 3},          {"f32_to_int8_tensor", op_int8_tensor, 3},
        {"f32_to_int8_rows", op_int8_rows, 3}, {"int8_to_f32", op_int8_deq, 1},
        {"amax_f32", op_amax, 1},              {"f32_to_bf16", op_bf16, 3},
        {"f32_to_f16", op_f16, 3},             {"bf16_to_f32", op_bf16_f32, 1},
        {"f16_to_f32", op_f16_f32, 1},         {"f32_to_e4m3", op_e4m3, 3},
        {"f32_to_e5m2", op_e5m2, 3},           {"e4m3_to_f32", op_e4m3_f32, 1},
    };
    int tmax = omp_get_max_threads();
    int tlist[2] = {1, tmax};
    int nt = tmax > 1 ? 2 : 1;
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (int m = 0; m < 2; m++) {
            if (!(ops[o].modes & (1 << m))) continue;
            for (int ti = 0; ti < nt; ti++) measure(&c, ops[o].name, ops[o].fn, m, tlist[ti], vpath);
        }
    measure(&c, "sr_words", op_bits, 1, 1, vpath);
    qs_sr_set_vector(false); /* the scalar Philox, for comparison */
    measure(&c, "sr_words", op_bits, 1, 1, "scalar");
    measure(&c, "f32_to_int8", op_int8, 1, 1, "scalar");
    qs_sr_set_vector(true);
    return 0;
}
