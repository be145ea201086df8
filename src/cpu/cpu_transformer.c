/* src/cpu/cpu_transformer.c — the memory-bound transformer operators of the CPU backend (FP32,
 * rows × C with C innermost; contracts in src/core/backend_ops.def): LayerNorm, GELU (tanh
 * approximation), tanh, token-embedding lookup and its gradient, the broadcast add of position
 * embeddings, attention's heads ⇄ tokens permute and the masked softmax.
 *
 * OpenMP over independent elements, rows or embedding rows. Every reduction is either within one
 * row, sequential and in double, or over rows in a fixed chunk order (qs_cpu_colsums), and the
 * embedding gradient sums each table row's contributions in row order on one thread, so every
 * result is bitwise identical for any thread count. */
#include "cpu/cpu_backend.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ shared helpers */

/* A (rows, C) op's arguments: rows >= 0, C >= 1 and, when rows·C > 0, none of the pointers NULL. */
static qs_status rows_check(const char *what, int64_t rows, int64_t C, int nptrs, const void *const *ptrs) {
    if (rows < 0 || C < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: rows=%lld C=%lld; need rows >= 0 and C >= 1", what, (long long)rows,
                       (long long)C);
    return qs_cpu_args_check(what, rows * C, nptrs, ptrs);
}

/* d[i] = v (or d[i] += v when accumulate): the store of every gradient written here. */
static inline void store(float *d, float v, bool accumulate) { *d = accumulate ? *d + v : v; }

/* ------------------------------------------------------------------ LayerNorm */

/* Per row r of x (rows, C): mean and rstd = 1/sqrt(biased var + eps) (two passes in double, saved
 * as floats), y = (x − mean)·rstd·gamma + beta. gamma, beta (C), save_mean, save_rstd (rows). */
qs_status qs_cpu_layernorm_forward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const float *x,
                                   const float *gamma, const float *beta, float eps, float *y, float *save_mean,
                                   float *save_rstd) {
    QS_TRY(rows_check("layernorm_forward", rows, C, 6, (const void *[]){x, gamma, beta, y, save_mean, save_rstd}));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        double sum = 0.0, sq = 0.0;
        for (int64_t c = 0; c < C; c++) sum += xr[c];
        const double mean = sum / (double)C;
        for (int64_t c = 0; c < C; c++) sq += ((double)xr[c] - mean) * ((double)xr[c] - mean);
        const float m = (float)mean, rs = (float)(1.0 / sqrt(sq / (double)C + (double)eps));
        save_mean[r] = m;
        save_rstd[r] = rs;
#pragma omp simd
        for (int64_t c = 0; c < C; c++) yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];
    }
    return QS_OK;
}

/* With x̂ = (x − mean)·rstd and g = dy·gamma per row:
 *   dx = rstd·(g − mean_c(g) − x̂·mean_c(g·x̂))     (row sums in double; dx may be NULL)
 *   dgamma[c] = Σ_r dy·x̂,  dbeta[c] = Σ_r dy      (over rows in qs_cpu_colsums' fixed chunks).
 * x̂ is formed once into the backend scratch (rows·C floats) and read by both. */
qs_status qs_cpu_layernorm_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const float *x,
                                    const float *dy, const float *gamma, const float *save_mean,
                                    const float *save_rstd, float *dx, bool accumulate, float *dgamma,
                                    float *dbeta) {
    const char *what = "layernorm_backward";
    QS_TRY(rows_check(what, rows, C, 5, (const void *[]){x, dy, gamma, save_mean, save_rstd}));
    if (!dgamma || !dbeta) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: NULL dgamma or dbeta (both are required)", what);
    const size_t xhat_bytes = qs_cpu_align((size_t)(rows * C) * sizeof(float));
    void *mem;
    QS_TRY(qs_cpu_scratch(qs_cpu_be(be), xhat_bytes + 2 * (size_t)C * sizeof(double), &mem));
    float *xhat = mem;
    double *sum_dy = (double *)((char *)mem + xhat_bytes), *sum_dy_xhat = sum_dy + C;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * C, *gr = dy + r * C;
        const float m = save_mean[r], rs = save_rstd[r];
        float *hr = xhat + r * C;
        double sg = 0.0, sgh = 0.0;
        for (int64_t c = 0; c < C; c++) {
            hr[c] = (xr[c] - m) * rs;
            const double g = (double)gr[c] * gamma[c];
            sg += g;
            sgh += g * hr[c];
        }
        if (!dx) continue;
        const float a = (float)(sg / (double)C), b = (float)(sgh / (double)C);
        float *dr = dx + r * C;
#pragma omp simd
        for (int64_t c = 0; c < C; c++) store(&dr[c], rs * (gr[c] * gamma[c] - a - hr[c] * b), accumulate);
    }
    QS_TRY(qs_cpu_colsums(rows, C, dy, NULL, xhat, NULL, NULL, sum_dy, sum_dy_xhat));
    for (int64_t c = 0; c < C; c++) {
        dbeta[c] = (float)sum_dy[c];
        dgamma[c] = (float)sum_dy_xhat[c];
    }
    return QS_OK;
}

