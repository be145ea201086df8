/* src/graph/graph.c — building the node DAG, setting it up for a batch (backend plans, then
 * its memory plan's arenas, graph/memory_plan.h), and driving forward and backward with every
 * op timed in its cost category. */
#include "graph/graph.h"
#include "graph/memory_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <time.h>

qs_status qs_model_create(const char *arch, int64_t in_h, int64_t in_w, int64_t in_c,
                          int64_t num_classes, qs_model **out) {
    if (in_h < 1 || in_w < 1 || in_c < 1 || num_classes < 2)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "model %s: input %lldx%lldx%lld with %lld classes is not a valid shape", arch,
                       (long long)in_h, (long long)in_w, (long long)in_c, (long long)num_classes);
    qs_model *m = calloc(1, sizeof *m);
    if (!m) return QS_FAIL(QS_ERR_OOM, "out of memory creating model");
    snprintf(m->arch, sizeof m->arch, "%s", arch);
    m->in_h = in_h;
    m->in_w = in_w;
    m->in_c = in_c;
    m->num_classes = num_classes;
    m->label_len = 1;
    m->logits_node = -1;
    qs_status st = qs_model_add(m, QS_NODE_INPUT, "input", NULL, 0, NULL, NULL);
    if (st != QS_OK) {
        qs_model_free(m);
        return st;
    }
    *out = m;
    return QS_OK;
}

