/* src/graph/precision_setup.c — a precision assignment applied to a model (see
 * precision_setup.h). */
#include "graph/precision_setup.h"

#include <stdio.h>
#include <string.h>

#include "graph/precision.h"

bool qs_grad_rounding_parse(const char *s, qs_grad_rounding *out) {
    if (s && strcmp(s, "stochastic") == 0) *out = QS_GRAD_ROUND_STOCHASTIC;
    else if (s && strcmp(s, "nearest") == 0) *out = QS_GRAD_ROUND_NEAREST;
    else return false;
    return true;
}

bool qs_weight_scales_parse(const char *s, qs_weight_scales *out) {
    if (s && strcmp(s, "tensor") == 0) *out = QS_WEIGHT_SCALES_TENSOR;
    else if (s && strcmp(s, "channel") == 0) *out = QS_WEIGHT_SCALES_CHANNEL;
    else return false;
    return true;
}

const char *qs_grad_rounding_name(qs_grad_rounding r) {
    return r == QS_GRAD_ROUND_STOCHASTIC ? "stochastic" : r == QS_GRAD_ROUND_NEAREST ? "nearest" : "unset";
}

const char *qs_weight_scales_name(qs_weight_scales w) {
    return w == QS_WEIGHT_SCALES_TENSOR ? "tensor" : w == QS_WEIGHT_SCALES_CHANNEL ? "channel" : "unset";
}

qs_precision_assignment qs_precision_uniform(qs_precision p, char *buf, size_t cap) {
    snprintf(buf, cap, "--precision %s", qs_precision_name(p));
    return (qs_precision_assignment){.origin = buf, .uniform = true, .default_prec = p,
                                     .grad_rounding = QS_GRAD_ROUND_UNSET, .weight_scales = QS_WEIGHT_SCALES_UNSET};
}

/* The node of m named `name`, or -1. */
static int qs_precision_find_node(const qs_model *m, const char *name) {
    for (int i = 0; i < m->n_nodes; i++)
        if (strcmp(m->nodes[i].name, name) == 0) return i;
    return -1;
}

/* The first few selectable layer names of m: "conv1, conv2, fc1, fc2" (+ ", ... (N in all)"). */
static void qs_precision_selectable_names(const qs_model *m, char *buf, size_t cap) {
    int total = 0, shown = 0;
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < m->n_nodes; i++) {
        if (!qs_node_precision_selectable(m->nodes[i].kind)) continue;
        total++;
        if (shown < 6 && len < cap) {
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", shown ? ", " : "", m->nodes[i].name);
            shown++;
        }
    }
    if (total > shown && len < cap) snprintf(buf + len, cap - len, ", ... (%d in all)", total);
    if (total == 0) snprintf(buf, cap, "(none)");
}

/* Precisions of be by support: "fp32, bf16, int8". */
static void qs_precision_support_list(qs_backend *be, qs_prec_support want, char *buf, size_t cap) {
    size_t len = 0;
    int k = 0;
    buf[0] = '\0';
    for (int p = 0; p < QS_PREC_COUNT && len < cap; p++)
        if (be->ops->precision_support(be, (qs_precision)p) == want)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", k++ ? ", " : "", qs_precision_name((qs_precision)p));
    if (!k) snprintf(buf, cap, "none");
}

/* Where a precision of the plan comes from, for messages: `precisions["conv1"] = int8` or
 * `"default" = int8 (layer conv1 and others)`. */
static void qs_precision_where(const qs_precision_assignment *p, const qs_model *m, qs_precision prec, char *buf, size_t cap) {
    for (int i = 0; i < p->n_layers; i++)
        if (p->layers[i].prec == prec) {
            snprintf(buf, cap, "precisions[\"%s\"] = %s", p->layers[i].name, qs_precision_name(prec));
            return;
        }
    const char *first = "?";
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *nd = &m->nodes[i];
        if (!qs_node_precision_selectable(nd->kind)) continue;
        bool listed = false;
        for (int k = 0; k < p->n_layers && !listed; k++) listed = strcmp(p->layers[k].name, nd->name) == 0;
        if (!listed && n++ == 0) first = nd->name;
    }
    snprintf(buf, cap, "\"default\" = %s (layer %s%s)", qs_precision_name(prec), first, n > 1 ? " and others" : "");
}

/* Which precisions some selectable layer of m would get from p. */
static void qs_precision_used(const qs_precision_assignment *p, const qs_model *m, bool used[QS_PREC_COUNT]) {
    for (int q = 0; q < QS_PREC_COUNT; q++) used[q] = false;
    for (int i = 0; i < p->n_layers; i++) used[p->layers[i].prec] = true;
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *nd = &m->nodes[i];
        if (!qs_node_precision_selectable(nd->kind)) continue;
        bool listed = false;
        for (int k = 0; k < p->n_layers && !listed; k++) listed = strcmp(p->layers[k].name, nd->name) == 0;
        if (!listed) used[p->default_prec] = true;
    }
}

