/* src/io/profile_file.c — defines: the profile reader and its look-ups (profile_file.h). */
#include "io/profile_file.h"

#include <stdlib.h>
#include <string.h>

#include "core/json_doc.h"
#include "io/json_fields.h"

#define QS_PROFILE_MAX_BYTES ((size_t)256 << 20)
#define QS_PF_N(t) ((int)(sizeof t / sizeof t[0]))

/* ---- the field tables (docs/PROFILE.md) ---- */

static const qs_jf_field qs_pf_op_fields[] = {
    QS_JF_STR(qs_profile_op, name, true),
    QS_JF_STR(qs_profile_op, kind, true),
    QS_JF_NESTED("inputs", QS_JF_ARRAY, true),
    QS_JF_STR(qs_profile_op, fused_into, false),
    QS_JF_F(qs_profile_op, precision, QS_JF_PRECISION, true, 0, 0),
    QS_JF_F(qs_profile_op, out_dtype, QS_JF_DTYPE, true, 0, 0),
    QS_JF_COUNT(qs_profile_op, out_elements, true),
    QS_JF_COUNT(qs_profile_op, out_bytes, true),
    QS_JF_COUNT(qs_profile_op, grad_bytes, true),
    QS_JF_COUNT(qs_profile_op, saved_bytes, true),
    QS_JF_COUNT(qs_profile_op, workspace_bytes, true),
    QS_JF_COUNT(qs_profile_op, param_count, true),
    QS_JF_MS(qs_profile_op, forward_ms, true),
    QS_JF_MS(qs_profile_op, backward_data_ms, true),
    QS_JF_MS(qs_profile_op, backward_weights_ms, true),
    QS_JF_MS(qs_profile_op, cast_ms, true),
};

static const qs_jf_field qs_pf_sync_fields[] = {
    QS_JF_F(qs_profile_sync, ranks, QS_JF_WHOLE, true, 1, QS_JF_WHOLE_MAX),
    QS_JF_COUNT(qs_profile_sync, bucket_bytes, true),
    QS_JF_COUNT(qs_profile_sync, buckets, true),
    QS_JF_MS(qs_profile_sync, overlap_ms, true),
    QS_JF_MS(qs_profile_sync, no_overlap_ms, true),
    QS_JF_MS(qs_profile_sync, overlap_step_ms, false),
    QS_JF_MS(qs_profile_sync, no_overlap_step_ms, false),
};

static const qs_jf_field qs_pf_memory_fields[] = {
    QS_JF_COUNT(qs_profile_memory, params, true),         QS_JF_COUNT(qs_profile_memory, grads, true),
    QS_JF_COUNT(qs_profile_memory, optimizer, true),      QS_JF_COUNT(qs_profile_memory, buffers, true),
    QS_JF_COUNT(qs_profile_memory, activations, true),    QS_JF_COUNT(qs_profile_memory, activation_grads, true),
    QS_JF_COUNT(qs_profile_memory, saved, true),          QS_JF_COUNT(qs_profile_memory, workspace, true),
    QS_JF_COUNT(qs_profile_memory, labels, true),         QS_JF_COUNT(qs_profile_memory, backend_in_use, true),
    QS_JF_COUNT(qs_profile_memory, backend_peak, true),
};

static const qs_jf_field qs_pf_facts_fields[] = {
    QS_JF_F(qs_mem_facts, fp8_wants_transposed, QS_JF_BOOL, true, 0, 0),
    QS_JF_F(qs_mem_facts, pointwise_conv_as_linear, QS_JF_BOOL, true, 0, 0),
    QS_JF_F(qs_mem_facts, fused_attention, QS_JF_BOOL, true, 0, 0),
};

