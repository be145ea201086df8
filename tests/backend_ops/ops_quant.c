/* tests/backend_ops/ops_quant.c — defines: the quantization ops of the registry — quantize (every
 * storage dtype, per tensor and per row, nearest and stochastic rounding, with a col_scale),
 * quantize with a transposed copy (dst_t), dequantize, stochastic rounding with the counter in
 * backend memory (counter_at), FP8 delayed scaling through an amax history, and cast — and their
 * rows. Every output is judged bit for bit: the backends share core/numfmt.h's element functions
 * and the Philox stream, so codes, scales, transposed copies and histories are identical. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bits.h"
#include "bo.h"
#include "gpu_harness.h"
#include "graph_helpers.h"

static bool scaled_dt(qs_dtype dt) { return dt == QS_S8 || dt == QS_F8E4M3 || dt == QS_F8E5M2; }

/* Inputs for quantize: rows of different magnitude (per-row scales differ), plus zeros, −0,
 * subnormals, exact BF16/FP16 ties, a value beyond FP16's range and, when `nonfinite`, NaN
 * (quiet and signalling) and ±Inf; row 1 all zero when rows ≥ 3 (a zero per-row scale). */
static float *quant_input(int64_t rows, int64_t cols, bool nonfinite) {
    float *x = rnd(rows * cols, -3, 3);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) x[r * cols + c] *= ldexpf(1.0f, (int)(r % 9) - 4);
    if (rows >= 3)
        for (int64_t c = 0; c < cols; c++) x[cols + c] = 0.0f;
    const float special[] = {0.0f, -0.0f, 1e-40f, -3e-39f, bitsf(0x3F808000u), 1.0f + 0x1p-11f, -(1.0f + 3 * 0x1p-11f),
                             70000.0f, 0x1p-25f, 0x1.8p-24f, 65519.0f};
    const float nonfin[] = {NAN, INFINITY, -INFINITY, bitsf(0x7FA00001u), bitsf(0xFFC12345u)};
    const int64_t n = rows * cols;
    int64_t at = rows >= 3 ? 2 * cols : 0; /* after the zero row */
    for (size_t i = 0; i < sizeof special / sizeof special[0] && at < n; i++, at += 3) x[at] = special[i];
    for (size_t i = 0; nonfinite && i < sizeof nonfin / sizeof nonfin[0] && at < n; i++, at += 3) x[at] = nonfin[i];
    return x;
}

/* ------------------------------------------------------------- quantize, dst_t, dequantize */

/* v = {input set, rows, cols, dtype, per_row, sr (0 nearest, 1 stochastic, 2 stochastic at an
 * offset), col_scale}. Tensors: */
enum { QX, QCS, QQ, QS, QQ2, QS2, QT, QCODES, QSCALES, QD };
enum { QUANTIZE, QUANTIZE_T, DEQUANTIZE };

static void quant_describe(const bo_case *c, char *buf, size_t n) {
    const int64_t *v = c->v;
    snprintf(buf, n, "%s%s %s %lldx%lld%s%s", qs_dtype_name((qs_dtype)v[3]), v[4] ? " per-row" : "",
             v[5] ? "SR" : "RNE", (long long)v[1], (long long)v[2], v[6] ? " col_scale" : "", v[5] == 2 ? " offset" : "");
}

/* The input set: a seeded random input (v[0] its index; BF16/F16/F32 pass NaN/Inf through and
 * get the non-finite one, INT8/FP8 reject them: facts_quant.c), or all zeros (v[0] < 0: the
 * S8 scale 2^-126, the FP8 scale 1). c->aux: the qs_sr, or NULL. */
