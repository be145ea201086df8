/* src/cuda/cuda_conv_engines.c — defines: the GRAPH path of the CUDA convolution: one convolution
 * operation through cuDNN's graph (cudnnBackend*) API (built with cuda_conv_graph.c, the steps
 * bench/cuda/bench_conv_cudnn.cu shares), FP32 compute. Engine configs come from heuristics modes
 * A and FALLBACK; those noted down-converting, reduced-precision-reduction, FFT or Winograd are
 * skipped, deterministic ones preferred; the first acceptable config in heuristic order is kept
 * (benchmark mode: up to QS_CONV_TUNE_PLANS finalized plans of distinct engines are timed once on
 * scratch buffers, the fastest kept). Why the graph API: the legacy API runs BF16/FP16 inputs only
 * with an output of the same type, and the contract wants the FP32 sums; the graph API writes the
 * FP32 accumulator directly (or, where chosen, a BF16 output: the sums rounded once). */
#include "cuda/cuda_conv_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_conv_graph.h"

_Static_assert((int)QS_CONV_FWD == (int)QS_CUDA_CG_FWD && (int)QS_CONV_BWD_DATA == (int)QS_CUDA_CG_BWD_DATA &&
                   (int)QS_CONV_BWD_WEIGHTS == (int)QS_CUDA_CG_BWD_FILTER,
               "the plan's directions are the graph operation's");

/* Call a qs_cuda_cg_* setter fn(args..., &call); on failure return the cuDNN error naming the
 * call (needs `d` and `dir` in scope). */
#define CG_TRY(fn, ...)                                                                            \
    do {                                                                                           \
        const char *cg_call_ = #fn;                                                                \
        cudnnStatus_t cg_st_ = fn(__VA_ARGS__, &cg_call_);                                         \
        if (cg_st_ != CUDNN_STATUS_SUCCESS) return qs_cuda_conv_dnn_fail(d, dir, cg_call_, cg_st_); \
    } while (0)

/* cuDNN's data type of a storage dtype (F32 for anything else). */
static cudnnDataType_t dnn_dtype(qs_dtype dt) {
    switch (dt) {
    case QS_BF16: return CUDNN_DATA_BFLOAT16;
    case QS_F16: return CUDNN_DATA_HALF;
    case QS_F8E4M3: return CUDNN_DATA_FP8_E4M3;
    case QS_F8E5M2: return CUDNN_DATA_FP8_E5M2;
    default: return CUDNN_DATA_FLOAT;
    }
}

/* Graph tensor ids → pointers, given the two inputs and the output of direction dir. */
static void dir_ptrs(int dir, void *a, void *b, void *out, void *ptrs[3]) {
    if (dir == QS_CONV_FWD) {
        ptrs[0] = a, ptrs[1] = b, ptrs[2] = out;    /* X, W, Y */
    } else if (dir == QS_CONV_BWD_DATA) {
        ptrs[0] = out, ptrs[1] = b, ptrs[2] = a;    /* dX, W, dY */
    } else {
        ptrs[0] = b, ptrs[1] = out, ptrs[2] = a;    /* X, dW, dY */
    }
}

/* Create a backend descriptor owned by cd (destroyed with the plan). */
static qs_status g_new(const qs_conv_desc *d, int dir, qs_cuda_conv_dir *cd, cudnnBackendDescriptorType_t t,
                       cudnnBackendDescriptor_t *out) {
    if (cd->nkeep >= QS_CONV_MAX_KEEP) return QS_FAIL(QS_ERR_INTERNAL, "conv_plan: too many cuDNN graph descriptors");
    DNN_TRY(cudnnBackendCreateDescriptor(t, out));
    cd->keep[cd->nkeep++] = *out;
    return QS_OK;
}

/* 4-d tensor of dtype dt, dims in N,C,H,W order with NHWC strides (filters: K,C,R,S with KRSC
 * strides), owned by cd. */
static qs_status g_tensor(const qs_conv_desc *d, int dir, qs_cuda_conv_dir *cd, int64_t uid, qs_dtype dt, int64_t n,
                          int64_t c, int64_t hh, int64_t ww, cudnnBackendDescriptor_t *t) {
    QS_TRY(g_new(d, dir, cd, CUDNN_BACKEND_TENSOR_DESCRIPTOR, t));
    CG_TRY(qs_cuda_cg_tensor, *t, uid, dnn_dtype(dt), n, c, hh, ww, false);
    return QS_OK;
}

