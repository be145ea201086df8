/* src/train/train_setup.c — defines: building a training job (train/train_job.h): the data
 * splits, the model, backend, precisions and loss scaler (checked against a --resume
 * checkpoint), the batch split, optimizer, gradient sync and loader; and freeing it. */
#include "train/train_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backends.h"
#include "graph/precision.h"
#include "train/checkpoint.h"
#include "train/checkpoint_rank.h"

/* Free everything j holds (a zeroed or partly built job too). */
void qs_train_job_free(qs_train_job *j) {
    qs_emulator_free(&j->emu);
    qs_grad_sync_free(&j->sync);
    qs_batch_balance_free(&j->balance);
    free(j->split);
    qs_samples_free(&j->step_ms);
    qs_host_free(j->x);
    qs_host_free(j->y);
    qs_plan_free(&j->plan);
    qs_metrics_close(&j->metrics);
    if (j->loader_ready) qs_loader_free(&j->loader);
    if (j->opt_ready) qs_optimizer_free(&j->opt, j->be);
    qs_model_free(j->m);
    if (j->be) j->be->ops->destroy(j->be);
    qs_dataset_free(&j->train);
    qs_dataset_free(&j->test);
}

/* Load both splits; subsets keep the first N samples. */
qs_status qs_train_load_data(const qs_train_config *c, qs_train_job *j) {
    QS_TRY(qs_dataset_load(c->data, c->data_dir, true, &j->train));
    QS_TRY(qs_dataset_load(c->data, c->data_dir, false, &j->test));
    if (c->train_subset > 0 && c->train_subset < j->train.n) QS_TRY(qs_dataset_truncate(&j->train, c->train_subset));
    if (c->eval_subset > 0 && c->eval_subset < j->test.n) QS_TRY(qs_dataset_truncate(&j->test, c->eval_subset));
    if (j->train.n < c->batch)
        return QS_FAIL(QS_ERR_INVALID_ARG, "batch %lld is larger than the %lld training samples", (long long)c->batch,
                       (long long)j->train.n);
    return QS_OK;
}

/* The loss scaler of the run: --loss-scale, where "auto" means dynamic when a layer is fp16. */
static qs_status qs_train_init_scaler(const qs_train_config *c, qs_train_job *j) {
    const char *ls = c->loss_scale;
    if (!ls || strcmp(ls, "auto") == 0) {
        int counts[QS_PREC_COUNT];
        qs_model_precision_counts(j->m, counts);
        ls = counts[QS_PREC_FP16] > 0 ? "dynamic" : "none";
    }
    qs_status st = qs_loss_scaler_parse(ls, c->loss_scale_window, &j->scaler);
    if (st != QS_OK) return qs_error_wrap(st, "--loss-scale: ");
    return QS_OK;
}

/* A plan with per-device-type sections: every section must name a worker type of the
 * cluster (a misspelt type would silently run at the top-level precisions), and this rank
 * takes the section of its own type. */
static qs_status qs_train_select_device_type(const qs_train_config *c, qs_train_job *j) {
    if (!qs_plan_has_device_types(&j->plan)) return QS_OK;
    if (!c->device_type)
        return QS_FAIL(QS_ERR_INVALID_ARG, "plan %s has per-device-type sections: run with --cluster, whose workers' "
                       "types select them", c->plan);
    int world = qs_comm_world(c->comm);
    for (int t = 0; c->worker_types && t < qs_plan_device_type_count(&j->plan); t++) {
        const char *type = qs_plan_device_type_at(&j->plan, t);
        bool found = false;
        for (int r = 0; r < world && !found; r++) found = strcmp(c->worker_types[r], type) == 0;
        if (!found)
            return QS_FAIL(QS_ERR_MISMATCH, "plan %s has a section for device type \"%s\", which no worker of the "
                           "cluster is (check the spelling against the cluster file's \"type\" labels)", c->plan, type);
    }
    return qs_plan_select_device_type(&j->plan, c->device_type);
}

/* Precisions (uniform or plan, validated against the backend), casts, and on resume the
 * check that the checkpoint was trained with the same ones. Between fuse and setup. */
