/* src/cpu/cpu_bmm.c — batched matrix product (qs_bmm_desc: attention's QKᵀ and P·V) on oneDNN
 * matmul with 3-D (batch, rows, cols) memory descriptors, every CPU precision.
 *
 * Per batch entry (row-major matrices, batch strides = the matrix sizes):
 *   forward     C  (M,N) = alpha · A (M,K)  · op(B)        op(B) = Bᵀ, B (N,K) when trans_b, else B (K,N)
 *   backward_a  dA (M,K) = alpha · dC (M,N) · op(B)ᵀ
 *   backward_b  dB (N,K) = alpha · dCᵀ (N,M) · A (M,K)     (trans_b)
 *               dB (K,N) = alpha · Aᵀ (K,M) · dC (M,N)     (!trans_b)
 * Every direction is one product O (m,n) = L (m,k) · R (k,n) of two stored operands, each read
 * as stored or transposed through strides (bmm_gemm below), so nothing is copied except where a
 * precision needs it. Per precision, as cpu_linear.c:
 *   FP32  f32 primitives.
 *   BF16  bf16 × bf16 → f32 primitives.
 *   INT8  s8 × s8 → f32 primitives without output scales (oneDNN 2.6 leaves its fast kernels for
 *         runtime scales), then the FP32 epilogue applies alpha·s_L·s_R. A transposed left
 *         operand (backward_b's Aᵀ or dCᵀ) is transposed into the workspace first (2.6 runs an
 *         s8 matmul with a strided-transposed A on its slow gemm kernel). Reductions are exact
 *         in int32 only up to QS_CPU_INT8_EXACT_TERMS products; a plan whose M, N or K (the
 *         three directions' reduction lengths) exceeds that runs emulated instead.
 *   FP16, FP8, and INT8 where the backend emulates it: operands widened (dequantized) to f32
 *         in the workspace, then the FP32 primitives — the format's values, FP32 arithmetic.
 * alpha ≠ 1 (and INT8's scales) are applied by that epilogue pass: in place when overwriting,
 * from a temporary in the workspace when accumulating; otherwise accumulate is oneDNN's sum
 * post-op. oneDNN's default implementation choice is kept for every direction.
 * Workspace: [widened / transposed operands][product temporary][oneDNN scratchpad], sized for
 * the worst direction. */
#include "cpu/cpu_backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum bmm_dir { BMM_FWD = 0, BMM_BWD_A, BMM_BWD_B, BMM_NDIR } bmm_dir;
typedef enum bmm_path { PATH_F32 = 0, PATH_BF16, PATH_INT8 } bmm_path;

/* One stored operand of a product, per batch entry a row-major (rows, cols) matrix, read as
 * stored (trans false) or as its transpose. */
typedef struct bmm_side {
    int64_t rows, cols;
    bool trans;
} bmm_side;

/* One direction: O (batch, m, n) = op(l) (m, k) · op(r) (k, n), O row-major f32. */
typedef struct bmm_gemm {
    int64_t m, n, k;
    bmm_side l, r;
    qs_dnnl_prim prim;      /* O = L·R */
    qs_dnnl_prim prim_acc;  /* O += L·R (sum post-op); built only for backward without epilogue */
} bmm_gemm;

typedef struct qs_cpu_bmm_plan_t {
    qs_cpu_plan hdr;
    qs_bmm_desc d;
    bmm_path path;
    bool emulated;       /* widen operands to f32, run PATH_F32 */
    bool epilogue;       /* scale by alpha (and INT8 scales) in an FP32 pass */
    qs_dtype fdt, gdt;   /* operand storage dtypes: forward (A, B), gradient (dC) */
    bmm_gemm g[BMM_NDIR];
    size_t in_bytes;     /* widened / transposed operands, at the start of the workspace */
    size_t tmp_bytes;    /* product temporary of an accumulating epilogue, after them */
    size_t ws_bytes;     /* total, the oneDNN scratchpad last */
} qs_cpu_bmm_plan_t;

static const char *const bmm_dir_name[BMM_NDIR] = {"bmm forward", "bmm backward_a", "bmm backward_b"};