static const float *quant_source(bo_case *c, const float **colsc) {
    const int64_t *v = c->v, rows = v[1], cols = v[2];
    const qs_dtype dt = (qs_dtype)v[3];
    c->aux = NULL;
    if (v[0] < 0) {
        *colsc = NULL;
        return hf(rows * cols);
    }
    bo_seed(c, "quantize", (uint64_t)v[0]);
    const float *x = quant_input(rows, cols, false), *xnf = quant_input(rows, cols, true);
    *colsc = rnd(cols, 0.25f, 4.0f);
    if (v[5]) {
        qs_sr *sr = halloc(sizeof *sr);
        *sr = v[5] == 1 ? (qs_sr){.key = qs_rng_key(9, "quant_sr", (uint64_t)v[0]), .counter = 5, .offset = 0}
                        : (qs_sr){.key = qs_rng_key(9, "quant_sr", (uint64_t)v[0] + 100), .counter = 7,
                                  .offset = 1000003};
        c->aux = sr;
    }
    return dt == QS_BF16 || dt == QS_F16 || dt == QS_F32 ? xnf : x;
}

static void quant_inputs(bo_case *c) {
    const int64_t *v = c->v, rows = v[1], cols = v[2], n = rows * cols, ns = v[4] ? rows : 1;
    const qs_dtype dt = (qs_dtype)v[3];
    const size_t es = qs_dtype_size(dt);
    const float *colsc;
    const float *x = quant_source(c, &colsc);
    bo_in(c, QX, "x", x, (size_t)n * 4);
    if (v[6]) bo_in(c, QCS, "col_scale", colsc, (size_t)cols * 4);
    else bo_none(c, QCS, "col_scale");
    if (c->op->variant == DEQUANTIZE) { /* the reference's codes, dequantized on both sides */
        void *q = halloc((size_t)n * es);
        float *s = hf(ns);
        ASSERT_OK(COPS->quantize(g_cpu, CST, rows, cols, x, NULL, dt, q, s, v[4] != 0, NULL, NULL, NULL));
        bo_in(c, QCODES, "codes", q, (size_t)n * es);
        if (scaled_dt(dt)) bo_in(c, QSCALES, "scales", s, (size_t)ns * 4);
        else bo_none(c, QSCALES, "scales");
        bo_out(c, QD, "dequantized", n, 4, BO_BITS, 0);
        return;
    }
    bo_out(c, QQ, "codes", n, es, c->op->variant == QUANTIZE ? BO_BITS : BO_NOCMP, 0);
    c->t[QQ].src = v[6] ? NULL : x;
    if (scaled_dt(dt)) bo_out(c, QS, "scales", ns, 4, c->op->variant == QUANTIZE ? BO_BITS : BO_NOCMP, 0); /* unused (NULL) for bf16/f16/f32 */
    else bo_none(c, QS, "scales");
    if (c->op->variant == QUANTIZE_T) {
        bo_out(c, QQ2, "codes +dst_t", n, 1, BO_NOCMP, 0);
        bo_out(c, QS2, "scales +dst_t", 1, 4, BO_NOCMP, 0);
        bo_out(c, QT, "the transposed copy", n, 1, BO_BITS, 0);
    }
}

static qs_status quant_exec(bo_case *c, bo_side *s) {
    const int64_t *v = c->v;
    const qs_dtype dt = (qs_dtype)v[3];
    const qs_sr *sr = c->aux;
    const qs_backend_ops *o = s->be->ops;
    if (c->op->variant == DEQUANTIZE) {
        const qs_operand op = {bo_at(c, s, QCODES), dt, BO_F(QSCALES), v[4] != 0, NULL};
        return o->dequantize(s->be, s->st, v[1], v[2], &op, BO_F(QD));
    }
    QS_TRY(o->quantize(s->be, s->st, v[1], v[2], BO_F(QX), BO_F(QCS), dt, bo_at(c, s, QQ), BO_F(QS), v[4] != 0, sr,
                       NULL, NULL));
    if (c->op->variant != QUANTIZE_T) return QS_OK;
    return o->quantize(s->be, s->st, v[1], v[2], BO_F(QX), BO_F(QCS), dt, bo_at(c, s, QQ2), BO_F(QS2), false, sr,
                       bo_at(c, s, QT), NULL);
}

/* dst_t: the codes are still those without it (the reference's, on both sides), and the
 * transposed copy is the reference's. */