/* Run a finalized graph plan on pointers (X, W, Y order) and a workspace. */
static cudnnStatus_t g_execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, void *ptrs[3], void *ws) {
    cudnnBackendDescriptor_t vp = NULL;
    const int64_t uids[3] = {QS_CONV_UID_X, QS_CONV_UID_W, QS_CONV_UID_Y};
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (st == CUDNN_STATUS_SUCCESS) st = qs_cuda_cg_variant_pack(vp, 3, uids, ptrs, ws, NULL);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendExecute(h, plan, vp);
    if (vp) cudnnBackendDestroyDescriptor(vp);
    return st;
}

/* Time finalized plans once on scratch buffers (zeros) and return the index of the fastest;
 * 0 when there is only one or the scratch cannot be allocated. */
static int g_tune(const qs_conv_desc *d, int dir, cudnnHandle_t h, cudaStream_t st, cudnnBackendDescriptor_t *plans,
                  const size_t *wss, int n, qs_dtype a_dt, qs_dtype b_dt, int *timed) {
    *timed = 0;
    if (n <= 1) return 0;
    size_t wmax = 0;
    for (int i = 0; i < n; i++) wmax = wss[i] > wmax ? wss[i] : wmax;
    const size_t sa = (size_t)qs_cuda_conv_numel_a(d, dir) * qs_dtype_size(a_dt), sb = (size_t)qs_cuda_conv_numel_b(d, dir) * qs_dtype_size(b_dt);
    const size_t so = (size_t)qs_cuda_conv_numel_out(d, dir) * sizeof(float); /* at least what any graph output needs */
    qs_cuda_conv_scratch sc;
    int best = 0;
    float best_ms = 0.0f;
    if (qs_cuda_conv_scratch_open(&sc, sa, sb, so, 0, wmax, st)) {
        void *ptrs[3];
        dir_ptrs(dir, sc.a, sc.b, sc.o, ptrs);
        for (int i = 0; i < n; i++) {
            if (g_execute(h, plans[i], ptrs, sc.w) != CUDNN_STATUS_SUCCESS) continue; /* warm-up */
            bool ok = cudaEventRecord(sc.e0, st) == cudaSuccess;
            for (int r = 0; ok && r < 3; r++) ok = g_execute(h, plans[i], ptrs, sc.w) == CUDNN_STATUS_SUCCESS;
            ok = ok && cudaEventRecord(sc.e1, st) == cudaSuccess && cudaEventSynchronize(sc.e1) == cudaSuccess;
            float ms = 0.0f;
            if (!ok || cudaEventElapsedTime(&ms, sc.e0, sc.e1) != cudaSuccess) continue;
            if (*timed == 0 || ms < best_ms) best = i, best_ms = ms;
            (*timed)++;
        }
    }
    qs_cuda_conv_scratch_close(&sc, st);
    return best;
}

/* The operation graph of direction dir into *graph: tensors X, W, Y (inputs A in a_dt, B in b_dt,
 * the output in out_dt), the convolution and its operation, every descriptor owned by cd. */
static qs_status graph_ops(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, qs_dtype a_dt, qs_dtype b_dt,
                           qs_dtype out_dt, qs_cuda_conv_dir *cd, cudnnBackendDescriptor_t *graph) {
    const qs_conv_desc *d = &cp->d;
    const qs_dtype x_dt = dir == QS_CONV_FWD ? a_dt : dir == QS_CONV_BWD_DATA ? out_dt : b_dt;
    const qs_dtype w_dt = dir == QS_CONV_BWD_WEIGHTS ? out_dt : b_dt;
    const qs_dtype y_dt = dir == QS_CONV_FWD ? out_dt : a_dt;
    cudnnBackendDescriptor_t tx = NULL, tw = NULL, ty = NULL, conv = NULL, op = NULL;
    QS_TRY(g_tensor(d, dir, cd, QS_CONV_UID_X, x_dt, d->N, d->C, d->H, d->W, &tx));
    QS_TRY(g_tensor(d, dir, cd, QS_CONV_UID_W, w_dt, d->K, d->C, d->R, d->S, &tw));
    QS_TRY(g_tensor(d, dir, cd, QS_CONV_UID_Y, y_dt, d->N, d->K, d->P, d->Q, &ty));
    const int64_t str[2] = {d->stride_h, d->stride_w}, pad[2] = {d->pad_h, d->pad_w};
    QS_TRY(g_new(d, dir, cd, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv));
    CG_TRY(qs_cuda_cg_conv, conv, str, pad);
    QS_TRY(g_new(d, dir, cd, qs_cuda_cg_conv_op_type(dir), &op));
    CG_TRY(qs_cuda_cg_conv_op, op, dir, tx, tw, ty, conv);
    QS_TRY(g_new(d, dir, cd, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, graph));
    CG_TRY(qs_cuda_cg_graph, *graph, h, &op, 1);
    return QS_OK;
}