/* The product of direction `dir` for descriptor d (see the table at the top). */
static void bmm_geometry(const qs_bmm_desc *d, bmm_dir dir, bmm_gemm *g) {
    const int64_t M = d->M, N = d->N, K = d->K;
    const bool tb = d->trans_b;
    const bmm_side b_as_stored = tb ? (bmm_side){N, K, false} : (bmm_side){K, N, false};
    switch (dir) {
    case BMM_FWD: /* A (M,K) · op(B) */
        g->m = M, g->n = N, g->k = K;
        g->l = (bmm_side){M, K, false};
        g->r = b_as_stored;
        g->r.trans = tb;
        break;
    case BMM_BWD_A: /* dC (M,N) · op(B)ᵀ */
        g->m = M, g->n = K, g->k = N;
        g->l = (bmm_side){M, N, false};
        g->r = b_as_stored;
        g->r.trans = !tb;
        break;
    default: /* trans_b: dCᵀ (N,M) · A (M,K); else Aᵀ (K,M) · dC (M,N) */
        g->m = tb ? N : K, g->n = tb ? K : N, g->k = M;
        g->l = tb ? (bmm_side){M, N, true} : (bmm_side){M, K, true};
        g->r = tb ? (bmm_side){M, K, false} : (bmm_side){M, N, false};
        break;
    }
}

/* The 3-D oneDNN view (batch, op rows, op cols) of a stored operand. */
static qs_dnnl_tensor side_tensor(int64_t batch, bmm_side s, qs_dtype dt) {
    const int64_t size = s.rows * s.cols;
    if (!s.trans)
        return (qs_dnnl_tensor){.ndims = 3, .dims = {batch, s.rows, s.cols}, .strides = {size, s.cols, 1},
                                .layout = QS_DNNL_STRIDED, .dt = dt};
    return (qs_dnnl_tensor){.ndims = 3, .dims = {batch, s.cols, s.rows}, .strides = {size, 1, s.cols},
                            .layout = QS_DNNL_STRIDED, .dt = dt};
}

/* Whether direction g's left operand is transposed into the workspace before the product
 * (INT8 only; see the top). */
static bool l_copied(const qs_cpu_bmm_plan_t *bp, const bmm_gemm *g) { return bp->path == PATH_INT8 && g->l.trans; }

/* Release a bmm plan and its primitives (NULL is a no-op). */
void qs_cpu_bmm_plan_destroy(void *plan) {
    qs_cpu_bmm_plan_t *bp = plan;
    if (!bp) return;
    for (int i = 0; i < BMM_NDIR; i++) {
        qs_dnnl_prim_destroy(&bp->g[i].prim);
        qs_dnnl_prim_destroy(&bp->g[i].prim_acc);
    }
    free(bp);
}

/* Build every direction's primitives and size the workspace. */
static qs_status bmm_build(qs_cpu_bmm_plan_t *bp, const qs_dnnl_ctx *ctx) {
    const int64_t B = bp->d.batch;
    const qs_dtype cdt = bp->path == PATH_BF16 ? QS_BF16 : bp->path == PATH_INT8 ? QS_S8 : QS_F32;
    size_t in = 0, tmp = 0, scratch = 0;
    for (int dir = 0; dir < BMM_NDIR; dir++) {
        bmm_gemm *g = &bp->g[dir];
        bmm_geometry(&bp->d, (bmm_dir)dir, g);
        bmm_side ls = g->l;
        if (l_copied(bp, g)) ls = (bmm_side){g->l.cols, g->l.rows, false}; /* the transposed copy */
        const qs_dnnl_tensor lt = side_tensor(B, ls, cdt), rt = side_tensor(B, g->r, cdt);
        const qs_dnnl_tensor ot = side_tensor(B, (bmm_side){g->m, g->n, false}, QS_F32);
        QS_TRY(qs_dnnl_matmul_create(&g->prim, ctx, &lt, &rt, NULL, &ot, false, NULL, bmm_dir_name[dir]));
        scratch = qs_cpu_max_size(scratch, g->prim.scratch_bytes);
        const size_t out_elems = (size_t)(B * g->m * g->n);
        if (dir != BMM_FWD && !bp->epilogue) {
            QS_TRY(qs_dnnl_matmul_create(&g->prim_acc, ctx, &lt, &rt, NULL, &ot, true, NULL, bmm_dir_name[dir]));
            scratch = qs_cpu_max_size(scratch, g->prim_acc.scratch_bytes);
        }
        if (dir != BMM_FWD && bp->epilogue) tmp = qs_cpu_max_size(tmp, out_elems * sizeof(float));
        const size_t l_elems = (size_t)(B * g->l.rows * g->l.cols), r_elems = (size_t)(B * g->r.rows * g->r.cols);
        if (bp->emulated) in = qs_cpu_max_size(in, (l_elems + r_elems) * sizeof(float));
        if (l_copied(bp, g)) in = qs_cpu_max_size(in, l_elems);
    }
    bp->in_bytes = qs_cpu_align(in);
    bp->tmp_bytes = qs_cpu_align(tmp);
    bp->ws_bytes = bp->in_bytes + bp->tmp_bytes + qs_cpu_align(scratch);
    return QS_OK;
}

