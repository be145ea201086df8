/* src/cpu/cpu_conv_plan.h — defines: the plan of the CPU convolution, shared by cpu_conv_plan.c
 * (building it: recipes, primitives, weight reorders, workspace) and cpu_conv.c (running it).
 *
 * Workspace, per direction (each region 64-byte aligned; the plan reports the maximum):
 *   forward          [X f32 | W f32 (widened: emulated, INT8 C==1)][W in the primitive's layout]
 *                    [per-channel scales (INT8, fused)][scratchpad][FP32 Y (y_dt BF16)]
 *   backward_data    [dY f32 | W f32 (emulated)][W in the primitive's layout]
 *                    [dX f32 temp (accumulate; INT8 1×1 strided: the (N·P·Q, C) product)][scratchpad]
 *                    [FP32 dX (dx_dt BF16)]
 *   backward_weights FP32/BF16/emulated: [dY f32 | X f32 (emulated)][dW in the primitive's layout][scratchpad]
 *                    INT8 swapped: [X chunk (C,n,H,W) s8][dY chunk in weights layout][partial f32 (C·R·S,K)]
 *                                  [sum f32 (C·R·S,K)][scratchpad]
 *                    INT8 1×1:     [gathered X s8 (strided only)][partial f32 (C,K)][sum f32 (C,K)][scratchpad] */
#ifndef QSYNC_CPU_CPU_CONV_PLAN_H
#define QSYNC_CPU_CPU_CONV_PLAN_H

#include "cpu/cpu_backend.h"

/* How a direction runs (cpu_conv_plan.c's comment). */
typedef enum conv_recipe {
    RCP_F32 = 0,    /* FP32 primitive; non-F32 operands widened to their values */
    RCP_BF16,       /* bf16 primitive, f32 output */
    RCP_S8,         /* forward: s8 convolution + epilogue */
    RCP_S8_AS_F32,  /* forward, C == 1: int8 codes widened to f32 (exact sums) + epilogue */
    RCP_S8_DECONV,  /* backward-data: s8 deconvolution + epilogue */
    RCP_S8_SWAPPED, /* backward-weights: s8 forward convolution with N and C swapped */
    RCP_BF16_SWAPPED, /* backward-weights: the same in bf16 (one chunk) */
    RCP_S8_GEMM     /* 1×1 pad 0 — backward-weights: s8 matmul Xᵀ·dY; backward-data (strided):
                     * s8 matmul dY·W, scattered into dX by the epilogue */
} conv_recipe;

enum { DIR_FWD = 0, DIR_BWD_DATA, DIR_BWD_WEIGHTS };

/* Weights in the primitive's layout plus the reorder that converts them (absent when the
 * primitive takes the user layout as is). */
typedef struct qs_cpu_wlayout {
    qs_dnnl_prim reorder;
    bool needed;
    size_t bytes;
} qs_cpu_wlayout;

/* One INT8 backward-weights chunk shape (the full one, and the shorter last one). */
typedef struct conv_chunk {
    qs_dnnl_prim prim;   /* swapped convolution or matmul */
    qs_dnnl_prim xt;     /* swapped: X images → (C, n, H', W') channels-last */
    qs_cpu_wlayout dyw;  /* swapped: dY images → the convolution's weights layout */
    int64_t len;         /* images (swapped) or rows (matmul) */
} conv_chunk;

/* Workspace regions of one direction (WS_Y: forward's FP32 Y when y_dt is BF16, backward-data's
 * FP32 dX when dx_dt is BF16). */
enum { WS_A = 0, WS_B, WS_L, WS_T, WS_S, WS_SCRATCH, WS_Y, WS_N };

typedef struct qs_cpu_conv_plan {
    qs_cpu_plan hdr;
    qs_conv_desc d;
    qs_dtype fdt, gdt;          /* operand storage dtypes: forward (X, W), gradient (dY) */
    conv_recipe rcp[3];
    bool fused_scale;           /* INT8 forward: scale and bias are post-ops of the primitive */
    qs_dnnl_prim fwd, bwd_data, bwd_weights;
    qs_cpu_wlayout w_fwd;       /* OIHW → forward weights layout */
    qs_cpu_wlayout w_bwd;       /* OIHW → backward-data (or deconvolution) weights layout */
    qs_cpu_wlayout dw_user;     /* backward-weights diff layout → OIHW (FP32/BF16) */
    conv_chunk chunk[2];        /* INT8 backward-weights */
    int64_t nchunks;
    int64_t pad_r[2];           /* right/bottom padding that makes the geometry exact (≤ pad; < 0: unread rows) */
    size_t off[3][WS_N];        /* region offsets per direction */
    size_t ws_bytes;
    char impl[3][160];
} qs_cpu_conv_plan_t;

/* ws + off, NULL when there is no workspace (the plan then needs none). */
static inline void *ws_at(void *ws, size_t off) { return ws ? (char *)ws + off : NULL; }

#endif