qs_status qs_model_add(qs_model *m, qs_node_kind kind, const char *name, const int *inputs,
                       int n_inputs, const qs_node_cfg *cfg, int *idx_out) {
    if ((unsigned)kind >= QS_NODE_KIND_COUNT) return QS_FAIL(QS_ERR_INVALID_ARG, "unknown node kind %d", kind);
    if (n_inputs < 0 || n_inputs > QS_MAX_INPUTS)
        return QS_FAIL(QS_ERR_INVALID_ARG, "node %s: %d inputs (max %d)", name, n_inputs, QS_MAX_INPUTS);
    if ((kind == QS_NODE_INPUT) != (m->n_nodes == 0))
        return QS_FAIL(QS_ERR_INVALID_ARG, "node %s: the input node must be node 0 and only node 0", name);
    for (int i = 0; i < n_inputs; i++)
        if (inputs[i] < 0 || inputs[i] >= m->n_nodes)
            return QS_FAIL(QS_ERR_INVALID_ARG, "node %s: input %d refers to node %d, which does not exist yet",
                           name, i, inputs[i]);
    if (m->n_nodes == m->cap_nodes) {
        int cap = m->cap_nodes ? m->cap_nodes * 2 : 32;
        qs_node *nn = realloc(m->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return QS_FAIL(QS_ERR_OOM, "out of memory growing the model graph");
        m->nodes = nn;
        m->cap_nodes = cap;
    }
    int idx = m->n_nodes;
    qs_node *n = &m->nodes[idx];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    if (name && name[0]) {
        if (strlen(name) >= QS_NAME_MAX) return QS_FAIL(QS_ERR_INVALID_ARG, "node name too long: %s", name);
        strcpy(n->name, name);
    } else {
        snprintf(n->name, sizeof n->name, "%s_%d", qs_layer_impl_for(kind)->kind_name, idx);
    }
    for (int i = 0; i < n_inputs; i++) n->inputs[i] = inputs[i];
    n->n_inputs = n_inputs;
    if (cfg) n->cfg = *cfg;
    n->prec = QS_PREC_FP32;
    n->out_dtype = QS_F32;
    n->alias_of = -1;
    n->fused_into = -1;
    for (int i = 0; i < QS_MAX_NODE_PARAMS; i++) n->param[i] = -1;
    for (int i = 0; i < QS_MAX_NODE_BUFFERS; i++) n->buffer[i] = -1;
    n->tied_param = -1;
    qs_status st = qs_layer_impl_for(kind)->infer(m, n);
    if (st != QS_OK) return qs_error_wrap(st, "node %s (%s): ", n->name, qs_layer_impl_for(kind)->kind_name);
    for (int i = 0; i < n_inputs; i++) m->nodes[inputs[i]].n_consumers++;
    m->n_nodes++;
    if (idx_out) *idx_out = idx;
    return QS_OK;
}

qs_status qs_model_finalize(qs_model *m) {
    if (m->n_nodes < 2 || m->nodes[m->n_nodes - 1].kind != QS_NODE_SOFTMAX_XENT)
        return QS_FAIL(QS_ERR_INVALID_ARG, "model %s: the last node must be the softmax cross-entropy loss",
                       m->arch);
    qs_node *loss = &m->nodes[m->n_nodes - 1];
    m->logits_node = loss->inputs[0];
    const qs_node *lg = &m->nodes[m->logits_node];
    if (lg->out_shape[lg->out_ndim - 1] != m->num_classes)
        return QS_FAIL(QS_ERR_MISMATCH, "model %s: logits node %s has %lld outputs, expected %lld classes",
                       m->arch, lg->name, (long long)lg->out_shape[lg->out_ndim - 1],
                       (long long)m->num_classes);
    if (qs_shape_numel(lg->out_ndim - 1, lg->out_shape + 1) != m->label_len * m->num_classes)
        return QS_FAIL(QS_ERR_MISMATCH, "model %s: logits node %s gives %lld rows of %lld classes per sample, expected "
                       "one per label (%lld)", m->arch, lg->name,
                       (long long)(qs_shape_numel(lg->out_ndim - 1, lg->out_shape + 1) / m->num_classes),
                       (long long)m->num_classes, (long long)m->label_len);
    return QS_OK;
}

/* Release what depends on the batch size: the plans, the arenas (outputs, gradients, saved
 * tensors, workspace, labels) and the memory plan; parameters and buffers stay. */
static void qs_model_release_batch(qs_model *m) {
    qs_capture_release(m);
    for (int i = 0; i < m->n_nodes; i++) {
        qs_node *n = &m->nodes[i];
        const qs_layer_impl *impl = qs_layer_impl_for(n->kind);
        if (impl->teardown) impl->teardown(m, n);
        if (n->plan) m->be->ops->plan_destroy(m->be, n->plan);
        for (int k = 0; k < QS_MAX_NODE_SAVED; k++) {
            n->saved[k] = NULL;
            n->saved_bytes[k] = 0;
        }
        n->plan = NULL;
        n->y = n->dy = NULL;
        n->dy_alias = false;
        n->workspace = 0;
    }
    for (int a = 0; a < QS_MEM_ARENA_COUNT; a++) {
        m->be->ops->free(m->be, m->arena[a]);
        m->arena[a] = NULL;
    }
    if (m->mem) qs_memory_plan_free(m->mem);
    free(m->mem);
    m->mem = NULL;
    m->workspace = NULL;
    m->labels = NULL;
    m->predictions = NULL;
    m->workspace_bytes = 0;
}

void qs_model_free(qs_model *m) {
    if (!m) return;
    if (m->be) {
        qs_model_busy_free(m);
        qs_model_release_batch(m);
        m->be->ops->free(m->be, m->param_data);
        m->be->ops->free(m->be, m->grad_data);
        m->be->ops->free(m->be, m->buffer_data);
        m->be->ops->free(m->be, m->step_dev);
    }
    qs_table_free(&m->params);
    qs_table_free(&m->buffers);
    free(m->nodes);
    free(m);
}

static size_t qs_node_out_bytes(const qs_node *n) {
    return (size_t)qs_shape_numel(n->out_ndim, n->out_shape) * qs_dtype_size(n->out_dtype);
}

static qs_status qs_be_alloc(qs_model *m, size_t bytes, void **out) {
    *out = NULL;
    if (bytes == 0) return QS_OK;
    return m->be->ops->alloc(m->be, bytes, out);
}

/* Parameters and buffers are initialised on the host by each layer, then copied. */
static qs_status qs_model_init_params(qs_model *m, uint64_t seed) {
    float *hp = qs_host_alloc(m->params.bytes);
    void *hb = qs_host_alloc(m->buffers.bytes);
    if (!hp || !hb) {
        qs_host_free(hp);
        qs_host_free(hb);
        return QS_ERR_OOM;
    }
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_layer_impl *impl = qs_layer_impl_for(m->nodes[i].kind);
        if (impl->init) impl->init(m, &m->nodes[i], hp, hb, seed);
    }
    qs_status st = QS_OK;
    if (m->params.bytes) st = m->be->ops->copy_h2d(m->be, m->stream, m->param_data, hp, m->params.bytes);
    if (st == QS_OK && m->buffers.bytes)
        st = m->be->ops->copy_h2d(m->be, m->stream, m->buffer_data, hb, m->buffers.bytes);
    if (st == QS_OK) st = m->be->ops->stream_sync(m->be, m->stream);
    qs_host_free(hp);
    qs_host_free(hb);
    return st;
}

