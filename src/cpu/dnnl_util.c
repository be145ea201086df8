/* src/cpu/dnnl_util.c — the only file that calls oneDNN (v2.6 C API); see dnnl_util.h. */
#include "cpu/dnnl_util.h"

#include <string.h>
#include <oneapi/dnnl/dnnl_debug.h>

qs_status qs_dnnl_check(dnnl_status_t st, const char *what) {
    if (st == dnnl_success) return QS_OK;
    qs_status qs = QS_ERR_BACKEND;
    const char *hint = "this is a qsync bug or a oneDNN limitation; report it with the shapes";
    if (st == dnnl_unimplemented) {
        qs = QS_ERR_UNSUPPORTED;
        hint = "oneDNN 2.6 has no implementation for this shape/precision; use another precision";
    } else if (st == dnnl_out_of_memory) {
        qs = QS_ERR_OOM;
        hint = "reduce the batch size or free memory";
    }
    return QS_FAIL(qs, "oneDNN %s failed: %s (%s)", what, dnnl_status2str(st), hint);
}

qs_status qs_dnnl_ctx_create(qs_dnnl_ctx *ctx) {
    memset(ctx, 0, sizeof *ctx);
    QS_TRY(qs_dnnl_check(dnnl_engine_create(&ctx->engine, dnnl_cpu, 0), "CPU engine creation"));
    qs_status st = qs_dnnl_check(dnnl_stream_create(&ctx->stream, ctx->engine, dnnl_stream_default_flags),
                                 "stream creation");
    if (st != QS_OK) qs_dnnl_ctx_destroy(ctx);
    return st;
}

void qs_dnnl_ctx_destroy(qs_dnnl_ctx *ctx) {
    if (ctx->stream) dnnl_stream_destroy(ctx->stream);
    if (ctx->engine) dnnl_engine_destroy(ctx->engine);
    memset(ctx, 0, sizeof *ctx);
}

qs_status qs_dnnl_md_strided(dnnl_memory_desc_t *md, int ndims, const int64_t *dims,
                             const int64_t *strides) {
    dnnl_dims_t d, s;
    for (int i = 0; i < ndims; i++) {
        d[i] = dims[i];
        s[i] = strides[i];
    }
    return qs_dnnl_check(dnnl_memory_desc_init_by_strides(md, ndims, d, dnnl_f32, s), "memory descriptor (strides)");
}

qs_status qs_dnnl_md_tag(dnnl_memory_desc_t *md, int ndims, const int64_t *dims, dnnl_format_tag_t tag) {
    dnnl_dims_t d;
    for (int i = 0; i < ndims; i++) d[i] = dims[i];
    return qs_dnnl_check(dnnl_memory_desc_init_by_tag(md, ndims, d, dnnl_f32, tag), "memory descriptor (tag)");
}

size_t qs_dnnl_md_bytes(const dnnl_memory_desc_t *md) { return md ? dnnl_memory_desc_get_size(md) : 0; }

bool qs_dnnl_md_equal(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b) {
    return dnnl_memory_desc_equal(a, b) != 0;
}

/* Shared tail of primitive construction: primitive, per-argument memory objects, scratchpad. */
static qs_status qs_dnnl_prim_finish(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, const int *arg_ids,
                                     int nargs, const char *what) {
    QS_TRY(qs_dnnl_check(dnnl_primitive_create(&p->prim, p->pd), what));
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0);
    p->scratch_bytes = qs_dnnl_md_bytes(smd);
    int total = nargs + (p->scratch_bytes > 0 ? 1 : 0);
    for (int i = 0; i < total; i++) {
        int arg = i < nargs ? arg_ids[i] : DNNL_ARG_SCRATCHPAD;
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(p->pd, dnnl_query_exec_arg_md, arg);
        if (!md) return QS_FAIL(QS_ERR_INTERNAL, "oneDNN %s: argument %d has no memory descriptor", what, arg);
        p->args[i].arg = arg;
        QS_TRY(qs_dnnl_check(dnnl_memory_create(&p->args[i].memory, md, ctx->engine, DNNL_MEMORY_NONE), what));
    }
    p->nargs = nargs;
    return QS_OK;
}

