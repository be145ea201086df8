/* src/train/checkpoint_fp8.c — the FP8 amax histories of delayed scaling in checkpoints (see
 * checkpoint_util.h): one F32 vector per node that keeps histories, named
 * "fp8_amax_history.<node>", shape (histories, len + 1): the node's histories (saved[2], each
 * len + 1 floats at a 64-byte padded stride, layers/gemm_quant.h) without the padding, so a
 * checkpoint of another history length does not fit. A single-process run keeps them in state.safetensors; under
 * mpirun every rank's own (their X and dY differ) in its rank file. */
#include <stdio.h>
#include <string.h>

#include "layers/gemm_quant.h"
#include "train/checkpoint_util.h"

#define QS_FP8_HISTORY_PREFIX "fp8_amax_history."
#define QS_FP8_HISTORY_NAME_MAX (QS_NAME_MAX + 32)

/* The index of the node named name, or -1. */
static int node_named(const qs_model *m, const char *name) {
    for (int i = 0; i < m->n_nodes; i++)
        if (strcmp(m->nodes[i].name, name) == 0) return i;
    return -1;
}

/* Whether node n keeps amax histories (layers/gemm_quant.h, layers/reshape.c). */
static bool keeps_histories(const qs_model *m, const qs_node *n) {
    return m->fp8_amax_history > 0 && n->saved[2] && n->saved_bytes[2] > 0 &&
           (n->kind == QS_NODE_CAST ? n->out_dtype == QS_F8E4M3 || n->out_dtype == QS_F8E5M2
                                    : qs_precision_operand_dtype(n->prec, false) == QS_F8E4M3);
}

int qs_ckpt_fp8_history_count(const qs_model *m) {
    int c = 0;
    for (int i = 0; i < m->n_nodes; i++) c += keeps_histories(m, &m->nodes[i]);
    return c;
}

qs_status qs_ckpt_add_fp8_histories(qs_model *m, void **host, qs_st_tensor *out, int *n) {
    *host = NULL;
    const int count = qs_ckpt_fp8_history_count(m);
    if (count == 0) return QS_OK;
    const size_t stride = qs_fp8_history_bytes(m), one = (size_t)(m->fp8_amax_history + 1) * sizeof(float);
    size_t data = 0;
    for (int i = 0; i < m->n_nodes; i++)
        if (keeps_histories(m, &m->nodes[i])) data += m->nodes[i].saved_bytes[2] / stride * one;
    char *h = qs_host_alloc(data + (size_t)count * QS_FP8_HISTORY_NAME_MAX);
    if (!h) return QS_FAIL(QS_ERR_OOM, "out of memory copying the FP8 amax histories");
    char *names = h + data;
    size_t at = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *node = &m->nodes[i];
        if (!keeps_histories(m, node)) continue;
        const size_t k = node->saved_bytes[2] / stride;
        qs_st_tensor *s = &out[(*n)++];
        memset(s, 0, sizeof *s);
        snprintf(names, QS_FP8_HISTORY_NAME_MAX, QS_FP8_HISTORY_PREFIX "%s", node->name);
        s->name = names;
        s->dtype = QS_F32;
        s->ndim = 2;
        s->shape[0] = (int64_t)k;
        s->shape[1] = m->fp8_amax_history + 1;
        s->data = h + at;
        names += QS_FP8_HISTORY_NAME_MAX;
        for (size_t j = 0; j < k; j++, at += one) {
            qs_status st = m->be->ops->copy_d2h(m->be, m->stream, h + at, (char *)node->saved[2] + j * stride, one);
            if (st != QS_OK) {
                qs_host_free(h);
                return st;
            }
        }
    }
    qs_status st = m->be->ops->stream_sync(m->be, m->stream);
    if (st != QS_OK) qs_host_free(h);
    else *host = h;
    return st;
}

qs_status qs_ckpt_load_fp8_histories(qs_model *m, const qs_st_file *f) {
    const char *path = qs_safetensors_path(f);
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *node = &m->nodes[i];
        if (!keeps_histories(m, node)) continue;
        char name[QS_FP8_HISTORY_NAME_MAX];
        snprintf(name, sizeof name, QS_FP8_HISTORY_PREFIX "%s", node->name);
        qs_st_tensor s;
        const size_t stride = qs_fp8_history_bytes(m), one = (size_t)(m->fp8_amax_history + 1) * sizeof(float);
        const int64_t k = (int64_t)(node->saved_bytes[2] / stride);
        if (qs_safetensors_get(f, name, &s) != QS_OK || s.dtype != QS_F32 || s.ndim != 2 || s.shape[0] != k ||
            s.shape[1] != m->fp8_amax_history + 1)
            return QS_FAIL(QS_ERR_MISMATCH, "%s has no FP8 amax history of %d steps for %s: it was saved without "
                           "--fp8-scaling delayed:%d; resume with the FP8 scaling it was trained with",
                           path, m->fp8_amax_history, node->name, m->fp8_amax_history);
        for (int64_t j = 0; j < k; j++)
            QS_TRY(m->be->ops->copy_h2d(m->be, m->stream, (char *)node->saved[2] + (size_t)j * stride,
                                        (const char *)s.data + (size_t)j * one, one));
    }
    const size_t plen = strlen(QS_FP8_HISTORY_PREFIX);
    for (int k = 0; k < qs_safetensors_count(f); k++) { /* histories this run does not keep */
        const char *name = qs_safetensors_name_at(f, k);
        if (strncmp(name, QS_FP8_HISTORY_PREFIX, plen) != 0) continue;
        int node = node_named(m, name + plen);
        if (node < 0 || !keeps_histories(m, &m->nodes[node]))
            return QS_FAIL(QS_ERR_MISMATCH, "%s holds the FP8 amax history %s, which this run does not keep: it was "
                           "trained with --fp8-scaling delayed; resume with the same FP8 scaling", path, name);
    }
    return m->be->ops->stream_sync(m->be, m->stream);
}
