/* tests/backend_ops/bo.h — defines: the registry of tests/test_backend_ops.c — ops (bo_op: how
 * an op's tensors are made, planned, run and judged), rows (bo_row: an op, its precisions, its
 * shapes, its inputs and its error budget), cases (bo_case: one row at one precision and one
 * shape), the two sides a case runs on (bo_side: the CPU reference and the backend under test)
 * and the runner's entry points.
 *
 * A case holds up to BO_MAX_T tensors, each made once on the host (inputs) or declared as an
 * output; the runner gives every tensor a buffer on each side — host memory on the reference,
 * a guarded view (tests/support/gpu_harness.h) on the DUT, outputs filled with POISON — runs the
 * op's exec on both, and judges every output of the DUT against the reference's by the rule the
 * row's budget function returns for it. Op files (tests/backend_ops/ops_*.c) define the ops and
 * their rows; ops_registry.c lists the row tables. */
#ifndef QSYNC_TESTS_BACKEND_OPS_BO_H
#define QSYNC_TESTS_BACKEND_OPS_BO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"

#define BO_MAX_T 40    /* tensors of one case */
#define BO_MAX_PLANS 3 /* plans of one case on one side */
#define BO_V 12        /* numbers of one shape (their meaning is the op's: its comment says) */

/* A row's precision list: BO_P(FP32) | BO_P(BF16) | ... */
#define BO_P(p) (1u << QS_PREC_##p)
/* Every GEMM precision the CUDA backend runs (INT8 rows say so separately). */
#define BO_GEMM_PRECS (BO_P(FP32) | BO_P(TF32) | BO_P(BF16) | BO_P(FP16) | BO_P(FP8))

/* How an output is judged. */
typedef enum bo_rule_kind {
    BO_ROW = 0, /* by the row's budget function (the default of a float output) */
    BO_NMSE,    /* NMSE ≤ value (check_nmse) */
    BO_TOL,     /* |d − r| ≤ atol + rtol·|r|, rtol = 4u·sqrt(4·value), atol = rtol·scale (check_tol) */
    BO_EXACT,   /* equal values, NaN matching NaN */
    BO_BITS,    /* equal bytes */
    BO_NOCMP,   /* not compared by the runner (the op's judge looks at it) */
} bo_rule_kind;

typedef struct bo_rule {
    bo_rule_kind kind;
    double value, scale;
} bo_rule;

typedef struct bo_tensor {
    const char *name;   /* in the printed lines: "<case>: <name>" */
    size_t bytes, es;   /* size and element size (bit comparisons) */
    const void *host;   /* an input's (or accumulated output's) start value; NULL: filled with fill */
    int fill;           /* byte of a buffer without host data (POISON for outputs) */
    bool null;          /* passed as NULL on both sides */
    bool out;           /* judged after the op */
    bool host_mem;      /* in host memory on both sides (a result the op returns to the host) */
    bo_rule_kind rule;  /* BO_ROW, or a rule of the tensor's own (codes and indices: BO_BITS) */
    double K, extra;    /* what the budget reads: reduction length (Kr) and extra roundings */
    double scale;       /* tolerance scale: < 0 is max|ref| */
    const float *src;   /* BO_BITS: the FP32 source printed on a mismatch */
    void *at[2];        /* its buffer on the reference [0] and on the DUT [1] */
} bo_tensor;

/* An entry of qs_backend_ops an op calls (BO_NEED(linear_plan)). */
typedef struct bo_need {
    size_t off;
    const char *name;
} bo_need;
#define BO_NEED(entry) {offsetof(qs_backend_ops, entry), #entry}

typedef struct bo_op bo_op;
typedef struct bo_row bo_row;

/* One row at one precision and one shape. */
typedef struct bo_case {
    const bo_row *row;
    const bo_op *op;
    qs_precision prec;   /* the row's precision (FP32 for rows without one) */
    const int64_t *v;    /* the shape (BO_V numbers) */
    int shape;           /* its index in the row's list */
    bool dut_cpu;        /* the DUT is the CPU backend */
    char name[200];      /* "<op> <prec> <shape>" */
    bo_tensor t[BO_MAX_T];
    int nt;
    union {              /* the op's descriptor, when it has one */
        qs_linear_desc lin;
        qs_conv_desc conv;
        qs_bmm_desc bmm;
        qs_pool_desc pool;
    } d;
    int64_t n[8];        /* op-specific sizes */
    double f[8];         /* op-specific figures (tolerance scales, flop counts) */
    const void *aux;     /* op-specific data made with the inputs */
} bo_case;

/* Where a case runs: the reference (idx 0, host memory) or the DUT (idx 1, guarded views). */
typedef struct bo_side {
    qs_backend *be;
    qs_stream *st;
    int idx;
    void *plan[BO_MAX_PLANS];
    size_t wsb[BO_MAX_PLANS];
    void *ws[BO_MAX_PLANS];
} bo_side;