qs_status qs_dnnl_prim_create(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, const void *op_desc,
                              const_dnnl_post_ops_t post_ops, const_dnnl_primitive_desc_t hint,
                              const int *arg_ids, int nargs, const char *what) {
    memset(p, 0, sizeof *p);
    if (nargs < 0 || nargs > QS_DNNL_MAX_ARGS)
        return QS_FAIL(QS_ERR_INTERNAL, "oneDNN %s: %d arguments, at most %d supported", what, nargs, QS_DNNL_MAX_ARGS);
    dnnl_primitive_attr_t attr = NULL;
    qs_status st = qs_dnnl_check(dnnl_primitive_attr_create(&attr), what);
    if (st == QS_OK)
        st = qs_dnnl_check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), what);
    if (st == QS_OK && post_ops) st = qs_dnnl_check(dnnl_primitive_attr_set_post_ops(attr, post_ops), what);
    if (st == QS_OK) st = qs_dnnl_check(dnnl_primitive_desc_create(&p->pd, op_desc, attr, ctx->engine, hint), what);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (st == QS_OK) st = qs_dnnl_prim_finish(p, ctx, arg_ids, nargs, what);
    if (st != QS_OK) qs_dnnl_prim_destroy(p);
    return st;
}

qs_status qs_dnnl_reorder_create(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx,
                                 const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to) {
    memset(p, 0, sizeof *p);
    static const int ids[2] = {DNNL_ARG_FROM, DNNL_ARG_TO};
    dnnl_primitive_attr_t attr = NULL;
    qs_status st = qs_dnnl_check(dnnl_primitive_attr_create(&attr), "reorder");
    if (st == QS_OK)
        st = qs_dnnl_check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "reorder");
    if (st == QS_OK)
        st = qs_dnnl_check(dnnl_reorder_primitive_desc_create(&p->pd, from, ctx->engine, to, ctx->engine, attr),
                           "reorder");
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (st == QS_OK) st = qs_dnnl_prim_finish(p, ctx, ids, 2, "reorder");
    if (st != QS_OK) qs_dnnl_prim_destroy(p);
    return st;
}

const dnnl_memory_desc_t *qs_dnnl_prim_arg_md(const qs_dnnl_prim *p, int arg) {
    return dnnl_primitive_desc_query_md(p->pd, dnnl_query_exec_arg_md, arg);
}

qs_status qs_dnnl_prim_exec(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, void *const *handles, void *scratch,
                            const char *what) {
    if (p->scratch_bytes > 0 && !scratch)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "oneDNN %s needs %zu bytes of workspace but got NULL; pass the plan's workspace",
                       what, p->scratch_bytes);
    int total = p->nargs + (p->scratch_bytes > 0 ? 1 : 0);
    for (int i = 0; i < total; i++) {
        void *h = i < p->nargs ? handles[i] : scratch;
        QS_TRY(qs_dnnl_check(dnnl_memory_set_data_handle(p->args[i].memory, h), what));
    }
    QS_TRY(qs_dnnl_check(dnnl_primitive_execute(p->prim, ctx->stream, total, p->args), what));
    return qs_dnnl_check(dnnl_stream_wait(ctx->stream), what);
}

void qs_dnnl_prim_destroy(qs_dnnl_prim *p) {
    for (int i = 0; i < QS_DNNL_MAX_ARGS + 1; i++)
        if (p->args[i].memory) dnnl_memory_destroy(p->args[i].memory);
    if (p->prim) dnnl_primitive_destroy(p->prim);
    if (p->pd) dnnl_primitive_desc_destroy(p->pd);
    memset(p, 0, sizeof *p);
}

qs_status qs_dnnl_post_ops_sum(dnnl_post_ops_t *out) {
    *out = NULL;
    QS_TRY(qs_dnnl_check(dnnl_post_ops_create(out), "post-ops creation"));
    qs_status st = qs_dnnl_check(dnnl_post_ops_append_sum(*out, 1.0f), "post-op sum");
    if (st != QS_OK) {
        dnnl_post_ops_destroy(*out);
        *out = NULL;
    }
    return st;
}

void qs_dnnl_post_ops_destroy(dnnl_post_ops_t po) {
    if (po) dnnl_post_ops_destroy(po);
}

const char *qs_dnnl_prim_impl(const qs_dnnl_prim *p) {
    const char *s = NULL;
    if (!p->pd || dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s)
        return "?";
    return s;
}