static void quant_t_judge(bo_case *c, bo_side *ref, bo_side *dut) {
    const int64_t n = c->v[1] * c->v[2];
    check_bits(bo_what(c, "+dst_t: reference codes"), bo_at(c, ref, QQ2), bo_at(c, ref, QQ), n, 1, NULL);
    const void *q2 = bo_fetch(c, dut, QQ2);
    if (q2) check_bits(bo_what(c, "+dst_t: codes"), q2, bo_at(c, ref, QQ), n, 1, NULL);
    bo_judge_outputs(c, ref, dut);
}

#define NEED_QUANT {BO_NEED(quantize), BO_NEED(dequantize)}
static const bo_op bo_quantize = {.name = "quantize", .variant = QUANTIZE, .seed_key = 20261202,
                                  .describe = quant_describe, .inputs = quant_inputs, .exec = quant_exec,
                                  .need = NEED_QUANT};
static const bo_op bo_quantize_dst_t = {.name = "quantize_dst_t", .variant = QUANTIZE_T, .seed_key = 20261202,
                                        .describe = quant_describe, .inputs = quant_inputs, .exec = quant_exec,
                                        .judge = quant_t_judge, .need = NEED_QUANT};
static const bo_op bo_dequantize = {.name = "dequantize", .variant = DEQUANTIZE, .seed_key = 20261202,
                                    .describe = quant_describe, .inputs = quant_inputs, .exec = quant_exec,
                                    .need = NEED_QUANT};

/* {130, 256}, {64, 128}: whole 64-column groups (one Philox call per tile row, GROUPED in
 * cuda_quant.cu) with a partial row tile and without. Q6: every rounding, with and without a
 * col_scale; the kind lists: every dtype (per-row S8 too), the 1-byte per-tensor ones (dst_t). */
#define Q6(s, r, c, dt, pr) \
    {s, r, c, dt, pr, 0, 0}, {s, r, c, dt, pr, 0, 1}, {s, r, c, dt, pr, 1, 0}, {s, r, c, dt, pr, 1, 1}, \
        {s, r, c, dt, pr, 2, 0}, {s, r, c, dt, pr, 2, 1}
#define Q_T(s, r, c) Q6(s, r, c, QS_S8, 0), Q6(s, r, c, QS_F8E4M3, 0), Q6(s, r, c, QS_F8E5M2, 0)
#define Q_ALL(s, r, c) \
    Q6(s, r, c, QS_S8, 0), Q6(s, r, c, QS_S8, 1), Q6(s, r, c, QS_F8E4M3, 0), Q6(s, r, c, QS_F8E5M2, 0), \
        Q6(s, r, c, QS_BF16, 0), Q6(s, r, c, QS_F16, 0), Q6(s, r, c, QS_F32, 0)
#define D_ALL(s, r, c) \
    {s, r, c, QS_S8, 0}, {s, r, c, QS_S8, 1}, {s, r, c, QS_F8E4M3, 0}, {s, r, c, QS_F8E5M2, 0}, \
        {s, r, c, QS_BF16, 0}, {s, r, c, QS_F16, 0}, {s, r, c, QS_F32, 0}
#define QUANT_SHAPES(X) \
    X(0, 1, 1), X(1, 3, 7), X(2, 5, 40), X(3, 64, 1000), X(4, 257, 1031), X(5, 2, 100003), X(6, 130, 256), X(7, 64, 128)
/* the CPU backend's: the two largest shapes smaller (a partial row tile kept) */
#define QUANT_SHAPES_CPU(X) \
    X(0, 1, 1), X(1, 3, 7), X(2, 5, 40), X(3, 64, 1000), X(4, 65, 131), X(5, 2, 10007), X(6, 130, 256), X(7, 64, 128)
