/* src/io/checkpoint_model.c — the model file of a checkpoint (see checkpoint_model.h). */
#include "io/checkpoint_model.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void qs_checkpoint_model_path(const char *path, char *buf, size_t cap) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(buf, cap, "%s/%s", path, QS_MODEL_FILE);
    else snprintf(buf, cap, "%s", path);
}

void qs_ckpt_add_table(const qs_table *t, const void *host, qs_st_tensor *out, int *n) {
    for (int i = 0; i < t->count; i++) {
        const qs_table_entry *e = &t->entries[i];
        qs_st_tensor *s = &out[(*n)++];
        memset(s, 0, sizeof *s);
        s->name = e->name;
        s->dtype = e->dtype;
        s->ndim = e->ndim;
        for (int d = 0; d < e->ndim; d++) s->shape[d] = e->shape[d];
        s->data = (const char *)host + e->offset;
    }
}

/* num_batches_tracked counts training forwards: every BatchNorm runs once per step. */
void qs_ckpt_set_batches_tracked(qs_model *m, void *host_buffers) {
    for (int i = 0; i < m->buffers.count; i++) {
        const qs_table_entry *e = &m->buffers.entries[i];
        if (e->dtype == QS_I64) {
            int64_t v = m->step;
            memcpy((char *)host_buffers + e->offset, &v, sizeof v);
        }
    }
}

qs_status qs_checkpoint_model_save(const char *path, qs_model *m, const char *arch, int64_t step) {
    qs_model_snapshot snap;
    qs_status st = qs_model_snapshot_take(m, &snap);
    qs_st_tensor *ts = st == QS_OK ? calloc((size_t)(m->params.count + m->buffers.count) + 1, sizeof *ts) : NULL;
    char *plan = NULL;
    if (st == QS_OK && !ts) st = QS_FAIL(QS_ERR_OOM, "out of memory preparing checkpoint %s", path);
    if (st == QS_OK) {
        int n = 0;
        qs_ckpt_set_batches_tracked(m, snap.buffers);
        qs_ckpt_add_table(&m->params, snap.params, ts, &n);
        qs_ckpt_add_table(&m->buffers, snap.buffers, ts, &n);
        char ver[16], stepbuf[32];
        snprintf(ver, sizeof ver, "%d", QS_CHECKPOINT_VERSION);
        snprintf(stepbuf, sizeof stepbuf, "%" PRId64, step);
        plan = qs_plan_model_json(m);
        if (!plan) st = QS_FAIL(QS_ERR_OOM, "out of memory preparing checkpoint %s", path);
        qs_st_meta meta[] = {{"format", "qsync.model"}, {"version", ver}, {"arch", arch},
                             {"config", m->config}, {"step", stepbuf}, {"plan", plan}};
        if (st == QS_OK) st = qs_safetensors_write(path, ts, n, meta, (int)(sizeof meta / sizeof meta[0]));
    }
    free(plan);
    free(ts);
    qs_model_snapshot_free(&snap);
    return st;
}

qs_status qs_ckpt_meta_i64(const qs_st_file *f, const char *key, int64_t *out) {
    const char *v = qs_safetensors_meta(f, key);
    char *end;
    if (!v) return QS_FAIL(QS_ERR_FORMAT, "%s: metadata field \"%s\" is missing", qs_safetensors_path(f), key);
    long long x = strtoll(v, &end, 10);
    if (end == v || *end)
        return QS_FAIL(QS_ERR_FORMAT, "%s: metadata field \"%s\" is not an integer: %s", qs_safetensors_path(f), key, v);
    *out = x;
    return QS_OK;
}

qs_status qs_ckpt_check_format(const qs_st_file *f, const char *format) {
    const char *fmt = qs_safetensors_meta(f, "format");
    if (!fmt || strcmp(fmt, format) != 0)
        return QS_FAIL(QS_ERR_FORMAT, "%s is not a qsync %s file (metadata format is %s)", qs_safetensors_path(f),
                       format, fmt ? fmt : "missing");
    int64_t v;
    QS_TRY(qs_ckpt_meta_i64(f, "version", &v));
    if (v != QS_CHECKPOINT_VERSION)
        return QS_FAIL(QS_ERR_FORMAT, "%s has checkpoint version %lld; this qsync reads version %d",
                       qs_safetensors_path(f), (long long)v, QS_CHECKPOINT_VERSION);
    return QS_OK;
}

