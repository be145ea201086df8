/* src/train/trainer.c — the training loop of `qsync train` (one process): one step, the loop
 * over the steps, and the run from building the job to its summary (the job: train/train_job.h). */
#include "train/train_job.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "core/timer.h"
#include "optim/schedule.h"

#define QS_PROFILE_WARMUP_STEPS 2

/* --warmup-steps, or (auto) 50 steps but never more than a tenth of the run's `total`. */
int64_t qs_train_warmup_steps(const qs_train_config *c, int64_t total) {
    return c->warmup_steps >= 0 ? c->warmup_steps : (total / 10 < 50 ? total / 10 : 50);
}

/* One optimizer step on the next batch; returns the batch's mean loss and correct count. */
static qs_status qs_train_step(const qs_train_config *c, qs_train_job *j, float lr, double *loss, int64_t *correct) {
    int64_t valid;
    if (c->comm) QS_TRY(qs_comm_arrive(c->comm, j->m->step + 1, 0)); /* named in timeouts */
    QS_TRY(qs_loader_next(&j->loader, j->x, j->y, &valid, NULL));
    QS_TRY(qs_model_forward(j->m, j->x, j->y, true));
    /* backward at the loss scale, overflow check, optimizer step (or a skipped one) */
    float scale = qs_loss_scaler_factor(&j->scaler);
    QS_TRY(qs_loss_scaler_step(&j->scaler, j->m, &j->opt, lr, NULL));
    if (j->scaler.last_skipped)
        qs_log_debug(c->log, "step %lld: non-finite gradients at loss scale %g: update skipped",
                     (long long)j->m->step, (double)scale);
    QS_TRY(qs_model_loss_accuracy(j->m, valid, loss, correct));
    if (!isfinite(*loss))
        return QS_FAIL(QS_ERR_INVALID_ARG, "training diverged: loss is %g (lower --lr or add warm-up)", *loss);
    return QS_OK;
}

/* Train from step 0 (or the --resume checkpoint's) to the last: the schedule, the emulator, the
 * metrics header, then step after step with its records, windows and checks; the totals in res. */
static qs_status qs_train_loop(const qs_train_config *c, qs_train_job *j, const qs_model_options *mo,
                               qs_train_result *res) {
    int64_t spe = qs_loader_steps_per_epoch(&j->loader);
    int64_t total = c->steps > 0 ? c->steps : c->epochs * spe;
    qs_lr_schedule sched;
    memset(&sched, 0, sizeof sched);
    QS_TRY(qs_lr_schedule_parse(c->lr_schedule, &sched));
    sched.base_lr = c->optim.lr;
    sched.warmup_steps = qs_train_warmup_steps(c, total);
    sched.total_steps = total;
    QS_TRY(qs_lr_schedule_check(&sched));
    int64_t step = 0;
    if (c->resume) QS_TRY(qs_train_resume(c, j, &step));
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    QS_TRY(qs_emulator_init(&j->emu, c->slowdown, c->emulation_method,
                            c->threads > 0 ? c->threads : cores > 0 ? (int)cores : 1, j->rank,
                            c->emulation_calibration_steps, total - step, j->m, c->log));
    /* rank 0 writes the metrics (its step records carry the global-batch loss) */
    QS_TRY(qs_metrics_open(&j->metrics, j->rank == 0 ? c->metrics_path : NULL, c->resume != NULL, j->rank));
    qs_train_log_config(c, j, total, spe);
    QS_TRY(qs_train_write_header(c, j, total, step));
    bool tty = c->progress && isatty(STDERR_FILENO), stop = false;
    int64_t first = step;
    double train_ms = 0;
    qs_train_window w = {.t0 = qs_now_ms()};
    while (step < total && !stop) {
        qs_train_profile_begin(c, j, step, first + QS_PROFILE_WARMUP_STEPS);
        QS_TRY(qs_train_busy_begin(c, j, step, first + QS_PROFILE_WARMUP_STEPS));
        double t0 = qs_now_ms(), loss;
        int64_t correct;
        float lr = qs_lr_at(&sched, step);
        QS_TRY(qs_train_step(c, j, lr, &loss, &correct));
        step++;
        double step_ms = qs_now_ms() - t0;
        train_ms += step_ms;
        QS_TRY(qs_samples_push(&j->step_ms, step_ms, "step times"));
        QS_TRY(qs_emulator_record(&j->emu, step - first, step_ms - j->m->comm_wait_time.last_ms, j->local_batch, j->m,
                                  c->log));
        QS_TRY(qs_train_rebalance(c, j, step_ms, step));
        /* the rank's mean loss, weighted so that the ranks' mean is the global-batch mean */
        w.loss += loss * (double)j->local_batch * j->world / (double)c->batch;
        w.correct += correct;
        w.n++;
        qs_train_profile_end(c, j, step, first + QS_PROFILE_WARMUP_STEPS, res);
        QS_TRY(qs_train_busy_after(c, j, step_ms, res));
        if (step % c->log_every == 0 || step % spe == 0 || step == total)
            QS_TRY(qs_train_log_step(c, j, &w, step, total, spe, lr, train_ms, tty, res));
        QS_TRY(qs_train_after_step(c, j, mo, step, total, spe, tty, &stop, res));
        if (step % spe == 0) w.t0 = qs_now_ms(); /* evaluation time is not training time */
    }
    res->steps = step;
    res->steps_this_run = step - first;
    res->wall_s = train_ms / 1e3;
    res->images_per_s = train_ms > 0 ? 1e3 * (double)((step - first) * c->batch) / train_ms : 0;
    res->label_len = j->m->label_len;
    qs_train_graph_report(c, j, res);
    QS_TRY(qs_train_worker_report(c, j, res));
    if (j->scaler.skipped > 0)
        qs_log_info(c->log, "loss scaling: %lld of %lld steps skipped for non-finite gradients; final scale %g",
                    (long long)j->scaler.skipped, (long long)step, (double)j->scaler.scale);
    return QS_OK;
}

/* Contract: train/trainer.h. */
qs_status qs_train_run(const qs_train_config *c, qs_train_result *res) {
    memset(res, 0, sizeof *res);
    res->test_accuracy = -1;
    qs_train_job j;
    memset(&j, 0, sizeof j);
    qs_model_options mo;
    qs_status st = qs_train_load_data(c, &j);
    if (st == QS_OK) st = qs_train_build(c, &j, &mo);
    if (st == QS_OK) st = qs_train_loop(c, &j, &mo, res);
    if (st == QS_OK) st = qs_train_summary(c, &j, res);
    qs_train_job_free(&j);
    return st;
}