static const int64_t k_quant[][BO_V] = {QUANT_SHAPES(Q_ALL)};
static const int64_t k_quant_t[][BO_V] = {QUANT_SHAPES(Q_T)};
static const int64_t k_dequant[][BO_V] = {QUANT_SHAPES(D_ALL)};
static const int64_t k_quant_cpu[][BO_V] = {QUANT_SHAPES_CPU(Q_ALL)};
static const int64_t k_quant_t_cpu[][BO_V] = {QUANT_SHAPES_CPU(Q_T)};
static const int64_t k_dequant_cpu[][BO_V] = {QUANT_SHAPES_CPU(D_ALL)};
/* an all-zero tensor (input set -1) */
static const int64_t k_quant_zeros[][BO_V] = {
    {-1, 4, 33, QS_S8, 0}, {-1, 4, 33, QS_S8, 1}, {-1, 4, 33, QS_F8E4M3, 0}, {-1, 4, 33, QS_F8E5M2, 0}};
static const int64_t k_quant_zeros_t[][BO_V] = {{-1, 4, 33, QS_S8, 0}, {-1, 4, 33, QS_F8E4M3, 0}, {-1, 4, 33, QS_F8E5M2, 0}};

/* -------------------------------------------------------------------------- counter_at */

/* Stochastic rounding with its counter in backend memory (qs_sr.counter_at, what captured
 * graphs read): the codes (and transposed copies) are those of the same counter passed by value,
 * in every kernel (element-wise BF16, tiled 1-byte formats with and without whole Philox
 * groups), and equal the reference's (reading its counter from host memory); the counter is
 * really read (another value there gives other codes). v = {input, rows, cols, dtype index}. */
static const qs_dtype k_counter_dts[] = {QS_BF16, QS_S8, QS_F8E4M3, QS_F8E5M2};
enum { CX, CSTEP, COTHER, CQ0, CQ1, CQ2, CS0, CS1, CS2, CT0, CT1, CT2 };
static const uint64_t k_step = 12345, k_other = 12346;

static void counter_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "%s %lldx%lld", qs_dtype_name(k_counter_dts[c->v[3]]), (long long)c->v[1], (long long)c->v[2]);
}

static void counter_inputs(bo_case *c) {
    const int64_t rows = c->v[1], cols = c->v[2], n = rows * cols;
    const qs_dtype dt = k_counter_dts[c->v[3]];
    bo_seed(c, "quantize_counter_at", (uint64_t)c->v[0]);
    float *x = quant_input(rows, cols, false);
    bo_in(c, CX, "x", x, (size_t)n * 4);
    bo_in(c, CSTEP, "counter", &k_step, sizeof k_step);
    bo_in(c, COTHER, "another counter", &k_other, sizeof k_other);
    static const char *const names[3] = {"counter_at", "by value, another counter_at", "by value"};
    for (int k = 0; k < 3; k++) {
        bo_out(c, CQ0 + k, names[k], n, qs_dtype_size(dt), BO_NOCMP, 0);
        if (dt != QS_BF16) bo_out(c, CS0 + k, "scale", 1, 4, BO_NOCMP, 0);
        else bo_none(c, CS0 + k, "scale");
        if (dt == QS_F8E4M3 || dt == QS_F8E5M2) bo_out(c, CT0 + k, "transposed", n, 1, BO_NOCMP, 0);
        else bo_none(c, CT0 + k, "transposed");
    }
    c->aux = x;
}

static qs_status counter_exec(bo_case *c, bo_side *s) {
    const qs_dtype dt = k_counter_dts[c->v[3]];
    const uint64_t key = qs_rng_key(9, "counter_at", (uint64_t)c->v[3]);
    const qs_sr variants[3] = {
        {.key = key, .counter = 0, .counter_at = bo_at(c, s, CSTEP)},
        {.key = key, .counter = k_step, .counter_at = bo_at(c, s, COTHER)},
        {.key = key, .counter = k_step},
    };
    for (int k = 0; k < 3; k++)
        QS_TRY(s->be->ops->quantize(s->be, s->st, c->v[1], c->v[2], BO_F(CX), NULL, dt, bo_at(c, s, CQ0 + k),
                                    BO_F(CS0 + k), false, &variants[k], bo_at(c, s, CT0 + k), NULL));
    return QS_OK;
}

