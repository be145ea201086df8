/* src/cuda/cuda_nccl.h — defines: NCCL's entry points as the nccl transport of the
 * communication interface (src/parallel/coll_nccl.c) calls them, in plain C types. NCCL is
 * loaded on first use (dlopen of libnccl.so.2), so that qsync runs where it is absent as long as
 * no job spans GPUs. Nothing here knows of ranks' agreement or timeouts: each call enqueues one
 * NCCL operation on stream s (or, between group_start and group_end, adds it to one group). */
#ifndef QSYNC_CUDA_CUDA_NCCL_H
#define QSYNC_CUDA_CUDA_NCCL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/backend.h"
#include "qsync/dtype.h"
#include "qsync/status.h"

#define QS_CUDA_NCCL_ID_BYTES 128 /* ncclUniqueId */

typedef struct qs_cuda_nccl qs_cuda_nccl; /* a ncclComm_t */

/* Load libnccl.so.2 and its entry points once. QS_ERR_UNSUPPORTED when it or a symbol is
 * missing (NCCL 2.7 or later is needed). */
qs_status qs_cuda_nccl_load(void);
/* A new unique id (what rank 0 makes and every rank joins with). */
qs_status qs_cuda_nccl_unique_id(unsigned char id[QS_CUDA_NCCL_ID_BYTES]);
/* Join the communicator of `world` ranks named by id as `rank` (blocks until every rank has
 * joined), on backend be's device. NVLink SHARP multicast stays off (NCCL_NVLS_ENABLE=0 is set
 * first), as the lent multi-GPU machines require. */
qs_status qs_cuda_nccl_init(qs_backend *be, int world, int rank, const unsigned char id[QS_CUDA_NCCL_ID_BYTES],
                            qs_cuda_nccl **out);
/* Whether NCCL has a type for dt (any dtype moves; sums: f32, bf16, f16, s32, i64). */
bool qs_cuda_nccl_has_dtype(qs_dtype dt, bool sum);

/* Sums (ncclSum) and moves of counts in elements of dt, as NCCL defines them. */
qs_status qs_cuda_nccl_all_reduce(qs_cuda_nccl *nc, const void *send, void *recv, size_t count, qs_dtype dt,
                                  qs_stream *s);
qs_status qs_cuda_nccl_reduce_scatter(qs_cuda_nccl *nc, const void *send, void *recv, size_t recv_count, qs_dtype dt,
                                      qs_stream *s);
qs_status qs_cuda_nccl_reduce(qs_cuda_nccl *nc, const void *send, void *recv, size_t count, qs_dtype dt, int root,
                              qs_stream *s);
qs_status qs_cuda_nccl_all_gather(qs_cuda_nccl *nc, const void *send, void *recv, size_t send_count, qs_dtype dt,
                                  qs_stream *s);
qs_status qs_cuda_nccl_broadcast(qs_cuda_nccl *nc, const void *send, void *recv, size_t count, qs_dtype dt, int root,
                                 qs_stream *s);
qs_status qs_cuda_nccl_send(qs_cuda_nccl *nc, const void *buf, size_t count, qs_dtype dt, int peer, qs_stream *s);
qs_status qs_cuda_nccl_recv(qs_cuda_nccl *nc, void *buf, size_t count, qs_dtype dt, int peer, qs_stream *s);
qs_status qs_cuda_nccl_group_start(void);
qs_status qs_cuda_nccl_group_end(void);

/* NCCL's asynchronous error state, without blocking (QS_ERR_BACKEND on an error). */
qs_status qs_cuda_nccl_async_error(qs_cuda_nccl *nc);
/* Abort (operations in flight are abandoned) or destroy the communicator; safe on NULL. */
void qs_cuda_nccl_abort(qs_cuda_nccl *nc);
void qs_cuda_nccl_destroy(qs_cuda_nccl *nc);

#endif