static const qs_jf_field qs_pf_run_fields[] = {
    QS_JF_F(qs_profile_prec_run, precision, QS_JF_PRECISION, true, 0, 0),
    QS_JF_NESTED("support", QS_JF_ANY, true),
    QS_JF_NESTED("step_samples_ms", QS_JF_ARRAY, false),
    QS_JF_MS(qs_profile_prec_run, step_ms, true),
    QS_JF_MS(qs_profile_prec_run, optimizer_ms, true),
    QS_JF_MS(qs_profile_prec_run, grad_average_ms, false),
    QS_JF_NESTED("grad_sync", QS_JF_OBJECT, false),
    QS_JF_NESTED("memory_bytes", QS_JF_OBJECT, true),
    QS_JF_NESTED("memory_facts", QS_JF_OBJECT, false),
    QS_JF_NESTED("ops", QS_JF_ARRAY, true),
};

static const qs_jf_field qs_pf_cast_fields[] = {
    QS_JF_F(qs_profile_cast_fit, from, QS_JF_DTYPE, true, 0, 0),
    QS_JF_F(qs_profile_cast_fit, to, QS_JF_DTYPE, true, 0, 0),
    QS_JF_MS(qs_profile_cast_fit, alpha_ms, true),
    QS_JF_F(qs_profile_cast_fit, beta_ms_per_element, QS_JF_NUM, true, -INFINITY, INFINITY),
    QS_JF_NESTED("points", QS_JF_ARRAY, true),
};

static const qs_jf_field qs_pf_allreduce_fields[] = {
    QS_JF_F(qs_profile_allreduce_curve, ranks, QS_JF_WHOLE, true, 1, QS_JF_WHOLE_MAX),
    QS_JF_COUNT(qs_profile_allreduce_curve, reps, false),
    QS_JF_MS(qs_profile_allreduce_curve, alpha_ms, true),
    QS_JF_F(qs_profile_allreduce_curve, beta_ms_per_byte, QS_JF_NUM, true, -INFINITY, INFINITY),
    QS_JF_NESTED("points", QS_JF_ARRAY, true),
};

static const qs_jf_field qs_pf_mixed_fields[] = {
    QS_JF_NESTED("precisions", QS_JF_OBJECT, true),
    QS_JF_F(qs_profile_mixed_run, precision, QS_JF_PRECISION, true, 0, 0),
    QS_JF_MS(qs_profile_mixed_run, step_ms, true),
    QS_JF_MS(qs_profile_mixed_run, optimizer_ms, true),
    QS_JF_MS(qs_profile_mixed_run, grad_average_ms, true),
    QS_JF_NESTED("grad_sync", QS_JF_OBJECT, false),
};

static const qs_jf_field qs_pf_device_fields[] = {
    QS_JF_STR(qs_profile_device, backend, true),
    QS_JF_STR(qs_profile_device, type, false),
    QS_JF_COUNT(qs_profile_device, cores, false),
    QS_JF_COUNT(qs_profile_device, threads, false),
    QS_JF_COUNT(qs_profile_device, memory_bytes, false),
    QS_JF_F(qs_profile_device, cpu, QS_JF_STRING, false, 0, 0),
    QS_JF_COUNT(qs_profile_device, device, false),
    QS_JF_F(qs_profile_device, gpu, QS_JF_STRING, false, 0, 0),
    QS_JF_COUNT(qs_profile_device, sms, false),
    QS_JF_MS(qs_profile_device, mps_sm_percent, false),
    QS_JF_F(qs_profile_device, sm_partition, QS_JF_STRING, false, 0, 0),
};

static const qs_jf_field qs_pf_emulation_fields[] = {
    {"slowdown", QS_JF_NUM, true, offsetof(qs_profile, emulated_slowdown), sizeof(double), 1, INFINITY},
    QS_JF_NESTED("method", QS_JF_ANY, true),
};

