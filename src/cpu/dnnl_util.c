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

static qs_status qs_dnnl_dt(qs_dtype dt, dnnl_data_type_t *out) {
    switch (dt) {
    case QS_F32: *out = dnnl_f32; return QS_OK;
    case QS_BF16: *out = dnnl_bf16; return QS_OK;
    case QS_F16: *out = dnnl_f16; return QS_OK;
    case QS_S8: *out = dnnl_s8; return QS_OK;
    case QS_U8: *out = dnnl_u8; return QS_OK;
    case QS_S32: *out = dnnl_s32; return QS_OK;
    default: return QS_FAIL(QS_ERR_INTERNAL, "oneDNN memory descriptor: no oneDNN type for %s", qs_dtype_name(dt));
    }
}

qs_status qs_dnnl_md(dnnl_memory_desc_t *md, const qs_dnnl_tensor *t) {
    if (t->ndims < 1 || t->ndims > 4)
        return QS_FAIL(QS_ERR_INTERNAL, "oneDNN memory descriptor: %d dimensions, 1..4 supported", t->ndims);
    dnnl_dims_t d, s;
    dnnl_data_type_t dt = dnnl_f32;
    QS_TRY(qs_dnnl_dt(t->dt, &dt));
    for (int i = 0; i < t->ndims; i++) {
        d[i] = t->dims[i];
        s[i] = t->strides[i];
    }
    if (t->layout == QS_DNNL_STRIDED)
        return qs_dnnl_check(dnnl_memory_desc_init_by_strides(md, t->ndims, d, dt, s),
                             "memory descriptor (strides)");
    dnnl_format_tag_t tag = t->layout == QS_DNNL_ANY    ? dnnl_format_tag_any
                            : t->layout == QS_DNNL_NHWC ? dnnl_nhwc
                            : t->layout == QS_DNNL_OIHW ? dnnl_oihw
                                                        : dnnl_a;
    return qs_dnnl_check(dnnl_memory_desc_init_by_tag(md, t->ndims, d, dt, tag), "memory descriptor (tag)");
}

/* Shared tail of primitive construction: primitive, per-argument memory objects, scratchpad. */
static qs_status qs_dnnl_prim_finish(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, const int *arg_ids,
                                     int nargs, const char *what) {
    QS_TRY(qs_dnnl_check(dnnl_primitive_create(&p->prim, p->pd), what));
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0);
    p->scratch_bytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
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

/* Primitive descriptor for op_desc: the first implementation whose name contains `prefer`
 * (when given and present), else oneDNN's first choice. */
static qs_status qs_dnnl_pd_create(dnnl_primitive_desc_t *pd, const qs_dnnl_ctx *ctx, const void *op_desc,
                                   const_dnnl_primitive_attr_t attr, const_dnnl_primitive_desc_t hint,
                                   const char *prefer, const char *what) {
    *pd = NULL;
    if (!prefer) return qs_dnnl_check(dnnl_primitive_desc_create(pd, op_desc, attr, ctx->engine, hint), what);
    dnnl_primitive_desc_iterator_t it = NULL;
    QS_TRY(qs_dnnl_check(dnnl_primitive_desc_iterator_create(&it, op_desc, attr, ctx->engine, hint), what));
    dnnl_primitive_desc_t first = NULL;
    do {
        dnnl_primitive_desc_t cand = dnnl_primitive_desc_iterator_fetch(it);
        if (!cand) break;
        const char *name = NULL;
        dnnl_primitive_desc_query(cand, dnnl_query_impl_info_str, 0, &name);
        if (name && strstr(name, prefer)) {
            *pd = cand;
            break;
        }
        if (!first)
            first = cand;
        else
            dnnl_primitive_desc_destroy(cand);
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
    if (*pd) {
        if (first) dnnl_primitive_desc_destroy(first);
        return QS_OK;
    }
    if (!first) return QS_FAIL(QS_ERR_UNSUPPORTED, "oneDNN %s: no implementation available", what);
    *pd = first;
    return QS_OK;
}

qs_status qs_dnnl_prim_create(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, const void *op_desc,
                              const_dnnl_post_ops_t post_ops, const_dnnl_primitive_desc_t hint,
                              const char *prefer_impl, const int *arg_ids, int nargs, const char *what) {
    memset(p, 0, sizeof *p);
    if (nargs < 0 || nargs > QS_DNNL_MAX_ARGS)
        return QS_FAIL(QS_ERR_INTERNAL, "oneDNN %s: %d arguments, at most %d supported", what, nargs, QS_DNNL_MAX_ARGS);
    dnnl_primitive_attr_t attr = NULL;
    qs_status st = qs_dnnl_check(dnnl_primitive_attr_create(&attr), what);
    if (st == QS_OK)
        st = qs_dnnl_check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), what);
    if (st == QS_OK && post_ops) st = qs_dnnl_check(dnnl_primitive_attr_set_post_ops(attr, post_ops), what);
    if (st == QS_OK) st = qs_dnnl_pd_create(&p->pd, ctx, op_desc, attr, hint, prefer_impl, what);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (st == QS_OK) st = qs_dnnl_prim_finish(p, ctx, arg_ids, nargs, what);
    if (st != QS_OK) qs_dnnl_prim_destroy(p);
    return st;
}