/* ------------------------------------------------------------------ GELU, tanh */

#define GELU_K 0.7978845608028654f /* sqrt(2/π) */
#define GELU_A 0.044715f

/* With z = √(2/π)·(x + 0.044715·x³): 0.5·(1 + tanh(z)) = σ(2z) and its complement
 * (qs_cpu_logistic). The logistic form has no cancellation where 1 + tanh(z) → 0. */
static inline float gelu_sigma(float x, float *one_minus) {
    return qs_cpu_logistic(2.0f * GELU_K * (x + GELU_A * x * x * x), one_minus);
}

/* y = x·σ(2z) = 0.5·x·(1 + tanh(z)) elementwise over n values (y may alias x). */
qs_status qs_cpu_gelu_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y) {
    QS_TRY(qs_cpu_args_check("gelu_forward", n, 2, (const void *[]){x, y}));
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float om;
        y[i] = x[i] * gelu_sigma(x[i], &om);
    }
    return QS_OK;
}

/* dx (+)= dy·gelu'(x), gelu'(x) = σ + 2·x·σ·(1 − σ)·z'(x), z' = √(2/π)·(1 + 3·0.044715·x²)
 * (the tanh form's 0.5·(1 + t) + 0.5·x·(1 − t²)·z' with t = 2σ − 1), from the forward's input x. */
qs_status qs_cpu_gelu_backward(qs_backend *be, qs_stream *s, int64_t n, const float *x, const float *dy, float *dx,
                               bool accumulate) {
    QS_TRY(qs_cpu_args_check("gelu_backward", n, 3, (const void *[]){x, dy, dx}));
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        float om;
        const float sg = gelu_sigma(v, &om), dz = GELU_K * (1.0f + 3.0f * GELU_A * v * v);
        store(&dx[i], dy[i] * (sg + 2.0f * v * sg * om * dz), accumulate);
    }
    return QS_OK;
}

/* y = tanh(x) elementwise over n values (y may alias x). */
qs_status qs_cpu_tanh_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y) {
    QS_TRY(qs_cpu_args_check("tanh_forward", n, 2, (const void *[]){x, y}));
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
    return QS_OK;
}

/* dx (+)= dy·(1 − y²) from the forward's output y. */
qs_status qs_cpu_tanh_backward(qs_backend *be, qs_stream *s, int64_t n, const float *y, const float *dy, float *dx,
                               bool accumulate) {
    QS_TRY(qs_cpu_args_check("tanh_backward", n, 3, (const void *[]){y, dy, dx}));
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) store(&dx[i], dy[i] * (1.0f - y[i] * y[i]), accumulate);
    return QS_OK;
}

/* ------------------------------------------------------------------ embedding */

/* Shapes and ids of an embedding op: rows >= 0, C >= 1, V >= 1; ids, the table-side buffer tab
 * and the rows-side buffer per_row non-NULL when rows > 0; every ids[r] an integer in [0, V) (a precise
 * message names the first that is not). */
static qs_status emb_check(const char *what, int64_t rows, int64_t C, int64_t V, const float *ids, const float *tab,
                           const float *per_row) {
    if (rows < 0 || C < 1 || V < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: rows=%lld C=%lld V=%lld; need rows >= 0, C >= 1 and V >= 1", what,
                       (long long)rows, (long long)C, (long long)V);
    QS_TRY(qs_cpu_args_check(what, rows * C, 3, (const void *[]){ids, tab, per_row}));
    for (int64_t r = 0; r < rows; r++) {
        const float id = ids[r];
        if (!(id >= 0.0f && id < (float)V) || id != floorf(id))
            return QS_FAIL(QS_ERR_INVALID_ARG,
                           "%s: token id %g at row %lld is not an integer in [0, %lld) (the vocabulary size); check "
                           "the data's token ids against the model's vocabulary",
                           what, (double)id, (long long)r, (long long)V);
    }
    return QS_OK;
}

