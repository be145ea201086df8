/* src/train/train_records.c — defines: what a training job writes about itself
 * (train/train_job.h): the configuration log lines, the metrics header, step records with the
 * progress line, and the end-of-run summary. */
#include "train/train_job.h"

#include <stdio.h>
#include <string.h>

#include "core/timer.h"
#include "graph/precision.h"
#include "parallel/batch_split.h"

/* The run's configuration in log lines: model, data, schedule, backend, precisions, loss scaling. */
void qs_train_log_config(const qs_train_config *c, const qs_train_job *j, int64_t total, int64_t spe) {
    char threads[24];
    if (c->threads > 0) snprintf(threads, sizeof threads, "%d", c->threads);
    else snprintf(threads, sizeof threads, "default");
    int64_t params = 0;
    for (int i = 0; i < j->m->params.count; i++) params += j->m->params.entries[i].numel;
    qs_log_info(c->log, "qsync train: model %s (%lld parameters), data %s (%lld train / %lld test, %lldx%lldx%lld)",
                c->model, (long long)params, c->data, (long long)j->train.n, (long long)j->test.n,
                (long long)j->train.h, (long long)j->train.w, (long long)j->train.c);
    qs_log_info(c->log, "  batch %lld, %lld steps (%lld per epoch), %s lr %g (%s, warm-up %lld), wd %g, seed %llu, "
                        "backend %s, threads %s",
                (long long)c->batch, (long long)total, (long long)spe,
                c->optim.kind == QS_OPTIM_SGD ? "sgd" : "adamw", c->optim.lr, c->lr_schedule,
                (long long)qs_train_warmup_steps(c, total), c->optim.weight_decay, (unsigned long long)c->seed,
                j->be->ops->name, threads);
    char line[256];
    qs_precision_report_line(j->m, j->be, line, sizeof line);
    if (c->plan) qs_log_info(c->log, "  precisions (plan %s): %s", c->plan, line);
    else qs_log_info(c->log, "  precisions (--precision %s): %s", qs_precision_name(c->precision), line);
    if (j->scaler.mode != QS_LOSS_SCALE_NONE)
        qs_log_info(c->log, "  loss scaling %s, scale %g%s", qs_loss_scale_mode_name(j->scaler.mode),
                    (double)j->scaler.scale, j->scaler.mode == QS_LOSS_SCALE_DYNAMIC ? "" : " (fixed)");
}

/* The metrics header: what this run is, precisions included. */
qs_status qs_train_write_header(const qs_train_config *c, qs_train_job *j, int64_t total, int64_t first) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "type", "run");
    cJSON_AddStringToObject(r, "model", c->model);
    cJSON_AddStringToObject(r, "config", j->m->config);
    cJSON_AddStringToObject(r, "data", c->data);
    cJSON_AddNumberToObject(r, "batch", (double)c->batch);
    cJSON_AddNumberToObject(r, "world", (double)j->world);
    cJSON_AddNumberToObject(r, "steps", (double)total);
    cJSON_AddNumberToObject(r, "first_step", (double)first);
    cJSON_AddNumberToObject(r, "seed", (double)c->seed);
    cJSON_AddStringToObject(r, "optimizer", qs_optim_kind_name(c->optim.kind));
    cJSON_AddNumberToObject(r, "lr", c->optim.lr);
    cJSON_AddStringToObject(r, "backend", j->be->ops->name);
    if (c->plan) cJSON_AddStringToObject(r, "plan", c->plan);
    else cJSON_AddStringToObject(r, "uniform_precision", qs_precision_name(c->precision));
    cJSON *prec = qs_precision_report_json(j->m, j->be);
    if (prec) cJSON_AddItemToObject(r, "precision", prec);
    cJSON_AddStringToObject(r, "loss_scale_mode", qs_loss_scale_mode_name(j->scaler.mode));
    cJSON_AddNumberToObject(r, "loss_scale", j->scaler.scale);
    return qs_metrics_write(&j->metrics, r);
}

