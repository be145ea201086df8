/* src/train/checkpoint.c — checkpoint directories: model.safetensors + state.safetensors. */
#include "train/checkpoint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/atomic_file.h"
#include "io/checkpoint_model.h"
#include "io/safetensors.h"
#include "train/checkpoint_util.h"

#define QS_STATE_FILE "state.safetensors"

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
    QS_TRY(qs_checkpoint_model_save(path, m, arch, ts->step));
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