/* The address of planned buffer b (NULL for none: index -1). */
static void *qs_plan_ptr(const qs_model *m, int b) {
    if (b < 0) return NULL;
    const qs_mem_buffer *x = &m->mem->buf[b];
    return (char *)m->arena[x->arena] + x->offset;
}

/* Point every node's y, dy and saved tensors, the workspace and the labels into the arenas. */
static void qs_model_bind(qs_model *m) {
    const qs_memory_plan *p = m->mem;
    for (int i = 0; i < m->n_nodes; i++) {
        qs_node *n = &m->nodes[i];
        const qs_mem_node *pn = &p->node[i];
        n->y = qs_plan_ptr(m, pn->y);
        n->dy = qs_plan_ptr(m, pn->dy);
        n->dy_alias = pn->dy_shared;
        for (int k = 0; k < QS_MAX_NODE_SAVED; k++) {
            n->saved[k] = qs_plan_ptr(m, pn->saved[k]);
            n->saved_bytes[k] = pn->saved[k] >= 0 ? p->buf[pn->saved[k]].bytes : 0;
        }
    }
    for (int b = 0; b < p->n_buf; b++) {
        if (p->buf[b].role == QS_MEM_LABEL_IDS) m->labels = qs_plan_ptr(m, b);
        if (p->buf[b].role == QS_MEM_PREDICTIONS) m->predictions = qs_plan_ptr(m, b);
    }
    m->workspace = m->arena[QS_MEM_WORKSPACE];
    m->workspace_bytes = p->arena_bytes[QS_MEM_WORKSPACE];
}

/* Every running node's backend plans and workspace for the batch; the workspace sizes into ws. */
static qs_status qs_model_setup_plans(qs_model *m, size_t *ws) {
    for (int i = 0; i < m->n_nodes; i++) {
        qs_node *n = &m->nodes[i];
        const qs_layer_impl *impl = qs_layer_impl_for(n->kind);
        if (!qs_node_runs(n) || !impl->setup) continue;
        qs_status st = impl->setup(m, n);
        if (st != QS_OK) return qs_error_wrap(st, "setting up node %s: ", n->name);
        ws[i] = n->workspace;
    }
    return QS_OK;
}

/* Set up what depends on the batch size (see qs_model_release_batch) for `batch`: backend
 * plans, the memory plan, one allocation per arena, every pointer bound, then the layers'
 * initialisation of what they keep in their buffers. */
static qs_status qs_model_setup_batch(qs_model *m, int64_t batch) {
    m->batch = batch;
    for (int i = 0; i < m->n_nodes; i++) m->nodes[i].out_shape[0] = batch;
    size_t *ws = calloc((size_t)m->n_nodes, sizeof *ws);
    m->mem = calloc(1, sizeof *m->mem);
    qs_status st = ws && m->mem ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory setting up %s", m->arch);
    if (st == QS_OK) st = qs_model_setup_plans(m, ws);
    if (st == QS_OK) st = qs_model_memory_plan(m, batch, &m->facts, ws, m->mem);
    free(ws);
    for (int a = 0; a < QS_MEM_ARENA_COUNT && st == QS_OK; a++) {
        st = qs_be_alloc(m, m->mem->arena_bytes[a], &m->arena[a]);
        if (st != QS_OK)
            st = qs_error_wrap(st, "model %s at batch %lld: the %s arena (%zu bytes; a smaller batch needs less): ",
                               m->arch, (long long)batch, qs_mem_arena_name((qs_mem_arena)a), m->mem->arena_bytes[a]);
    }
    if (st != QS_OK) return st;
    qs_model_bind(m);
    for (int i = 0; i < m->n_nodes; i++) {
        qs_node *n = &m->nodes[i];
        const qs_layer_impl *impl = qs_layer_impl_for(n->kind);
        if (!qs_node_runs(n) || !impl->bind) continue;
        st = impl->bind(m, n);
        if (st != QS_OK) return qs_error_wrap(st, "setting up node %s: ", n->name);
    }
    return QS_OK;
}