/* A reorder between two layouts (arguments from, to). */
static qs_status qs_dnnl_reorder_create(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, const dnnl_memory_desc_t *from,
                                        const dnnl_memory_desc_t *to) {
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

qs_status qs_dnnl_matmul_create(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, const qs_dnnl_tensor *a,
                                const qs_dnnl_tensor *b, const qs_dnnl_tensor *bias, const qs_dnnl_tensor *c,
                                bool accumulate, const char *prefer, const char *what) {
    memset(p, 0, sizeof *p);
    dnnl_memory_desc_t amd, bmd, cmd, biasmd;
    QS_TRY(qs_dnnl_md(&amd, a));
    QS_TRY(qs_dnnl_md(&bmd, b));
    QS_TRY(qs_dnnl_md(&cmd, c));
    if (bias) QS_TRY(qs_dnnl_md(&biasmd, bias));
    dnnl_matmul_desc_t md;
    QS_TRY(qs_dnnl_check(dnnl_matmul_desc_init(&md, &amd, &bmd, bias ? &biasmd : NULL, &cmd), what));
    dnnl_post_ops_t po = NULL;
    if (accumulate) {
        QS_TRY(qs_dnnl_check(dnnl_post_ops_create(&po), what));
        qs_status st = qs_dnnl_check(dnnl_post_ops_append_sum(po, 1.0f), what);
        if (st != QS_OK) {
            dnnl_post_ops_destroy(po);
            return st;
        }
    }
    const int ids_bias[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST};
    const int ids[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
    qs_status st = qs_dnnl_prim_create(p, ctx, &md, po, NULL, prefer, bias ? ids_bias : ids, bias ? 4 : 3, what);
    if (po) dnnl_post_ops_destroy(po);
    return st;
}

qs_status qs_dnnl_matmul_probe(const qs_dnnl_ctx *ctx, qs_dtype dt, bool *fast) {
    *fast = false;
    const qs_dnnl_tensor a = {.ndims = 2, .dims = {64, 64}, .strides = {64, 1}, .dt = dt};
    const qs_dnnl_tensor c = {.ndims = 2, .dims = {64, 64}, .strides = {64, 1}};
    qs_dnnl_prim p;
    qs_status st = qs_dnnl_matmul_create(&p, ctx, &a, &a, NULL, &c, false, NULL, "matmul probe");
    if (st == QS_ERR_UNSUPPORTED) return QS_OK;
    QS_TRY(st);
    *fast = strstr(qs_dnnl_prim_impl(&p), "ref") == NULL;
    qs_dnnl_prim_destroy(&p);
    return QS_OK;
}

qs_status qs_dnnl_conv_create(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, qs_dnnl_conv_dir dir,
                              const qs_dnnl_tensor *src, const qs_dnnl_tensor *weights, const qs_dnnl_tensor *bias,
                              const qs_dnnl_tensor *dst, const int64_t strides[2], const int64_t pads[2],
                              const qs_dnnl_prim *hint, const char *what) {
    memset(p, 0, sizeof *p);
    dnnl_memory_desc_t smd, wmd, dmd, bmd;
    QS_TRY(qs_dnnl_md(&smd, src));
    QS_TRY(qs_dnnl_md(&wmd, weights));
    QS_TRY(qs_dnnl_md(&dmd, dst));
    if (bias) QS_TRY(qs_dnnl_md(&bmd, bias));
    const dnnl_memory_desc_t *bptr = bias ? &bmd : NULL;
    const dnnl_dims_t st = {strides[0], strides[1]}, pad = {pads[0], pads[1]};
    dnnl_convolution_desc_t cd;
    dnnl_status_t ds;
    int ids[4], nargs;
    if (dir == QS_DNNL_CONV_FWD) {
        ds = dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, &smd, &wmd, bptr,
                                                &dmd, st, pad, pad);
        nargs = 0;
        ids[nargs++] = DNNL_ARG_SRC;
        ids[nargs++] = DNNL_ARG_WEIGHTS;
        if (bias) ids[nargs++] = DNNL_ARG_BIAS;
        ids[nargs++] = DNNL_ARG_DST;
    } else if (dir == QS_DNNL_CONV_BWD_DATA) {
        ds = dnnl_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, &smd, &wmd, &dmd, st, pad, pad);
        ids[0] = DNNL_ARG_DIFF_DST, ids[1] = DNNL_ARG_WEIGHTS, ids[2] = DNNL_ARG_DIFF_SRC;
        nargs = 3;
    } else {
        ds = dnnl_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, &smd, &wmd, bptr, &dmd, st, pad,
                                                         pad);
        ids[0] = DNNL_ARG_SRC, ids[1] = DNNL_ARG_DIFF_DST, ids[2] = DNNL_ARG_DIFF_WEIGHTS, ids[3] = DNNL_ARG_DIFF_BIAS;
        nargs = bias ? 4 : 3;
    }
    QS_TRY(qs_dnnl_check(ds, what));
    return qs_dnnl_prim_create(p, ctx, &cd, NULL, hint ? hint->pd : NULL, NULL, ids, nargs, what);
}

