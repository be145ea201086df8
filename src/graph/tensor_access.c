/* src/graph/tensor_access.c — defines: host access to a set-up model's tensors and tables
 * (see tensor_access.h): the taps of one node read as FP32, the tables read and written,
 * snapshots, and the gradient table's scaling. */
#include "graph/tensor_access.h"

#include <string.h>

#include "core/numfmt.h"
#include "layers/registry.h"

static const char *const qs_tap_names[QS_TAP_COUNT] = {"x", "y", "dy", "w", "dw"};

const char *qs_tap_name(qs_tap t) { return (unsigned)t < QS_TAP_COUNT ? qs_tap_names[t] : NULL; }

/* Where one tap lives: backend address, stored dtype and element count. */
typedef struct qs_tap_src {
    const void *dev;
    qs_dtype dtype;
    int64_t numel;
} qs_tap_src;

/* The node holding n's buffers: n, or the end of its alias_of chain. */
static const qs_node *qs_tap_holder(const qs_model *m, const qs_node *n) {
    while (n->alias_of >= 0) n = &m->nodes[n->alias_of];
    return n;
}

/* The dtype of the gradient buffer n->dy points to (n->dy not NULL): a straight-through cast
 * sharing its input's gradient (dy_alias) has the input's; a plain cast's gradient arrives in
 * its output dtype; any other node's is its grad_dtype (as graph.c allocates them). */
static qs_dtype qs_tap_grad_dtype(const qs_model *m, const qs_node *n) {
    n = qs_tap_holder(m, n);
    while (n->dy_alias) n = qs_tap_holder(m, &m->nodes[n->inputs[0]]);
    if (n->kind == QS_NODE_CAST && !n->cfg.cast.straight_through) return n->out_dtype;
    return n->grad_dtype;
}

/* Y or DY of node i (what = QS_TAP_Y / QS_TAP_DY): its buffer, dtype and numel, or a refusal. */
static qs_status qs_tap_activation(const qs_model *m, int i, qs_tap what, qs_tap asked, int asker, qs_tap_src *src) {
    const qs_node *n = &m->nodes[i];
    const char *asker_name = m->nodes[asker].name;
    if (n->fused_into >= 0)
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "tensor access: %s of node %s: node %s is part of the fused attention that node %s runs and "
                       "has no buffers of its own; read the fused node's taps",
                       qs_tap_name(asked), asker_name, n->name, m->nodes[n->fused_into].name);
    const qs_node *h = qs_tap_holder(m, n);
    src->numel = qs_shape_numel(h->out_ndim, h->out_shape);
    if (what == QS_TAP_Y) {
        src->dev = n->y;
        src->dtype = h->out_dtype;
        return QS_OK;
    }
    if (!n->dy)
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "tensor access: dy of node %s: it has no gradient buffer (it needs no gradient, it is the "
                       "loss, or its gradient stays elsewhere: a reader's quantized copy, or the gradient of the "
                       "Add a BatchNorm reads)",
                       n->name);
    src->dev = n->dy;
    src->dtype = qs_tap_grad_dtype(m, n);
    return QS_OK;
}

/* Where tap t of node `node` lives, or why it cannot be read. */
static qs_status qs_tap_locate(const qs_model *m, int node, qs_tap t, qs_tap_src *src) {
    memset(src, 0, sizeof *src);
    if (!m || !m->be)
        return QS_FAIL(QS_ERR_INVALID_ARG, "tensor access: the model is not set up (call qs_model_setup first)");
    if (node < 0 || node >= m->n_nodes)
        return QS_FAIL(QS_ERR_INVALID_ARG, "tensor access: model %s has no node %d (it has %d)", m->arch, node,
                       m->n_nodes);
    const qs_node *n = &m->nodes[node];
    switch (t) {
    case QS_TAP_X:
        if (n->n_inputs < 1)
            return QS_FAIL(QS_ERR_UNSUPPORTED, "tensor access: x of node %s: it has no input (read its y)", n->name);
        return qs_tap_activation(m, n->inputs[0], QS_TAP_Y, t, node, src);
    case QS_TAP_Y:
    case QS_TAP_DY:
        return qs_tap_activation(m, node, t, t, node, src);
    case QS_TAP_W:
    case QS_TAP_DW: {
        if (!qs_node_has_weights(n))
            return QS_FAIL(QS_ERR_UNSUPPORTED,
                           "tensor access: %s of node %s (%s): it has no weight (a MatMul's operands are its "
                           "inputs' y)",
                           qs_tap_name(t), n->name, qs_layer_impl_for(n->kind)->kind_name);
        const int p = qs_node_weight_param(n);
        const qs_table_entry *e = &m->params.entries[p];
        src->dev = (const char *)(t == QS_TAP_W ? m->param_data : m->grad_data) + e->offset;
        src->dtype = e->dtype;
        src->numel = e->numel;
        return QS_OK;
    }
    default:
        return QS_FAIL(QS_ERR_INVALID_ARG, "tensor access: tap %d of node %s does not exist", (int)t, n->name);
    }
}