static bool qs_be_attention_supported(void *ctx, const qs_attention_desc *d) {
    qs_backend *be = ctx;
    return be->ops->attention_supported(be, d);
}

qs_status qs_model_setup(qs_model *m, qs_backend *be, int64_t batch, uint64_t seed) {
    if (m->logits_node < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "model %s: qs_model_finalize was not called", m->arch);
    if (m->be) return QS_FAIL(QS_ERR_INVALID_ARG, "model %s: qs_model_setup called twice", m->arch);
    if (batch < 1) return QS_FAIL(QS_ERR_INVALID_ARG, "batch size must be ≥ 1 (got %lld)", (long long)batch);
    m->be = be;
    m->facts = qs_mem_facts_of(be);
    m->stream = be->ops->default_stream(be);
    m->seed = seed;
    qs_model_mark_grads(m);
    m->batch = batch;
    if (be->fused_attention && be->ops->attention_supported) qs_model_fuse_attention(m, qs_be_attention_supported, be);
    QS_TRY(qs_be_alloc(m, m->params.bytes, &m->param_data));
    QS_TRY(qs_be_alloc(m, m->params.bytes, &m->grad_data));
    QS_TRY(qs_be_alloc(m, m->buffers.bytes, &m->buffer_data));
    QS_TRY(qs_be_alloc(m, sizeof *m->step_dev, (void **)&m->step_dev));
    QS_TRY(qs_model_setup_batch(m, batch));
    return qs_model_init_params(m, seed);
}

qs_status qs_model_set_batch(qs_model *m, int64_t batch) {
    if (!m->be) return QS_FAIL(QS_ERR_INVALID_ARG, "model %s: qs_model_set_batch before qs_model_setup", m->arch);
    if (batch < 1) return QS_FAIL(QS_ERR_INVALID_ARG, "batch size must be ≥ 1 (got %lld)", (long long)batch);
    if (batch == m->batch) return QS_OK;
    QS_TRY(m->be->ops->stream_sync(m->be, m->stream));
    qs_model_release_batch(m);
    return qs_model_setup_batch(m, batch);
}

double qs_emulate_slowdown(qs_emulation *e, double op_ms) {
    e->op_ms += op_ms;
    e->debt_ms += (e->slowdown - 1) * op_ms;
    if (e->debt_ms < 1.0) return 0; /* sleep in slices of at least 1 ms: shorter sleeps overshoot */
    double t0 = qs_now_ms();
    struct timespec ts = {.tv_sec = (time_t)(e->debt_ms / 1e3), .tv_nsec = (long)(fmod(e->debt_ms, 1e3) * 1e6)};
    nanosleep(&ts, NULL);
    double slept = qs_now_ms() - t0;
    e->slept_ms += slept;
    e->debt_ms -= slept; /* an overshoot is paid back by the next ops */
    return slept;
}

double qs_emulation_measured(const qs_emulation *e) {
    if (e->cpu_threads > 0) return e->cpu_ms > 0 ? e->op_ms * e->cpu_threads / e->cpu_ms : 1;
    return e->slowdown > 1 && e->op_ms > 0 ? (e->op_ms + e->slept_ms) / e->op_ms : 1;
}

