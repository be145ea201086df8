/* src/models/builder.c — the sticky-status model builder behind every architecture. */
#include "models/builder.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Append one node named by fmt/ap with inputs x (and y when ≥ 0). Checks that every output
 * dimension is at least 1, which is how an input too small for the architecture shows up. */
static int mb_addv(qs_mbuild *b, qs_node_kind kind, const qs_node_cfg *cfg, int x, int y,
                   const char *fmt, va_list ap) {
    if (b->st != QS_OK) return -1;
    char name[QS_NAME_MAX];
    int len = vsnprintf(name, sizeof name, fmt, ap);
    if (len < 0 || len >= (int)sizeof name) {
        b->st = QS_FAIL(QS_ERR_INTERNAL, "model %s: node name '%s...' is longer than %d bytes",
                        b->m->arch, name, QS_NAME_MAX - 1);
        return -1;
    }
    int inputs[2] = {x, y};
    int idx = -1;
    qs_status st = qs_model_add(b->m, kind, name, inputs, y >= 0 ? 2 : 1, cfg, &idx);
    if (st != QS_OK) {
        b->st = qs_error_wrap(st, "model %s, input %lldx%lldx%lld: ", b->m->arch,
                              (long long)b->m->in_h, (long long)b->m->in_w, (long long)b->m->in_c);
        return -1;
    }
    const qs_node *n = &b->m->nodes[idx];
    for (int d = 0; d < n->out_ndim; d++) {
        if (n->out_shape[d] < 1) {
            b->st = QS_FAIL(QS_ERR_INVALID_ARG,
                            "model %s, input %lldx%lldx%lld: too small, node %s would have an "
                            "empty output; use a larger input or another model",
                            b->m->arch, (long long)b->m->in_h, (long long)b->m->in_w,
                            (long long)b->m->in_c, name);
            return -1;
        }
    }
    return idx;
}

/* Declares a helper's va_list over its trailing name arguments and appends the node. */
#define MB_ADD(b, kind, cfg, x, y, fmt)                                   \
    do {                                                                  \
        va_list ap_;                                                      \
        va_start(ap_, fmt);                                               \
        int idx_ = mb_addv((b), (kind), (cfg), (x), (y), (fmt), ap_);     \
        va_end(ap_);                                                      \
        return idx_;                                                      \
    } while (0)

int qs_mb_begin(qs_mbuild *b, const char *arch, const qs_model_options *o) {
    b->m = NULL;
    b->st = qs_model_create(arch, o->in_h, o->in_w, o->in_c, o->num_classes, &b->m);
    if (b->st != QS_OK) return -1;
    if (b->m->n_nodes > 0) return 0; /* qs_model_create already made the INPUT node */
    int idx = -1;
    b->st = qs_model_add(b->m, QS_NODE_INPUT, "input", NULL, 0, NULL, &idx);
    return b->st == QS_OK ? idx : -1;
}

qs_status qs_mb_finish(qs_mbuild *b, int logits) {
    if (b->st == QS_OK) {
        int idx = -1;
        b->st = qs_model_add(b->m, QS_NODE_SOFTMAX_XENT, "loss", &logits, 1, NULL, &idx);
        if (b->st == QS_OK) b->st = qs_model_finalize(b->m);
        if (b->st == QS_OK) {
            const qs_node *n = &b->m->nodes[logits];
            if (b->m->logits_node != logits || n->out_shape[n->out_ndim - 1] != b->m->num_classes)
                b->st = QS_FAIL(QS_ERR_INTERNAL,
                                "model %s: logits node %s is not (N, ..., %lld) or not the loss input",
                                b->m->arch, n->name, (long long)b->m->num_classes);
        }
    }
    if (b->st != QS_OK && b->m) {
        qs_model_free(b->m);
        b->m = NULL;
    }
    return b->st;
}

int qs_mb_linear(qs_mbuild *b, int x, int64_t out_features, const char *fmt, ...) {
    qs_node_cfg c = {.linear = {.out_features = out_features, .bias = true}};
    MB_ADD(b, QS_NODE_LINEAR, &c, x, -1, fmt);
}

int qs_mb_conv(qs_mbuild *b, int x, int64_t out_channels, int64_t k, int64_t s, int64_t p,
               bool bias, const char *fmt, ...) {
    qs_node_cfg c = {.conv = {.out_channels = out_channels, .kernel = k, .stride = s, .pad = p,
                              .bias = bias}};
    MB_ADD(b, QS_NODE_CONV2D, &c, x, -1, fmt);
}

int qs_mb_bn(qs_mbuild *b, int x, const char *fmt, ...) {
    qs_node_cfg c = {.bn = {.eps = 1e-5f, .momentum = 0.1f}};
    MB_ADD(b, QS_NODE_BATCHNORM2D, &c, x, -1, fmt);
}

int qs_mb_relu(qs_mbuild *b, int x, const char *fmt, ...) {
    MB_ADD(b, QS_NODE_RELU, NULL, x, -1, fmt);
}