qs_status qs_model_tensor_numel(const qs_model *m, int node, qs_tap t, int64_t *numel) {
    qs_tap_src src;
    *numel = 0;
    QS_TRY(qs_tap_locate(m, node, t, &src));
    *numel = src.numel;
    return QS_OK;
}

/* Copy `bytes` of backend memory dev into host and wait for it. */
static qs_status qs_tap_copy_in(qs_model *m, void *host, const void *dev, size_t bytes) {
    if (bytes) QS_TRY(m->be->ops->copy_d2h(m->be, m->stream, host, dev, bytes));
    return m->be->ops->stream_sync(m->be, m->stream);
}

qs_status qs_model_read_tensor(qs_model *m, int node, qs_tap t, float *host, int64_t cap, int64_t *numel) {
    qs_tap_src src;
    *numel = 0;
    QS_TRY(qs_tap_locate(m, node, t, &src));
    const char *name = m->nodes[node].name;
    if (src.dtype != QS_F32 && src.dtype != QS_BF16 && src.dtype != QS_F16)
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "tensor access: %s of node %s is stored as %s: only f32, bf16 and f16 tensors read as FP32 "
                       "(a quantized one needs its scale)",
                       qs_tap_name(t), name, qs_dtype_name(src.dtype));
    if (cap < src.numel)
        return QS_FAIL(QS_ERR_INVALID_ARG, "tensor access: %s of node %s has %lld elements; the host buffer holds %lld",
                       qs_tap_name(t), name, (long long)src.numel, (long long)cap);
    if (src.dtype == QS_F32) QS_TRY(qs_tap_copy_in(m, host, src.dev, (size_t)src.numel * sizeof(float)));
    else {
        /* 16-bit values land in the upper half of host, then widen in place from the front */
        uint16_t *h16 = (uint16_t *)(host + src.numel) - src.numel;
        QS_TRY(qs_tap_copy_in(m, h16, src.dev, (size_t)src.numel * sizeof(uint16_t)));
        for (int64_t i = 0; i < src.numel; i++) {
            uint16_t b = h16[i];
            uint32_t u = src.dtype == QS_BF16 ? qs_nf_bf16_to_f32(b) : qs_nf_f16_to_f32(b);
            memcpy(&host[i], &u, sizeof u);
        }
    }
    *numel = src.numel;
    return QS_OK;
}

/* ------------------------------------------------------------------ tables */

/* Table t's layout and backend base address (NULL for a table of no bytes). */
static const qs_table *qs_tab(const qs_model *m, qs_model_table t, void **dev) {
    switch (t) {
    case QS_TABLE_PARAMS:
        *dev = m->param_data;
        return &m->params;
    case QS_TABLE_GRADS:
        *dev = m->grad_data;
        return &m->params;
    case QS_TABLE_BUFFERS:
        *dev = m->buffer_data;
        return &m->buffers;
    default:
        *dev = NULL;
        return NULL;
    }
}

/* Check m is set up and t exists; its layout and base into *tab and *dev. */
static qs_status qs_tab_get(const qs_model *m, qs_model_table t, const qs_table **tab, void **dev) {
    *tab = NULL;
    *dev = NULL;
    if (!m || !m->be)
        return QS_FAIL(QS_ERR_INVALID_ARG, "tensor access: the model is not set up (call qs_model_setup first)");
    *tab = qs_tab(m, t, dev);
    if (!*tab) return QS_FAIL(QS_ERR_INVALID_ARG, "tensor access: model %s has no table %d", m->arch, (int)t);
    return QS_OK;
}

