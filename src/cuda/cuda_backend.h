/* src/cuda/cuda_backend.h — defines: the prototypes of the CUDA backend's ops, qs_cuda_<op> for
 * every op of core/backend_ops.def, optional ones included (expanded from the list; contracts
 * there, kept asynchronously on the stream), each defined in cuda_<family>.{c,cu}, and what op
 * files export to the dispatcher (cuda_backend.c). What they all share: cuda_common.h.
 *
 * Layout of the backend: op X of family F (core/backend_ops.def) is in cuda_F.{c,cu}, or in
 * cuda_F_<part> when a family is split; the rest:
 *   cuda_backend.c      the dispatcher: handle, device memory (256-byte aligned, counted), streams,
 *                       events, copies, precision support, plan dispatch, the ops table
 *   cuda_common.{h,c}   what every file shares: handle, plan kinds, QS_CUDA_TRY, launch check
 *   cuda_gemm.{h,c}     the cuBLASLt wrapper of cuda_linear.c and cuda_bmm.c (kernels:
 *                       cuda_linear_kernels.cu)
 *   cuda_conv_*.c       cuda_conv.c's plan, execution and cuDNN paths (cuda_conv_plan.h); the
 *                       graph-API steps shared with bench/cuda (cuda_conv_graph.c); kernels
 *                       (cuda_conv_kernels.cu)
 *   cuda_map.cuh, cuda_quant.cuh, cuda_launch.cuh   what the kernel files share
 *   cuda_ipc.c, cuda_ipc_sum.cu, cuda_nccl.c        the transports of src/parallel
 *   cuda_green.c        an SM partition through a green context (QS_CUDA_SM_PARTITION) */
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
void qs_cuda_bmm_plan_destroy(qs_backend *be, void *plan);    /* cuda_bmm.c */
void qs_cuda_gemm_release(qs_backend *be);                    /* the cuBLASLt handle, at destroy (cuda_gemm.c) */
void qs_cuda_conv_plan_destroy(qs_backend *be, void *plan);   /* cuda_conv.c */
void qs_cuda_conv_release(qs_backend *be);                    /* the cuDNN handle, at destroy */
void qs_cuda_pool_plan_destroy(qs_backend *be, void *plan);   /* cuda_pool.cu */

#ifdef __cplusplus
}
#endif
#endif