static qs_status qs_precision_check_backend(const qs_precision_assignment *p, const qs_model *m, qs_backend *be, bool allow_emulated) {
    bool used[QS_PREC_COUNT];
    qs_precision_used(p, m, used);
    char native[96], emulated[96], where[768];
    qs_precision_support_list(be, QS_PREC_NATIVE, native, sizeof native);
    qs_precision_support_list(be, QS_PREC_EMULATED, emulated, sizeof emulated);
    for (int q = 0; q < QS_PREC_COUNT; q++) {
        if (!used[q]) continue;
        qs_precision prec = (qs_precision)q;
        qs_prec_support s = be->ops->precision_support(be, prec);
        if (s == QS_PREC_NATIVE) continue;
        if (p->uniform) snprintf(where, sizeof where, "%s", p->origin);
        else {
            char w[QS_NAME_MAX + 48];
            qs_precision_where(p, m, prec, w, sizeof w);
            snprintf(where, sizeof where, "plan %s: %s", p->origin, w);
        }
        if (s == QS_PREC_UNSUPPORTED)
            return QS_FAIL(QS_ERR_UNSUPPORTED, "%s: the %s backend cannot run %s; choose one of %s (native here) or %s "
                           "(emulated, with --allow-emulated)", where, be->ops->name, qs_precision_name(prec), native,
                           emulated);
        if (!allow_emulated)
            return QS_FAIL(QS_ERR_UNSUPPORTED, "%s: %s is only emulated on the %s backend (operands rounded to %s, "
                           "arithmetic in fp32: numerically faithful, not faster); pass --allow-emulated to run it "
                           "anyway, or choose one of %s (native here)", where, qs_precision_name(prec), be->ops->name,
                           qs_precision_name(prec), native);
    }
    return QS_OK;
}

qs_status qs_precision_check(const qs_precision_assignment *p, const qs_model *m, qs_backend *be, bool allow_emulated) {
    for (int i = 0; i < p->n_layers; i++) {
        const qs_layer_prec *l = &p->layers[i];
        int k = qs_precision_find_node(m, l->name);
        if (k < 0) {
            char names[512];
            qs_precision_selectable_names(m, names, sizeof names);
            return QS_FAIL(QS_ERR_NOT_FOUND, "plan %s: precisions[\"%s\"]: model %s has no layer \"%s\"; its layers "
                           "with a selectable precision are %s (see qsync models %s)", p->origin, l->name, m->arch,
                           l->name, names, m->arch);
        }
        const qs_node *nd = &m->nodes[k];
        if (!qs_node_precision_selectable(nd->kind)) {
            const qs_layer_impl *impl = qs_layer_impl_for(nd->kind);
            return QS_FAIL(QS_ERR_INVALID_ARG, "plan %s: precisions[\"%s\"]: layer \"%s\" is a %s, whose precision "
                           "cannot be chosen (only Linear, Conv2d and MatMul layers can; normalizations, pooling and the loss "
                           "stay fp32): remove it from the plan", p->origin, l->name, l->name,
                           impl && impl->kind_name ? impl->kind_name : "node of another kind");
        }
    }
    if (be) QS_TRY(qs_precision_check_backend(p, m, be, allow_emulated));
    return QS_OK;
}

qs_status qs_precision_assign(const qs_precision_assignment *p, qs_model *m, qs_backend *be, bool allow_emulated) {
    QS_TRY(qs_precision_check(p, m, be, allow_emulated));
    for (int i = 0; i < m->n_nodes; i++) {
        qs_node *nd = &m->nodes[i];
        if (!qs_node_precision_selectable(nd->kind)) continue;
        nd->prec = p->default_prec;
        for (int k = 0; k < p->n_layers; k++)
            if (strcmp(p->layers[k].name, nd->name) == 0) nd->prec = p->layers[k].prec;
    }
    m->grad_round_nearest = p->grad_rounding == QS_GRAD_ROUND_NEAREST;
    m->weight_per_channel = p->weight_scales == QS_WEIGHT_SCALES_CHANNEL;
    return QS_OK;
}

bool qs_fp8_scaling_parse(const char *s, int *history) {
    if (strcmp(s, "current") == 0) {
        *history = 0;
        return true;
    }
    if (strcmp(s, "delayed") == 0) {
        *history = QS_FP8_AMAX_HISTORY_DEFAULT;
        return true;
    }
    int n = 0, used = 0;
    if (sscanf(s, "delayed:%d%n", &n, &used) != 1 || s[used] != '\0' || n < 1 || n > QS_FP8_AMAX_HISTORY_MAX) return false;
    *history = n;
    return true;
}

