/* src/train/train_checkpoints.c — defines: a training job's checkpoints (train/train_job.h):
 * writing one (every rank meeting under mpirun) and resuming from one, with the checks that it
 * was trained with the same settings. */
#include "train/train_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "parallel/batch_split.h"
#include "train/checkpoint.h"
#include "train/checkpoint_rank.h"

/* All ranks meet (a checkpoint's phases); they must all be after the same step. */
static qs_status qs_train_meet(const qs_train_config *c, int64_t step) {
    uint64_t lo, hi;
    QS_TRY(qs_comm_allreduce_minmax_u64(c->comm, (uint64_t)step, &lo, &hi, c->collective_timeout_s));
    if (lo != hi)
        return QS_FAIL(QS_ERR_INTERNAL, "ranks met to checkpoint after different steps (%llu and %llu)",
                       (unsigned long long)lo, (unsigned long long)hi);
    return QS_OK;
}

/* Rank 0 writes the weights and the optimizer state (replicas are identical); under mpirun
 * every rank also writes its own file, and rank 0 marks the checkpoint complete once all are
 * durable (src/train/checkpoint_rank.h). */
qs_status qs_train_checkpoint(const qs_train_config *c, qs_train_job *j, const qs_model_options *mo,
                              int64_t step) {
    if (!c->checkpoint_dir) return QS_OK;
    const char *dir = c->checkpoint_dir;
    if (j->world > 1) {
        if (j->rank == 0) {
            QS_TRY(qs_dir_ensure_writable(dir));
            QS_TRY(qs_checkpoint_marker_clear(dir));
        }
        QS_TRY(qs_train_meet(c, step));
        char split[256];
        qs_batch_split_format(j->split, j->world, split, sizeof split);
        QS_TRY(qs_checkpoint_rank_save(dir, j->m, c->model, j->rank, j->world, step, split));
    }
    if (j->rank == 0) {
        qs_train_state ts = {.step = step, .seed = c->seed, .global_batch = c->batch, .world = j->world};
        qs_loader_get_position(&j->loader, &ts.epoch, &ts.batch_in_epoch);
        snprintf(ts.data, sizeof ts.data, "%s", c->data);
        snprintf(ts.loss_scale_mode, sizeof ts.loss_scale_mode, "%s", qs_loss_scale_mode_name(j->scaler.mode));
        ts.loss_scale = j->scaler.scale;
        ts.loss_scale_good_steps = j->scaler.good_steps;
        ts.skipped_steps = j->scaler.skipped;
        QS_TRY(qs_checkpoint_save(dir, j->m, c->model, mo, &j->opt, &ts));
    }
    if (j->world > 1) {
        QS_TRY(qs_train_meet(c, step));
        if (j->rank == 0) QS_TRY(qs_checkpoint_marker_write(dir, step, j->world));
    }
    qs_log_info(c->log, "checkpoint written to %s (step %lld)", dir, (long long)step);
    return QS_OK;
}

/* Under mpirun: the marker must name the state's step, and this rank takes back its own
 * buffers and the batch split (dynamic batching continues from it; a given or even split must
 * be the one the checkpoint was trained with). */
static qs_status qs_train_resume_rank(const qs_train_config *c, qs_train_job *j, int64_t step) {
    QS_TRY(qs_checkpoint_marker_check(c->resume, step, j->world));
    qs_rank_state rs;
    QS_TRY(qs_checkpoint_rank_load(c->resume, j->m, j->rank, j->world, &rs));
    char path[4096];
    qs_checkpoint_rank_path(c->resume, j->rank, path, sizeof path);
    if (rs.step != step)
        return QS_FAIL(QS_ERR_MISMATCH, "%s is from step %lld, the checkpoint from step %lld: it is incomplete", path,
                       (long long)rs.step, (long long)step);
    int64_t *saved = calloc((size_t)j->world, sizeof *saved);
    if (!saved) return QS_FAIL(QS_ERR_OOM, "out of memory for the batch split");
    qs_status st = qs_batch_split_parse(rs.batch_split, j->world, c->batch, saved);
    if (st == QS_OK && j->dynamic) st = qs_train_apply_split(c, j, saved);
    else if (st == QS_OK && memcmp(saved, j->split, (size_t)j->world * sizeof *saved) != 0) {
        char have[256];
        qs_batch_split_format(j->split, j->world, have, sizeof have);
        st = QS_FAIL(QS_ERR_MISMATCH, "--resume %s was trained with local batches %s, this run has %s: resume with "
                     "the same --batch-split", c->resume, rs.batch_split, have);
    }
    free(saved);
    return st;
}

/* Load c->resume's weights, optimizer and loss-scaler state and loader position (*step: its
 * step), after checking it was trained with this run's data, batch, seed, ranks and loss scaling. */
qs_status qs_train_resume(const qs_train_config *c, qs_train_job *j, int64_t *step) {
    qs_train_state ts;
    char path[4096];
    qs_checkpoint_model_path(c->resume, path, sizeof path);
    QS_TRY(qs_checkpoint_load_model(path, j->m));
    QS_TRY(qs_checkpoint_load_state(c->resume, j->m, &j->opt, &ts));
    if (ts.global_batch != c->batch || ts.seed != c->seed || strcmp(ts.data, c->data) != 0)
        return QS_FAIL(QS_ERR_MISMATCH,
                       "--resume %s was trained with data %s, batch %lld, seed %llu; this run has %s, %lld, %llu: "
                       "resume with the same settings",
                       c->resume, ts.data, (long long)ts.global_batch, (unsigned long long)ts.seed, c->data,
                       (long long)c->batch, (unsigned long long)c->seed);
    if (ts.world != j->world)
        return QS_FAIL(QS_ERR_MISMATCH,
                       "--resume %s was trained by %lld rank(s), this run has %d: resume with the same number of "
                       "ranks (each rank's slice of the global batch, and so the run, depends on it)",
                       c->resume, (long long)ts.world, j->world);
    const char *mode = qs_loss_scale_mode_name(j->scaler.mode);
    if (strcmp(ts.loss_scale_mode, mode) != 0 ||
        (j->scaler.mode == QS_LOSS_SCALE_STATIC && ts.loss_scale != j->scaler.scale))
        return QS_FAIL(QS_ERR_MISMATCH, "--resume %s was trained with loss scaling %s (scale %g); this run has %s "
                       "(scale %g): resume with the same --loss-scale", c->resume, ts.loss_scale_mode,
                       (double)ts.loss_scale, mode, (double)j->scaler.scale);
    if (j->scaler.mode != QS_LOSS_SCALE_NONE) {
        j->scaler.scale = ts.loss_scale;
        j->scaler.good_steps = ts.loss_scale_good_steps;
    }
    j->scaler.skipped = ts.skipped_steps;
    if (j->world > 1) QS_TRY(qs_train_resume_rank(c, j, ts.step));
    QS_TRY(qs_loader_set_position(&j->loader, ts.epoch, ts.batch_in_epoch));
    j->m->step = ts.step;
    *step = ts.step;
    qs_log_info(c->log, "resumed from %s at step %lld (epoch %lld, batch %lld)", c->resume, (long long)ts.step,
                (long long)ts.epoch, (long long)ts.batch_in_epoch);
    return QS_OK;
}
