/* src/layers/layer_util.c — shared layer helpers. */
#include "layers/layer_util.h"

#include <stdio.h>
#include "qsync/rng.h"

qs_status qs_layer_declare_param(qs_model *m, qs_node *n, const char *suffix, int ndim, const int64_t *shape) {
    char name[QS_NAME_MAX + 32];
    snprintf(name, sizeof name, "%s.%s", n->name, suffix);
    if (n->n_params >= QS_MAX_NODE_PARAMS) return QS_FAIL(QS_ERR_INTERNAL, "too many parameters on %s", n->name);
    int idx;
    QS_TRY(qs_table_add(&m->params, name, QS_F32, ndim, shape, (int)(n - m->nodes), &idx));
    n->param[n->n_params++] = idx;
    n->param_count += qs_shape_numel(ndim, shape);
    return QS_OK;
}

qs_status qs_layer_declare_buffer(qs_model *m, qs_node *n, const char *suffix, qs_dtype dt, int ndim,
                                  const int64_t *shape) {
    char name[QS_NAME_MAX + 32];
    snprintf(name, sizeof name, "%s.%s", n->name, suffix);
    if (n->n_buffers >= QS_MAX_NODE_BUFFERS) return QS_FAIL(QS_ERR_INTERNAL, "too many buffers on %s", n->name);
    int idx;
    QS_TRY(qs_table_add(&m->buffers, name, dt, ndim, shape, (int)(n - m->nodes), &idx));
    n->buffer[n->n_buffers++] = idx;
    return QS_OK;
}

qs_status qs_layer_expect_ndim(qs_model *m, const qs_node *n, int ndim) {
    const qs_node *in = qs_layer_input(m, n, 0);
    if (in->out_ndim != ndim) {
        char buf[96];
        qs_shape_format(in->out_ndim, in->out_shape, buf, sizeof buf);
        return QS_FAIL(QS_ERR_MISMATCH, "expects a %d-d input (%s), but %s produces %s", ndim,
                       ndim == 4 ? "N,H,W,C" : "N,features", in->name, buf);
    }
    return QS_OK;
}

void qs_layer_init_uniform(float *p, int64_t count, float bound, uint64_t seed, uint64_t stream) {
    qs_rng r;
    qs_rng_init(&r, qs_rng_key(seed, "init", stream), 0);
    for (int64_t i = 0; i < count; i++) p[i] = (2.0f * qs_rng_uniform(&r) - 1.0f) * bound;
}

void qs_layer_init_const(float *p, int64_t count, float value) {
    for (int64_t i = 0; i < count; i++) p[i] = value;
}

float *qs_layer_host_param(qs_model *m, const qs_node *n, int k, float *host_params) {
    return (float *)((char *)host_params + m->params.entries[n->param[k]].offset);
}

int64_t qs_layer_out_numel_per_sample(const qs_node *n) {
    return qs_shape_numel(n->out_ndim - 1, n->out_shape + 1);
}

void qs_layer_set_out_nhwc(qs_node *n, int64_t h, int64_t w, int64_t c) {
    n->out_ndim = 4;
    n->out_shape[0] = 1;
    n->out_shape[1] = h;
    n->out_shape[2] = w;
    n->out_shape[3] = c;
}

void qs_layer_init_normal(float *p, int64_t count, float std, uint64_t seed, uint64_t stream) {
    qs_rng r;
    qs_rng_init(&r, qs_rng_key(seed, "init", stream), 0);
    for (int64_t i = 0; i < count; i++) p[i] = qs_rng_normal(&r) * std;
}

int64_t qs_layer_rows_per_sample(const qs_node *x) { return qs_layer_out_numel_per_sample(x) / qs_layer_last_dim(x); }

void qs_layer_same_shape(qs_node *n, const qs_node *from) {
    n->out_ndim = from->out_ndim;
    for (int i = 0; i < from->out_ndim; i++) n->out_shape[i] = from->out_shape[i];
    n->out_shape[0] = 1;
}
