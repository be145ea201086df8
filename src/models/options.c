/* src/models/options.c — defaults, validation and the "key=value" config string of
 * qs_model_options. */
#include "models/options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

qs_model_options qs_models_default_options(int64_t in_h, int64_t in_w, int64_t in_c,
                                           int64_t num_classes) {
    qs_model_options o = {.in_h = in_h, .in_w = in_w, .in_c = in_c, .num_classes = num_classes};
    o.cifar_stem = in_h <= QS_MODELS_SMALL_INPUT && in_w <= QS_MODELS_SMALL_INPUT;
    return o;
}

/* QS_OK if lo ≤ v ≤ hi, else QS_ERR_INVALID_ARG naming `what`. */
static qs_status check_range(const char *model, const char *what, int64_t v, int64_t lo,
                             int64_t hi) {
    if (v >= lo && v <= hi) return QS_OK;
    return QS_FAIL(QS_ERR_INVALID_ARG, "model %s: option %s=%lld is out of range [%lld, %lld]",
                   model, what, (long long)v, (long long)lo, (long long)hi);
}

bool qs_models_is_transformer(const char *name) {
    return strncmp(name, "gpt", 3) == 0 || strncmp(name, "bert", 4) == 0;
}

qs_status qs_models_resolve_options(const char *name, const qs_model_options *in, const qs_model_defaults *d,
                                    qs_model_options *out) {
    QS_TRY(check_range(name, "in_h", in->in_h, 1, QS_MODELS_MAX_DIM));
    QS_TRY(check_range(name, "in_w", in->in_w, 1, QS_MODELS_MAX_DIM));
    QS_TRY(check_range(name, "in_c", in->in_c, 1, QS_MODELS_MAX_DIM));
    QS_TRY(check_range(name, "classes", in->num_classes, 2, QS_MODELS_MAX_DIM));
    QS_TRY(check_range(name, "width", in->width, 0, QS_MODELS_MAX_DIM));
    QS_TRY(check_range(name, "layers", in->layers, 0, d->layers ? 1024 : 0));
    QS_TRY(check_range(name, "heads", in->heads, 0, d->layers ? QS_MODELS_MAX_DIM : 0));
    if (!(in->dropout >= 0.0f && in->dropout < 1.0f))
        return QS_FAIL(QS_ERR_INVALID_ARG, "model %s: option dropout=%g must be in [0, 1)", name,
                       (double)in->dropout);
    if (!d->has_dropout && in->dropout != 0.0f)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "model %s has no dropout layer: option dropout=%g must be 0", name,
                       (double)in->dropout);
    *out = *in;
    if (out->width == 0) out->width = d->width;
    if (out->layers == 0) out->layers = d->layers;
    if (out->heads == 0) out->heads = d->heads;
    if (d->layers && out->width % out->heads != 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "model %s: heads=%lld must divide width=%lld", name,
                       (long long)out->heads, (long long)out->width);
    return QS_OK;
}

/* Shortest %g text (6 to 9 digits) that reads back as exactly v, as tools/torch_models.py
 * writes it. */
static void format_float(char *buf, size_t cap, float v) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, cap, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) return;
    }
}

qs_status qs_models_format_config(const char *name, const qs_model_options *opt, char *buf,
                                  size_t cap) {
    const bool resnet = strncmp(name, "resnet", 6) == 0;
    char tail[96];
    if (resnet) {
        snprintf(tail, sizeof tail, "cifar_stem=%d", opt->cifar_stem ? 1 : 0);
    } else {
        char p[32];
        format_float(p, sizeof p, opt->dropout);
        if (qs_models_is_transformer(name))
            snprintf(tail, sizeof tail, "layers=%lld heads=%lld dropout=%s", (long long)opt->layers,
                     (long long)opt->heads, p);
        else
            snprintf(tail, sizeof tail, "dropout=%s", p);
    }
    int len = snprintf(buf, cap, "in_h=%lld in_w=%lld in_c=%lld classes=%lld width=%lld %s",
                       (long long)opt->in_h, (long long)opt->in_w, (long long)opt->in_c,
                       (long long)opt->num_classes, (long long)opt->width, tail);
    if (len < 0 || (size_t)len >= cap)
        return QS_FAIL(QS_ERR_INVALID_ARG, "model %s: config string needs %d bytes, have %zu",
                       name, len, cap);
    return QS_OK;
}

