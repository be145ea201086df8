/* src/cuda/cuda_graph.c — defines: capture of queued ops into CUDA graphs and their replay
 * (the capture_begin / capture_end / graph_launch / graph_destroy ops of core/backend_ops.def).
 *
 * Capture runs in cudaStreamCaptureModeThreadLocal: a call of this thread that is not allowed
 * while capturing (cudaMalloc, a synchronising copy, cudaStreamSynchronize) fails and invalidates
 * the capture, which capture_end then reports; other threads are not affected. Stream-ordered
 * scratch (cudaMallocAsync / cudaFreeAsync within an op) is recorded as graph memory nodes. */
#include <cuda_runtime_api.h>

#include "cuda/cuda_backend.h"

/* Start recording what is queued on s. */
qs_status qs_cuda_capture_begin(qs_backend *be, qs_stream *s) {
    cudaStream_t st = s ? s->s : qs_cuda_be(be)->stream.s;
    QS_CUDA_TRY(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    return QS_OK;
}

/* End the capture on s and instantiate it (uploaded to the device, so the first launch does
 * not pay for that); *graph = the executable graph, or NULL with an error naming why the
 * recorded work cannot be replayed. */
qs_status qs_cuda_capture_end(qs_backend *be, qs_stream *s, void **graph) {
    *graph = NULL;
    cudaStream_t st = s ? s->s : qs_cuda_be(be)->stream.s;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(st, &g);
    if (e != cudaSuccess || !g) {
        (void)cudaGetLastError(); /* the invalidated capture's error is reported here, once */
        return QS_FAIL(QS_ERR_BACKEND, "cudaStreamEndCapture failed: %s (%s): an op queued during the capture "
                       "is not capturable",
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiateWithFlags(&x, g, 0);
    (void)cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return QS_FAIL(QS_ERR_BACKEND, "cudaGraphInstantiateWithFlags failed: %s (%s)", cudaGetErrorName(e),
                       cudaGetErrorString(e));
    }
    e = cudaGraphUpload(x, st);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        (void)cudaGraphExecDestroy(x);
        return QS_FAIL(QS_ERR_BACKEND, "cudaGraphUpload failed: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    }
    *graph = (void *)x;
    return QS_OK;
}

/* Queue the captured work of `graph` on s. */
qs_status qs_cuda_graph_launch(qs_backend *be, qs_stream *s, void *graph) {
    if (!graph) return QS_FAIL(QS_ERR_INVALID_ARG, "graph_launch: NULL graph");
    cudaStream_t st = s ? s->s : qs_cuda_be(be)->stream.s;
    QS_CUDA_TRY(cudaGraphLaunch((cudaGraphExec_t)graph, st));
    return QS_OK;
}

/* Free a graph from capture_end (NULL is a no-op). Launches already queued still complete. */
void qs_cuda_graph_destroy(qs_backend *be, void *graph) {
    (void)be;
    if (graph) (void)cudaGraphExecDestroy((cudaGraphExec_t)graph);
}
