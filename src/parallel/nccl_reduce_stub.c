/* src/parallel/nccl_reduce_stub.c — the GPU layout and the NCCL all-reduce in a build without the
 * CUDA backend: no buffer can live on a GPU there (see nccl_reduce.h). */
#include "parallel/nccl_reduce.h"

#ifndef QS_HAVE_CUDA
qs_status qs_gpu_layout_of(qs_backend *be, qs_comm *comm, double timeout_s, qs_gpu_layout *out, int *n_gpus) {
    (void)be, (void)comm, (void)timeout_s, (void)out, (void)n_gpus;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "no GPU in this build: it was configured without the CUDA backend");
}
qs_status qs_nccl_reduce_open(qs_backend *be, qs_comm *comm, void *buf, size_t bytes, double timeout_s,
                              qs_nccl_reduce **out) {
    (void)be, (void)comm, (void)buf, (void)bytes, (void)timeout_s;
    *out = NULL;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "the NCCL all-reduce is not in this build: it was configured without the "
                   "CUDA backend");
}
qs_status qs_nccl_reduce_start(qs_nccl_reduce *x, qs_stream *s, size_t off, size_t bytes) {
    (void)x, (void)s, (void)off, (void)bytes;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "no NCCL all-reduce in this build");
}
qs_status qs_nccl_reduce_poll(qs_nccl_reduce *x) {
    (void)x;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "no NCCL all-reduce in this build");
}
qs_status qs_nccl_reduce_finish(qs_nccl_reduce *x, qs_stream *s) {
    (void)x, (void)s;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "no NCCL all-reduce in this build");
}
void qs_nccl_reduce_close(qs_nccl_reduce *x) { (void)x; }
#endif
