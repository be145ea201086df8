/* src/train/checkpoint_rank.c — per-rank checkpoint files and the completion marker. */
#include "train/checkpoint_rank.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/json_doc.h"
#include "graph/tensor_access.h"
#include "train/checkpoint.h"
#include "train/checkpoint_util.h"

#define QS_MARKER_FILE "complete.json"
#define QS_MARKER_FORMAT "qsync-checkpoint"

void qs_checkpoint_rank_path(const char *dir, int rank, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/rank-%d.safetensors", dir, rank);
}

qs_status qs_checkpoint_rank_save(const char *dir, qs_model *m, const char *arch, int rank, int world, int64_t step,
                                  const char *batch_split) {
    char path[4096];
    qs_checkpoint_rank_path(dir, rank, path, sizeof path);
    void *hb = NULL;
    qs_status st = qs_model_table_download(m, QS_TABLE_BUFFERS, &hb);
    qs_st_tensor *ts = calloc((size_t)(m->buffers.count + qs_ckpt_fp8_history_count(m)) + 1, sizeof *ts);
    void *hist = NULL;
    char *plan = qs_plan_model_json(m);
    if (st == QS_OK && !(ts && plan)) st = QS_FAIL(QS_ERR_OOM, "out of memory preparing %s", path);
    int n = 0;
    if (st == QS_OK) {
        qs_ckpt_set_batches_tracked(m, hb);
        qs_ckpt_add_table(&m->buffers, hb, ts, &n);
        st = qs_ckpt_add_fp8_histories(m, &hist, ts, &n);
    }
    if (st == QS_OK) {
        char v[4][32];
        snprintf(v[0], sizeof v[0], "%d", QS_CHECKPOINT_VERSION);
        snprintf(v[1], sizeof v[1], "%d", rank);
        snprintf(v[2], sizeof v[2], "%d", world);
        snprintf(v[3], sizeof v[3], "%" PRId64, step);
        qs_st_meta meta[] = {{"format", "qsync.rank"}, {"version", v[0]}, {"arch", arch},
                             {"rank", v[1]},           {"world", v[2]},   {"step", v[3]},
                             {"plan", plan},           {"batch_split", batch_split}};
        st = qs_safetensors_write(path, ts, n, meta, (int)(sizeof meta / sizeof meta[0]));
    }
    free(plan);
    free(ts);
    qs_host_free(hist);
    qs_host_free(hb);
    return st;
}

/* Open this rank's file and check its format, rank and world. */
static qs_status qs_rank_open(const char *dir, int rank, int world, qs_st_file **out) {
    char path[4096];
    qs_checkpoint_rank_path(dir, rank, path, sizeof path);
    QS_TRY(qs_safetensors_open(path, out));
    int64_t r = -1, w = -1;
    qs_status st = qs_ckpt_check_format(*out, "qsync.rank");
    if (st == QS_OK) st = qs_ckpt_meta_i64(*out, "rank", &r);
    if (st == QS_OK) st = qs_ckpt_meta_i64(*out, "world", &w);
    if (st == QS_OK && (r != rank || w != world))
        st = QS_FAIL(QS_ERR_MISMATCH, "%s is rank %lld of %lld, but this process is rank %d of %d", path, (long long)r,
                     (long long)w, rank, world);
    if (st != QS_OK) {
        qs_safetensors_close(*out);
        *out = NULL;
    }
    return st;
}

qs_status qs_checkpoint_rank_load(const char *dir, qs_model *m, int rank, int world, qs_rank_state *out) {
    memset(out, 0, sizeof *out);
    qs_st_file *f;
    QS_TRY(qs_rank_open(dir, rank, world, &f));
    const char *split = qs_safetensors_meta(f, "batch_split");
    qs_status st = qs_ckpt_meta_i64(f, "step", &out->step);
    if (st == QS_OK && !split)
        st = QS_FAIL(QS_ERR_FORMAT, "%s: metadata lacks \"batch_split\"", qs_safetensors_path(f));
    if (st == QS_OK) snprintf(out->batch_split, sizeof out->batch_split, "%s", split);
    if (st == QS_OK) st = qs_ckpt_load_table(m, f, QS_TABLE_BUFFERS);
    if (st == QS_OK) st = qs_ckpt_load_fp8_histories(m, f);
    if (st == QS_OK && qs_safetensors_count(f) != m->buffers.count + qs_ckpt_fp8_history_count(m))
        st = QS_FAIL(QS_ERR_MISMATCH, "%s holds %d tensors, but model %s has %d buffers and %d FP8 amax histories",
                     qs_safetensors_path(f), qs_safetensors_count(f), m->arch, m->buffers.count,
                     qs_ckpt_fp8_history_count(m));
    qs_safetensors_close(f);
    return st;
}

qs_status qs_checkpoint_rank_read_plan(const char *dir, int rank, qs_plan *out) {
    char path[4096];
    qs_checkpoint_rank_path(dir, rank, path, sizeof path);
    if (access(path, F_OK) != 0) return QS_ERR_NOT_FOUND;
    return qs_ckpt_read_plan_file(path, "qsync.rank", out);
}

qs_status qs_checkpoint_marker_clear(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, QS_MARKER_FILE);
    if (unlink(path) != 0 && errno != ENOENT)
        return QS_FAIL(QS_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
    return QS_OK;
}

qs_status qs_checkpoint_marker_write(const char *dir, int64_t step, int world) {
    char path[4096], text[256];
    snprintf(path, sizeof path, "%s/%s", dir, QS_MARKER_FILE);
    int n = snprintf(text, sizeof text, "{\"format\": \"%s\", \"version\": %d, \"step\": %" PRId64 ", \"world\": %d}\n",
                     QS_MARKER_FORMAT, QS_CHECKPOINT_VERSION, step, world);
    return qs_write_file_atomic(path, text, (size_t)n);
}

/* An integer member of the marker, or -1 when absent or not an integer. */
static int64_t qs_marker_int(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) && v->valuedouble == (double)(int64_t)v->valuedouble ? (int64_t)v->valuedouble : -1;
}

qs_status qs_checkpoint_marker_check(const char *dir, int64_t step, int world) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, QS_MARKER_FILE);
    if (access(path, F_OK) != 0)
        return QS_FAIL(QS_ERR_MISMATCH, "checkpoint %s has no %s: it was being written when the job stopped (or "
                       "by an older qsync); resume from a complete checkpoint", dir, QS_MARKER_FILE);
    cJSON *o = NULL;
    QS_TRY(qs_json_read(path, 4096, "checkpoint marker", &o));
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format");
    int64_t version = qs_marker_int(o, "version"), s = qs_marker_int(o, "step"), w = qs_marker_int(o, "world");
    qs_status st = QS_OK;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, QS_MARKER_FORMAT) != 0 || version < 0 || s < 0 || w < 1)
        st = QS_FAIL(QS_ERR_FORMAT, "%s is not a qsync checkpoint marker (want \"format\": \"%s\" and integer "
                     "\"version\", \"step\", \"world\")", path, QS_MARKER_FORMAT);
    else if (version != QS_CHECKPOINT_VERSION)
        st = QS_FAIL(QS_ERR_FORMAT, "%s has checkpoint version %lld; this qsync reads version %d", path,
                     (long long)version, QS_CHECKPOINT_VERSION);
    else if (s != step || w != world)
        st = QS_FAIL(QS_ERR_MISMATCH, "%s marks step %lld of %lld rank(s) complete, but the checkpoint's files are "
                     "from step %lld of %d: it was being written when the job stopped", path, (long long)s,
                     (long long)w, (long long)step, world);
    cJSON_Delete(o);
    return st;
}