const qs_table *qs_model_table_layout(const qs_model *m, qs_model_table t) {
    void *dev;
    return qs_tab(m, t, &dev);
}

qs_status qs_model_table_read(qs_model *m, qs_model_table t, void *host) {
    const qs_table *tab;
    void *dev;
    QS_TRY(qs_tab_get(m, t, &tab, &dev));
    return qs_tap_copy_in(m, host, dev, tab->bytes);
}

qs_status qs_model_table_download(qs_model *m, qs_model_table t, void **host) {
    *host = NULL;
    const qs_table *tab;
    void *dev;
    QS_TRY(qs_tab_get(m, t, &tab, &dev));
    void *h = qs_host_alloc(tab->bytes ? tab->bytes : 1);
    if (!h) return QS_FAIL(QS_ERR_OOM, "tensor access: out of memory for a host copy of %zu bytes of %s's tables",
                           tab->bytes, m->arch);
    qs_status st = qs_tap_copy_in(m, h, dev, tab->bytes);
    if (st != QS_OK) {
        qs_host_free(h);
        return st;
    }
    *host = h;
    return QS_OK;
}

/* Copy `bytes` of host into backend memory dev and wait for it. */
static qs_status qs_tap_copy_out(qs_model *m, void *dev, const void *host, size_t bytes) {
    if (bytes) QS_TRY(m->be->ops->copy_h2d(m->be, m->stream, dev, host, bytes));
    return m->be->ops->stream_sync(m->be, m->stream);
}

qs_status qs_model_table_write(qs_model *m, qs_model_table t, const void *host) {
    const qs_table *tab;
    void *dev;
    QS_TRY(qs_tab_get(m, t, &tab, &dev));
    return qs_tap_copy_out(m, dev, host, tab->bytes);
}

qs_status qs_model_table_write_entry(qs_model *m, qs_model_table t, int entry, const void *host) {
    const qs_table *tab;
    void *dev;
    QS_TRY(qs_tab_get(m, t, &tab, &dev));
    if (entry < 0 || entry >= tab->count)
        return QS_FAIL(QS_ERR_INVALID_ARG, "tensor access: table %d of model %s has no entry %d (it has %d)", (int)t,
                       m->arch, entry, tab->count);
    const qs_table_entry *e = &tab->entries[entry];
    return qs_tap_copy_out(m, (char *)dev + e->offset, host, (size_t)e->numel * qs_dtype_size(e->dtype));
}

qs_status qs_model_grads_scale(qs_model *m, float alpha) {
    const qs_table *tab;
    void *dev;
    QS_TRY(qs_tab_get(m, QS_TABLE_GRADS, &tab, &dev));
    QS_TRY(m->be->ops->scale(m->be, m->stream, (int64_t)(tab->bytes / sizeof(float)), dev, alpha));
    return m->be->ops->stream_sync(m->be, m->stream);
}

/* ------------------------------------------------------------------ snapshots */

qs_status qs_model_snapshot_take(qs_model *m, qs_model_snapshot *s) {
    memset(s, 0, sizeof *s);
    QS_TRY(qs_model_table_download(m, QS_TABLE_PARAMS, &s->params));
    QS_TRY(qs_model_table_download(m, QS_TABLE_BUFFERS, &s->buffers));
    s->param_bytes = m->params.bytes;
    s->buffer_bytes = m->buffers.bytes;
    return QS_OK;
}

qs_status qs_model_snapshot_restore(qs_model *m, const qs_model_snapshot *s) {
    if (m && (s->param_bytes != m->params.bytes || s->buffer_bytes != m->buffers.bytes))
        return QS_FAIL(QS_ERR_MISMATCH,
                       "tensor access: a snapshot of %zu parameter and %zu buffer bytes does not fit model %s (%zu "
                       "and %zu)",
                       s->param_bytes, s->buffer_bytes, m->arch, m->params.bytes, m->buffers.bytes);
    QS_TRY(qs_model_table_write(m, QS_TABLE_PARAMS, s->params));
    return qs_model_table_write(m, QS_TABLE_BUFFERS, s->buffers);
}

void qs_model_snapshot_free(qs_model_snapshot *s) {
    if (!s) return;
    qs_host_free(s->params);
    qs_host_free(s->buffers);
    memset(s, 0, sizeof *s);
}