struct bo_op {
    const char *name;      /* "linear_forward": the test name's stem and the filter's text */
    int variant;           /* what distinguishes ops sharing functions (accumulate, in place, ...) */
    uint64_t seed_key;     /* key of the seeded inputs (that of the suite the op's rows came from) */
    /* the shape as text ("M3 N5 K7 +b") into buf */
    void (*describe)(const bo_case *c, char *buf, size_t n);
    /* the case's tensors, sizes and descriptors, inputs made seeded from c->v and c->prec */
    void (*inputs)(bo_case *c);
    /* plans of side s into s->plan[i] and their workspace sizes s->wsb[i]; NULL: no plan */
    qs_status (*plan)(bo_case *c, bo_side *s);
    /* the op on side s (what --perf times) */
    qs_status (*exec)(bo_case *c, bo_side *s);
    /* NULL: every output by its rule; else the op's own judgement (it may call bo_judge_outputs) */
    void (*judge)(bo_case *c, bo_side *ref, bo_side *dut);
    bool dut_only;         /* judged against the DUT's own results: the reference does not run */
    /* FLOPs of one exec (0: a memory-bound op, reported in GB/s) */
    double (*flops)(const bo_case *c);
    /* the qs_backend_ops entries it calls (BO_NEED), name-NULL-terminated: a NULL one fails the case */
    bo_need need[6];
};

struct bo_row {
    const bo_op *op;
    unsigned precs;                  /* BO_P list; 0: the op takes no precision */
    const int64_t (*shapes)[BO_V];   /* the shapes the row expands over */
    int nshapes;
    const int64_t (*cpu_shapes)[BO_V]; /* the CPU backend's shapes (smaller); NULL: shapes */
    int ncpu;
    void (*inputs)(bo_case *c);      /* how inputs are made; NULL: the op's */
    bo_rule (*budget)(const bo_case *c, int i); /* the rule of output i */
    void (*fp64)(bo_case *c);        /* NULL, or the CPU's outputs against an FP64 reference */
    const char *variant;             /* test-name suffix ("nonfinite"), or NULL */
};

/* A row's shape list: BO_SHAPES(k_lin) → .shapes = k_lin, .nshapes = its length. */
#define BO_SHAPES(a) .shapes = (a), .nshapes = (int)(sizeof(a) / sizeof((a)[0]))
#define BO_CPU_SHAPES(a) .cpu_shapes = (a), .ncpu = (int)(sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------ declaring tensors */

/* Tensor i: an input holding `bytes` of host (copied to both sides). */
void bo_in(bo_case *c, int i, const char *name, const void *host, size_t bytes);
/* Tensor i: an output of n elements of es bytes (POISON-filled), judged by rule with K. */
void bo_out(bo_case *c, int i, const char *name, int64_t n, size_t es, bo_rule_kind rule, double K);
/* Tensor i: an output that starts from host (accumulate, in-place, optimizer state). */
void bo_inout(bo_case *c, int i, const char *name, const void *host, int64_t n, size_t es, bo_rule_kind rule, double K);
/* Tensor i: NULL on both sides (an absent optional argument). */
void bo_none(bo_case *c, int i, const char *name);
/* Tensor i: host memory on both sides, n elements of es bytes, POISON-filled, judged by rule. */
void bo_host_out(bo_case *c, int i, const char *name, int64_t n, size_t es, bo_rule_kind rule, double K);
/* x (rows, cols) quantized per tensor by the reference into dt (sr NULL: nearest even) as input
 * tensor i (codes) and i + 1 (the scale, or none for unscaled dtypes); returns the codes. */
void *bo_quantized(bo_case *c, int i, const char *name, const float *x, int64_t rows, int64_t cols, qs_dtype dt,
                   const qs_sr *sr);
/* The reference's dequantized values (n floats) of operand tensors i (codes) and i + 1 (scale) in dt. */
float *bo_dequantized(const bo_case *c, int i, int64_t n, qs_dtype dt);
/* Tensor i's buffer on side s. */
void *bo_at(const bo_case *c, const bo_side *s, int i);
#define BO_F(i) ((float *)bo_at(c, s, (i)))

/* The precision side s plans at: the row's on the DUT, cpu_prec of it on the reference. */
qs_precision bo_prec(const bo_case *c, const bo_side *s);
/* Seed g_rng for case c: qs_rng_key(its op's seed_key, what, i). */
void bo_seed(const bo_case *c, const char *what, uint64_t i);

/* ---------------------------------------------------------------------- judging */

/* Every output with a rule, DUT against reference (what a NULL judge does). */
void bo_judge_outputs(bo_case *c, bo_side *ref, bo_side *dut);
/* Output i of the DUT on the host (downloaded and guard-checked; NULL after a DUT error). */
const void *bo_fetch(bo_case *c, bo_side *dut, int i);
/* "<case>: <suffix>" in a buffer of the case (valid until the next call). */
const char *bo_what(const bo_case *c, const char *suffix);

/* Budgets every op may name: each output by its own rule with its K and scale. */
bo_rule bo_tol(const bo_case *c, int i);   /* BO_TOL, Kr = K, scale */
bo_rule bo_exact(const bo_case *c, int i); /* BO_EXACT */
bo_rule bo_bits(const bo_case *c, int i);  /* BO_BITS */

/* --------------------------------------------------------------------- the runner */

/* The rows of every op file, NULL-op-terminated lists (ops_registry.c). */
extern const bo_row *const bo_registry[];

/* The name of row r at precision p ("linear_forward_fp32"), into buf. */
void bo_row_name(const bo_row *r, qs_precision p, bool has_prec, char *buf, size_t n);
/* Run every shape of row r at precision p whose name contains filter (NULL: all) on g_dut
 * against g_cpu; cases print their lines and count failures (g_fail). */
void bo_run_row(const bo_row *r, qs_precision p, const char *filter);
/* Whether some shape of row r at p matches filter on the current DUT. */
bool bo_row_matches(const bo_row *r, qs_precision p, const char *filter);
/* --perf: every matching shape of r at p on g_dut, median of reps after a warm-up, one line each. */
void bo_perf_row(const bo_row *r, qs_precision p, const char *filter, int reps);

#endif