qs_status qs_dnnl_conv_fwd_create_ex(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, bool deconv, const qs_dnnl_tensor *src,
                                     const qs_dnnl_tensor *weights, const qs_dnnl_tensor *bias,
                                     const qs_dnnl_tensor *dst, const qs_dnnl_conv_geom *g, bool po_mul,
                                     bool po_add, const char *what) {
    memset(p, 0, sizeof *p);
    dnnl_memory_desc_t smd, wmd, dmd, bmd, vmd;
    QS_TRY(qs_dnnl_md(&smd, src));
    QS_TRY(qs_dnnl_md(&wmd, weights));
    QS_TRY(qs_dnnl_md(&dmd, dst));
    if (bias) QS_TRY(qs_dnnl_md(&bmd, bias));
    const dnnl_memory_desc_t *bptr = bias ? &bmd : NULL;
    const dnnl_dims_t st = {g->strides[0], g->strides[1]}, dil = {g->dilates[0], g->dilates[1]};
    const dnnl_dims_t pl = {g->pad_l[0], g->pad_l[1]}, pr = {g->pad_r[0], g->pad_r[1]};
    int ids[6], nargs = 0, npo = 0;
    ids[nargs++] = DNNL_ARG_SRC;
    ids[nargs++] = DNNL_ARG_WEIGHTS;
    if (bias) ids[nargs++] = DNNL_ARG_BIAS;
    ids[nargs++] = DNNL_ARG_DST;
    dnnl_post_ops_t po = NULL;
    if (po_mul || po_add) {
        const dnnl_dims_t vd = {1, dst->dims[1], 1, 1};
        QS_TRY(qs_dnnl_check(dnnl_memory_desc_init_by_tag(&vmd, 4, vd, dnnl_f32, dnnl_nchw), what));
        QS_TRY(qs_dnnl_check(dnnl_post_ops_create(&po), what));
        qs_status st2 = QS_OK;
        if (po_mul) {
            st2 = qs_dnnl_check(dnnl_post_ops_append_binary(po, dnnl_binary_mul, &vmd), what);
            ids[nargs++] = DNNL_ARG_ATTR_MULTIPLE_POST_OP(npo++) | DNNL_ARG_SRC_1;
        }
        if (st2 == QS_OK && po_add) {
            st2 = qs_dnnl_check(dnnl_post_ops_append_binary(po, dnnl_binary_add, &vmd), what);
            ids[nargs++] = DNNL_ARG_ATTR_MULTIPLE_POST_OP(npo++) | DNNL_ARG_SRC_1;
        }
        if (st2 != QS_OK) {
            dnnl_post_ops_destroy(po);
            return st2;
        }
    }
    qs_status ret;
    if (deconv) {
        dnnl_deconvolution_desc_t dd;
        ret = qs_dnnl_check(dnnl_dilated_deconvolution_forward_desc_init(&dd, dnnl_forward_inference,
                                                                         dnnl_deconvolution_direct, &smd, &wmd, bptr,
                                                                         &dmd, st, dil, pl, pr),
                            what);
        if (ret == QS_OK) ret = qs_dnnl_prim_create(p, ctx, &dd, po, NULL, NULL, ids, nargs, what);
    } else {
        dnnl_convolution_desc_t cd;
        ret = qs_dnnl_check(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                                       dnnl_convolution_direct, &smd, &wmd, bptr, &dmd,
                                                                       st, dil, pl, pr),
                            what);
        if (ret == QS_OK) ret = qs_dnnl_prim_create(p, ctx, &cd, po, NULL, NULL, ids, nargs, what);
    }
    if (po) dnnl_post_ops_destroy(po);
    return ret;
}

