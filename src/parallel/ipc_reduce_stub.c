/* src/parallel/ipc_reduce_stub.c — the IPC all-reduce in a build without the CUDA backend: no
 * buffer can live on a GPU there, so opening one is a clear refusal (see ipc_reduce.h). */
#include "parallel/ipc_reduce.h"

#ifndef QS_HAVE_CUDA
qs_status qs_ipc_reduce_open(qs_backend *be, qs_comm *comm, void *buf, size_t bytes, int n_slots, double timeout_s,
                             qs_ipc_reduce **out) {
    (void)be, (void)comm, (void)buf, (void)bytes, (void)n_slots, (void)timeout_s;
    *out = NULL;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "the GPU all-reduce (CUDA IPC) is not in this build: it was configured without "
                   "the CUDA backend");
}
qs_status qs_ipc_reduce_start(qs_ipc_reduce *x, qs_stream *s, int k, size_t off, size_t bytes) {
    (void)x, (void)s, (void)k, (void)off, (void)bytes;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "no IPC all-reduce in this build");
}
qs_status qs_ipc_reduce_poll(qs_ipc_reduce *x) {
    (void)x;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "no IPC all-reduce in this build");
}
qs_status qs_ipc_reduce_finish(qs_ipc_reduce *x, qs_stream *s) {
    (void)x, (void)s;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "no IPC all-reduce in this build");
}
void qs_ipc_reduce_close(qs_ipc_reduce *x) { (void)x; }
#endif
