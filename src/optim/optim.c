/* src/optim/optim.c — SGD / AdamW over a parameter table through the backend's optimizer
 * ops, global-norm clipping, and the checkpoint copy of the optimizer state. */
#include "optim/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

qs_optim_config qs_optim_config_default(qs_optim_kind kind, float lr) {
    qs_optim_config c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.lr = lr;
    c.beta1 = 0.9;
    c.beta2 = 0.999;
    c.eps = 1e-8f;
    c.weight_decay = kind == QS_OPTIM_ADAMW ? 0.01f : 0.0f;
    return c;
}

qs_status qs_optim_kind_parse(const char *s, qs_optim_kind *out) {
    if (s && strcmp(s, "sgd") == 0) {
        *out = QS_OPTIM_SGD;
        return QS_OK;
    }
    if (s && strcmp(s, "adamw") == 0) {
        *out = QS_OPTIM_ADAMW;
        return QS_OK;
    }
    return QS_FAIL(QS_ERR_INVALID_ARG, "unknown optimizer '%s': choose sgd or adamw", s ? s : "(null)");
}

const char *qs_optim_kind_name(qs_optim_kind k) {
    switch (k) {
    case QS_OPTIM_SGD: return "sgd";
    case QS_OPTIM_ADAMW: return "adamw";
    }
    return "invalid";
}

/* PyTorch's constructor checks, as precise messages. */
static qs_status qs_optim_check_config(const qs_optim_config *c) {
    const char *k = qs_optim_kind_name(c->kind);
    if (c->kind != QS_OPTIM_SGD && c->kind != QS_OPTIM_ADAMW)
        return QS_FAIL(QS_ERR_INVALID_ARG, "optimizer: unknown kind %d; use QS_OPTIM_SGD or QS_OPTIM_ADAMW",
                       (int)c->kind);
    if (!(c->lr >= 0.0f) || !isfinite(c->lr))
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: invalid learning rate %g; it must be finite and >= 0", k,
                       (double)c->lr);
    if (!(c->weight_decay >= 0.0f) || !isfinite(c->weight_decay))
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: invalid weight_decay %g; it must be finite and >= 0", k,
                       (double)c->weight_decay);
    if (!(c->clip_norm >= 0.0f) || !isfinite(c->clip_norm))
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: invalid clip_norm %g; use 0 (off) or a positive norm", k,
                       (double)c->clip_norm);
    if (c->kind == QS_OPTIM_SGD) {
        if (!(c->momentum >= 0.0f) || !isfinite(c->momentum))
            return QS_FAIL(QS_ERR_INVALID_ARG, "sgd: invalid momentum %g; it must be >= 0", (double)c->momentum);
        if (!isfinite(c->dampening))
            return QS_FAIL(QS_ERR_INVALID_ARG, "sgd: invalid dampening %g", (double)c->dampening);
        if (c->nesterov && (c->momentum <= 0.0f || c->dampening != 0.0f))
            return QS_FAIL(QS_ERR_INVALID_ARG, "sgd: Nesterov momentum requires momentum > 0 and dampening = 0 "
                           "(got momentum %g, dampening %g)", (double)c->momentum, (double)c->dampening);
    } else {
        if (!(c->beta1 >= 0.0 && c->beta1 < 1.0) || !(c->beta2 >= 0.0 && c->beta2 < 1.0))
            return QS_FAIL(QS_ERR_INVALID_ARG, "adamw: invalid betas (%g, %g); each must be in [0, 1)",
                           (double)c->beta1, (double)c->beta2);
        if (!(c->eps >= 0.0f) || !isfinite(c->eps))
            return QS_FAIL(QS_ERR_INVALID_ARG, "adamw: invalid eps %g; it must be finite and >= 0", (double)c->eps);
    }
    return QS_OK;
}

void qs_optimizer_free(qs_optimizer *o, qs_backend *be) {
    for (int i = 0; i < 2; i++) {
        if (o->state[i]) be->ops->free(be, o->state[i]);
        o->state[i] = NULL;
    }
    o->n_state = 0;
}

int qs_optim_state_count(const qs_optim_config *cfg) {
    if (cfg->kind == QS_OPTIM_ADAMW) return 2;
    return cfg->momentum != 0.0f ? 1 : 0;
}

size_t qs_optim_state_bytes(const qs_optim_config *cfg, const qs_table *params) {
    return (size_t)qs_optim_state_count(cfg) * (params->bytes ? params->bytes : 1);
}