/* y[r,:] = table[ids[r],:] for r < rows; table (V,C), y (rows,C). */
qs_status qs_cpu_embedding_forward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, int64_t V,
                                   const float *ids, const float *table, float *y) {
    QS_TRY(emb_check("embedding_forward", rows, C, V, ids, table, y));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) memcpy(y + r * C, table + (int64_t)ids[r] * C, (size_t)C * sizeof(float));
    return QS_OK;
}

#define EMB_COLS 64 /* columns summed at once (a stack block of doubles) */

/* dtable[v,:] = Σ_{r: ids[r]=v} dy[r,:] (or dtable[v,:] += that sum) for every v < V: the rows of
 * each v are listed in row order by a stable counting sort (in the backend scratch), and one
 * thread sums them in that order, in double, rounding once. Rows no id names are zeroed when
 * overwriting and left alone when accumulating. */
qs_status qs_cpu_embedding_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, int64_t V,
                                    const float *ids, const float *dy, float *dtable, bool accumulate) {
    QS_TRY(emb_check("embedding_backward", rows, C, V, ids, dtable, dy));
    if (!dtable) return QS_FAIL(QS_ERR_INVALID_ARG, "embedding_backward: NULL dtable");
    int64_t *start, *order;
    QS_TRY(qs_cpu_scratch(qs_cpu_be(be), (size_t)(V + 1 + rows) * sizeof(int64_t), (void **)&start));
    order = start + V + 1;
    memset(start, 0, (size_t)(V + 1) * sizeof(int64_t));
    for (int64_t r = 0; r < rows; r++) start[(int64_t)ids[r] + 1]++;
    for (int64_t v = 0; v < V; v++) start[v + 1] += start[v];
    for (int64_t r = 0; r < rows; r++) order[start[(int64_t)ids[r]]++] = r; /* start[v] now ends v's rows */
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t v = 0; v < V; v++) {
        const int64_t r0 = v == 0 ? 0 : start[v - 1], r1 = start[v];
        float *t = dtable + v * C;
        if (r0 == r1) {
            if (!accumulate) memset(t, 0, (size_t)C * sizeof(float));
            continue;
        }
        for (int64_t c0 = 0; c0 < C; c0 += EMB_COLS) {
            const int64_t nc = C - c0 < EMB_COLS ? C - c0 : EMB_COLS;
            double acc[EMB_COLS] = {0};
            for (int64_t i = r0; i < r1; i++) {
                const float *g = dy + order[i] * C + c0;
                for (int64_t c = 0; c < nc; c++) acc[c] += g[c];
            }
            for (int64_t c = 0; c < nc; c++) store(&t[c0 + c], (float)acc[c], accumulate);
        }
    }
    return QS_OK;
}

/* ------------------------------------------------------------------ broadcast add, heads */

/* y[o·inner + i] = x[o·inner + i] + v[i] for o < outer, i < inner (y may alias x). */
qs_status qs_cpu_add_broadcast(qs_backend *be, qs_stream *s, int64_t outer, int64_t inner, const float *x,
                               const float *v, float *y) {
    if (outer < 0 || inner < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "add_broadcast: outer=%lld inner=%lld must be >= 0", (long long)outer,
                       (long long)inner);
    QS_TRY(qs_cpu_args_check("add_broadcast", outer * inner, 3, (const void *[]){x, v, y}));
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < outer; o++) {
        const float *xo = x + o * inner;
        float *yo = y + o * inner;
#pragma omp simd
        for (int64_t i = 0; i < inner; i++) yo[i] = xo[i] + v[i];
    }
    return QS_OK;
}

/* Heads ⇄ tokens: for every (n, h, t) the D floats at ((n·H + h)·T + t)·D of the (N,H,T,D) side
 * and at (n·T + t)·ld + off + h·D of the token side are copied (or added) from the source side to
 * the destination side; to_heads says which side is the source. Requires off >= 0 and
 * ld >= off + H·D; src and dst must not overlap. */