static void counter_judge(bo_case *c, bo_side *ref, bo_side *dut) {
    const int64_t n = c->v[1] * c->v[2];
    const size_t es = qs_dtype_size(k_counter_dts[c->v[3]]);
    const void *q0 = bo_fetch(c, dut, CQ0), *q1 = bo_fetch(c, dut, CQ1), *q2 = bo_fetch(c, dut, CQ2);
    if (!q0 || !q1 || !q2) return;
    const char *what = bo_what(c, "SR counter read from backend memory");
    check_bits(what, q0, q2, n, es, c->aux);
    if (!c->t[CT0].null) {
        const void *t0 = bo_fetch(c, dut, CT0), *t2 = bo_fetch(c, dut, CT2);
        if (t0 && t2) check_bits(bo_what(c, "SR counter read from backend memory: transposed"), t0, t2, n, 1, NULL);
    }
    check_fact(what, memcmp(q1, q2, (size_t)n * es) != 0, "a different counter in backend memory changes the codes");
    check_bits(bo_what(c, "SR counter_at: reference = DUT"), bo_at(c, ref, CQ0), q0, n, es, c->aux);
}

static const bo_op bo_quantize_counter_at = {.name = "quantize_counter_at", .seed_key = 20261202,
                                             .describe = counter_describe, .inputs = counter_inputs,
                                             .exec = counter_exec, .judge = counter_judge,
                                             .need = {BO_NEED(quantize)}};
static const int64_t k_counter[][BO_V] = {{0, 5, 40, 0},    {0, 5, 40, 1},    {0, 5, 40, 2},    {0, 5, 40, 3},
                                          {1, 130, 256, 0}, {1, 130, 256, 1}, {1, 130, 256, 2}, {1, 130, 256, 3}};

/* ----------------------------------------------------------------------- delayed scaling */

/* FP8 delayed scaling: a sequence of quantizations of growing and shrinking tensors through one
 * amax history (len 3): codes, scales and the history bit for bit after every call, with nearest
 * and stochastic rounding, a col_scale, a transposed copy, a call that does not record, and a
 * flat tensor — for E5M2 with the slot taken from a step in memory (step_at: step + 1, not the
 * slot passed). v = {dtype index, step}: the case is step `step`, from the history the
 * reference's earlier steps left (so every step is judged alone, from the same state). */
enum { DX, DCS, DH, DSTEP, DQ, DS, DT };
#define DROWS 70
#define DCOLS 130
static const float k_gain[] = {1.0f, 3.0f, 0.25f, 8.0f, 1.0f, 0.5f}; /* 3 and 8: beyond the history: saturate */
static const qs_dtype k_delayed_dts[] = {QS_F8E4M3, QS_F8E5M2};

/* The options of step k: stochastic rounding, col_scale, flat, record. */
typedef struct dl_step {
    bool sr, cs, flat, record, at;
} dl_step;
static dl_step dl_options(int d, int k) {
    return (dl_step){k % 2 == 1, k == 2, k == 4, k != 3, k_delayed_dts[d] == QS_F8E5M2};
}

static void delayed_describe(const bo_case *c, char *buf, size_t n) {
    const dl_step o = dl_options((int)c->v[0], (int)c->v[1]);
    snprintf(buf, n, "%s step %lld%s%s%s%s", qs_dtype_name(k_delayed_dts[c->v[0]]), (long long)c->v[1],
             o.sr ? " SR" : "", o.cs ? " col_scale" : "", o.record ? "" : " no-record", o.flat ? " flat" : "");
}

/* Step k of dtype d on side s: x, col_scale, history h, step memory (for step_at), outputs. */
static qs_status delayed_call(qs_backend *be, qs_stream *st, int d, int k, const float *x, const float *colsc,
                              float *h, const int64_t *step_mem, void *q, float *scale, void *t) {
    const dl_step o = dl_options(d, k);
    const qs_sr sr = {.key = 77, .counter = (uint64_t)k, .offset = 0};
    const qs_quant_delayed dl = {.amax = h, .len = 3, .slot = k % 3, .record = o.record,
                                 .step_at = o.at ? step_mem : NULL};
    const int64_t r = o.flat ? 1 : DROWS, cols = o.flat ? DROWS * DCOLS : DCOLS;
    return be->ops->quantize(be, st, r, cols, x, o.cs ? colsc : NULL, k_delayed_dts[d], q, scale, false,
                             o.sr ? &sr : NULL, o.flat ? NULL : t, &dl);
}