qs_status qs_checkpoint_read_arch(const char *path, char *arch, size_t cap, qs_model_options *opt) {
    char file[4096];
    qs_checkpoint_model_path(path, file, sizeof file);
    qs_st_file *f;
    QS_TRY(qs_safetensors_open(file, &f));
    qs_status st = qs_ckpt_check_format(f, "qsync.model");
    const char *a = qs_safetensors_meta(f, "arch"), *cfg = qs_safetensors_meta(f, "config");
    if (st == QS_OK && (!a || !cfg))
        st = QS_FAIL(QS_ERR_FORMAT, "%s: metadata lacks \"arch\" or \"config\"", file);
    if (st == QS_OK) {
        snprintf(arch, cap, "%s", a);
        *opt = qs_models_default_options(0, 0, 0, 0);
        st = qs_models_parse_config(cfg, opt);
        if (st != QS_OK) st = qs_error_wrap(st, "%s: ", file);
    }
    qs_safetensors_close(f);
    return st;
}

qs_status qs_ckpt_read_plan_file(const char *file, const char *format, qs_plan *out) {
    qs_plan_uniform("", QS_PREC_FP32, file, out);
    qs_st_file *f;
    QS_TRY(qs_safetensors_open(file, &f));
    qs_status st = qs_ckpt_check_format(f, format);
    const char *a = qs_safetensors_meta(f, "arch"), *plan = qs_safetensors_meta(f, "plan");
    if (st == QS_OK && !a) st = QS_FAIL(QS_ERR_FORMAT, "%s: metadata lacks \"arch\"", file);
    if (st == QS_OK && plan) {
        char origin[4200];
        snprintf(origin, sizeof origin, "%s (metadata \"plan\")", file);
        st = qs_plan_parse(plan, origin, out);
    } else if (st == QS_OK) { /* written before plans: everything fp32, default options */
        qs_plan_uniform(a, QS_PREC_FP32, file, out);
        out->uniform = false;
    }
    qs_safetensors_close(f);
    return st;
}

qs_status qs_checkpoint_read_plan(const char *path, qs_plan *out) {
    char file[4096];
    qs_checkpoint_model_path(path, file, sizeof file);
    return qs_ckpt_read_plan_file(file, "qsync.model", out);
}

qs_status qs_ckpt_load_table(qs_model *m, const qs_st_file *f, qs_model_table which) {
    const qs_table *t = qs_model_table_layout(m, which);
    for (int i = 0; i < t->count; i++) {
        const qs_table_entry *e = &t->entries[i];
        qs_st_tensor s;
        qs_status st = qs_safetensors_get(f, e->name, &s);
        if (st != QS_OK)
            return QS_FAIL(QS_ERR_MISMATCH, "checkpoint %s has no tensor %s: it was not saved from this model (%s)",
                           qs_safetensors_path(f), e->name, m->arch);
        bool same = s.dtype == e->dtype && s.ndim == e->ndim;
        for (int d = 0; same && d < e->ndim; d++) same = s.shape[d] == e->shape[d];
        if (!same) {
            char want[96], got[96];
            qs_shape_format(e->ndim, e->shape, want, sizeof want);
            qs_shape_format(s.ndim, s.shape, got, sizeof got);
            return QS_FAIL(QS_ERR_MISMATCH, "checkpoint %s: tensor %s is %s %s, the model %s needs %s %s",
                           qs_safetensors_path(f), e->name, qs_dtype_name(s.dtype), got, m->arch,
                           qs_dtype_name(e->dtype), want);
        }
        QS_TRY(qs_model_table_write_entry(m, which, i, s.data));
    }
    return QS_OK;
}

qs_status qs_checkpoint_load_model(const char *path, qs_model *m) {
    qs_st_file *f;
    QS_TRY(qs_safetensors_open(path, &f));
    qs_status st = qs_ckpt_check_format(f, "qsync.model");
    if (st == QS_OK) st = qs_ckpt_load_table(m, f, QS_TABLE_PARAMS);
    if (st == QS_OK) st = qs_ckpt_load_table(m, f, QS_TABLE_BUFFERS);
    if (st == QS_OK && qs_safetensors_count(f) != m->params.count + m->buffers.count) {
        for (int i = 0; i < qs_safetensors_count(f); i++) {
            const char *name = qs_safetensors_name_at(f, i);
            if (qs_table_find(&m->params, name) < 0 && qs_table_find(&m->buffers, name) < 0) {
                st = QS_FAIL(QS_ERR_MISMATCH, "checkpoint %s holds tensor %s, which model %s does not have", path,
                             name, m->arch);
                break;
            }
        }
    }
    qs_safetensors_close(f);
    return st;
}
