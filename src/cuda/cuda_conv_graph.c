/* src/cuda/cuda_conv_graph.c — defines: the cuDNN graph API steps of a 2-D convolution shared by
 * the CUDA backend and bench/cuda/bench_conv_cudnn.cu (contracts: cuda_conv_graph.h). Plain C on
 * cudnn.h alone. */
#include "cuda/cuda_conv_graph.h"

#include <stdlib.h>

/* Return cuDNN's status from the enclosing setter when `x` fails, naming it in *call. */
#define CG_TRY(x)                                                                                  \
    do {                                                                                           \
        cudnnStatus_t cg_st_ = (x);                                                                \
        if (cg_st_ != CUDNN_STATUS_SUCCESS) {                                                      \
            if (call) *call = #x;                                                                  \
            return cg_st_;                                                                         \
        }                                                                                          \
    } while (0)

/* Dims (n, c, h, w), NHWC strides, uid, type, 16-byte alignment, virtual only when asked. */
cudnnStatus_t qs_cuda_cg_tensor(cudnnBackendDescriptor_t t, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c,
                                int64_t h, int64_t w, bool virt, const char **call) {
    int64_t dims[4] = {n, c, h, w};
    int64_t str[4] = {h * w * c, 1, w * c, c};
    int64_t align = 16;
    CG_TRY(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    CG_TRY(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    CG_TRY(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
    CG_TRY(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    CG_TRY(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    if (virt) CG_TRY(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt));
    CG_TRY(cudnnBackendFinalize(t));
    return CUDNN_STATUS_SUCCESS;
}

/* FP32 compute, cross-correlation, 2 spatial dims, dilation 1, the given strides and paddings. */
cudnnStatus_t qs_cuda_cg_conv(cudnnBackendDescriptor_t conv, const int64_t stride[2], const int64_t pad[2],
                              const char **call) {
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t nd = 2, dil[2] = {1, 1}, str[2] = {stride[0], stride[1]}, pd[2] = {pad[0], pad[1]};
    CG_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    CG_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    CG_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nd));
    CG_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
    CG_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str));
    CG_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pd));
    CG_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pd));
    CG_TRY(cudnnBackendFinalize(conv));
    return CUDNN_STATUS_SUCCESS;
}

/* Per direction: the operation's descriptor type and its x, w, y, conv, alpha, beta attributes. */
static const struct {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
} cg_ops[QS_CUDA_CG_DIRS] = {
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
};

/* cg_ops[dir].type. */
cudnnBackendDescriptorType_t qs_cuda_cg_conv_op_type(int dir) { return cg_ops[dir].type; }