/* Prepare the plan of descriptor d: batch, M, N, K >= 1, finite alpha, a precision the backend
 * runs. *workspace receives the bytes every execution needs. */
qs_status qs_cpu_bmm_plan(qs_backend *be, const qs_bmm_desc *d, void **plan, size_t *workspace) {
    if (!d || !plan || !workspace) return QS_FAIL(QS_ERR_INVALID_ARG, "bmm_plan: NULL descriptor or output");
    *plan = NULL;
    *workspace = 0;
    if (d->batch < 1 || d->M < 1 || d->N < 1 || d->K < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "bmm_plan: batch=%lld M=%lld N=%lld K=%lld must all be >= 1",
                       (long long)d->batch, (long long)d->M, (long long)d->N, (long long)d->K);
    if (!isfinite(d->alpha))
        return QS_FAIL(QS_ERR_INVALID_ARG, "bmm_plan: alpha = %g; it must be finite", (double)d->alpha);
    QS_TRY(qs_cpu_prec_check(be, d->prec, "bmm_plan"));
    qs_cpu_bmm_plan_t *bp = calloc(1, sizeof *bp);
    if (!bp) return QS_FAIL(QS_ERR_OOM, "bmm_plan: out of memory for the plan");
    bp->hdr.kind = QS_CPU_PLAN_BMM;
    bp->hdr.prec = d->prec;
    bp->d = *d;
    bp->fdt = qs_precision_operand_dtype(d->prec, false);
    bp->gdt = qs_precision_operand_dtype(d->prec, true);
    bp->emulated = qs_cpu_prec_of(be, d->prec) == QS_PREC_EMULATED;
    const int64_t longest = d->M > d->N ? (d->M > d->K ? d->M : d->K) : (d->N > d->K ? d->N : d->K);
    if (d->prec == QS_PREC_INT8 && longest > QS_CPU_INT8_EXACT_TERMS) bp->emulated = true;
    bp->path = bp->emulated                  ? PATH_F32
               : d->prec == QS_PREC_BF16 ? PATH_BF16
               : d->prec == QS_PREC_INT8 ? PATH_INT8
                                         : PATH_F32;
    bp->epilogue = bp->path == PATH_INT8 || d->alpha != 1.0f;
    qs_status st = bmm_build(bp, &qs_cpu_be(be)->dnnl);
    if (st != QS_OK) {
        qs_cpu_bmm_plan_destroy(bp);
        return qs_error_wrap(st, "bmm_plan (%s, batch=%lld M=%lld N=%lld K=%lld%s): ", qs_precision_name(d->prec),
                             (long long)d->batch, (long long)d->M, (long long)d->N, (long long)d->K,
                             d->trans_b ? ", trans_b" : "");
    }
    *plan = bp;
    *workspace = bp->ws_bytes;
    return QS_OK;
}

/* Run direction dir: out (batch, m, n) (+)= alpha · op(l) · op(r) for the operands l, r (already
 * checked against the plan's dtypes). */