static const qs_jf_field qs_pf_top_fields[] = {
    QS_JF_NESTED("format", QS_JF_ANY, true),
    QS_JF_NESTED("version", QS_JF_ANY, true),
    QS_JF_STR(qs_profile, model, true),
    QS_JF_STR(qs_profile, config, true),
    QS_JF_F(qs_profile, data, QS_JF_STRING, true, 0, 0),
    QS_JF_F(qs_profile, batch, QS_JF_WHOLE, true, 1, QS_JF_WHOLE_MAX),
    QS_JF_STR(qs_profile, optimizer, true),
    QS_JF_COUNT(qs_profile, fp8_amax_history, false),
    QS_JF_COUNT(qs_profile, warmup, true),
    QS_JF_F(qs_profile, reps, QS_JF_WHOLE, true, 1, QS_JF_WHOLE_MAX),
    QS_JF_MS(qs_profile, data_ms, false),
    QS_JF_NESTED("device", QS_JF_OBJECT, true),
    QS_JF_NESTED("emulation", QS_JF_OBJECT, false),
    QS_JF_NESTED("runs", QS_JF_OBJECT, true),
    QS_JF_NESTED("casts", QS_JF_ARRAY, true),
    QS_JF_F(qs_profile, co_running_ranks, QS_JF_WHOLE, false, 1, QS_JF_WHOLE_MAX),
    QS_JF_F(qs_profile, co_running_slowdown, QS_JF_NUM, false, 1, INFINITY),
    QS_JF_NESTED("allreduce", QS_JF_OBJECT, false),
    QS_JF_NESTED("mixed_runs", QS_JF_ARRAY, false),
};

/* ---- parts ---- */

/* obj[key], for keys qs_jf_read has checked. */
static const cJSON *qs_pf_get(const cJSON *obj, const char *key) { return cJSON_GetObjectItemCaseSensitive(obj, key); }

/* When obj has `key` (a nested value whose type qs_jf_read checked), evaluate `call` with the
 * path at that key; `call` sees the value as qs_pf_v_. Returns from the caller on failure. */
#define QS_PF_NESTED(ctx, obj, key, call)                                                                      \
    do {                                                                                                        \
        const cJSON *qs_pf_v_ = qs_pf_get(obj, key);                                                            \
        if (qs_pf_v_) {                                                                                         \
            size_t qs_pf_at_ = qs_jf_enter_key(ctx, key);                                                       \
            qs_status qs_pf_st_ = call;                                                                         \
            qs_jf_leave(ctx, qs_pf_at_);                                                                        \
            QS_TRY(qs_pf_st_);                                                                                  \
        }                                                                                                       \
    } while (0)

/* The items of array arr (qs_jf_items) into *list (a pointer to the profile's array, kept also on
 * failure so that qs_profile_free frees what was read) and *n. */
static qs_status qs_pf_list(qs_jf_ctx *ctx, const cJSON *arr, size_t size, qs_jf_item_fn read, void *list, int *n) {
    void *items = NULL;
    qs_status st = qs_jf_items(ctx, arr, false, size, read, &items, n);
    memcpy(list, &items, sizeof items);
    return st;
}

/* An op's "inputs": an array of node names. */
static qs_status qs_pf_inputs(qs_jf_ctx *ctx, const cJSON *arr, qs_profile_op *op) {
    int n = cJSON_GetArraySize(arr);
    op->inputs = calloc((size_t)n + 1, sizeof *op->inputs);
    if (!op->inputs) return QS_FAIL(QS_ERR_OOM, "out of memory reading %s", ctx->origin);
    static const qs_jf_field name = {"", QS_JF_STRING, true, 0, QS_NAME_MAX, 1, 0};
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        size_t at = qs_jf_enter_index(ctx, op->n_inputs);
        qs_status st = qs_jf_read_value(ctx, &name, e, (char *)op->inputs[op->n_inputs]);
        qs_jf_leave(ctx, at);
        QS_TRY(st);
        op->n_inputs++;
    }
    return QS_OK;
}

/* One op of a run (a qs_jf_item_fn). */
static qs_status qs_pf_op(qs_jf_ctx *ctx, const cJSON *o, void *out) {
    qs_profile_op *op = out;
    QS_TRY(qs_jf_read(ctx, o, qs_pf_op_fields, QS_PF_N(qs_pf_op_fields), op));
    op->fused = qs_pf_get(o, "fused_into") != NULL;
    QS_PF_NESTED(ctx, o, "inputs", qs_pf_inputs(ctx, qs_pf_v_, op));
    return QS_OK;
}