/* Write a step record (and the progress line on a terminal) for the window, then reset it. */
qs_status qs_train_log_step(const qs_train_config *c, qs_train_job *j, qs_train_window *w, int64_t step,
                            int64_t total, int64_t spe, float lr, double train_ms, bool tty,
                            qs_train_result *res) {
    double dt = qs_now_ms() - w->t0, rate = 1e3 * (double)(w->n * c->batch) / dt;
    if (j->world > 1) { /* the window over the global batch: mean of the ranks' means, summed counts */
        double sums[2] = {w->loss, (double)w->correct};
        QS_TRY(qs_comm_allreduce_sum_f64(c->comm, sums, 2, c->collective_timeout_s));
        w->loss = sums[0] / j->world;
        w->correct = (int64_t)sums[1];
    }
    res->final_loss = w->loss / (double)w->n;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "type", "step");
    cJSON_AddNumberToObject(r, "step", (double)step);
    cJSON_AddNumberToObject(r, "epoch", (double)((step - 1) / spe));
    cJSON_AddNumberToObject(r, "loss", res->final_loss);
    cJSON_AddNumberToObject(r, "train_accuracy",
                            (double)w->correct / (double)(w->n * c->batch * j->train.label_len)); /* per prediction */
    cJSON_AddNumberToObject(r, "lr", lr);
    cJSON_AddNumberToObject(r, "images_per_s", rate);
    cJSON_AddNumberToObject(r, "train_s", train_ms / 1e3);
    if (j->scaler.mode != QS_LOSS_SCALE_NONE) {
        cJSON_AddNumberToObject(r, "loss_scale", j->scaler.scale);
        cJSON_AddNumberToObject(r, "skipped_steps", (double)j->scaler.skipped);
    }
    QS_TRY(qs_metrics_write(&j->metrics, r));
    if (tty && j->rank == 0)
        fprintf(stderr, "\rstep %lld/%lld  epoch %lld  loss %.4f  lr %.4g  %.0f img/s   ", (long long)step,
                (long long)total, (long long)((step - 1) / spe + 1), res->final_loss, lr, rate);
    memset(w, 0, sizeof *w);
    w->t0 = qs_now_ms();
    return QS_OK;
}

/* After a finished run: the run's precisions, loss scaling and batch split in res, and the
 * summary record of the metrics. */
qs_status qs_train_summary(const qs_train_config *c, qs_train_job *j, qs_train_result *res) {
    res->precision = qs_precision_report_json(j->m, j->be);
    qs_precision_report_line(j->m, j->be, res->precision_line, sizeof res->precision_line);
    snprintf(res->loss_scale_mode, sizeof res->loss_scale_mode, "%s", qs_loss_scale_mode_name(j->scaler.mode));
    res->loss_scale = j->scaler.scale;
    res->skipped_steps = j->scaler.skipped;
    res->rebalances = j->rebalances;
    if (j->split) qs_batch_split_format(j->split, j->world, res->batch_split, sizeof res->batch_split);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "type", "summary");
    cJSON_AddNumberToObject(r, "steps", (double)res->steps);
    cJSON_AddNumberToObject(r, "test_accuracy", res->test_accuracy);
    cJSON_AddNumberToObject(r, "test_loss", res->test_loss);
    cJSON_AddNumberToObject(r, "train_wall_s", res->wall_s);
    cJSON_AddNumberToObject(r, "images_per_s", res->images_per_s);
    cJSON *prec = qs_precision_report_json(j->m, j->be);
    if (prec) cJSON_AddItemToObject(r, "precision", prec);
    if (res->workers) cJSON_AddItemReferenceToObject(r, "workers", res->workers);
    if (j->split && j->world > 1) {
        cJSON_AddStringToObject(r, "batch_split_mode", j->dynamic ? "dynamic" : c->batch_split ? "given" : "even");
        cJSON_AddStringToObject(r, "batch_split", res->batch_split);
        cJSON_AddNumberToObject(r, "rebalances", (double)res->rebalances);
    }
    cJSON_AddStringToObject(r, "loss_scale_mode", res->loss_scale_mode);
    cJSON_AddNumberToObject(r, "loss_scale", res->loss_scale);
    cJSON_AddNumberToObject(r, "skipped_steps", (double)res->skipped_steps);
    return qs_metrics_write(&j->metrics, r);
}
