/* src/cuda/cuda_ipc.c — defines: the device primitives of the GPU transports (cuda_ipc.h):
 * UUID, streams, events and IPC handles over the CUDA runtime. */
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_ipc.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) == QS_CUDA_IPC_HANDLE_BYTES, "IPC memory handle size");
_Static_assert(sizeof(cudaIpcEventHandle_t) == QS_CUDA_IPC_HANDLE_BYTES, "IPC event handle size");

static cudaEvent_t ev(qs_cuda_event *e) { return (cudaEvent_t)e; }

qs_status qs_cuda_ipc_device_uuid(qs_backend *be, unsigned char uuid[16]) {
    memcpy(uuid, qs_cuda_be(be)->props.uuid.bytes, 16);
    return QS_OK;
}

qs_status qs_cuda_ipc_stream_create(qs_backend *be, qs_stream **out) {
    *out = NULL;
    QS_TRY(qs_cuda_make_current(qs_cuda_be(be)));
    qs_stream *s = calloc(1, sizeof *s);
    if (!s) return QS_FAIL(QS_ERR_OOM, "out of memory for a stream");
    const cudaError_t err = cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
        free(s);
        QS_CUDA_TRY(err);
    }
    *out = s;
    return QS_OK;
}

void qs_cuda_ipc_stream_destroy(qs_stream *s) {
    if (!s) return;
    (void)cudaStreamSynchronize(s->s);
    (void)cudaStreamDestroy(s->s);
    free(s);
}

qs_status qs_cuda_ipc_event_create(qs_backend *be, bool interprocess, qs_cuda_event **out) {
    *out = NULL;
    QS_TRY(qs_cuda_make_current(qs_cuda_be(be)));
    cudaEvent_t e = NULL;
    QS_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | (interprocess ? cudaEventInterprocess : 0)));
    *out = (qs_cuda_event *)e;
    return QS_OK;
}

void qs_cuda_ipc_event_destroy(qs_cuda_event *e) {
    if (e) (void)cudaEventDestroy(ev(e));
}

qs_status qs_cuda_ipc_event_record(qs_cuda_event *e, qs_stream *s) {
    QS_CUDA_TRY(cudaEventRecord(ev(e), s->s));
    return QS_OK;
}

qs_status qs_cuda_ipc_stream_wait(qs_stream *s, qs_cuda_event *e) {
    QS_CUDA_TRY(cudaStreamWaitEvent(s->s, ev(e), 0));
    return QS_OK;
}

qs_status qs_cuda_ipc_event_query(qs_cuda_event *e, bool *done) {
    const cudaError_t q = cudaEventQuery(ev(e));
    *done = q == cudaSuccess;
    if (q != cudaSuccess && q != cudaErrorNotReady) QS_CUDA_TRY(q);
    return QS_OK;
}

qs_status qs_cuda_ipc_event_handle(qs_cuda_event *e, qs_cuda_ipc_handle *out) {
    cudaIpcEventHandle_t h;
    QS_CUDA_TRY(cudaIpcGetEventHandle(&h, ev(e)));
    memcpy(out->bytes, &h, sizeof h);
    return QS_OK;
}

qs_status qs_cuda_ipc_event_open(const qs_cuda_ipc_handle *h, qs_cuda_event **out) {
    *out = NULL;
    cudaIpcEventHandle_t ch;
    memcpy(&ch, h->bytes, sizeof ch);
    cudaEvent_t e = NULL;
    QS_CUDA_TRY(cudaIpcOpenEventHandle(&e, ch));
    *out = (qs_cuda_event *)e;
    return QS_OK;
}

qs_status qs_cuda_ipc_mem_handle(void *base, qs_cuda_ipc_handle *out) {
    cudaIpcMemHandle_t h;
    QS_CUDA_TRY(cudaIpcGetMemHandle(&h, base));
    memcpy(out->bytes, &h, sizeof h);
    return QS_OK;
}

qs_status qs_cuda_ipc_mem_open(const qs_cuda_ipc_handle *h, void **out) {
    *out = NULL;
    cudaIpcMemHandle_t ch;
    memcpy(&ch, h->bytes, sizeof ch);
    QS_CUDA_TRY(cudaIpcOpenMemHandle(out, ch, cudaIpcMemLazyEnablePeerAccess));
    return QS_OK;
}

void qs_cuda_ipc_mem_close(void *mapped) {
    if (mapped) (void)cudaIpcCloseMemHandle(mapped);
}