qs_status qs_optimizer_init(qs_optimizer *o, qs_backend *be, const qs_table *params,
                            const qs_optim_config *cfg) {
    memset(o, 0, sizeof *o);
    if (!be || !params || !cfg)
        return QS_FAIL(QS_ERR_INVALID_ARG, "qs_optimizer_init: backend, parameter table and config are required");
    QS_TRY(qs_optim_check_config(cfg));
    for (int i = 0; i < params->count; i++)
        if (params->entries[i].dtype != QS_F32)
            return QS_FAIL(QS_ERR_UNSUPPORTED, "%s: parameter '%s' is %s; optimizers update FP32 (master) "
                           "parameters only", qs_optim_kind_name(cfg->kind), params->entries[i].name,
                           qs_dtype_name(params->entries[i].dtype));
    o->cfg = *cfg;
    o->params = params;
    o->n_state = qs_optim_state_count(cfg);
    for (int i = 0; i < o->n_state; i++) {
        qs_status st = be->ops->alloc(be, qs_optim_state_bytes(cfg, params) / (size_t)o->n_state, &o->state[i]);
        if (st != QS_OK) {
            qs_optimizer_free(o, be);
            return qs_error_wrap(st, "%s: allocating optimizer state (%zu bytes): ",
                                 qs_optim_kind_name(cfg->kind), params->bytes);
        }
    }
    return QS_OK;
}

/* Pointer to entry e inside a buffer with the table's layout. */
static inline float *qs_entry_ptr(void *base, const qs_table_entry *e) {
    return (float *)((char *)base + e->offset);
}

qs_status qs_optimizer_grad_norm(const qs_optimizer *o, qs_backend *be, qs_stream *s,
                                 const void *grads, double *norm_out) {
    double total = 0.0;
    for (int i = 0; i < o->params->count; i++) {
        const qs_table_entry *e = &o->params->entries[i];
        double ss = 0.0;
        qs_status st = be->ops->sum_squares(be, s, e->numel, qs_entry_ptr((void *)grads, e), &ss);
        if (st != QS_OK) return qs_error_wrap(st, "gradient norm of '%s': ", e->name);
        total += ss;
    }
    *norm_out = sqrt(total);
    return QS_OK;
}

qs_status qs_optimizer_step(qs_optimizer *o, qs_backend *be, qs_stream *s, void *params,
                            void *grads, float lr, double *grad_norm_out) {
    const qs_optim_config *c = &o->cfg;
    const char *kind = qs_optim_kind_name(c->kind);
    if (!o->params) return QS_FAIL(QS_ERR_INVALID_ARG, "optimizer step: the optimizer is not initialised");
    if (!(lr >= 0.0f) || !isfinite(lr))
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s step %lld: invalid learning rate %g; it must be finite and >= 0",
                       kind, (long long)o->step + 1, (double)lr);
    const qs_table *t = o->params;

    if (c->clip_norm > 0.0f || grad_norm_out) {
        double norm = 0.0;
        QS_TRY(qs_optimizer_grad_norm(o, be, s, grads, &norm));
        if (grad_norm_out) *grad_norm_out = norm;
        if (c->clip_norm > 0.0f) {
            if (!isfinite(norm)) return QS_OK; /* skipped: see the header */
            /* torch.nn.utils.clip_grad_norm_: coef = max_norm / (total_norm + 1e-6), clamped to 1 */
            float coef = (float)((double)c->clip_norm / (norm + 1e-6));
            if (coef < 1.0f) {
                for (int i = 0; i < t->count; i++) {
                    const qs_table_entry *e = &t->entries[i];
                    qs_status st = be->ops->scale(be, s, e->numel, qs_entry_ptr(grads, e), coef);
                    if (st != QS_OK) return qs_error_wrap(st, "clipping the gradient of '%s': ", e->name);
                }
            }
        }
    }

    /* One op over the whole table: every parameter has the same hyperparameters and the update
     * is element-wise, so this is the per-parameter update of each, with one launch instead of
     * one per parameter; the alignment gaps between parameters are zero in the parameters,
     * their gradients and the state (zeroed allocations that only per-parameter ops write) and
     * stay zero. */
    const int64_t step = o->step + 1, n = (int64_t)(t->bytes / sizeof(float));
    qs_status st;
    if (c->kind == QS_OPTIM_SGD)
        st = be->ops->sgd_step(be, s, n, params, grads, o->n_state ? o->state[0] : NULL, lr, c->momentum,
                               c->dampening, c->weight_decay, c->nesterov, o->step == 0);
    else
        st = be->ops->adamw_step(be, s, n, params, grads, o->state[0], o->state[1], lr, c->beta1, c->beta2, c->eps,
                                 c->weight_decay, step);
    if (st != QS_OK) return qs_error_wrap(st, "%s step %lld over %d parameters: ", kind, (long long)step, t->count);
    o->step = step;
    return QS_OK;
}