static qs_status qs_pf_sync(qs_jf_ctx *ctx, const cJSON *o, qs_profile_sync *s) {
    s->overlap_step_ms = s->no_overlap_step_ms = NAN;
    return qs_jf_read(ctx, o, qs_pf_sync_fields, QS_PF_N(qs_pf_sync_fields), s);
}

/* A run's "support": "native" or "emulated". */
static qs_status qs_pf_support(qs_jf_ctx *ctx, const cJSON *v, qs_prec_support *out) {
    for (int s = QS_PREC_NATIVE; s <= QS_PREC_EMULATED; s++)
        if (cJSON_IsString(v) && strcmp(v->valuestring, qs_prec_support_name((qs_prec_support)s)) == 0) {
            *out = (qs_prec_support)s;
            return QS_OK;
        }
    return qs_jf_fail(ctx, v, "must be \"native\" or \"emulated\"");
}

/* Run `o` keyed `key` (a precision name) into r (its memory_facts preset to the device's defaults). */
static qs_status qs_pf_run(qs_jf_ctx *ctx, const cJSON *o, qs_precision key, qs_profile_prec_run *r) {
    QS_TRY(qs_jf_read(ctx, o, qs_pf_run_fields, QS_PF_N(qs_pf_run_fields), r));
    if (r->precision != key) {
        size_t at = qs_jf_enter_key(ctx, "precision");
        qs_status st = qs_jf_fail(ctx, qs_pf_get(o, "precision"), "must be \"%s\", the run's key",
                                  qs_precision_name(key));
        qs_jf_leave(ctx, at);
        return st;
    }
    QS_PF_NESTED(ctx, o, "support", qs_pf_support(ctx, qs_pf_v_, &r->support));
    QS_PF_NESTED(ctx, o, "step_samples_ms", qs_jf_times(ctx, qs_pf_v_, &r->step_samples_ms, &r->n_step_samples));
    r->has_sync = qs_pf_get(o, "grad_sync") != NULL;
    QS_PF_NESTED(ctx, o, "grad_sync", qs_pf_sync(ctx, qs_pf_v_, &r->sync));
    QS_PF_NESTED(ctx, o, "memory_bytes",
                 qs_jf_read(ctx, qs_pf_v_, qs_pf_memory_fields, QS_PF_N(qs_pf_memory_fields), &r->memory));
    QS_PF_NESTED(ctx, o, "memory_facts",
                 qs_jf_read(ctx, qs_pf_v_, qs_pf_facts_fields, QS_PF_N(qs_pf_facts_fields), &r->memory_facts));
    QS_PF_NESTED(ctx, o, "ops", qs_pf_list(ctx, qs_pf_v_, sizeof *r->ops, qs_pf_op, (void *)&r->ops, &r->n_ops));
    return QS_OK;
}

/* "runs": an object keyed by precision names, at least one. */
static qs_status qs_pf_runs(qs_jf_ctx *ctx, const cJSON *o, qs_profile *p) {
    int n = cJSON_GetArraySize(o);
    if (n == 0) return qs_jf_fail(ctx, o, "must hold at least one run (keyed by its precision)");
    if (!(p->runs = calloc((size_t)n, sizeof *p->runs))) return QS_FAIL(QS_ERR_OOM, "out of memory reading %s", ctx->origin);
    const cJSON *e;
    cJSON_ArrayForEach(e, o) {
        const char *key = e->string ? e->string : "";
        qs_precision prec;
        size_t at = qs_jf_enter_key(ctx, key);
        qs_status st = qs_precision_parse(key, &prec) ? QS_OK
                       : qs_jf_fail(ctx, NULL, "is not a precision name (runs are keyed fp32, tf32, bf16, fp16, fp8, int8)");
        if (st == QS_OK && p->run_index[prec] >= 0) st = qs_jf_fail(ctx, NULL, "appears twice");
        if (st == QS_OK) {
            p->run_index[prec] = p->n_runs;
            qs_profile_prec_run *r = &p->runs[p->n_runs++];
            const bool cuda = strcmp(p->device.backend, "cuda") == 0; /* "device" is read before "runs" */
            r->memory_facts = (qs_mem_facts){cuda, cuda, cuda};
            st = qs_pf_run(ctx, e, prec, r);
        }
        qs_jf_leave(ctx, at);
        QS_TRY(st);
    }
    return QS_OK;
}

