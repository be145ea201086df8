/* src/core/tensor.c — tensor views and aligned host allocation. */
#include "qsync/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

qs_tensor qs_tensor_view(void *data, qs_dtype dt, int ndim, const int64_t *shape) {
    qs_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = ndim < 0 ? 0 : (ndim > QS_MAX_DIMS ? QS_MAX_DIMS : ndim);
    for (int i = 0; i < t.ndim; i++) t.shape[i] = shape[i];
    t.data = data;
    return t;
}

int64_t qs_shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

int64_t qs_tensor_numel(const qs_tensor *t) { return qs_shape_numel(t->ndim, t->shape); }

size_t qs_tensor_nbytes(const qs_tensor *t) { return (size_t)qs_tensor_numel(t) * qs_dtype_size(t->dtype); }

void qs_shape_format(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t used = 0;
    if (cap == 0) return;
    buf[0] = '\0';
    used += (size_t)snprintf(buf + used, cap - used, "(");
    for (int i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (used < cap) snprintf(buf + used, cap - used, ")");
}

void *qs_host_alloc(size_t bytes) {
    size_t rounded = (bytes + QS_HOST_ALIGN - 1) / QS_HOST_ALIGN * QS_HOST_ALIGN;
    if (rounded == 0) rounded = QS_HOST_ALIGN;
    void *p = aligned_alloc(QS_HOST_ALIGN, rounded);
    if (!p) {
        QS_FAIL(QS_ERR_OOM, "out of memory allocating %zu bytes on the host", bytes);
        return NULL;
    }
    memset(p, 0, rounded);
    return p;
}

void qs_host_free(void *p) { free(p); }
