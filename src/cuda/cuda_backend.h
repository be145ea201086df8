/* src/cuda/cuda_backend.h — defines: the prototypes of the CUDA backend's ops, qs_cuda_<op> for
 * every op of core/backend_ops.def, optional ones included (expanded from the list; contracts
 * there, kept asynchronously on the stream), each defined in cuda_<family>.{c,cu}, and what op
 * files export to the dispatcher (cuda_backend.c). What they all share: cuda_common.h.
 *
 * Layout of the backend (one purpose per file):
 *   cuda_backend.c      handle, device memory (256-byte aligned, counted), streams, events,
 *                       copies, precision support, plan dispatch, the ops table
 *   cuda_common.c       the launch check, making the backend's context current
 *   cuda_graph.c        capture of queued ops into CUDA graphs, and their replay
 *   cuda_elementwise.cu ReLU, add, accumulate, dropout, scale, cast, NHWC<->NCHW, column sums,
 *                       sum of squares, SGD and AdamW steps
 *   cuda_quant.cu       quantize / dequantize (INT8, FP8 E4M3/E5M2, BF16, FP16; RNE and
 *                       stochastic rounding, bit-identical to the CPU's core/numfmt.h)
 *   cuda_norm.cu        batch norm, pooling, softmax + cross-entropy
 *   cuda_linear.c       Linear and the batched matmul through cuBLASLt (one wrapper for every
 *                       GEMM precision)
 *   cuda_linear_kernels.cu  the small kernels cuda_linear.c needs (FP8 transposes, bias sums)
 *   cuda_transformer.cu the transformer's memory-bound ops: layer norm, GELU, tanh, embedding,
 *                       position add, head permutes, masked softmax
 *   cuda_attention.cu   fused multi-head attention (the optional attention ops)
 *   cuda_conv.c         Conv2d through cuDNN
 *   cuda_ipc.c, cuda_ipc_sum.cu  the IPC all-reduce between ranks on one GPU (parallel/ipc_reduce.h)
 *   cuda_nccl.c         the NCCL all-reduce (parallel/nccl_reduce.h)
 *   cuda_green.c        an SM partition through a green context (QS_CUDA_SM_PARTITION)
 *   cuda_launch.cuh     what the kernel files share: the op's stream, grid caps, argument checks,
 *                       stream-ordered scratch */
#ifndef QSYNC_CUDA_BACKEND_H
#define QSYNC_CUDA_BACKEND_H

#include "cuda/cuda_common.h"
#include "cuda/cuda_open.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every op, the optional ones too: the CUDA backend has them all. */
#define QS_OP(family, ret, op, params) ret qs_cuda_##op params;
#define QS_OP_OPTIONAL(family, ret, op, params) ret qs_cuda_##op params;
#include "core/backend_ops.def"

/* ---- what plan_destroy and destroy (cuda_backend.c) call in the op files ---- */
void qs_cuda_linear_plan_destroy(qs_backend *be, void *plan); /* cuda_linear.c */
void qs_cuda_bmm_plan_destroy(qs_backend *be, void *plan);
void qs_cuda_gemm_release(qs_backend *be);                    /* the cuBLASLt handle, at destroy (cuda_gemm.c) */
void qs_cuda_conv_plan_destroy(qs_backend *be, void *plan);   /* cuda_conv.c */
void qs_cuda_conv_release(qs_backend *be);                    /* the cuDNN handle, at destroy */
void qs_cuda_pool_plan_destroy(qs_backend *be, void *plan);   /* cuda_norm.cu */

#ifdef __cplusplus
}
#endif
#endif