/* One cast fit (a qs_jf_item_fn). */
static qs_status qs_pf_cast(qs_jf_ctx *ctx, const cJSON *o, void *out) {
    qs_profile_cast_fit *c = out;
    QS_TRY(qs_jf_read(ctx, o, qs_pf_cast_fields, QS_PF_N(qs_pf_cast_fields), c));
    QS_PF_NESTED(ctx, o, "points", qs_jf_points(ctx, qs_pf_v_, false, &c->points, &c->n_points));
    return QS_OK;
}

static qs_status qs_pf_allreduce(qs_jf_ctx *ctx, const cJSON *o, qs_profile_allreduce_curve *a) {
    QS_TRY(qs_jf_read(ctx, o, qs_pf_allreduce_fields, QS_PF_N(qs_pf_allreduce_fields), a));
    QS_PF_NESTED(ctx, o, "points", qs_jf_points(ctx, qs_pf_v_, true, &a->points, &a->n_points));
    return QS_OK;
}

/* A mixed run's "precisions": device type → precision. */
static qs_status qs_pf_assignment(qs_jf_ctx *ctx, const cJSON *o, qs_profile_mixed_run *m) {
    int n = cJSON_GetArraySize(o);
    m->types = calloc((size_t)n + 1, sizeof *m->types);
    m->precs = calloc((size_t)n + 1, sizeof *m->precs);
    if (!m->types || !m->precs) return QS_FAIL(QS_ERR_OOM, "out of memory reading %s", ctx->origin);
    static const qs_jf_field prec = {"", QS_JF_PRECISION, true, 0, 0, 0, 0};
    const cJSON *e;
    cJSON_ArrayForEach(e, o) {
        const char *t = e->string ? e->string : "";
        size_t at = qs_jf_enter_label(ctx, t);
        qs_status st = QS_OK;
        if (!t[0] || strlen(t) >= QS_PROFILE_TYPE_MAX)
            st = qs_jf_fail(ctx, NULL, "must be a device-type label of 1 to %d characters", QS_PROFILE_TYPE_MAX - 1);
        if (st == QS_OK && qs_jf_key_repeated(o, e)) st = qs_jf_fail(ctx, NULL, "appears twice");
        if (st == QS_OK) st = qs_jf_read_value(ctx, &prec, e, (char *)&m->precs[m->n_types]);
        qs_jf_leave(ctx, at);
        QS_TRY(st);
        snprintf(m->types[m->n_types++], QS_PROFILE_TYPE_MAX, "%s", t);
    }
    return QS_OK;
}

/* One mixed run (a qs_jf_item_fn). */
static qs_status qs_pf_mixed_run(qs_jf_ctx *ctx, const cJSON *o, void *out) {
    qs_profile_mixed_run *m = out;
    QS_TRY(qs_jf_read(ctx, o, qs_pf_mixed_fields, QS_PF_N(qs_pf_mixed_fields), m));
    QS_PF_NESTED(ctx, o, "precisions", qs_pf_assignment(ctx, qs_pf_v_, m));
    m->has_sync = qs_pf_get(o, "grad_sync") != NULL;
    QS_PF_NESTED(ctx, o, "grad_sync", qs_pf_sync(ctx, qs_pf_v_, &m->sync));
    return QS_OK;
}

