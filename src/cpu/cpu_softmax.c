/* src/cpu/cpu_softmax.c — fused softmax + cross-entropy over logits (B, classes), FP32 in
 * and out, per-row log-sum-exp in double with the row maximum subtracted (stable). */
#include "cpu/cpu_backend.h"

#include <math.h>

/* Index of the first label outside [0, classes), or -1. */
static int64_t bad_label(int64_t B, int64_t classes, const int32_t *labels) {
    for (int64_t b = 0; b < B; b++)
        if (labels[b] < 0 || labels[b] >= classes) return b;
    return -1;
}

static qs_status xent_check(const char *what, int64_t B, int64_t classes, const int32_t *labels, int nptrs,
                            const void *const *ptrs) {
    if (B < 0 || classes < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: B=%lld classes=%lld; need B >= 0 and classes >= 1", what,
                       (long long)B, (long long)classes);
    QS_TRY(qs_cpu_args_check(what, B, nptrs, ptrs));
    int64_t bad = B > 0 ? bad_label(B, classes, labels) : -1;
    if (bad >= 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: label %d of sample %lld is outside [0, %lld); check the dataset labels",
                       what, (int)labels[bad], (long long)bad, (long long)classes);
    return QS_OK;
}

/* loss[b] = logsumexp(logits[b,:]) - logits[b,label[b]]; probs = softmax(logits). */
qs_status qs_cpu_softmax_xent_forward(qs_backend *be, qs_stream *s, int64_t B, int64_t classes,
                                      const float *logits, const int32_t *labels, float *loss, float *probs) {
    QS_TRY(xent_check("softmax_xent_forward", B, classes, labels, 4, (const void *[]){logits, labels, loss, probs}));
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; b++) {
        const float *l = logits + b * classes;
        float *pr = probs + b * classes;
        float m = l[0];
        for (int64_t c = 1; c < classes; c++) m = l[c] > m ? l[c] : m;
        double sum = 0.0;
        for (int64_t c = 0; c < classes; c++) sum += exp((double)l[c] - (double)m);
        double lse = (double)m + log(sum);
        for (int64_t c = 0; c < classes; c++) pr[c] = (float)exp((double)l[c] - lse);
        loss[b] = (float)(lse - (double)l[labels[b]]);
    }
    return QS_OK;
}

/* dlogits = (probs - onehot(labels))·scale. */
qs_status qs_cpu_softmax_xent_backward(qs_backend *be, qs_stream *s, int64_t B, int64_t classes,
                                       const float *probs, const int32_t *labels, float scale, float *dlogits) {
    QS_TRY(xent_check("softmax_xent_backward", B, classes, labels, 3, (const void *[]){probs, labels, dlogits}));
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; b++) {
        const float *pr = probs + b * classes;
        float *d = dlogits + b * classes;
#pragma omp simd
        for (int64_t c = 0; c < classes; c++) d[c] = pr[c] * scale;
        d[labels[b]] = (pr[labels[b]] - 1.0f) * scale;
    }
    return QS_OK;
}

/* idx[b] = first argmax of row b (a sequential scan with `>`). */
qs_status qs_cpu_argmax_rows(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *x, int32_t *idx) {
    if (rows < 0 || cols < 1 || cols > INT32_MAX)
        return QS_FAIL(QS_ERR_INVALID_ARG, "argmax_rows: rows=%lld cols=%lld; need rows >= 0 and 1 <= cols < 2^31",
                       (long long)rows, (long long)cols);
    QS_TRY(qs_cpu_args_check("argmax_rows", rows, 2, (const void *[]){x, idx}));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        int64_t best = 0;
        for (int64_t c = 1; c < cols; c++)
            if (row[c] > row[best]) best = c;
        idx[r] = (int32_t)best;
    }
    return QS_OK;
}