static void delayed_inputs(bo_case *c) {
    const int d = (int)c->v[0], step = (int)c->v[1];
    const int64_t n = DROWS * DCOLS;
    bo_seed(c, "quantize_delayed", 0);
    const float *x0 = rnd(n, -2, 2), *colsc = rnd(DCOLS, 0.5f, 2.0f);
    float *h = hf(4), *x = NULL;
    int64_t *step_mem = halloc(sizeof *step_mem);
    uint8_t *scratch = halloc((size_t)n * 2 + 128); /* codes, scale, transposed copy of the earlier steps */
    for (int k = 0; k <= step; k++) {
        x = hcopy(x0, n);
        for (int64_t i = 0; i < n; i++) x[i] *= k_gain[k];
        *step_mem = k + 1;
        if (k < step)
            ASSERT_OK(delayed_call(g_cpu, CST, d, k, x, colsc, h, step_mem, scratch, (float *)(void *)(scratch + n),
                                   scratch + n + 64));
    }
    const dl_step o = dl_options(d, step);
    bo_in(c, DX, "x", x, (size_t)n * 4);
    bo_in(c, DCS, "col_scale", colsc, DCOLS * 4);
    bo_inout(c, DH, "amax history", h, 4, 4, BO_NOCMP, 0);
    if (o.at) bo_in(c, DSTEP, "step", step_mem, sizeof *step_mem);
    else bo_none(c, DSTEP, "step");
    bo_out(c, DQ, "codes", n, 1, BO_BITS, 0);
    bo_out(c, DS, "scale", 1, 4, BO_BITS, 0);
    if (!o.flat) bo_out(c, DT, "transposed copy", n, 1, BO_BITS, 0);
    else bo_none(c, DT, "transposed copy");
}

static qs_status delayed_exec(bo_case *c, bo_side *s) {
    return delayed_call(s->be, s->st, (int)c->v[0], (int)c->v[1], BO_F(DX), BO_F(DCS), BO_F(DH), bo_at(c, s, DSTEP),
                        bo_at(c, s, DQ), BO_F(DS), bo_at(c, s, DT));
}

/* Codes, scale, transposed copy; the history's 3 entries (amax[3] is the call's working word). */
static void delayed_judge(bo_case *c, bo_side *ref, bo_side *dut) {
    const float *ch = bo_at(c, ref, DH);
    if (c->v[0] == 1 && c->v[1] == 0)
        check_fact(bo_what(c, "step_at: the reference records into slot (step + 1) mod 3"), ch[1] > 0.0f && ch[0] == 0.0f,
                   "");
    bo_judge_outputs(c, ref, dut);
    const float *h = bo_fetch(c, dut, DH);
    if (h) check_bits(bo_what(c, "amax history"), h, ch, 3, 4, NULL);
}

static const bo_op bo_quantize_delayed = {.name = "quantize_delayed", .seed_key = 20261202,
                                          .describe = delayed_describe, .inputs = delayed_inputs,
                                          .exec = delayed_exec, .judge = delayed_judge, .need = {BO_NEED(quantize)}};
static const int64_t k_delayed[][BO_V] = {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {0, 5},
                                          {1, 0}, {1, 1}, {1, 2}, {1, 3}, {1, 4}, {1, 5}};

/* -------------------------------------------------------------------------------- cast */

/* v = {source dtype, destination dtype}. FP32 sources: hand-picked ties/specials, then random
 * patterns over the whole range (half with exponents 2^-27..2^18: FP16 subnormals, normals and
 * overflow), NaNs included; 16-bit sources: all 65536 patterns. */
