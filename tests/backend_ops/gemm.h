/* tests/backend_ops/gemm.h — defines: what the GEMM-like op files (ops_gemm.c, ops_gemm_bf16.c)
 * share: the tensor slots of a Linear / Conv2d case, their geometry from a shape, quantized
 * operands made by the reference, the NMSE budget gemm_budget (its derivation: ops_gemm.c) and
 * the op calls common to both kinds.
 *
 * Shapes: Linear v = {M, N, K, bias}; Conv2d v = {N, H, W, C, K, R, S, stride_h, stride_w, pad_h,
 * pad_w, bias}. Geometry (c->n): x (n[0], n[1]), w (n[2], n[3]), dy (n[4], n[5]) as the 2-D
 * matrices quantize sees; reduction lengths (c->f): f[0] forward, f[1] backward-data, f[2]
 * backward-weights; f[3] the FLOPs of one product. */
#ifndef QSYNC_TESTS_BACKEND_OPS_GEMM_H
#define QSYNC_TESTS_BACKEND_OPS_GEMM_H

#include "bo.h"

typedef enum gemm_kind { GEMM_LINEAR, GEMM_CONV } gemm_kind;

/* Tensor slots; each operand's scale sits in the slot after its codes (none when unscaled). */
enum {
    G_X, G_XS, G_W, G_WS, G_DY, G_DYS, G_B,  /* inputs */
    G_Y, G_DX, G_DW, G_DB,                   /* outputs */
    G_XT, G_WT, G_DYT, G_DX2, G_DW2,         /* FP8 transposed copies and the results from them */
    G_Y16, G_DX16,                           /* BF16 outputs of a y_dt / dx_dt BF16 plan */
};

/* The NMSE budget of a GEMM-like output of reduction length K at precision p (ops_gemm.c). */
double gemm_budget(gemm_kind kind, qs_precision p, double K);

/* Descriptor (c->d), geometry (c->n, c->f) and the name parts of case c of kind `kind`. */
void gemm_geometry(bo_case *c, gemm_kind kind);
/* The sizes of a case's tensors (elements) and its operand dtypes. */
typedef struct gemm_dims {
    int64_t nx, nw, ny, nb;
    bool lin, bias;
    qs_dtype fdt, gdt;
} gemm_dims;
/* gemm_geometry, then g_rng seeded for the case as its rows always were: key `what` (lin_what
 * or conv_what by kind), index from the precision and the sizes, plus `extra`. */
gemm_dims gemm_setup(bo_case *c, gemm_kind kind, const char *lin_what, const char *conv_what, uint64_t extra);
/* "M3 N5 K7 +b" or "N8 15x15x16->32 k3x3 s2 p1 +b" into buf. */
void gemm_describe_linear(const bo_case *c, char *buf, size_t n);
void gemm_describe_conv(const bo_case *c, char *buf, size_t n);

/* Operand of tensors i (codes) and i + 1 (scale) in dt on side s; data_t from tensor t (< 0: none). */
qs_operand gemm_op(const bo_case *c, const bo_side *s, int i, qs_dtype dt, int t);

/* A plan of the case's kind on side s at its side precision with output dtypes y_dt, dx_dt. */
qs_status gemm_plan_dt(bo_case *c, bo_side *s, qs_dtype y_dt, int slot);
/* The forward / backward-data / backward-weights call of the case's kind with plan `slot`. */
qs_status gemm_fwd(bo_case *c, bo_side *s, int slot, void *y);
qs_status gemm_bwd_data(bo_case *c, bo_side *s, int slot, const qs_operand *dy, const qs_operand *w, void *dx,
                        bool acc);
qs_status gemm_bwd_weights(bo_case *c, bo_side *s, const qs_operand *dy, const qs_operand *x, float *dw, float *db);

/* The row budgets: every output's NMSE at its reduction length (tensor K). */
bo_rule gemm_linear_nmse(const bo_case *c, int i);
bo_rule gemm_conv_nmse(const bo_case *c, int i);

#endif