/* Parse a whole-string integer into *v; false if malformed. */
static bool parse_i64(const char *s, int64_t *v) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end) return false;
    *v = x;
    return true;
}

/* Apply one "key=value" item to *o. */
static qs_status apply_item(char *item, qs_model_options *o) {
    char *eq = strchr(item, '=');
    if (!eq || eq == item || !eq[1])
        return QS_FAIL(QS_ERR_FORMAT, "model config item '%s' is not key=value", item);
    *eq = '\0';
    const char *key = item, *val = eq + 1;
    int64_t *field = NULL;
    if (strcmp(key, "in_h") == 0) field = &o->in_h;
    else if (strcmp(key, "in_w") == 0) field = &o->in_w;
    else if (strcmp(key, "in_c") == 0) field = &o->in_c;
    else if (strcmp(key, "classes") == 0) field = &o->num_classes;
    else if (strcmp(key, "width") == 0) field = &o->width;
    else if (strcmp(key, "layers") == 0) field = &o->layers;
    else if (strcmp(key, "heads") == 0) field = &o->heads;
    if (field) {
        if (!parse_i64(val, field))
            return QS_FAIL(QS_ERR_FORMAT, "model config: %s=%s is not an integer", key, val);
        return QS_OK;
    }
    if (strcmp(key, "cifar_stem") == 0) {
        if (strcmp(val, "1") && strcmp(val, "0") && strcmp(val, "true") && strcmp(val, "false"))
            return QS_FAIL(QS_ERR_FORMAT, "model config: cifar_stem=%s must be 0, 1, true or false",
                           val);
        o->cifar_stem = val[0] == '1' || val[0] == 't';
        return QS_OK;
    }
    if (strcmp(key, "dropout") == 0) {
        char *end;
        errno = 0;
        float p = strtof(val, &end);
        if (errno || end == val || *end)
            return QS_FAIL(QS_ERR_FORMAT, "model config: dropout=%s is not a number", val);
        o->dropout = p;
        return QS_OK;
    }
    return QS_FAIL(QS_ERR_NOT_FOUND,
                   "model config: unknown option '%s' (valid: in_h in_w in_c classes width "
                   "layers heads cifar_stem dropout)",
                   key);
}

/* Keys whose presence parse_config reports: the four that qs_models_build_config requires,
 * then cifar_stem, whose default depends on the input size. */
static const char *const config_keys[] = {"in_h", "in_w", "in_c", "classes", "cifar_stem", NULL};

/* Parse config into *o (keys absent keep their value); *seen gets bit k when config_keys[k]
 * was given. *o is unchanged on failure. */
static qs_status parse_config(const char *config, qs_model_options *o, unsigned *seen) {
    if (!config || !o) return QS_FAIL(QS_ERR_INVALID_ARG, "model config: NULL argument");
    qs_model_options tmp = *o;
    *seen = 0;
    const char *p = config;
    while (*p) {
        size_t skip = strspn(p, " ,\t\n");
        p += skip;
        size_t len = strcspn(p, " ,\t\n");
        if (len == 0) break;
        char item[128];
        if (len >= sizeof item)
            return QS_FAIL(QS_ERR_FORMAT, "model config item '%.40s...' is too long", p);
        memcpy(item, p, len);
        item[len] = '\0';
        for (int k = 0; config_keys[k]; k++) {
            size_t kl = strlen(config_keys[k]);
            if (strncmp(item, config_keys[k], kl) == 0 && item[kl] == '=') *seen |= 1u << k;
        }
        QS_TRY(apply_item(item, &tmp));
        p += len;
    }
    *o = tmp;
    return QS_OK;
}

qs_status qs_models_parse_config(const char *config, qs_model_options *opt) {
    unsigned seen;
    return parse_config(config, opt, &seen);
}

qs_status qs_models_build_config(const char *name, const char *config, qs_model **out) {
    if (out) *out = NULL;
    qs_model_options o = qs_models_default_options(0, 0, 0, 0);
    unsigned seen;
    QS_TRY(parse_config(config, &o, &seen));
    for (int k = 0; k < 4; k++)
        if (!(seen & (1u << k)))
            return QS_FAIL(QS_ERR_FORMAT, "model %s: config '%s' lacks %s", name ? name : "?",
                           config, config_keys[k]);
    if (!(seen & (1u << 4)))
        o.cifar_stem = qs_models_default_options(o.in_h, o.in_w, o.in_c, 0).cifar_stem;
    return qs_models_build(name, &o, out);
}
