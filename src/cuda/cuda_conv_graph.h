/* src/cuda/cuda_conv_graph.h — defines: the cuDNN graph (cudnnBackend*) API steps of a 2-D
 * convolution that the CUDA backend (cuda_conv_engines.c) and bench/cuda/bench_conv_cudnn.cu
 * share (cuda_conv_graph.c): tensors, the convolution and its operation, the operation graph,
 * engine heuristics and configs, execution plans and variant packs. Plain C on cudnn.h alone (no
 * qsync header), so the standalone bench compiles it too.
 *
 * Each qs_cuda_cg_* setter takes a descriptor the caller created (and owns: the caller destroys
 * it), sets its attributes in cuDNN's order and finalizes it. It returns cuDNN's status; on
 * failure *call (when call is not NULL) names the call that failed, for the caller's message.
 * Tensors: dims in N,C,H,W order with NHWC strides (filters: K,C,R,S with KRSC strides), 16-byte
 * aligned. The convolution: cross-correlation, FP32 compute, dilation 1. */
#ifndef QSYNC_CUDA_CONV_GRAPH_H
#define QSYNC_CUDA_CONV_GRAPH_H

#include <cudnn.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The directions of a convolution operation: forward (y from x, w), backward-data (dx from dy,
 * w), backward-filter (dw from x, dy). */
enum { QS_CUDA_CG_FWD = 0, QS_CUDA_CG_BWD_DATA, QS_CUDA_CG_BWD_FILTER, QS_CUDA_CG_DIRS };

/* A tensor (CUDNN_BACKEND_TENSOR_DESCRIPTOR) of dims (n, c, h, w), unique id uid, type dt;
 * virt: a virtual (intermediate) tensor of a multi-op graph. */
cudnnStatus_t qs_cuda_cg_tensor(cudnnBackendDescriptor_t t, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c,
                                int64_t h, int64_t w, bool virt, const char **call);

/* A convolution (CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR) with strides stride[2] and symmetric
 * paddings pad[2] (height, width). */
cudnnStatus_t qs_cuda_cg_conv(cudnnBackendDescriptor_t conv, const int64_t stride[2], const int64_t pad[2],
                              const char **call);

/* The descriptor type of the convolution operation of direction dir (QS_CUDA_CG_*). */
cudnnBackendDescriptorType_t qs_cuda_cg_conv_op_type(int dir);

/* The convolution operation of direction dir (op created with qs_cuda_cg_conv_op_type(dir)) on
 * tensors x, w, y (the forward's roles: dx, dw, dy in the backward directions) and conv, with
 * alpha 1 and beta 0. */
cudnnStatus_t qs_cuda_cg_conv_op(cudnnBackendDescriptor_t op, int dir, cudnnBackendDescriptor_t x,
                                 cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t conv,
                                 const char **call);

/* An operation graph of nops operations on handle h. */
cudnnStatus_t qs_cuda_cg_graph(cudnnBackendDescriptor_t graph, cudnnHandle_t h, const cudnnBackendDescriptor_t *ops,
                               int64_t nops, const char **call);

/* Engine heuristics (CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) of graph in mode. */
cudnnStatus_t qs_cuda_cg_heur(cudnnBackendDescriptor_t heur, cudnnBackendDescriptor_t graph,
                              cudnnBackendHeurMode_t mode, const char **call);

/* Append the engine configs that the finalized heuristics heur offers to the malloc'd array
 * *cfgs of *ncfg entries (the caller destroys the configs and frees the array). Nothing is
 * appended when cuDNN reports none or fails to hand them out. Returns 0, or -1 when the array
 * cannot grow (out of memory; *cfgs and *ncfg unchanged, *wanted the count asked for). */
int qs_cuda_cg_engine_configs(cudnnBackendDescriptor_t heur, cudnnBackendDescriptor_t **cfgs, int64_t *ncfg,
                              int64_t *wanted);

/* Whether engine config cfg keeps FP32 sums: not down-converting, reduced-precision-reducing, FFT
 * or Winograd. *nondet: whether it is nondeterministic; *index: its engine's global index (-1
 * when unknown). */
bool qs_cuda_cg_cfg_ok(cudnnBackendDescriptor_t cfg, bool *nondet, int64_t *index);

/* An execution plan (CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) of engine config cfg on handle h;
 * *ws = the workspace bytes it needs. */
cudnnStatus_t qs_cuda_cg_plan(cudnnBackendDescriptor_t plan, cudnnHandle_t h, cudnnBackendDescriptor_t cfg,
                              int64_t *ws, const char **call);

/* A variant pack of n (unique id, device pointer) pairs and the workspace ws. */
cudnnStatus_t qs_cuda_cg_variant_pack(cudnnBackendDescriptor_t vp, int64_t n, const int64_t *uids, void *const *ptrs,
                                      void *ws, const char **call);

#ifdef __cplusplus
}
#endif
#endif
