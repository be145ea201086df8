/* src/layers/gemm_quant.c — low-precision operands of Linear and Conv2d (see gemm_quant.h). */
#include "layers/gemm_quant.h"

#include "qsync/rng.h"

static size_t align64(size_t b) { return (b + 63u) & ~(size_t)63u; }
static bool low_precision(const qs_node *n) { return qs_precision_operand_dtype(n->prec, false) != QS_F32; }
static bool per_channel(const qs_model *m, const qs_node *n) {
    return m->weight_per_channel && qs_precision_operand_dtype(n->prec, false) == QS_S8;
}
/* Byte size of a (rows, cols) tensor of dtype dt, padded so scales can follow it. */
static size_t data_bytes(int64_t rows, int64_t cols, qs_dtype dt) {
    return align64((size_t)(rows * cols) * qs_dtype_size(dt));
}

static bool is_fp8(qs_dtype dt) { return dt == QS_F8E4M3 || dt == QS_F8E5M2; }

/* Whether a quantized copy in dtype dt carries a transposed copy, for a node that keeps them. */
static bool keeps_t(bool keeps, qs_dtype dt) { return keeps && is_fp8(dt); }

/* Bytes of a quantized operand's data, with its transposed copy when the node keeps one. */
static size_t operand_bytes(bool keeps, int64_t rows, int64_t cols, qs_dtype dt) {
    return data_bytes(rows, cols, dt) * (keeps_t(keeps, dt) ? 2u : 1u);
}

/* Whether the node keeps transposed copies of its FP8 W and dY (gemm_quant.h). */
static bool gemm_keeps_transposed(const qs_node *n, qs_gemm_shape sh, const qs_mem_facts *f) {
    return sh.transposable && f->fp8_wants_transposed && is_fp8(qs_precision_operand_dtype(n->prec, false));
}

size_t qs_fp8_history_bytes(const qs_model *m) { return align64((size_t)(m->fp8_amax_history + 1) * sizeof(float)); }

const qs_quant_delayed *qs_fp8_delayed(const qs_model *m, float *hist, qs_quant_delayed *buf) {
    if (!hist) return NULL;
    *buf = (qs_quant_delayed){.amax = hist, .len = m->fp8_amax_history,
                              .slot = (int)(m->step % m->fp8_amax_history), .record = m->training,
                              .step_at = m->capture.on ? m->step_dev : NULL};
    return buf;
}

/* The amax history of the node's W (which 0) or dY (which 1) in saved[2], or NULL. */
static float *gemm_history(const qs_model *m, const qs_node *n, int which) {
    if (m->fp8_amax_history < 1 || !is_fp8(qs_precision_operand_dtype(n->prec, false)) || !n->saved[2]) return NULL;
    return (float *)(void *)((char *)n->saved[2] + (size_t)which * qs_fp8_history_bytes(m));
}

/* saved[1]: dY's quantized copy (and transposed copy) and its scale; saved[2]: the FP8 amax
 * histories under delayed scaling (carried from step to step). */
static void gemm_dy_declare(const qs_model *m, const qs_node *n, qs_gemm_shape sh, const qs_mem_facts *f,
                            qs_node_decl *d) {
    if (!low_precision(n)) return;
    const qs_dtype gdt = qs_precision_operand_dtype(n->prec, true);
    d->saved[1] = (qs_buffer_decl){
        .bytes = operand_bytes(gemm_keeps_transposed(n, sh, f), sh.dy_rows, sh.dy_cols, gdt) + sizeof(float),
        .dtype = gdt};
    if (!is_fp8(qs_precision_operand_dtype(n->prec, false)) || m->fp8_amax_history < 1) return;
    d->saved[2] = (qs_buffer_decl){.bytes = 2 * qs_fp8_history_bytes(m), .dtype = QS_F32, .persistent = true};
}

void qs_gemm_dy_declare(const qs_model *m, const qs_node *n, int64_t rows, int64_t cols, const qs_mem_facts *f,
                        qs_node_decl *d) {
    gemm_dy_declare(m, n, (qs_gemm_shape){.dy_rows = rows, .dy_cols = cols}, f, d);
}

void qs_gemm_quant_declare(const qs_model *m, const qs_node *n, qs_gemm_shape sh, const qs_mem_facts *f,
                           qs_node_decl *d) {
    gemm_dy_declare(m, n, sh, f, d);
    if (!low_precision(n)) return;
    const qs_dtype fdt = qs_precision_operand_dtype(n->prec, false);
    const size_t wdata = operand_bytes(gemm_keeps_transposed(n, sh, f), sh.w_rows, sh.w_cols, fdt);
    /* persistent: the unit scale after the weight's scales is written once (qs_gemm_quant_bind) */
    d->saved[0] = (qs_buffer_decl){.bytes = wdata + (size_t)(sh.w_rows + 1) * sizeof(float), .dtype = fdt,
                                   .persistent = true};
    if (per_channel(m, n)) d->saved[2] = d->saved[1]; /* INT8 only: saved[2] is free (no FP8 histories) */
}