enum { KSRC, KDST };
#define CAST_NF 200003

static void cast_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "%s -> %s (%s)", qs_dtype_name((qs_dtype)c->v[0]), qs_dtype_name((qs_dtype)c->v[1]),
             c->v[0] == QS_F32 ? "random patterns + specials" : "all 65536 patterns");
}

static void cast_inputs(bo_case *c) {
    const qs_dtype sdt = (qs_dtype)c->v[0], ddt = (qs_dtype)c->v[1];
    const int64_t n = sdt == QS_F32 ? CAST_NF : 65536;
    if (sdt == QS_F32) {
        bo_seed(c, "cast", 0);
        float *f = hf(CAST_NF);
        const uint32_t special[] = {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x3F80FFFFu, 0x7F7FFFFFu, 0x7F800000u,
                                    0xFF800000u, 0x80000000u, 0x00000001u, 0x7FC00001u, 0x7F800001u, 0xBF7F8000u,
                                    0x477FF000u, 0x477FEFFFu, 0x33000000u, 0x33000001u, 0x38800000u, 0x387FE000u};
        for (int64_t i = 0; i < CAST_NF; i++) {
            uint32_t u = qs_rng_u32(&g_rng);
            if (i % 2) u = (u & 0x807FFFFFu) | ((100u + qs_rng_u32(&g_rng) % 46u) << 23);
            f[i] = bitsf(u);
        }
        for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) f[i] = bitsf(special[i]);
        bo_in(c, KSRC, "src", f, (size_t)n * 4);
    } else {
        uint16_t *all = halloc(65536 * 2);
        for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
        bo_in(c, KSRC, "src", all, 65536 * 2);
    }
    bo_out(c, KDST, "dst", n, qs_dtype_size(ddt), BO_BITS, 0);
    c->t[KDST].src = sdt == QS_F32 ? c->t[KSRC].host : NULL;
}

static qs_status cast_exec(bo_case *c, bo_side *s) {
    const int64_t n = c->v[0] == QS_F32 ? CAST_NF : 65536;
    return s->be->ops->cast(s->be, s->st, n, bo_at(c, s, KSRC), (qs_dtype)c->v[0], bo_at(c, s, KDST), (qs_dtype)c->v[1]);
}

static const bo_op bo_cast = {.name = "cast", .seed_key = 20261202, .describe = cast_describe, .inputs = cast_inputs,
                              .exec = cast_exec, .need = {BO_NEED(cast)}};
#define CAST_TO(s) {s, QS_F32}, {s, QS_BF16}, {s, QS_F16}
static const int64_t k_cast[][BO_V] = {CAST_TO(QS_F32), CAST_TO(QS_BF16), CAST_TO(QS_F16)};

const bo_row bo_rows_quant[] = {
    {&bo_quantize, 0, BO_SHAPES(k_quant), BO_CPU_SHAPES(k_quant_cpu), .budget = bo_bits},
    {&bo_quantize, 0, BO_SHAPES(k_quant_zeros), .budget = bo_bits, .variant = "zeros"},
    {&bo_quantize_dst_t, 0, BO_SHAPES(k_quant_t), BO_CPU_SHAPES(k_quant_t_cpu), .budget = bo_bits},
    {&bo_quantize_dst_t, 0, BO_SHAPES(k_quant_zeros_t), .budget = bo_bits, .variant = "zeros"},
    {&bo_dequantize, 0, BO_SHAPES(k_dequant), BO_CPU_SHAPES(k_dequant_cpu), .budget = bo_bits},
    {&bo_dequantize, 0, BO_SHAPES(k_quant_zeros), .budget = bo_bits, .variant = "zeros"},
    {&bo_quantize_counter_at, 0, BO_SHAPES(k_counter), .budget = bo_bits},
    {&bo_quantize_delayed, 0, BO_SHAPES(k_delayed), .budget = bo_bits},
    {&bo_cast, 0, BO_SHAPES(k_cast), .budget = bo_bits},
    {0},
};
