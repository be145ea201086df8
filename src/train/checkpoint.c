/* src/train/checkpoint.c — checkpoint directories: model.safetensors + state.safetensors. */
#include "train/checkpoint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/atomic_file.h"
#include "train/checkpoint_util.h"
#include "train/safetensors.h"

#define QS_MODEL_FILE "model.safetensors"
#define QS_STATE_FILE "state.safetensors"

void qs_checkpoint_model_path(const char *path, char *buf, size_t cap) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(buf, cap, "%s/%s", path, QS_MODEL_FILE);
    else snprintf(buf, cap, "%s", path);
}

void *qs_ckpt_download(qs_model *m, const void *dev, size_t bytes) {
    void *h = qs_host_alloc(bytes ? bytes : 1);
    if (h && bytes && m->be->ops->copy_d2h(m->be, m->stream, h, dev, bytes) != QS_OK) {
        qs_host_free(h);
        return NULL;
    }
    if (h && m->be->ops->stream_sync(m->be, m->stream) != QS_OK) {
        qs_host_free(h);
        return NULL;
    }
    return h;
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

static qs_status qs_ckpt_save_model(const char *path, qs_model *m, const char *arch, int64_t step) {
    void *hp = qs_ckpt_download(m, m->param_data, m->params.bytes);
    void *hb = qs_ckpt_download(m, m->buffer_data, m->buffers.bytes);
    qs_st_tensor *ts = calloc((size_t)(m->params.count + m->buffers.count) + 1, sizeof *ts);
    char *plan = NULL;
    qs_status st = (hp && hb && ts) ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory preparing checkpoint %s", path);
    if (st == QS_OK) {
        int n = 0;
        qs_ckpt_set_batches_tracked(m, hb);
        qs_ckpt_add_table(&m->params, hp, ts, &n);
        qs_ckpt_add_table(&m->buffers, hb, ts, &n);
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
    qs_host_free(hp);
    qs_host_free(hb);
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

qs_status qs_ckpt_load_table(qs_model *m, const qs_st_file *f, const qs_table *t, void *dev) {
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
        QS_TRY(m->be->ops->copy_h2d(m->be, m->stream, (char *)dev + e->offset, s.data,
                                    (size_t)e->numel * qs_dtype_size(e->dtype)));
    }
    return QS_OK;
}

qs_status qs_checkpoint_load_model(const char *path, qs_model *m) {
    qs_st_file *f;
    QS_TRY(qs_safetensors_open(path, &f));
    qs_status st = qs_ckpt_check_format(f, "qsync.model");
    if (st == QS_OK) st = qs_ckpt_load_table(m, f, &m->params, m->param_data);
    if (st == QS_OK) st = qs_ckpt_load_table(m, f, &m->buffers, m->buffer_data);
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
    if (st == QS_OK) st = m->be->ops->stream_sync(m->be, m->stream);
    qs_safetensors_close(f);
    return st;
}

static qs_status qs_ckpt_save_state(const char *path, qs_model *m, const qs_optimizer *o, const qs_train_state *ts) {
    qs_optim_state os;
    QS_TRY(qs_optimizer_state_save(o, m->be, m->stream, &os));
    qs_st_tensor *t = calloc((size_t)(os.count + qs_ckpt_fp8_history_count(m)) + 1, sizeof *t);
    qs_status st = t ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory preparing %s", path);
    void *hist = NULL;
    int n = os.count;
    if (st == QS_OK) st = qs_ckpt_add_fp8_histories(m, &hist, t, &n);
    if (st == QS_OK) {
        for (int i = 0; i < os.count; i++) {
            t[i].name = os.names[i];
            t[i].dtype = os.tensors[i].dtype;
            t[i].ndim = os.tensors[i].ndim;
            for (int d = 0; d < t[i].ndim; d++) t[i].shape[d] = os.tensors[i].shape[d];
            t[i].data = os.tensors[i].data;
        }
        char v[12][40];
        snprintf(v[0], sizeof v[0], "%d", QS_CHECKPOINT_VERSION);
        snprintf(v[1], sizeof v[1], "%" PRId64, ts->step);
        snprintf(v[2], sizeof v[2], "%" PRId64, ts->epoch);
        snprintf(v[3], sizeof v[3], "%" PRId64, ts->batch_in_epoch);
        snprintf(v[4], sizeof v[4], "%" PRIu64, ts->seed);
        snprintf(v[5], sizeof v[5], "%" PRId64, ts->global_batch);
        snprintf(v[6], sizeof v[6], "%" PRId64, o->step);
        /* %a: the scale round-trips exactly */
        snprintf(v[7], sizeof v[7], "%a", ts->loss_scale_mode[0] ? (double)ts->loss_scale : 1.0);
        snprintf(v[8], sizeof v[8], "%" PRId64, ts->loss_scale_good_steps);
        snprintf(v[9], sizeof v[9], "%" PRId64, ts->skipped_steps);
        snprintf(v[10], sizeof v[10], "%" PRId64, ts->world > 0 ? ts->world : 1);
        qs_st_meta meta[] = {{"format", "qsync.state"}, {"version", v[0]},   {"step", v[1]},
                             {"epoch", v[2]},          {"batch_in_epoch", v[3]}, {"seed", v[4]},
                             {"global_batch", v[5]},   {"data", ts->data},   {"optimizer", qs_optim_kind_name(o->cfg.kind)},
                             {"optimizer_step", v[6]},
                             {"loss_scale_mode", ts->loss_scale_mode[0] ? ts->loss_scale_mode : "none"},
                             {"loss_scale", v[7]},     {"loss_scale_good_steps", v[8]}, {"skipped_steps", v[9]},
                             {"world", v[10]}};
        st = qs_safetensors_write(path, t, n, meta, (int)(sizeof meta / sizeof meta[0]));
    }
    qs_host_free(hist);
    free(t);
    qs_optim_state_free(&os);
    return st;
}

qs_status qs_checkpoint_save(const char *dir, qs_model *m, const char *arch, const qs_model_options *opt,
                             const qs_optimizer *o, const qs_train_state *ts) {
    (void)opt; /* the model's config string records the resolved options */
    char path[4096];
    QS_TRY(qs_dir_ensure_writable(dir));
    snprintf(path, sizeof path, "%s/%s", dir, QS_MODEL_FILE);
    QS_TRY(qs_ckpt_save_model(path, m, arch, ts->step));
    if (!o) return QS_OK;
    snprintf(path, sizeof path, "%s/%s", dir, QS_STATE_FILE);
    return qs_ckpt_save_state(path, m, o, ts);
}

/* Loss-scaling metadata of a state file; absent (older checkpoints) means none. */
static qs_status qs_ckpt_load_loss_scale(const qs_st_file *f, qs_train_state *ts) {
    const char *mode = qs_safetensors_meta(f, "loss_scale_mode");
    snprintf(ts->loss_scale_mode, sizeof ts->loss_scale_mode, "%s", mode ? mode : "none");
    ts->loss_scale = 1.0f;
    if (!mode) return QS_OK;
    const char *v = qs_safetensors_meta(f, "loss_scale");
    char *end = NULL;
    double x = v ? strtod(v, &end) : 0.0;
    if (!v || end == v || *end || !(x > 0))
        return QS_FAIL(QS_ERR_FORMAT, "%s: metadata field \"loss_scale\" is %s%s%s, not a positive number",
                       qs_safetensors_path(f), v ? "\"" : "", v ? v : "missing", v ? "\"" : "");
    ts->loss_scale = (float)x;
    QS_TRY(qs_ckpt_meta_i64(f, "loss_scale_good_steps", &ts->loss_scale_good_steps));
    return qs_ckpt_meta_i64(f, "skipped_steps", &ts->skipped_steps);
}

qs_status qs_checkpoint_load_state(const char *dir, qs_model *m, qs_optimizer *o, qs_train_state *ts) {
    char path[4096], model_path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, QS_STATE_FILE);
    qs_checkpoint_model_path(dir, model_path, sizeof model_path);
    qs_st_file *f = NULL, *mf = NULL;
    QS_TRY(qs_safetensors_open(path, &f));
    qs_status st = qs_ckpt_check_format(f, "qsync.state");
    int64_t model_step = -1, opt_step = 0, seed = 0;
    memset(ts, 0, sizeof *ts);
    if (st == QS_OK) st = qs_ckpt_meta_i64(f, "step", &ts->step);
    if (st == QS_OK) st = qs_ckpt_meta_i64(f, "epoch", &ts->epoch);
    if (st == QS_OK) st = qs_ckpt_meta_i64(f, "batch_in_epoch", &ts->batch_in_epoch);
    if (st == QS_OK) st = qs_ckpt_meta_i64(f, "seed", &seed);
    if (st == QS_OK) st = qs_ckpt_meta_i64(f, "global_batch", &ts->global_batch);
    if (st == QS_OK) st = qs_ckpt_meta_i64(f, "optimizer_step", &opt_step);
    ts->world = 1;
    if (st == QS_OK && qs_safetensors_meta(f, "world")) st = qs_ckpt_meta_i64(f, "world", &ts->world);
    const char *data = qs_safetensors_meta(f, "data"), *kind = qs_safetensors_meta(f, "optimizer");
    if (st == QS_OK && (!data || !kind)) st = QS_FAIL(QS_ERR_FORMAT, "%s: metadata lacks \"data\" or \"optimizer\"", path);
    if (st == QS_OK && strcmp(kind, qs_optim_kind_name(o->cfg.kind)) != 0)
        st = QS_FAIL(QS_ERR_MISMATCH, "%s holds %s state, but this run uses %s: resume with the same --optimizer", path,
                     kind, qs_optim_kind_name(o->cfg.kind));
    if (st == QS_OK) st = qs_safetensors_open(model_path, &mf);
    if (st == QS_OK) st = qs_ckpt_meta_i64(mf, "step", &model_step);
    if (st == QS_OK && model_step != ts->step)
        st = QS_FAIL(QS_ERR_MISMATCH, "%s is from step %lld but %s from step %lld: the checkpoint is incomplete",
                     model_path, (long long)model_step, path, (long long)ts->step);
    if (st == QS_OK) st = qs_ckpt_load_loss_scale(f, ts);
    if (st == QS_OK) {
        ts->seed = (uint64_t)seed;
        snprintf(ts->data, sizeof ts->data, "%s", data);
        st = qs_optimizer_state_load(o, m->be, m->stream, opt_step, qs_safetensors_lookup, f);
    }
    if (st == QS_OK) st = qs_ckpt_load_fp8_histories(m, f);
    if (mf) qs_safetensors_close(mf);
    qs_safetensors_close(f);
    return st;
}