/* The engine configs of graph from heuristics mode A followed by mode FALLBACK (A often offers a
 * single engine for an FP32 output) into the malloc'd *cfgs of *ncfg entries; the heuristics
 * descriptors are owned by cd. */
static qs_status graph_configs(const qs_conv_desc *d, qs_cuda_conv_dir *cd, cudnnBackendDescriptor_t graph,
                               cudnnBackendDescriptor_t **cfgs, int64_t *ncfg) {
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (int m = 0; m < 2; m++) {
        cudnnBackendDescriptor_t heur = NULL;
        if (cd->nkeep >= QS_CONV_MAX_KEEP ||
            cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur) != CUDNN_STATUS_SUCCESS)
            continue;
        cd->keep[cd->nkeep++] = heur;
        if (qs_cuda_cg_heur(heur, graph, modes[m], NULL) != CUDNN_STATUS_SUCCESS) continue;
        int64_t wanted = 0;
        if (qs_cuda_cg_engine_configs(heur, cfgs, ncfg, &wanted) != 0) {
            for (int64_t i = 0; i < *ncfg; i++) cudnnBackendDestroyDescriptor((*cfgs)[i]);
            free(*cfgs);
            *cfgs = NULL;
            *ncfg = 0;
            return QS_FAIL(QS_ERR_OOM, "conv_plan: out of memory for %lld engine configs", (long long)wanted);
        }
    }
    return QS_OK;
}

/* Finalized execution plans of distinct engines, the candidates of one graph. */
typedef struct graph_cands {
    cudnnBackendDescriptor_t plans[QS_CONV_TUNE_PLANS];
    size_t wss[QS_CONV_TUNE_PLANS];
    int64_t pcfg[QS_CONV_TUNE_PLANS], pidx[QS_CONV_TUNE_PLANS]; /* the config and its engine's index */
    bool pnondet[QS_CONV_TUNE_PLANS];
    int np;
    cudnnStatus_t last; /* the last finalize failure, if any */
} graph_cands;

/* Finalize up to `want` acceptable configs of cfgs (qs_cuda_cg_cfg_ok, within the workspace cap),
 * one per engine, deterministic ones first: nondeterministic ones only when no deterministic
 * one finalizes. */
static void graph_plans(cudnnHandle_t h, cudnnBackendDescriptor_t *cfgs, int64_t ncfg, int want, graph_cands *c) {
    for (int pass = 0; pass < 2 && c->np == 0; pass++)
        for (int64_t i = 0; i < ncfg && c->np < want; i++) {
            bool nondet;
            int64_t index;
            if (!qs_cuda_cg_cfg_ok(cfgs[i], &nondet, &index) || (pass == 0 && nondet)) continue;
            bool dup = false; /* the same engine from both heuristics modes */
            for (int j = 0; j < c->np; j++) dup = dup || c->pidx[j] == index;
            if (dup) continue;
            cudnnBackendDescriptor_t p = NULL;
            cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p);
            int64_t ws = 0;
            if (st == CUDNN_STATUS_SUCCESS) st = qs_cuda_cg_plan(p, h, cfgs[i], &ws, NULL);
            if (st != CUDNN_STATUS_SUCCESS || ws < 0 || (uint64_t)ws > QS_CONV_ALGO_WS_CAP) {
                if (st != CUDNN_STATUS_SUCCESS) c->last = st;
                if (p) cudnnBackendDestroyDescriptor(p);
                continue;
            }
            c->plans[c->np] = p;
            c->wss[c->np] = (size_t)ws;
            c->pcfg[c->np] = i;
            c->pidx[c->np] = index;
            c->pnondet[c->np] = nondet;
            c->np++;
        }
}