static qs_status bmm_run(qs_backend *be, qs_cpu_bmm_plan_t *bp, bmm_dir dir, const qs_operand *l, const qs_operand *r,
                         float *out, bool accumulate, void *ws) {
    const char *what = bmm_dir_name[dir];
    if (!out) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: NULL output", what);
    if (bp->ws_bytes && !ws)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the plan needs %zu bytes of workspace but ws is NULL", what,
                       bp->ws_bytes);
    bmm_gemm *g = &bp->g[dir];
    const int64_t B = bp->d.batch, l_size = g->l.rows * g->l.cols;
    void *pl = (void *)l->data, *pr = (void *)r->data;
    if (bp->emulated) {
        float *fl, *fr, *w = ws;
        QS_TRY(qs_cpu_widen(be, B * g->l.rows, g->l.cols, l, &fl, w));
        QS_TRY(qs_cpu_widen(be, B * g->r.rows, g->r.cols, r, &fr, w + B * l_size));
        pl = fl, pr = fr;
    } else if (l_copied(bp, g)) {
        for (int64_t b = 0; b < B; b++)
            qs_cpu_transpose_s8(g->l.rows, g->l.cols, (const int8_t *)l->data + b * l_size, (int8_t *)ws + b * l_size);
        pl = ws;
    }
    void *scratch = ws ? (char *)ws + bp->in_bytes + bp->tmp_bytes : NULL;
    const qs_dnnl_ctx *ctx = &qs_cpu_be(be)->dnnl;
    if (!bp->epilogue) {
        void *h[3] = {pl, pr, out};
        return qs_dnnl_prim_exec(accumulate ? &g->prim_acc : &g->prim, ctx, h, scratch, what);
    }
    float *acc = accumulate ? (float *)((char *)ws + bp->in_bytes) : out;
    void *h[3] = {pl, pr, acc};
    QS_TRY(qs_dnnl_prim_exec(&g->prim, ctx, h, scratch, what));
    float factor = bp->d.alpha;
    if (bp->path == PATH_INT8) factor *= l->scale[0] * r->scale[0];
    qs_cpu_epilogue(B * g->m, g->n, acc, factor, NULL, NULL, out, accumulate);
    return QS_OK;
}

/* The checks every bmm execution starts with: the plan's kind and two operands of its storage
 * dtypes (u in the gradient dtype when u_grad, v in the forward dtype; per-tensor scales),
 * named "<what> <name>" in messages. */
static qs_status bmm_args(void *plan, const qs_operand *u, bool u_grad, const char *u_name, const qs_operand *v,
                          const char *v_name, const char *what) {
    QS_TRY(qs_cpu_plan_check(plan, QS_CPU_PLAN_BMM, what));
    const qs_cpu_bmm_plan_t *bp = plan;
    char label[64];
    snprintf(label, sizeof label, "%s %s", what, u_name);
    QS_TRY(qs_cpu_operand_check(u, u_grad ? bp->gdt : bp->fdt, false, label));
    snprintf(label, sizeof label, "%s %s", what, v_name);
    return qs_cpu_operand_check(v, bp->fdt, false, label);
}

/* c (batch,M,N) = alpha · a (batch,M,K) · op(b); a, b in the forward dtype, per-tensor scales. */
qs_status qs_cpu_bmm_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *a, const qs_operand *b,
                             float *c, void *ws) {
    QS_TRY(bmm_args(plan, a, false, "a", b, "b", "bmm_forward"));
    return bmm_run(be, plan, BMM_FWD, a, b, c, false, ws);
}

/* da (batch,M,K) (+)= alpha · dc (batch,M,N) · op(b)ᵀ; dc in the gradient dtype, b forward. */
qs_status qs_cpu_bmm_backward_a(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dc, const qs_operand *b,
                                float *da, bool accumulate, void *ws) {
    QS_TRY(bmm_args(plan, dc, true, "dc", b, "b", "bmm_backward_a"));
    return bmm_run(be, plan, BMM_BWD_A, dc, b, da, accumulate, ws);
}

/* db (+)= alpha · dcᵀ · a (batch,N,K) when trans_b, else alpha · aᵀ · dc (batch,K,N). */
qs_status qs_cpu_bmm_backward_b(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dc, const qs_operand *a,
                                float *db, bool accumulate, void *ws) {
    QS_TRY(bmm_args(plan, dc, true, "dc", a, "a", "bmm_backward_b"));
    qs_cpu_bmm_plan_t *bp = plan;
    if (bp->d.trans_b) return bmm_run(be, bp, BMM_BWD_B, dc, a, db, accumulate, ws);
    return bmm_run(be, bp, BMM_BWD_B, a, dc, db, accumulate, ws);
}

/* oneDNN implementation name of direction dir's primitive ("?" for a foreign plan or dir). */
const char *qs_cpu_bmm_impl_name(const void *plan, int dir) {
    const qs_cpu_bmm_plan_t *bp = plan;
    if (!bp || bp->hdr.kind != QS_CPU_PLAN_BMM || dir < 0 || dir >= BMM_NDIR) return "?";
    return qs_dnnl_prim_impl(&bp->g[dir].prim);
}
