/* src/dag/table.c — parameter/buffer tables: names, PyTorch shapes and aligned offsets
 * into one contiguous allocation. */
#include "dag/dag.h"

#include <stdlib.h>
#include <string.h>

qs_status qs_table_add(qs_table *t, const char *name, qs_dtype dt, int ndim, const int64_t *shape,
                       int node, int *index_out) {
    if (ndim < 0 || ndim > 4) return QS_FAIL(QS_ERR_INVALID_ARG, "tensor %s: %d dims (max 4)", name, ndim);
    if (strlen(name) >= QS_NAME_MAX)
        return QS_FAIL(QS_ERR_INVALID_ARG, "tensor name too long (max %d): %s", QS_NAME_MAX - 1, name);
    if (qs_table_find(t, name) >= 0) return QS_FAIL(QS_ERR_INVALID_ARG, "duplicate tensor name %s", name);
    if (t->count == t->cap) {
        int cap = t->cap ? t->cap * 2 : 32;
        qs_table_entry *e = realloc(t->entries, (size_t)cap * sizeof *e);
        if (!e) return QS_FAIL(QS_ERR_OOM, "out of memory growing the tensor table");
        t->entries = e;
        t->cap = cap;
    }
    qs_table_entry *e = &t->entries[t->count];
    memset(e, 0, sizeof *e);
    strcpy(e->name, name);
    e->dtype = dt;
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
    e->numel = qs_shape_numel(ndim, shape);
    e->offset = (t->bytes + QS_DEVICE_ALIGN - 1) / QS_DEVICE_ALIGN * QS_DEVICE_ALIGN;
    e->node = node;
    t->bytes = e->offset + (size_t)e->numel * qs_dtype_size(dt);
    if (index_out) *index_out = t->count;
    t->count++;
    return QS_OK;
}

int qs_table_find(const qs_table *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (strcmp(t->entries[i].name, name) == 0) return i;
    return -1;
}

void qs_table_free(qs_table *t) {
    free(t->entries);
    memset(t, 0, sizeof *t);
}