qs_status qs_dnnl_reorder_create_t(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, const qs_dnnl_tensor *from,
                                   const qs_dnnl_tensor *to, const char *what) {
    memset(p, 0, sizeof *p);
    dnnl_memory_desc_t fmd, tmd;
    QS_TRY(qs_dnnl_md(&fmd, from));
    QS_TRY(qs_dnnl_md(&tmd, to));
    qs_status st = qs_dnnl_reorder_create(p, ctx, &fmd, &tmd);
    return st == QS_OK ? st : qs_error_wrap(st, "%s: ", what);
}

bool qs_dnnl_int8_exact(void) {
    /* ISA bit masks of oneDNN 2.6: 0x40 is set from avx512_core_vnni up (AMX included),
     * 0x400 marks avx2_vnni */
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    return (isa & 0x40u) || (isa & 0x400u);
}

qs_status qs_dnnl_weights_reorder(qs_dnnl_prim *reorder, const qs_dnnl_ctx *ctx, const qs_dnnl_prim *p, int arg,
                                  const qs_dnnl_tensor *user, bool to_prim, bool *needed, size_t *bytes) {
    memset(reorder, 0, sizeof *reorder);
    *needed = false;
    *bytes = 0;
    const dnnl_memory_desc_t *chosen =
        dnnl_primitive_desc_query_md(p->pd, dnnl_query_exec_arg_md, arg ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS);
    if (!chosen) return QS_FAIL(QS_ERR_INTERNAL, "oneDNN weights reorder: the primitive has no such argument");
    dnnl_memory_desc_t umd;
    QS_TRY(qs_dnnl_md(&umd, user));
    if (dnnl_memory_desc_equal(&umd, chosen)) return QS_OK;
    *needed = true;
    *bytes = dnnl_memory_desc_get_size(chosen);
    return to_prim ? qs_dnnl_reorder_create(reorder, ctx, &umd, chosen)
                   : qs_dnnl_reorder_create(reorder, ctx, chosen, &umd);
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

const char *qs_dnnl_prim_impl(const qs_dnnl_prim *p) {
    const char *s = NULL;
    if (!p->pd || dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s)
        return "?";
    return s;
}