static qs_status qs_pf_device(qs_jf_ctx *ctx, const cJSON *o, qs_profile_device *d) {
    QS_TRY(qs_jf_read(ctx, o, qs_pf_device_fields, QS_PF_N(qs_pf_device_fields), d));
    if (strcmp(d->backend, "cpu") == 0 || strcmp(d->backend, "cuda") == 0) return QS_OK;
    size_t at = qs_jf_enter_key(ctx, "backend");
    qs_status st = qs_jf_fail(ctx, qs_pf_get(o, "backend"), "must be \"cpu\" or \"cuda\"");
    qs_jf_leave(ctx, at);
    return st;
}

static qs_status qs_pf_emulation(qs_jf_ctx *ctx, const cJSON *o, qs_profile *p) {
    static const char *const methods[] = {"none", "cgroup-quota", "duty-cycle"};
    QS_TRY(qs_jf_read(ctx, o, qs_pf_emulation_fields, QS_PF_N(qs_pf_emulation_fields), p));
    p->has_emulation = true;
    const cJSON *m = qs_pf_get(o, "method");
    for (int k = 0; k < 3; k++)
        if (cJSON_IsString(m) && strcmp(m->valuestring, methods[k]) == 0) {
            p->emulation_method = (qs_profile_emulation_method)k;
            return QS_OK;
        }
    size_t at = qs_jf_enter_key(ctx, "method");
    qs_status st = qs_jf_fail(ctx, m, "must be \"cgroup-quota\", \"duty-cycle\" or \"none\"");
    qs_jf_leave(ctx, at);
    return st;
}

/* "format" and "version" first: a document of another kind is named as such. */
static qs_status qs_pf_header(qs_jf_ctx *ctx, const cJSON *doc) {
    if (!cJSON_IsObject(doc)) return qs_jf_fail(ctx, NULL, "the document must be a JSON object (a qsync profile)");
    const cJSON *fmt = qs_pf_get(doc, "format"), *ver = qs_pf_get(doc, "version");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, QS_PROFILE_FORMAT) != 0) {
        snprintf(ctx->path, sizeof ctx->path, "format");
        return qs_jf_fail(ctx, fmt, "must be \"%s\": this is not a qsync profile (docs/PROFILE.md)", QS_PROFILE_FORMAT);
    }
    if (!cJSON_IsNumber(ver) || ver->valuedouble != QS_PROFILE_VERSION) {
        snprintf(ctx->path, sizeof ctx->path, "version");
        return qs_jf_fail(ctx, ver, "must be %d, the profile version this qsync reads", QS_PROFILE_VERSION);
    }
    return QS_OK;
}

static qs_status qs_pf_document(qs_jf_ctx *ctx, const cJSON *doc, qs_profile *p) {
    QS_TRY(qs_pf_header(ctx, doc));
    QS_TRY(qs_jf_read(ctx, doc, qs_pf_top_fields, QS_PF_N(qs_pf_top_fields), p));
    if (qs_optim_kind_parse(p->optimizer, &p->optimizer_kind) != QS_OK) {
        snprintf(ctx->path, sizeof ctx->path, "optimizer");
        return qs_jf_fail(ctx, qs_pf_get(doc, "optimizer"), "must be \"sgd\" or \"adamw\"");
    }
    QS_PF_NESTED(ctx, doc, "device", qs_pf_device(ctx, qs_pf_v_, &p->device));
    QS_PF_NESTED(ctx, doc, "emulation", qs_pf_emulation(ctx, qs_pf_v_, p));
    QS_PF_NESTED(ctx, doc, "runs", qs_pf_runs(ctx, qs_pf_v_, p));
    QS_PF_NESTED(ctx, doc, "casts", qs_pf_list(ctx, qs_pf_v_, sizeof *p->casts, qs_pf_cast, (void *)&p->casts, &p->n_casts));
    p->has_allreduce = qs_pf_get(doc, "allreduce") != NULL;
    QS_PF_NESTED(ctx, doc, "allreduce", qs_pf_allreduce(ctx, qs_pf_v_, &p->allreduce));
    QS_PF_NESTED(ctx, doc, "mixed_runs",
                 qs_pf_list(ctx, qs_pf_v_, sizeof *p->mixed, qs_pf_mixed_run, (void *)&p->mixed, &p->n_mixed));
    return QS_OK;
}