void qs_gemm_quant_setup(qs_model *m, qs_node *n, qs_gemm_shape sh) {
    n->quant_step = -1;
    n->keeps_transposed = gemm_keeps_transposed(n, sh, &m->facts);
}

qs_operand qs_gemm_input_operand(qs_model *m, const qs_node *n, int slot) {
    const qs_node *in = qs_layer_input(m, n, slot);
    qs_operand x = qs_operand_f32(in->y);
    x.dt = in->out_dtype;
    if (x.dt == QS_S8 || x.dt == QS_F8E4M3 || x.dt == QS_F8E5M2) x.scale = in->saved[0];
    if (in->kind == QS_NODE_CAST) x.data_t = in->saved[1]; /* Xᵀ where the cast keeps one */
    return x;
}

/* The transposed copy inside a [data | data_t | ...] block, or NULL when the node keeps none. */
static void *data_t_of(const qs_node *n, void *block, int64_t rows, int64_t cols, qs_dtype dt) {
    return keeps_t(n->keeps_transposed, dt) ? (char *)block + data_bytes(rows, cols, dt) : NULL;
}

/* Scales of saved[0]: after the weight data (and its transposed copy). */
static float *w_scales(const qs_node *n, qs_gemm_shape sh) {
    const qs_dtype fdt = qs_precision_operand_dtype(n->prec, false);
    return (float *)((char *)n->saved[0] + operand_bytes(n->keeps_transposed, sh.w_rows, sh.w_cols, fdt));
}

qs_status qs_gemm_quant_bind(qs_model *m, qs_node *n, qs_gemm_shape sh) {
    if (!low_precision(n)) return QS_OK;
    const float one = 1.0f; /* the unit scale of per-channel weights in backward-data */
    QS_TRY(m->be->ops->copy_h2d(m->be, m->stream, w_scales(n, sh) + sh.w_rows, &one, sizeof one));
    return m->be->ops->stream_sync(m->be, m->stream);
}

/* The weight for forward: quantized now from the FP32 parameter when the precision needs it. */
static qs_status qs_gemm_w_forward(qs_model *m, qs_node *n, qs_gemm_shape sh, qs_operand *w) {
    const float *master = qs_model_param_ptr(m, qs_node_weight_param(n));
    *w = qs_operand_f32(master);
    if (!low_precision(n)) return QS_OK;
    const qs_dtype fdt = qs_precision_operand_dtype(n->prec, false);
    const bool pc = per_channel(m, n);
    float *scales = w_scales(n, sh);
    void *wt = data_t_of(n, n->saved[0], sh.w_rows, sh.w_cols, fdt);
    qs_quant_delayed dl;
    QS_TRY(m->be->ops->quantize(m->be, m->stream, sh.w_rows, sh.w_cols, master, NULL, fdt, n->saved[0], scales, pc,
                                NULL, wt, qs_fp8_delayed(m, gemm_history(m, n, 0), &dl)));
    *w = (qs_operand){.data = n->saved[0], .dt = fdt, .scale = scales, .per_row = pc, .data_t = wt};
    if (fdt == QS_BF16 || fdt == QS_F16) w->scale = NULL;
    return QS_OK;
}

/* The weight for backward-data (per-tensor scale; unit scale for per-channel weights). */
static qs_operand qs_gemm_w_backward(qs_model *m, const qs_node *n, qs_gemm_shape sh) {
    if (!low_precision(n)) return qs_operand_f32(qs_model_param_ptr(m, qs_node_weight_param(n)));
    const qs_dtype fdt = qs_precision_operand_dtype(n->prec, false);
    float *scales = w_scales(n, sh);
    qs_operand w = {.data = n->saved[0], .dt = fdt, .scale = scales, .per_row = false,
                    .data_t = data_t_of(n, n->saved[0], sh.w_rows, sh.w_cols, fdt)};
    if (per_channel(m, n)) w.scale = scales + sh.w_rows; /* the stored 1.0f */
    if (fdt == QS_BF16 || fdt == QS_F16) w.scale = NULL;
    return w;
}

/* The stochastic rounding stream of the node's dY (role 0) or folded dY (role 1) in *buf, or
 * NULL when the model rounds gradients to nearest (gemm_quant.h). */
static const qs_sr *dy_sr(const qs_model *m, const qs_node *n, int role, qs_sr *buf) {
    if (m->grad_round_nearest) return NULL;
    const uint64_t node_index = (uint64_t)(n - m->nodes);
    *buf = (qs_sr){.key = qs_rng_key(m->seed, "sr", 4 * node_index + (uint64_t)role), .counter = (uint64_t)m->step,
                   .counter_at = m->capture.on ? (const uint64_t *)(const void *)m->step_dev : NULL};
    return buf;
}

/* dY as an operand, quantized on first use in this step; folded selects the per-channel
 * backward-data variant (only differs for per-output-channel INT8 weights). */
