/* src/optim/loss_scale.c — static and dynamic loss scaling (see loss_scale.h). */
#include "optim/loss_scale.h"

#include "core/timer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qs_loss_scaler_init(qs_loss_scaler *ls, qs_loss_scale_mode mode, float scale, int64_t growth_interval) {
    memset(ls, 0, sizeof *ls);
    ls->mode = mode;
    ls->scale = mode == QS_LOSS_SCALE_NONE ? 1.0f : scale;
    ls->growth_factor = 2.0f;
    ls->backoff_factor = 0.5f;
    ls->growth_interval = growth_interval > 0 ? growth_interval : QS_LOSS_SCALE_GROWTH_INTERVAL;
}

const char *qs_loss_scale_mode_name(qs_loss_scale_mode m) {
    switch (m) {
    case QS_LOSS_SCALE_NONE: return "none";
    case QS_LOSS_SCALE_STATIC: return "static";
    case QS_LOSS_SCALE_DYNAMIC: return "dynamic";
    }
    return "invalid";
}

bool qs_loss_scale_mode_parse(const char *s, qs_loss_scale_mode *out) {
    for (int m = QS_LOSS_SCALE_NONE; m <= QS_LOSS_SCALE_DYNAMIC; m++)
        if (s && strcmp(s, qs_loss_scale_mode_name((qs_loss_scale_mode)m)) == 0) {
            *out = (qs_loss_scale_mode)m;
            return true;
        }
    return false;
}

/* A finite positive float from text (the whole string); false otherwise. */
static bool qs_loss_scale_number(const char *t, float *out) {
    char *end = NULL;
    double v = strtod(t, &end);
    if (end == t || *end || !isfinite(v) || !(v > 0) || !isfinite((float)v) || (float)v <= 0) return false;
    *out = (float)v;
    return true;
}

qs_status qs_loss_scaler_parse(const char *text, int64_t growth_interval, qs_loss_scaler *out) {
    float v;
    if (!text) text = "";
    if (strcmp(text, "none") == 0) {
        qs_loss_scaler_init(out, QS_LOSS_SCALE_NONE, 1.0f, growth_interval);
    } else if (strcmp(text, "dynamic") == 0) {
        qs_loss_scaler_init(out, QS_LOSS_SCALE_DYNAMIC, QS_LOSS_SCALE_INIT, growth_interval);
    } else if (strncmp(text, "dynamic:", 8) == 0 && qs_loss_scale_number(text + 8, &v)) {
        qs_loss_scaler_init(out, QS_LOSS_SCALE_DYNAMIC, v, growth_interval);
    } else if (qs_loss_scale_number(text, &v)) {
        qs_loss_scaler_init(out, QS_LOSS_SCALE_STATIC, v, growth_interval);
    } else {
        return QS_FAIL(QS_ERR_INVALID_ARG, "loss scale '%s': expected none, dynamic, dynamic:INIT or a positive "
                       "number N (a static scale)", text);
    }
    return QS_OK;
}

float qs_loss_scaler_factor(const qs_loss_scaler *ls) { return ls->mode == QS_LOSS_SCALE_NONE ? 1.0f : ls->scale; }

qs_status qs_loss_scaler_unscale(const qs_loss_scaler *ls, qs_backend *be, qs_stream *s, float *grads, int64_t n,
                                 bool *finite, double *norm) {
    double ss = 0.0;
    float scale = qs_loss_scaler_factor(ls);
    qs_status st = be->ops->sum_squares(be, s, n, grads, &ss);
    if (st != QS_OK) return qs_error_wrap(st, "loss scaling: checking the gradients: ");
    *finite = isfinite(ss);
    if (norm) *norm = sqrt(ss) / (double)scale;
    if (*finite && scale != 1.0f) {
        st = be->ops->scale(be, s, n, grads, 1.0f / scale);
        if (st != QS_OK) return qs_error_wrap(st, "loss scaling: unscaling the gradients: ");
    }
    return QS_OK;
}

qs_status qs_loss_scaler_update(qs_loss_scaler *ls, bool finite) {
    ls->last_skipped = !finite;
    if (ls->mode == QS_LOSS_SCALE_NONE) return QS_OK;
    if (finite) {
        ls->good_steps++;
        if (ls->mode == QS_LOSS_SCALE_DYNAMIC && ls->good_steps >= ls->growth_interval) {
            float grown = ls->scale * ls->growth_factor;
            if (isfinite(grown)) ls->scale = grown;
            ls->good_steps = 0;
        }
        return QS_OK;
    }
    ls->skipped++;
    ls->good_steps = 0;
    if (ls->mode != QS_LOSS_SCALE_DYNAMIC) return QS_OK;
    ls->scale *= ls->backoff_factor;
    if (!(ls->scale >= QS_LOSS_SCALE_MIN))
        return QS_FAIL(QS_ERR_INVALID_ARG, "loss scaling: the gradients stay non-finite even at loss scale %g: "
                       "training diverged (lower --lr or add warm-up); this is not an overflow", (double)ls->scale);
    return QS_OK;
}

qs_status qs_loss_scaler_step(qs_loss_scaler *ls, qs_model *m, qs_optimizer *o, float lr, bool *applied) {
    if (applied) *applied = false;
    qs_backend *be = m->be;
    qs_status st = qs_model_backward(m, qs_loss_scaler_factor(ls));
    bool finite = true;
    if (st != QS_OK) {
        if (ls->mode == QS_LOSS_SCALE_NONE || st != QS_ERR_INVALID_ARG || !strstr(qs_last_error(), "non-finite"))
            return st;
        qs_error_clear(); /* an overflow surfaced by a quantizer: handled as such */
        finite = false;
    }
    double t0 = qs_now_ms();
    QS_TRY(qs_model_busy_mark(m)); /* the optimizer's GPU time counts as busy (no-op when off) */
    if (st == QS_OK && ls->mode != QS_LOSS_SCALE_NONE)
        QS_TRY(qs_loss_scaler_unscale(ls, be, m->stream, (float *)m->grad_data, (int64_t)(m->params.bytes / sizeof(float)),
                                      &finite, NULL));
    if (finite) {
        QS_TRY(qs_optimizer_step(o, be, m->stream, m->param_data, m->grad_data, lr, NULL));
        if (applied) *applied = true;
    }
    QS_TRY(qs_model_busy_mark(m));
    if (m->timing) { /* the check, unscaling and update count as optimizer time */
        QS_TRY(be->ops->stream_sync(be, m->stream));
        double dt = qs_now_ms() - t0;
        m->optimizer_time.total_ms += dt;
        m->optimizer_time.last_ms = dt;
        m->optimizer_time.calls++;
    }
    return qs_loss_scaler_update(ls, finite);
}
