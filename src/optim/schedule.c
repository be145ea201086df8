/* src/optim/schedule.c — learning-rate schedules (closed forms) and their string syntax. */
#include "optim/schedule.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

float qs_lr_at(const qs_lr_schedule *s, int64_t step) {
    if (step < 0) step = 0;
    const double base = s->base_lr;
    if (step < s->warmup_steps) return (float)(base * (double)step / (double)s->warmup_steps);
    const int64_t t = step - (s->warmup_steps > 0 ? s->warmup_steps : 0);
    switch (s->kind) {
    case QS_LR_CONSTANT: return (float)base;
    case QS_LR_STEP:
        if (s->step_size <= 0) return (float)base;
        return (float)(base * pow((double)s->gamma, (double)(t / s->step_size)));
    case QS_LR_COSINE: {
        const int64_t T = s->total_steps - (s->warmup_steps > 0 ? s->warmup_steps : 0);
        if (T <= 0 || t >= T) return s->min_lr;
        const double pi = 3.14159265358979323846;
        return (float)(s->min_lr + (base - s->min_lr) * 0.5 * (1.0 + cos(pi * (double)t / (double)T)));
    }
    }
    return (float)base;
}

/* Parse all of [s, end) as a finite float / positive integer. */
static bool qs_parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v)) return false;
    *out = v;
    return true;
}

static bool qs_parse_i64(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE) return false;
    *out = (int64_t)v;
    return true;
}

#define QS_LR_FORMS "constant, step:STEP_SIZE:GAMMA (e.g. step:30:0.1), cosine or cosine:MIN_LR"

qs_status qs_lr_schedule_parse(const char *text, qs_lr_schedule *out) {
    if (!text) return QS_FAIL(QS_ERR_INVALID_ARG, "learning-rate schedule: none given; use " QS_LR_FORMS);
    char buf[128];
    if (strlen(text) >= sizeof buf)
        return QS_FAIL(QS_ERR_INVALID_ARG, "learning-rate schedule '%.40s...' is too long; use " QS_LR_FORMS, text);
    strcpy(buf, text);
    char *parts[4] = {buf, NULL, NULL, NULL};
    int n = 1;
    for (char *c = buf; *c; c++) {
        if (*c == ':') {
            *c = '\0';
            if (n == 4) return QS_FAIL(QS_ERR_INVALID_ARG, "learning-rate schedule '%s': too many ':' fields; use "
                                       QS_LR_FORMS, text);
            parts[n++] = c + 1;
        }
    }
    if (strcmp(parts[0], "constant") == 0) {
        if (n != 1)
            return QS_FAIL(QS_ERR_INVALID_ARG, "learning-rate schedule '%s': constant takes no parameters", text);
        out->kind = QS_LR_CONSTANT;
        return QS_OK;
    }
    if (strcmp(parts[0], "step") == 0) {
        int64_t size;
        float gamma;
        if (n != 3)
            return QS_FAIL(QS_ERR_INVALID_ARG, "learning-rate schedule '%s': step needs two parameters, "
                           "step:STEP_SIZE:GAMMA (e.g. step:30:0.1)", text);
        if (!qs_parse_i64(parts[1], &size) || size <= 0)
            return QS_FAIL(QS_ERR_INVALID_ARG, "learning-rate schedule '%s': STEP_SIZE '%s' is not a positive "
                           "integer", text, parts[1]);
        if (!qs_parse_float(parts[2], &gamma) || !(gamma > 0.0f))
            return QS_FAIL(QS_ERR_INVALID_ARG, "learning-rate schedule '%s': GAMMA '%s' is not a positive "
                           "number", text, parts[2]);
        out->kind = QS_LR_STEP;
        out->step_size = size;
        out->gamma = gamma;
        return QS_OK;
    }
    if (strcmp(parts[0], "cosine") == 0) {
        float min_lr = 0.0f;
        if (n > 2)
            return QS_FAIL(QS_ERR_INVALID_ARG, "learning-rate schedule '%s': cosine takes at most one "
                           "parameter, cosine:MIN_LR", text);
        if (n == 2 && (!qs_parse_float(parts[1], &min_lr) || !(min_lr >= 0.0f)))
            return QS_FAIL(QS_ERR_INVALID_ARG, "learning-rate schedule '%s': MIN_LR '%s' is not a number >= 0",
                           text, parts[1]);
        out->kind = QS_LR_COSINE;
        out->min_lr = min_lr;
        return QS_OK;
    }
    return QS_FAIL(QS_ERR_INVALID_ARG, "unknown learning-rate schedule '%s'; use " QS_LR_FORMS, text);
}

qs_status qs_lr_schedule_check(const qs_lr_schedule *s) {
    if (!(s->base_lr >= 0.0f) || !isfinite(s->base_lr))
        return QS_FAIL(QS_ERR_INVALID_ARG, "learning-rate schedule: base learning rate %g must be finite and >= 0",
                       (double)s->base_lr);
    if (s->warmup_steps < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "learning-rate schedule: warm-up of %lld steps is negative",
                       (long long)s->warmup_steps);
    switch (s->kind) {
    case QS_LR_CONSTANT: return QS_OK;
    case QS_LR_STEP:
        if (s->step_size <= 0 || !(s->gamma > 0.0f) || !isfinite(s->gamma))
            return QS_FAIL(QS_ERR_INVALID_ARG, "learning-rate schedule step: step size %lld must be > 0 and "
                           "gamma %g > 0", (long long)s->step_size, (double)s->gamma);
        return QS_OK;
    case QS_LR_COSINE:
        if (s->total_steps <= s->warmup_steps)
            return QS_FAIL(QS_ERR_INVALID_ARG, "learning-rate schedule cosine: total steps %lld must exceed the "
                           "warm-up steps %lld; set the run length (--steps or --epochs)",
                           (long long)s->total_steps, (long long)s->warmup_steps);
        if (!(s->min_lr >= 0.0f) || s->min_lr > s->base_lr)
            return QS_FAIL(QS_ERR_INVALID_ARG, "learning-rate schedule cosine: MIN_LR %g must be in [0, base "
                           "learning rate %g]", (double)s->min_lr, (double)s->base_lr);
        return QS_OK;
    }
    return QS_FAIL(QS_ERR_INVALID_ARG, "learning-rate schedule: unknown kind %d", (int)s->kind);
}

/* Shortest %g form of v that reads back as the same float. */
static void qs_fmt_float(float v, char *buf, size_t cap) {
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, cap, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) return;
    }
}

void qs_lr_schedule_format(const qs_lr_schedule *s, char *buf, size_t cap) {
    char num[32];
    switch (s->kind) {
    case QS_LR_STEP:
        qs_fmt_float(s->gamma, num, sizeof num);
        snprintf(buf, cap, "step:%lld:%s", (long long)s->step_size, num);
        return;
    case QS_LR_COSINE:
        if (s->min_lr == 0.0f) {
            snprintf(buf, cap, "cosine");
        } else {
            qs_fmt_float(s->min_lr, num, sizeof num);
            snprintf(buf, cap, "cosine:%s", num);
        }
        return;
    case QS_LR_CONSTANT:
    default: snprintf(buf, cap, "constant"); return;
    }
}