static qs_status qs_train_precisions(const qs_train_config *c, qs_train_job *j) {
    if (c->plan_text) QS_TRY(qs_plan_parse(c->plan_text, c->plan, &j->plan));
    else if (c->plan) QS_TRY(qs_train_load_plan(c->plan, &j->plan));
    if (c->plan) QS_TRY(qs_train_select_device_type(c, j));
    qs_precision_options po;
    qs_train_precision_options(c->precision, c->allow_emulated, c->grad_rounding, c->weight_scales, &po);
    po.fp8_amax_history = c->fp8_amax_history;
    QS_TRY(qs_plan_precision_setup(c->plan ? &j->plan : NULL, j->m, j->be, &po));
    if (c->resume) {
        qs_plan saved;
        char what[4200], msg[1024];
        snprintf(what, sizeof what, "--resume %s was trained with", c->resume);
        /* under mpirun each rank compares with its own plan (device types differ) */
        qs_status st = qs_checkpoint_rank_read_plan(c->resume, qs_comm_rank(c->comm), &saved);
        if (st == QS_ERR_NOT_FOUND) st = qs_checkpoint_read_plan(c->resume, &saved);
        if (st == QS_OK) st = qs_plan_compare(&saved, j->m, what);
        qs_plan_free(&saved);
        if (st == QS_ERR_MISMATCH) {
            snprintf(msg, sizeof msg, "%s", qs_last_error());
            return QS_FAIL(st, "%s: resume with the same --precision/--plan and options (--plan %s reuses the "
                           "checkpoint's own)", msg, c->resume);
        }
        QS_TRY(st);
    }
    return qs_train_init_scaler(c, j);
}

/* The model (*mo: its resolved options, checked against a --resume checkpoint), backend,
 * precisions, batch split, parameters, optimizer, gradient sync and loader, after the data. */
qs_status qs_train_build(const qs_train_config *c, qs_train_job *j, qs_model_options *mo) {
    *mo = qs_models_default_options(j->train.h, j->train.w, j->train.c, j->train.classes);
    mo->width = c->model_opt.width;
    mo->dropout = c->model_opt.dropout;
    mo->layers = c->model_opt.layers;
    mo->heads = c->model_opt.heads;
    if (c->imagenet_stem) mo->cifar_stem = false;
    QS_TRY(qs_models_build(c->model, mo, &j->m));
    const qs_model *m = j->m;
    QS_TRY(qs_dataset_check_model(&j->train, c->data, c->model, m->in_h, m->in_w, m->in_c, m->label_len, m->num_classes));
    QS_TRY(qs_dataset_check_model(&j->test, c->data, c->model, m->in_h, m->in_w, m->in_c, m->label_len, m->num_classes));
    if (c->resume) { /* the checkpoint must hold this very model: same arch, same resolved options */
        char arch[32], have[256];
        qs_model_options saved;
        QS_TRY(qs_checkpoint_read_arch(c->resume, arch, sizeof arch, &saved));
        if (strcmp(arch, c->model) != 0)
            return QS_FAIL(QS_ERR_MISMATCH, "--resume %s holds a %s model, but --model is %s", c->resume, arch, c->model);
        QS_TRY(qs_models_format_config(arch, &saved, have, sizeof have));
        if (strcmp(j->m->config, have) != 0)
            return QS_FAIL(QS_ERR_MISMATCH, "--resume %s holds %s with \"%s\", but this run builds \"%s\": resume with "
                           "the same model options", c->resume, arch, have, j->m->config);
    }
    QS_TRY(qs_backend_open(c->cuda, c->cuda_device, c->threads, &j->be));
    if (!c->no_fuse) qs_model_fuse(j->m);
    QS_TRY(qs_train_precisions(c, j));
    j->rank = qs_comm_rank(c->comm);
    j->world = qs_comm_world(c->comm);
    QS_TRY(qs_train_initial_split(c, j));
    /* every rank initialises identical parameters from the seed; the replica check confirms it */
    QS_TRY(qs_model_setup(j->m, j->be, j->local_batch, c->seed));
    j->m->capture.on = !c->no_graphs;
    QS_TRY(qs_train_check_memory_cap(c, j));
    QS_TRY(qs_optimizer_init(&j->opt, j->be, &j->m->params, &c->optim));
    j->opt_ready = true;
    QS_TRY(qs_grad_sync_init(&j->sync, c->comm, j->m, c->bucket_bytes ? c->bucket_bytes : (size_t)25 << 20,
                             !c->no_overlap, c->collective_timeout_s));
    qs_loader_options lo = {.global_batch = c->batch, .rank = j->rank, .world = j->world, .seed = c->seed,
                            .shuffle = true, .drop_last = true, .augment = c->augment,
                            .crop_pad = j->train.h >= 32 ? 4 : 2};
    QS_TRY(qs_loader_init(&j->loader, &j->train, &lo));
    j->loader_ready = true;
    return qs_train_apply_split(c, j, j->split);
}