static qs_status qs_gemm_dy(qs_model *m, qs_node *n, qs_gemm_shape sh, bool folded, qs_operand *dy) {
    *dy = qs_operand_f32(n->dy);
    if (!low_precision(n)) return QS_OK;
    const qs_dtype gdt = qs_precision_operand_dtype(n->prec, true);
    const bool fold = folded && per_channel(m, n);
    const int slot = fold ? 2 : 1;
    const size_t gdata = fold ? data_bytes(sh.dy_rows, sh.dy_cols, gdt)
                              : operand_bytes(n->keeps_transposed, sh.dy_rows, sh.dy_cols, gdt);
    float *scale = (float *)((char *)n->saved[slot] + gdata);
    void *dyt = fold ? NULL : data_t_of(n, n->saved[slot], sh.dy_rows, sh.dy_cols, gdt);
    *dy = (qs_operand){.data = n->saved[slot], .dt = gdt, .scale = scale, .data_t = dyt};
    if (gdt == QS_BF16 || gdt == QS_F16) dy->scale = NULL;
    if (!fold && n->quant_step == m->step) return QS_OK; /* already quantized in this step */
    qs_sr sr;
    const float *col_scale = fold ? w_scales(n, sh) : NULL;
    qs_quant_delayed dl;
    QS_TRY(m->be->ops->quantize(m->be, m->stream, sh.dy_rows, sh.dy_cols, n->dy, col_scale, gdt, n->saved[slot], scale,
                                false, dy_sr(m, n, fold ? 1 : 0, &sr), dyt,
                                qs_fp8_delayed(m, gemm_history(m, n, 1), &dl)));
    if (!fold) n->quant_step = m->step;
    return QS_OK;
}

qs_status qs_gemm_quantized_dy(qs_model *m, qs_node *n, int64_t rows, int64_t cols, qs_operand *dy) {
    return qs_gemm_dy(m, n, (qs_gemm_shape){.dy_rows = rows, .dy_cols = cols}, false, dy);
}

qs_status qs_gemm_forward(qs_model *m, qs_node *n, qs_gemm_shape sh, qs_gemm_forward_fn op) {
    const float *b = n->n_params > 1 ? qs_model_param_ptr(m, n->param[1]) : NULL;
    qs_operand x = qs_gemm_input_operand(m, n, 0), w;
    QS_TRY(qs_gemm_w_forward(m, n, sh, &w));
    return op(m->be, n->plan, m->stream, &x, &w, b, n->y, m->workspace);
}

qs_status qs_gemm_backward_data(qs_model *m, qs_node *n, qs_gemm_shape sh, qs_gemm_backward_data_fn op) {
    bool acc;
    void *dx = qs_model_grad_target(m, n, 0, &acc); /* in qs_gemm_dx_dtype (the plan's dx_dt) */
    if (!dx) return QS_OK;
    qs_operand dy, w = qs_gemm_w_backward(m, n, sh);
    QS_TRY(qs_gemm_dy(m, n, sh, true, &dy));
    return op(m->be, n->plan, m->stream, &dy, &w, dx, acc, m->workspace);
}

qs_status qs_gemm_backward_weights(qs_model *m, qs_node *n, qs_gemm_shape sh, qs_gemm_backward_weights_fn op) {
    float *db = n->n_params > 1 ? qs_model_grad_ptr(m, n->param[1]) : NULL;
    qs_operand dy, x = qs_gemm_input_operand(m, n, 0);
    QS_TRY(qs_gemm_dy(m, n, sh, false, &dy));
    const bool fused_db = !low_precision(n); /* the backend sums an FP32 dY itself */
    QS_TRY(op(m->be, n->plan, m->stream, &dy, &x, qs_model_grad_ptr(m, qs_node_weight_param(n)), fused_db ? db : NULL,
              m->workspace));
    if (!db || fused_db) return QS_OK;
    return m->be->ops->column_sums(m->be, m->stream, sh.dy_rows, sh.dy_cols, n->dy, db);
}

qs_dtype qs_gemm_dx_dtype(const qs_model *m, const qs_node *n) {
    return m->nodes[qs_model_grad_owner(m, n->inputs[0])].grad_dtype;
}

bool qs_gemm_dy_written_by_reader(const qs_model *m, const qs_node *n) {
    return m->fuse_casts && n->kind == QS_NODE_CONV2D && n->out_dtype == QS_BF16 && n->n_params == 1 &&
           qs_precision_operand_dtype(n->prec, true) == QS_BF16;
}

bool qs_gemm_dy_from_reader(qs_model *m, qs_node *n, void **dst, const qs_sr **sr, qs_sr *buf) {
    if (!qs_gemm_dy_written_by_reader(m, n) || !n->saved[1]) return false;
    *dst = n->saved[1]; /* [data | scale]: BF16 data at offset 0, no transposed copy, no scale read */
    *sr = dy_sr(m, n, 0, buf);
    return true;
}

void qs_gemm_dy_mark_quantized(qs_model *m, qs_node *n) { n->quant_step = m->step; }
