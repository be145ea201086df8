/* qsync/tensor.h — defines: qs_tensor, a non-owning view (dtype, int64 shape, data
 * pointer), and aligned host allocation. Activations are channels-last: an image batch is
 * (N, H, W, C). Ownership of the bytes lies with an arena, a node or the caller. */
#ifndef QSYNC_TENSOR_H
#define QSYNC_TENSOR_H

#include <stdint.h>
#include <stddef.h>
#include "qsync/dtype.h"
#include "qsync/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QS_MAX_DIMS 6
#define QS_HOST_ALIGN 64     /* every host tensor buffer starts on this boundary */
#define QS_DEVICE_ALIGN 256  /* every offset inside an arena is a multiple of this */

typedef struct qs_tensor {
    qs_dtype dtype;
    int ndim;
    int64_t shape[QS_MAX_DIMS];
    void *data;
} qs_tensor;

/* A view over data with the given shape. ndim must be 0..QS_MAX_DIMS. */
qs_tensor qs_tensor_view(void *data, qs_dtype dt, int ndim, const int64_t *shape);
int64_t qs_tensor_numel(const qs_tensor *t);
size_t qs_tensor_nbytes(const qs_tensor *t);
/* Product of shape[0..ndim). */
int64_t qs_shape_numel(int ndim, const int64_t *shape);
/* Writes "(2, 3, 4)" into buf (always NUL-terminated). */
void qs_shape_format(int ndim, const int64_t *shape, char *buf, size_t cap);

/* Zero-filled host memory aligned to QS_HOST_ALIGN, size rounded up to the alignment.
 * Returns NULL on failure (and records QS_ERR_OOM). Free with qs_host_free. */
void *qs_host_alloc(size_t bytes);
void qs_host_free(void *p);

#ifdef __cplusplus
}
#endif
#endif