/* ---- entry points ---- */

static void qs_profile_init(qs_profile *p, const char *origin) {
    memset(p, 0, sizeof *p);
    snprintf(p->origin, sizeof p->origin, "%s", origin ? origin : "(profile)");
    for (int k = 0; k < QS_PREC_COUNT; k++) p->run_index[k] = -1;
}

qs_status qs_profile_from_json(const cJSON *doc, const char *origin, qs_profile *out) {
    qs_profile_init(out, origin);
    qs_jf_ctx ctx = {.what = "profile", .origin = out->origin};
    qs_status st = qs_pf_document(&ctx, doc, out);
    if (st != QS_OK) {
        qs_profile_free(out);
        qs_profile_init(out, origin);
    }
    return st;
}

qs_status qs_profile_parse(const char *text, const char *origin, qs_profile *out) {
    cJSON *doc = NULL;
    qs_profile_init(out, origin);
    QS_TRY(qs_json_parse(text, "profile", out->origin, &doc));
    qs_status st = qs_profile_from_json(doc, origin, out);
    cJSON_Delete(doc);
    return st;
}

qs_status qs_profile_read(const char *path, qs_profile *out) {
    cJSON *doc = NULL;
    qs_profile_init(out, path);
    QS_TRY(qs_json_read(path, QS_PROFILE_MAX_BYTES, "profile", &doc));
    qs_status st = qs_profile_from_json(doc, path, out);
    cJSON_Delete(doc);
    return st;
}

void qs_profile_free(qs_profile *p) {
    for (int r = 0; p->runs && r < p->n_runs; r++) {
        for (int i = 0; p->runs[r].ops && i < p->runs[r].n_ops; i++) free(p->runs[r].ops[i].inputs);
        free(p->runs[r].ops);
        free(p->runs[r].step_samples_ms);
    }
    for (int c = 0; p->casts && c < p->n_casts; c++) free(p->casts[c].points);
    for (int m = 0; p->mixed && m < p->n_mixed; m++) {
        free(p->mixed[m].types);
        free(p->mixed[m].precs);
    }
    free(p->runs);
    free(p->casts);
    free(p->mixed);
    free(p->allreduce.points);
    p->runs = NULL;
    p->casts = NULL;
    p->mixed = NULL;
    p->allreduce.points = NULL;
    p->n_runs = p->n_casts = p->n_mixed = 0;
}

/* ---- look-ups ---- */

const qs_profile_prec_run *qs_profile_run_at(const qs_profile *p, qs_precision prec) {
    return (unsigned)prec < QS_PREC_COUNT && p->run_index[prec] >= 0 ? &p->runs[p->run_index[prec]] : NULL;
}

bool qs_profile_top_precision(const qs_profile *p, qs_precision *out) {
    for (int k = 0; k < QS_PREC_COUNT; k++)
        if (p->run_index[k] >= 0) {
            *out = (qs_precision)k;
            return true;
        }
    return false;
}

const qs_profile_prec_run *qs_profile_base_run(const qs_profile *p) {
    qs_precision top;
    return qs_profile_top_precision(p, &top) ? qs_profile_run_at(p, top) : NULL;
}

const qs_profile_op *qs_profile_find_op(const qs_profile_prec_run *r, const char *name) {
    for (int i = 0; r && i < r->n_ops; i++)
        if (strcmp(r->ops[i].name, name) == 0) return &r->ops[i];
    return NULL;
}

bool qs_profile_op_fused(const qs_profile *p, const char *name) {
    const qs_profile_op *op = qs_profile_find_op(qs_profile_base_run(p), name);
    return op && op->fused;
}