/* x, w, y, conv, alpha = 1, beta = 0, then finalize. */
cudnnStatus_t qs_cuda_cg_conv_op(cudnnBackendDescriptor_t op, int dir, cudnnBackendDescriptor_t x,
                                 cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t conv,
                                 const char **call) {
    const float alpha = 1.0f, beta = 0.0f;
    CG_TRY(cudnnBackendSetAttribute(op, cg_ops[dir].x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    CG_TRY(cudnnBackendSetAttribute(op, cg_ops[dir].w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
    CG_TRY(cudnnBackendSetAttribute(op, cg_ops[dir].y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    CG_TRY(cudnnBackendSetAttribute(op, cg_ops[dir].conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
    CG_TRY(cudnnBackendSetAttribute(op, cg_ops[dir].alpha, CUDNN_TYPE_FLOAT, 1, &alpha));
    CG_TRY(cudnnBackendSetAttribute(op, cg_ops[dir].beta, CUDNN_TYPE_FLOAT, 1, &beta));
    CG_TRY(cudnnBackendFinalize(op));
    return CUDNN_STATUS_SUCCESS;
}

/* The operations, the handle, then finalize. */
cudnnStatus_t qs_cuda_cg_graph(cudnnBackendDescriptor_t graph, cudnnHandle_t h, const cudnnBackendDescriptor_t *ops,
                               int64_t nops, const char **call) {
    CG_TRY(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops));
    CG_TRY(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    CG_TRY(cudnnBackendFinalize(graph));
    return CUDNN_STATUS_SUCCESS;
}

/* The graph, the mode, then finalize. */
cudnnStatus_t qs_cuda_cg_heur(cudnnBackendDescriptor_t heur, cudnnBackendDescriptor_t graph,
                              cudnnBackendHeurMode_t mode, const char **call) {
    CG_TRY(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                    &graph));
    CG_TRY(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    CG_TRY(cudnnBackendFinalize(heur));
    return CUDNN_STATUS_SUCCESS;
}

/* Count the results, grow the array, create that many config descriptors, let cuDNN fill them;
 * the ones it does not fill are destroyed. */
int qs_cuda_cg_engine_configs(cudnnBackendDescriptor_t heur, cudnnBackendDescriptor_t **cfgs, int64_t *ncfg,
                              int64_t *wanted) {
    int64_t cnt = 0;
    if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &cnt, NULL) !=
            CUDNN_STATUS_SUCCESS ||
        cnt <= 0)
        return 0;
    cudnnBackendDescriptor_t *grown = realloc(*cfgs, (size_t)(*ncfg + cnt) * sizeof *grown);
    if (!grown) {
        *wanted = *ncfg + cnt;
        return -1;
    }
    *cfgs = grown;
    cudnnBackendDescriptor_t *fresh = grown + *ncfg;
    int64_t made = 0;
    for (; made < cnt; made++)
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &fresh[made]) != CUDNN_STATUS_SUCCESS)
            break;
    int64_t got = 0;
    if (made == cnt && cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, cnt,
                                                &got, fresh) == CUDNN_STATUS_SUCCESS) {
        if (got > cnt) got = cnt;
    } else {
        got = 0;
    }
    for (int64_t i = got; i < made; i++) cudnnBackendDestroyDescriptor(fresh[i]);
    *ncfg += got;
    return 0;
}

/* The config's engine: its numerical notes and global index. */
bool qs_cuda_cg_cfg_ok(cudnnBackendDescriptor_t cfg, bool *nondet, int64_t *index) {
    cudnnBackendDescriptor_t eng = NULL;
    bool ok = false;
    *nondet = false;
    *index = -1;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS) return false;
    int64_t cnt = 0;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &eng) ==
        CUDNN_STATUS_SUCCESS) {
        cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT + 4];
        int64_t nn = 0;
        ok = true;
        if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                     (int64_t)(sizeof notes / sizeof notes[0]), &nn, notes) == CUDNN_STATUS_SUCCESS) {
            for (int64_t i = 0; i < nn && i < (int64_t)(sizeof notes / sizeof notes[0]); i++) {
                switch (notes[i]) {
                case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
                case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
                case CUDNN_NUMERICAL_NOTE_FFT:
                case CUDNN_NUMERICAL_NOTE_WINOGRAD:
                case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
                case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
                case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13: ok = false; break;
                case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: *nondet = true; break;
                default: break;
                }
            }
        }
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, index);
    }
    cudnnBackendDestroyDescriptor(eng);
    return ok;
}

/* The handle, the config, finalize, then its workspace size. */
cudnnStatus_t qs_cuda_cg_plan(cudnnBackendDescriptor_t plan, cudnnHandle_t h, cudnnBackendDescriptor_t cfg,
                              int64_t *ws, const char **call) {
    int64_t cnt = 0;
    *ws = 0;
    CG_TRY(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    CG_TRY(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                    &cfg));
    CG_TRY(cudnnBackendFinalize(plan));
    CG_TRY(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, ws));
    return CUDNN_STATUS_SUCCESS;
}

/* The unique ids, the data pointers, the workspace, then finalize. */
cudnnStatus_t qs_cuda_cg_variant_pack(cudnnBackendDescriptor_t vp, int64_t n, const int64_t *uids, void *const *ptrs,
                                      void *ws, const char **call) {
    CG_TRY(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
    CG_TRY(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs));
    CG_TRY(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    CG_TRY(cudnnBackendFinalize(vp));
    return CUDNN_STATUS_SUCCESS;
}