/* Run one op and add its duration to node->time[cat]. */
typedef qs_status (*qs_node_fn)(qs_model *, qs_node *);
static qs_status qs_timed(qs_model *m, qs_node *n, qs_node_fn fn, qs_cost_cat cat) {
    qs_emulation *e = &m->emulation;
    if (m->timing) QS_TRY(m->be->ops->stream_sync(m->be, m->stream));
    double c0 = e->cpu_threads > 0 ? qs_process_cpu_ms() : 0, t0 = qs_now_ms();
    if (m->busy.on) QS_TRY(qs_model_busy_mark(m));
    qs_status st = fn(m, n);
    if (st != QS_OK) return qs_error_wrap(st, "%s of node %s: ", qs_cost_cat_name(cat), n->name);
    if (m->busy.on) QS_TRY(qs_model_busy_mark(m));
    if (m->timing) QS_TRY(m->be->ops->stream_sync(m->be, m->stream));
    double dt = qs_now_ms() - t0;
    if (e->cpu_threads > 0) {
        e->op_ms += dt;
        e->cpu_ms += qs_process_cpu_ms() - c0;
    } else if (e->slowdown > 1) {
        dt += qs_emulate_slowdown(e, dt);
    }
    n->time[cat].total_ms += dt;
    n->time[cat].last_ms = dt;
    n->time[cat].calls++;
    return QS_OK;
}

/* The forward ops of every node after the input, in order. */
static qs_status qs_model_forward_ops(qs_model *m) {
    for (int i = 1; i < m->n_nodes; i++) {
        qs_node *n = &m->nodes[i];
        if (!qs_node_runs(n)) continue;
        qs_cost_cat cat = n->kind == QS_NODE_CAST ? QS_CAT_CAST : QS_CAT_FORWARD;
        QS_TRY(qs_timed(m, n, qs_layer_impl_for(n->kind)->forward, cat));
    }
    return QS_OK;
}

qs_status qs_model_forward(qs_model *m, const float *x_host, const int32_t *labels_host, bool training) {
    if (!m->be) return QS_FAIL(QS_ERR_INVALID_ARG, "model %s: forward before qs_model_setup", m->arch);
    const qs_backend_ops *ops = m->be->ops;
    QS_TRY(ops->copy_h2d(m->be, m->stream, m->nodes[0].y, x_host, qs_node_out_bytes(&m->nodes[0])));
    QS_TRY(ops->copy_h2d(m->be, m->stream, m->labels, labels_host, (size_t)(m->batch * m->label_len) * sizeof(int32_t)));
    m->training = training;
    if (!training) return qs_model_forward_ops(m);
    m->step++;
    QS_TRY(ops->copy_h2d(m->be, m->stream, m->step_dev, &m->step, sizeof m->step));
    return qs_capture_run(m, QS_PASS_FORWARD, qs_model_forward_ops);
}

/* The backward ops of every node that needs them, in reverse order, with the gradient hook
 * after each node. */
static qs_status qs_model_backward_ops(qs_model *m) {
    for (int i = 0; i < m->n_nodes; i++) m->nodes[i].grads_received = 0;
    for (int i = m->n_nodes - 1; i >= 1; i--) {
        qs_node *n = &m->nodes[i];
        if ((!n->needs_grad && n->kind != QS_NODE_SOFTMAX_XENT) || !qs_node_runs(n)) continue;
        const qs_layer_impl *impl = qs_layer_impl_for(n->kind);
        bool is_cast = n->kind == QS_NODE_CAST;
        if (impl->backward_weights && qs_node_has_weights(n))
            QS_TRY(qs_timed(m, n, impl->backward_weights, QS_CAT_BACKWARD_WEIGHTS));
        bool any_input_grad = false;
        for (int k = 0; k < n->n_inputs; k++) any_input_grad |= m->nodes[n->inputs[k]].needs_grad;
        /* a node without a separate weight pass (BatchNorm) computes its parameter
         * gradients in backward_data, which must then run even without input gradients */
        bool fused_weights = n->n_params > 0 && !impl->backward_weights;
        if (impl->backward_data && (any_input_grad || fused_weights || n->kind == QS_NODE_SOFTMAX_XENT))
            QS_TRY(qs_timed(m, n, impl->backward_data, is_cast ? QS_CAT_CAST : QS_CAT_BACKWARD_DATA));
        if (m->grads_ready) QS_TRY(m->grads_ready(m->grads_ctx, i));
    }
    return QS_OK;
}