int qs_mb_maxpool(qs_mbuild *b, int x, int64_t k, int64_t s, int64_t p, const char *fmt, ...) {
    qs_node_cfg c = {.pool = {.kernel = k, .stride = s, .pad = p, .global = false}};
    MB_ADD(b, QS_NODE_MAXPOOL2D, &c, x, -1, fmt);
}

int qs_mb_gap(qs_mbuild *b, int x, const char *fmt, ...) {
    qs_node_cfg c = {.pool = {.kernel = 0, .stride = 1, .pad = 0, .global = true}};
    MB_ADD(b, QS_NODE_AVGPOOL2D, &c, x, -1, fmt);
}

int qs_mb_flatten(qs_mbuild *b, int x, const char *fmt, ...) {
    if (b->st == QS_OK && b->m->nodes[x].out_ndim == 2) return x;
    MB_ADD(b, QS_NODE_FLATTEN, NULL, x, -1, fmt);
}

int qs_mb_dropout(qs_mbuild *b, int x, float p, const char *fmt, ...) {
    if (p == 0.0f) return b->st == QS_OK ? x : -1;
    qs_node_cfg c = {.dropout = {.p = p}};
    MB_ADD(b, QS_NODE_DROPOUT, &c, x, -1, fmt);
}

int qs_mb_add(qs_mbuild *b, int x, int y, const char *fmt, ...) {
    MB_ADD(b, QS_NODE_ADD, NULL, x, y, fmt);
}

int qs_mb_embedding(qs_mbuild *b, int x, int64_t rows, int64_t dim, const char *fmt, ...) {
    qs_node_cfg c = {.embed = {.rows = rows, .dim = dim}};
    MB_ADD(b, QS_NODE_EMBEDDING, &c, x, -1, fmt);
}

int qs_mb_pos_embedding(qs_mbuild *b, int x, int64_t positions, const char *fmt, ...) {
    qs_node_cfg c = {.embed = {.rows = positions, .dim = qs_mb_dim(b, x, 2)}};
    MB_ADD(b, QS_NODE_POS_EMBEDDING, &c, x, -1, fmt);
}

int qs_mb_layernorm(qs_mbuild *b, int x, float eps, const char *fmt, ...) {
    qs_node_cfg c = {.ln = {.eps = eps}};
    MB_ADD(b, QS_NODE_LAYERNORM, &c, x, -1, fmt);
}

int qs_mb_gelu(qs_mbuild *b, int x, const char *fmt, ...) {
    MB_ADD(b, QS_NODE_GELU, NULL, x, -1, fmt);
}

int qs_mb_tanh(qs_mbuild *b, int x, const char *fmt, ...) {
    MB_ADD(b, QS_NODE_TANH, NULL, x, -1, fmt);
}

int qs_mb_silu(qs_mbuild *b, int x, const char *fmt, ...) {
    MB_ADD(b, QS_NODE_SILU, NULL, x, -1, fmt);
}

int qs_mb_split_heads(qs_mbuild *b, int x, int64_t heads, int64_t part, int64_t parts, const char *fmt, ...) {
    qs_node_cfg c = {.heads = {.heads = heads, .part = part, .parts = parts}};
    MB_ADD(b, QS_NODE_SPLIT_HEADS, &c, x, -1, fmt);
}

int qs_mb_merge_heads(qs_mbuild *b, int x, const char *fmt, ...) {
    MB_ADD(b, QS_NODE_MERGE_HEADS, NULL, x, -1, fmt);
}

int qs_mb_matmul(qs_mbuild *b, int a, int bb, bool trans_b, float alpha, const char *fmt, ...) {
    qs_node_cfg c = {.matmul = {.trans_b = trans_b, .alpha = alpha}};
    MB_ADD(b, QS_NODE_MATMUL, &c, a, bb, fmt);
}

int qs_mb_softmax(qs_mbuild *b, int x, bool causal, int ids, float pad_id, const char *fmt, ...) {
    qs_node_cfg c = {.softmax = {.causal = causal, .pad_id = ids >= 0 ? pad_id : -1.0f}};
    MB_ADD(b, QS_NODE_SOFTMAX, &c, x, ids, fmt);
}

int qs_mb_select_token(qs_mbuild *b, int x, const char *fmt, ...) {
    MB_ADD(b, QS_NODE_SELECT_TOKEN, NULL, x, -1, fmt);
}

int qs_mb_linear_tied(qs_mbuild *b, int x, int64_t out_features, int param, const char *fmt, ...) {
    qs_node_cfg c = {.linear = {.out_features = out_features, .bias = false, .tied = true, .tie_param = param}};
    MB_ADD(b, QS_NODE_LINEAR, &c, x, -1, fmt);
}

int64_t qs_mb_dim(const qs_mbuild *b, int x, int axis) {
    if (b->st != QS_OK || axis >= b->m->nodes[x].out_ndim) return 0;
    return b->m->nodes[x].out_shape[axis];
}