qs_status qs_cpu_permute_heads(qs_backend *be, qs_stream *s, int64_t N, int64_t T, int64_t H, int64_t D, int64_t ld,
                               int64_t off, const float *src, float *dst, bool to_heads, bool accumulate) {
    const char *what = "permute_heads";
    if (N < 0 || T < 0 || H < 0 || D < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: negative dimension in N=%lld T=%lld H=%lld D=%lld", what, (long long)N,
                       (long long)T, (long long)H, (long long)D);
    if (off < 0 || ld < off + H * D)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: token rows of ld=%lld floats cannot hold H·D=%lld floats at off=%lld; "
                       "need off >= 0 and ld >= off + H·D", what, (long long)ld, (long long)(H * D), (long long)off);
    QS_TRY(qs_cpu_args_check(what, N * T * H * D, 2, (const void *[]){src, dst}));
#pragma omp parallel for collapse(3) schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                const int64_t heads = ((n * H + h) * T + t) * D, tokens = (n * T + t) * ld + off + h * D;
                const float *from = src + (to_heads ? tokens : heads);
                float *to = dst + (to_heads ? heads : tokens);
#pragma omp simd
                for (int64_t d = 0; d < D; d++) store(&to[d], from[d], accumulate);
            }
    return QS_OK;
}

/* ------------------------------------------------------------------ masked softmax */

/* Softmax over the last axis of x (N,H,Tq,Tk) into y. Key j of query row i in sample n is
 * masked when causal and j > i, or when key_ids[n·Tk + j] == pad_id; masked entries get 0 and
 * a row with every key masked is all 0. Per row: max over the kept keys, exp(x − max) in FP32,
 * their sum in double, one multiply by its FP32 reciprocal. */
qs_status qs_cpu_softmax_forward(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t Tq, int64_t Tk,
                                 const float *x, float *y, bool causal, const float *key_ids, float pad_id) {
    if (N < 0 || H < 0 || Tq < 0 || Tk < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "softmax_forward: negative dimension in N=%lld H=%lld Tq=%lld Tk=%lld",
                       (long long)N, (long long)H, (long long)Tq, (long long)Tk);
    QS_TRY(qs_cpu_args_check("softmax_forward", N * H * Tq * Tk, 2, (const void *[]){x, y}));
    const int64_t rows = N * H * Tq;
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < rows; row++) {
        const int64_t i = row % Tq, n = row / (H * Tq);
        const int64_t kept_end = causal && i + 1 < Tk ? i + 1 : Tk; /* keys >= kept_end are masked */
        const float *xr = x + row * Tk, *kid = key_ids ? key_ids + n * Tk : NULL;
        float *yr = y + row * Tk;
        float m = -INFINITY;
        bool any = false;
        for (int64_t j = 0; j < kept_end; j++)
            if (!kid || kid[j] != pad_id) {
                if (!any || xr[j] > m) m = xr[j];
                any = true;
            }
        double sum = 0.0;
        for (int64_t j = 0; j < Tk; j++) {
            const bool kept = any && j < kept_end && (!kid || kid[j] != pad_id);
            yr[j] = kept ? expf(xr[j] - m) : 0.0f;
            sum += yr[j];
        }
        const float inv = any ? (float)(1.0 / sum) : 0.0f;
#pragma omp simd
        for (int64_t j = 0; j < Tk; j++) yr[j] *= inv;
    }
    return QS_OK;
}

/* dx (+)= y ⊙ (dy − Σ_j dy·y) per row of `cols` values (the dot product in double). */
qs_status qs_cpu_softmax_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *y,
                                  const float *dy, float *dx, bool accumulate) {
    if (rows < 0 || cols < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "softmax_backward: rows=%lld cols=%lld must be >= 0", (long long)rows,
                       (long long)cols);
    QS_TRY(qs_cpu_args_check("softmax_backward", rows * cols, 3, (const void *[]){y, dy, dx}));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * cols, *gr = dy + r * cols;
        float *dr = dx + r * cols;
        double dot = 0.0;
        for (int64_t j = 0; j < cols; j++) dot += (double)gr[j] * yr[j];
        const float d = (float)dot;
#pragma omp simd
        for (int64_t j = 0; j < cols; j++) store(&dr[j], yr[j] * (gr[j] - d), accumulate);
    }
    return QS_OK;
}