qs_status qs_model_backward(qs_model *m, float loss_scale) {
    if (!m->be || !m->training)
        return QS_FAIL(QS_ERR_INVALID_ARG, "model %s: backward needs a preceding training forward", m->arch);
    m->loss_scale = loss_scale;
    QS_TRY(qs_capture_run(m, QS_PASS_BACKWARD, qs_model_backward_ops));
    if (m->grads_done) {
        double t0 = qs_now_ms();
        QS_TRY(m->grads_done(m->grads_ctx));
        m->comm_wait_time.last_ms = qs_now_ms() - t0;
        m->comm_wait_time.total_ms += m->comm_wait_time.last_ms;
        m->comm_wait_time.calls++;
    }
    return QS_OK;
}

qs_status qs_model_loss_accuracy(qs_model *m, int64_t valid, double *mean_loss, int64_t *correct) {
    if (valid < 0 || valid > m->batch) valid = m->batch;
    const int64_t rows = m->batch * m->label_len, valid_rows = valid * m->label_len;
    float *loss = qs_host_alloc((size_t)rows * sizeof(float));
    int32_t *pred = qs_host_alloc((size_t)rows * sizeof(int32_t)), *labels = qs_host_alloc((size_t)rows * sizeof(int32_t));
    qs_status st = (loss && pred && labels) ? QS_OK : QS_ERR_OOM;
    const qs_backend_ops *ops = m->be->ops;
    if (st == QS_OK)
        st = ops->argmax_rows(m->be, m->stream, rows, m->num_classes, m->nodes[m->logits_node].y, m->predictions);
    if (st == QS_OK) st = ops->copy_d2h(m->be, m->stream, loss, m->nodes[m->n_nodes - 1].y, (size_t)rows * sizeof(float));
    if (st == QS_OK) st = ops->copy_d2h(m->be, m->stream, pred, m->predictions, (size_t)rows * sizeof(int32_t));
    if (st == QS_OK) st = ops->copy_d2h(m->be, m->stream, labels, m->labels, (size_t)rows * sizeof(int32_t));
    if (st == QS_OK) st = ops->stream_sync(m->be, m->stream);
    if (st == QS_OK) {
        double sum = 0;
        int64_t ok = 0;
        for (int64_t b = 0; b < valid_rows; b++) {
            sum += loss[b];
            ok += pred[b] == labels[b];
        }
        if (mean_loss) *mean_loss = valid_rows ? sum / (double)valid_rows : 0.0;
        if (correct) *correct = ok;
    }
    qs_host_free(loss);
    qs_host_free(pred);
    qs_host_free(labels);
    return st;
}

qs_status qs_model_logits(qs_model *m, float *host_out) {
    const qs_node *lg = &m->nodes[m->logits_node];
    QS_TRY(m->be->ops->copy_d2h(m->be, m->stream, host_out, lg->y, qs_node_out_bytes(lg)));
    return m->be->ops->stream_sync(m->be, m->stream);
}

void qs_node_memory(const qs_model *m, const qs_node *n, size_t *out, size_t *grad, size_t *saved) {
    *out = *grad = *saved = 0;
    if (m->mem) qs_memory_plan_node(m->mem, (int)(n - m->nodes), out, grad, saved);
}

void qs_model_memory(const qs_model *m, qs_memory_report *r) {
    memset(r, 0, sizeof *r);
    r->params = m->params.bytes;
    r->grads = m->params.bytes;
    r->buffers = m->buffers.bytes + (m->be ? sizeof *m->step_dev : 0); /* and the device step counter */
    if (!m->mem) return;
    r->activations = m->mem->arena_bytes[QS_MEM_ACTIVATIONS];
    r->activation_grads = m->mem->arena_bytes[QS_MEM_ACTIVATION_GRADS];
    r->saved = m->mem->arena_bytes[QS_MEM_SAVED];
    r->workspace = m->mem->arena_bytes[QS_MEM_WORKSPACE];
    r->labels = m->mem->arena_bytes[QS_MEM_LABELS];
}

void qs_model_reset_times(qs_model *m) {
    for (int i = 0; i < m->n_nodes; i++) memset(m->nodes[i].time, 0, sizeof m->nodes[i].time);
    memset(&m->optimizer_time, 0, sizeof m->optimizer_time);
    memset(&m->comm_wait_time, 0, sizeof m->comm_wait_time);
}