void qs_precision_options_default(qs_precision_options *o) {
    memset(o, 0, sizeof *o);
    o->uniform = QS_PREC_FP32;
    o->grad_rounding = QS_GRAD_ROUND_UNSET;
    o->weight_scales = QS_WEIGHT_SCALES_UNSET;
}

qs_status qs_precision_setup(qs_model *m, qs_backend *be, const qs_precision_options *o) {
    if (o->assignment && o->uniform != QS_PREC_FP32)
        return QS_FAIL(QS_ERR_INVALID_ARG, "a plan (%s) and a uniform precision (%s) were both given: use one; a plan "
                       "sets the precision of unlisted layers with \"default\"", o->assignment->origin,
                       qs_precision_name(o->uniform));
    char origin[64];
    qs_precision_assignment u = qs_precision_uniform(o->uniform, origin, sizeof origin);
    QS_TRY(qs_precision_assign(o->assignment ? o->assignment : &u, m, be, o->allow_emulated));
    if (o->grad_rounding != QS_GRAD_ROUND_UNSET) m->grad_round_nearest = o->grad_rounding == QS_GRAD_ROUND_NEAREST;
    if (o->weight_scales != QS_WEIGHT_SCALES_UNSET) m->weight_per_channel = o->weight_scales == QS_WEIGHT_SCALES_CHANNEL;
    if (o->fp8_amax_history < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "FP8 amax history of %d steps (0: current scaling)", o->fp8_amax_history);
    m->fp8_amax_history = o->fp8_amax_history;
    return qs_model_insert_casts(m, NULL);
}

cJSON *qs_precision_report_json(const qs_model *m, qs_backend *be) {
    int counts[QS_PREC_COUNT];
    qs_model_precision_counts(m, counts);
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON *c = cJSON_AddObjectToObject(o, "counts");
    cJSON *sup = cJSON_AddObjectToObject(o, "support");
    cJSON *nat = cJSON_AddArrayToObject(o, "native");
    cJSON *emu = cJSON_AddArrayToObject(o, "emulated");
    cJSON_AddStringToObject(o, "grad_rounding", m->grad_round_nearest ? "nearest" : "stochastic");
    cJSON_AddStringToObject(o, "weight_scales", m->weight_per_channel ? "channel" : "tensor");
    cJSON_AddNumberToObject(o, "fp8_amax_history", m->fp8_amax_history);
    cJSON *layers = cJSON_AddObjectToObject(o, "layers");
    if (!c || !sup || !nat || !emu || !layers) {
        cJSON_Delete(o);
        return NULL;
    }
    for (int q = 0; q < QS_PREC_COUNT; q++) {
        if (!counts[q]) continue;
        const char *name = qs_precision_name((qs_precision)q);
        cJSON_AddNumberToObject(c, name, counts[q]);
        if (!be) continue;
        qs_prec_support s = be->ops->precision_support(be, (qs_precision)q);
        cJSON_AddStringToObject(sup, name, qs_prec_support_name(s));
        if (s == QS_PREC_NATIVE) cJSON_AddItemToArray(nat, cJSON_CreateString(name));
        else if (s == QS_PREC_EMULATED) cJSON_AddItemToArray(emu, cJSON_CreateString(name));
    }
    for (int i = 0; i < m->n_nodes; i++)
        if (qs_node_precision_selectable(m->nodes[i].kind))
            cJSON_AddStringToObject(layers, m->nodes[i].name, qs_precision_name(m->nodes[i].prec));
    return o;
}

void qs_precision_report_line(const qs_model *m, qs_backend *be, char *buf, size_t cap) {
    int counts[QS_PREC_COUNT];
    qs_model_precision_counts(m, counts);
    size_t len = 0;
    int k = 0;
    buf[0] = '\0';
    for (int q = 0; q < QS_PREC_COUNT && len < cap; q++) {
        if (!counts[q]) continue;
        const char *sup = be ? qs_prec_support_name(be->ops->precision_support(be, (qs_precision)q)) : "?";
        len += (size_t)snprintf(buf + len, cap - len, "%s%d x %s (%s)", k++ ? ", " : "", counts[q],
                                qs_precision_name((qs_precision)q), sup);
    }
    if (!k && len < cap) len += (size_t)snprintf(buf + len, cap - len, "no selectable layers");
    if (len < cap)
        len += (size_t)snprintf(buf + len, cap - len, "; gradients rounded %s, weight scales per %s",
                                m->grad_round_nearest ? "to nearest" : "stochastically",
                                m->weight_per_channel ? "channel" : "tensor");
    if (m->fp8_amax_history > 0 && len < cap)
        snprintf(buf + len, cap - len, ", FP8 scales delayed (%d-step amax history)", m->fp8_amax_history);
}