/* Contract: cuda_conv_plan.h. The chosen plan and its config stay in cd; every other config and
 * plan is destroyed. */
qs_status qs_cuda_conv_graph_build(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, cudaStream_t stream,
                                   qs_dtype a_dt, qs_dtype b_dt, qs_dtype out_dt, qs_cuda_conv_dir *cd) {
    const qs_conv_desc *d = &cp->d;
    cd->eng = QS_CONV_ENG_GRAPH;
    cd->out_dt = out_dt;
    cudnnBackendDescriptor_t graph = NULL, *cfgs = NULL;
    int64_t ncfg = 0;
    QS_TRY(graph_ops(cp, dir, h, a_dt, b_dt, out_dt, cd, &graph));
    QS_TRY(graph_configs(d, cd, graph, &cfgs, &ncfg));
    if (ncfg == 0) {
        free(cfgs);
        return QS_FAIL(QS_ERR_BACKEND,
                       "cudnn engine heuristics (modes A and fallback) offered no engine for conv N=%lld H=%lld W=%lld "
                       "C=%lld K=%lld %lldx%lld at %s (%s, %s x %s -> %s)",
                       (long long)d->N, (long long)d->H, (long long)d->W, (long long)d->C, (long long)d->K,
                       (long long)d->R, (long long)d->S, qs_precision_name(d->prec), qs_cuda_conv_dir_names[dir],
                       qs_dtype_name(a_dt), qs_dtype_name(b_dt), qs_dtype_name(out_dt));
    }
    graph_cands c;
    memset(&c, 0, sizeof c);
    c.last = CUDNN_STATUS_SUCCESS;
    graph_plans(h, cfgs, ncfg, qs_cuda_conv_benchmark() ? QS_CONV_TUNE_PLANS : 1, &c); /* else the first in order */
    qs_status rs = QS_OK;
    if (c.np == 0) {
        rs = c.last != CUDNN_STATUS_SUCCESS
                 ? qs_cuda_conv_dnn_fail(d, dir, "cudnnBackendFinalize(execution plan) for every engine config", c.last)
                 : QS_FAIL(QS_ERR_BACKEND,
                           "cudnn: none of the %lld engine configs for conv N=%lld H=%lld W=%lld C=%lld K=%lld "
                           "%lldx%lld at %s (%s) keeps FP32 sums without FFT/Winograd within the workspace cap",
                           (long long)ncfg, (long long)d->N, (long long)d->H, (long long)d->W, (long long)d->C,
                           (long long)d->K, (long long)d->R, (long long)d->S, qs_precision_name(d->prec),
                           qs_cuda_conv_dir_names[dir]);
    } else {
        int timed = 0;
        const int best = g_tune(d, dir, h, stream, c.plans, c.wss, c.np, a_dt, b_dt, &timed);
        cd->gplan = c.plans[best];
        cd->dnn_ws = c.wss[best];
        if (cd->nkeep < QS_CONV_MAX_KEEP) { /* keep the chosen config alive with the plan */
            cd->keep[cd->nkeep++] = cfgs[c.pcfg[best]];
            cfgs[c.pcfg[best]] = NULL;
        }
        for (int i = 0; i < c.np; i++)
            if (i != best) cudnnBackendDestroyDescriptor(c.plans[i]);
        snprintf(cd->impl, sizeof cd->impl,
                 "graph %s x %s -> %s, engine %lld%s (%d plan%s timed of %lld configs), cudnn ws %zu B",
                 qs_dtype_name(a_dt), qs_dtype_name(b_dt), qs_dtype_name(out_dt), (long long)c.pidx[best],
                 c.pnondet[best] ? ", nondeterministic" : "", timed, timed == 1 ? "" : "s", (long long)ncfg,
                 cd->dnn_ws);
    }
    for (int64_t i = 0; i < ncfg; i++)
        if (cfgs[i]) cudnnBackendDestroyDescriptor(cfgs[i]);
    free(cfgs);
    return rs;
}

/* Contract: cuda_conv_plan.h. */
qs_status qs_cuda_conv_graph_exec(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, const void *a, const void *b, void *out,
                            void *ws) {
    const qs_conv_desc *d = &cp->d;
    void *ptrs[3];
    dir_ptrs(dir, (void *)a, (void *)b, out, ptrs);
    DNN_TRY(g_execute(h, cp->dir[dir].gplan, ptrs, ws));
    return QS_OK;
}