const char *qs_optimizer_state_suffix(const qs_optimizer *o, int slot) {
    if (slot < 0 || slot >= o->n_state) return NULL;
    if (o->cfg.kind == QS_OPTIM_SGD) return "momentum_buffer";
    return slot == 0 ? "exp_avg" : "exp_avg_sq";
}

void qs_optim_state_free(qs_optim_state *st) {
    free(st->names);
    free(st->tensors);
    qs_host_free(st->data);
    memset(st, 0, sizeof *st);
}

/* "<param>.<suffix>" for state tensor (slot, entry i). */
static void qs_state_name(const qs_optimizer *o, int slot, int i, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", o->params->entries[i].name, qs_optimizer_state_suffix(o, slot));
}

qs_status qs_optimizer_state_save(const qs_optimizer *o, qs_backend *be, qs_stream *s,
                                  qs_optim_state *out) {
    memset(out, 0, sizeof *out);
    const qs_table *t = o->params;
    const int count = o->n_state * t->count;
    out->step = o->step;
    out->count = count;
    out->names = calloc((size_t)count + 1, sizeof *out->names);
    out->tensors = calloc((size_t)count + 1, sizeof *out->tensors);
    out->data = qs_host_alloc((size_t)o->n_state * t->bytes);
    if (!out->names || !out->tensors || !out->data) {
        qs_optim_state_free(out);
        return QS_FAIL(QS_ERR_OOM, "saving optimizer state: out of memory for %d tensors", count);
    }
    for (int slot = 0; slot < o->n_state; slot++) {
        char *host = (char *)out->data + (size_t)slot * t->bytes;
        qs_status st = be->ops->copy_d2h(be, s, host, o->state[slot], t->bytes);
        if (st != QS_OK) {
            qs_optim_state_free(out);
            return qs_error_wrap(st, "saving optimizer state: ");
        }
        for (int i = 0; i < t->count; i++) {
            const qs_table_entry *e = &t->entries[i];
            int k = slot * t->count + i;
            qs_state_name(o, slot, i, out->names[k], sizeof out->names[k]);
            out->tensors[k] = qs_tensor_view(host + e->offset, QS_F32, e->ndim, e->shape);
        }
    }
    qs_status st = be->ops->stream_sync(be, s);
    if (st != QS_OK) {
        qs_optim_state_free(out);
        return qs_error_wrap(st, "saving optimizer state: ");
    }
    return QS_OK;
}

/* Look up and validate state tensor (slot, i) without copying it. */
static qs_status qs_state_fetch(const qs_optimizer *o, int slot, int i, qs_tensor_lookup_fn get,
                                void *ctx, qs_tensor *out) {
    const qs_table_entry *e = &o->params->entries[i];
    char name[QS_OPTIM_NAME_MAX];
    qs_state_name(o, slot, i, name, sizeof name);
    qs_status st = get(ctx, name, out);
    if (st != QS_OK)
        return qs_error_wrap(st, "loading %s optimizer state '%s': ", qs_optim_kind_name(o->cfg.kind), name);
    bool same = out->dtype == QS_F32 && out->ndim == e->ndim;
    for (int d = 0; same && d < e->ndim; d++) same = out->shape[d] == e->shape[d];
    if (!same) {
        char want[96], got[96];
        qs_shape_format(e->ndim, e->shape, want, sizeof want);
        qs_shape_format(out->ndim, out->shape, got, sizeof got);
        return QS_FAIL(QS_ERR_MISMATCH, "loading optimizer state '%s': expected f32 %s (the shape of parameter "
                       "'%s') but the checkpoint has %s %s; the checkpoint is from another model",
                       name, want, e->name, qs_dtype_name(out->dtype), got);
    }
    return QS_OK;
}

qs_status qs_optimizer_state_load(qs_optimizer *o, qs_backend *be, qs_stream *s, int64_t step,
                                  qs_tensor_lookup_fn get, void *ctx) {
    if (step < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "loading optimizer state: step %lld is negative", (long long)step);
    const qs_table *t = o->params;
    qs_tensor src;
    for (int slot = 0; slot < o->n_state; slot++)
        for (int i = 0; i < t->count; i++) QS_TRY(qs_state_fetch(o, slot, i, get, ctx, &src));
    for (int slot = 0; slot < o->n_state; slot++) {
        for (int i = 0; i < t->count; i++) {
            const qs_table_entry *e = &t->entries[i];
            QS_TRY(qs_state_fetch(o, slot, i, get, ctx, &src));
            qs_status st = be->ops->copy_h2d(be, s, (char *)o->state[slot] + e->offset, src.data,
                                             (size_t)e->numel * sizeof(float));
            if (st != QS_OK) return qs_error_wrap(st, "loading optimizer state of '%s': ", e->name);
        }
    }
    QS_TRY(be->ops->stream_sync(be, s));
    o->step = step;
    return QS_OK;
}
