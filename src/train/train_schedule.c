/* src/train/train_schedule.c — defines: what a training job does between steps
 * (train/train_job.h): evaluation and checkpoints at epoch ends and every N steps, the replica
 * check, and stopping at --stop-at or on an interruption signal. */
#include "train/train_job.h"

#include <math.h>
#include <stdio.h>

#include "train/evaluate.h"

/* Evaluate on the test split after `step` (epoch `epoch`): res's test figures, a log line and an
 * eval record. */
static qs_status qs_train_eval(const qs_train_config *c, qs_train_job *j, int64_t step, int64_t epoch,
                               qs_train_result *res) {
    qs_eval_stats ev;
    QS_TRY(qs_evaluate(j->m, &j->test, &ev));
    res->test_accuracy = ev.accuracy;
    res->test_loss = ev.loss;
    if (j->m->label_len > 1) /* a language model: per-token accuracy, loss also in bits (per byte for bytes) */
        qs_log_info(c->log, "eval after epoch %lld (step %lld): test loss %.4f (%.4f bits per token), next-token "
                    "accuracy %.2f%% (%lld sequences)", (long long)epoch, (long long)step, ev.loss, ev.loss / log(2.0),
                    100.0 * ev.accuracy, (long long)ev.samples);
    else
        qs_log_info(c->log, "eval after epoch %lld (step %lld): test accuracy %.2f%%, loss %.4f (%lld samples)",
                    (long long)epoch, (long long)step, 100.0 * ev.accuracy, ev.loss, (long long)ev.samples);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "type", "eval");
    cJSON_AddNumberToObject(r, "step", (double)step);
    cJSON_AddNumberToObject(r, "epoch", (double)epoch);
    cJSON_AddNumberToObject(r, "accuracy", ev.accuracy);
    cJSON_AddNumberToObject(r, "loss", ev.loss);
    if (j->m->label_len > 1) cJSON_AddNumberToObject(r, "bits_per_token", ev.loss / log(2.0));
    cJSON_AddNumberToObject(r, "samples", (double)ev.samples);
    return qs_metrics_write(&j->metrics, r);
}

/* After `step`: evaluate and checkpoint at epoch ends, checkpoint every N steps, and stop (with a
 * checkpoint) at --stop-at or on an interruption signal. Sets *stop. */
qs_status qs_train_after_step(const qs_train_config *c, qs_train_job *j, const qs_model_options *mo,
                              int64_t step, int64_t total, int64_t spe, bool tty, bool *stop,
                              qs_train_result *res) {
    bool epoch_end = step % spe == 0 || step == total;
    int sig = c->interrupt ? atomic_load(c->interrupt) : 0;
    if (j->world > 1) { /* every rank stops after the same step, when any of them was signalled */
        uint64_t lo, hi;
        QS_TRY(qs_comm_allreduce_minmax_u64(c->comm, (uint64_t)sig, &lo, &hi, c->collective_timeout_s));
        sig = (int)hi;
    }
    bool interrupted = sig != 0;
    if (epoch_end || (c->check_replicas_every > 0 && step % c->check_replicas_every == 0))
        QS_TRY(qs_grad_sync_check_replicas(&j->sync, step));
    *stop = step == c->stop_at || interrupted;
    if (epoch_end) {
        if (tty) fputc('\n', stderr);
        int64_t epoch = (step - 1) / spe + 1;
        if (step == total || (c->eval_every > 0 && epoch % c->eval_every == 0))
            QS_TRY(qs_train_eval(c, j, step, epoch, res));
    }
    if (epoch_end || *stop || (c->checkpoint_every > 0 && step % c->checkpoint_every == 0))
        QS_TRY(qs_train_checkpoint(c, j, mo, step));
    if (*stop && tty && !epoch_end) fputc('\n', stderr);
    if (step == c->stop_at) qs_log_info(c->log, "stopping at step %lld as asked (--stop-at)", (long long)step);
    if (interrupted) {
        res->interrupted = true;
        res->interrupt_signal = sig;
        if (c->checkpoint_dir)
            qs_log_warn(c->log, "interrupted after step %lld; checkpoint written: continue with --resume %s",
                        (long long)step, c->checkpoint_dir);
        else
            qs_log_warn(c->log, "interrupted after step %lld; no --checkpoint-dir was given, so nothing was saved",
                        (long long)step);
    }
    return QS_OK;
}
