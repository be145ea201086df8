/* src/train/trainer.c — the training loop of `qsync train` (one process). */
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/stats.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "parallel/batch_balance.h"
#include "parallel/batch_split.h"
#include "io/cluster.h"
#include "parallel/grad_sync.h"
#include "graph/precision.h"
#include "optim/loss_scale.h"
#include "optim/schedule.h"
#include "train/checkpoint.h"
#include "train/checkpoint_rank.h"
#include "train/emulator.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/op_report.h"
#include "train/worker_report.h"
#include "backends/backends.h"

#define QS_PROFILE_WARMUP_STEPS 2

void qs_train_config_defaults(qs_train_config *c) {
    memset(c, 0, sizeof *c);
    c->model = "cnn";
    c->data = "fashion-mnist";
    c->epochs = 1;
    c->batch = 128;
    c->bucket_bytes = (size_t)25 << 20;
    c->collective_timeout_s = 300;
    c->rebalance_every = 20;
    c->optim.kind = QS_OPTIM_SGD;
    c->optim.lr = 0.1f;
    c->optim.momentum = 0.9f;
    c->optim.nesterov = true;
    c->optim.weight_decay = 5e-4f;
    c->optim.beta1 = 0.9;
    c->optim.beta2 = 0.999;
    c->optim.eps = 1e-8f;
    c->lr_schedule = "cosine";
    c->warmup_steps = -1;
    c->seed = 1;
    c->log_every = 50;
    c->precision = QS_PREC_FP32;
    c->grad_rounding = QS_GRAD_ROUND_UNSET;
    c->weight_scales = QS_WEIGHT_SCALES_UNSET;
    c->emulation_calibration_steps = QS_CLUSTER_DEFAULT_CALIBRATION_STEPS;
}

qs_status qs_train_load_plan(const char *path, qs_plan *out) {
    struct stat sb;
    size_t n = strlen(path);
    bool ckpt = (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) ||
                (n > 12 && strcmp(path + n - 12, ".safetensors") == 0);
    return ckpt ? qs_checkpoint_read_plan(path, out) : qs_plan_read(path, out);
}

void qs_train_precision_options(qs_precision precision, bool allow_emulated, qs_grad_rounding gr, qs_weight_scales ws,
                                qs_precision_options *out) {
    qs_precision_options_default(out);
    out->uniform = precision;
    out->allow_emulated = allow_emulated;
    out->grad_rounding = gr;
    out->weight_scales = ws;
}

/* Everything the loop owns, so that one cleanup path frees it. */
typedef struct qs_train_job {
    qs_dataset train, test;
    qs_backend *be;
    qs_model *m;
    qs_optimizer opt;
    bool opt_ready;
    qs_loader loader;
    bool loader_ready;
    qs_metrics metrics;
    qs_loss_scaler scaler;
    qs_plan plan;               /* the --plan file, if any */
    qs_grad_sync sync;          /* gradient averaging over the ranks */
    int rank, world;
    int64_t local_batch;
    int64_t *split;             /* every rank's local batch (world entries) */
    bool dynamic;               /* dynamic batching: split re-measured by `balance` */
    qs_batch_balance balance;
    int64_t rebalances;         /* splits changed by dynamic batching */
    qs_emulator emu;            /* this worker's emulated slowdown (train/emulator.h) */
    qs_samples step_ms;         /* this run's step times, for the medians of the report */
    float *x;
    int32_t *y;
} qs_train_job;

static void qs_train_job_free(qs_train_job *j) {
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
static qs_status qs_train_load_data(const qs_train_config *c, qs_train_job *j) {
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

/* The split of the global batch the run starts with (cfg->batch_split): even (--batch must
 * be divisible by the ranks), explicit, or even as the first measurement of dynamic batching. */
static qs_status qs_train_initial_split(const qs_train_config *c, qs_train_job *j) {
    j->split = calloc((size_t)j->world, sizeof *j->split);
    if (!j->split) return QS_FAIL(QS_ERR_OOM, "out of memory for the batch split");
    const char *bs = c->batch_split ? c->batch_split : "even";
    j->dynamic = strcmp(bs, "dynamic") == 0;
    if (c->batch < j->world)
        return QS_FAIL(QS_ERR_INVALID_ARG, "--batch %lld (the global batch) is smaller than the %d ranks",
                       (long long)c->batch, j->world);
    if (strcmp(bs, "even") == 0 && c->batch % j->world != 0)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "--batch %lld (the global batch) must be divisible by the %d ranks, so that every rank "
                       "takes an equal share (or give the shares with --batch-split, or use --batch-split dynamic)",
                       (long long)c->batch, j->world);
    if (j->dynamic || strcmp(bs, "even") == 0) qs_batch_split_even(j->world, c->batch, j->split);
    else QS_TRY(qs_batch_split_parse(bs, j->world, c->batch, j->split));
    if (j->dynamic)
        QS_TRY(qs_batch_balance_init(&j->balance, j->world, j->rank, c->batch, (int)c->rebalance_every));
    j->local_batch = j->split[j->rank];
    return QS_OK;
}

/* The worker's memory cap (cluster file) against what the backend measures as allocated. */
static qs_status qs_train_check_memory_cap(const qs_train_config *c, qs_train_job *j) {
    if (c->memory_cap_mb <= 0) return QS_OK;
    size_t used = 0;
    j->be->ops->memory_stats(j->be, &used, NULL);
    if (used > (size_t)c->memory_cap_mb << 20)
        return QS_FAIL(QS_ERR_OOM,
                       "rank %d (%s): the model needs %.1f MiB at batch %lld but the worker's memory cap is %lld MiB: "
                       "lower the batch, quantize more layers, or raise memory_mb in the cluster file",
                       j->rank, c->device_type ? c->device_type : "cpu", (double)used / 1048576.0,
                       (long long)j->local_batch, (long long)c->memory_cap_mb);
    return QS_OK;
}

/* Make `split` the ranks' local batches: this rank's model batch size, loader slice, gradient
 * weight and host batch buffers (the memory cap is checked again). */
static qs_status qs_train_apply_split(const qs_train_config *c, qs_train_job *j, const int64_t *split) {
    if (split != j->split) memcpy(j->split, split, (size_t)j->world * sizeof *split);
    j->local_batch = split[j->rank];
    QS_TRY(qs_model_set_batch(j->m, j->local_batch));
    QS_TRY(qs_train_check_memory_cap(c, j));
    QS_TRY(qs_loader_set_slice(&j->loader, qs_batch_split_offset(split, j->rank), j->local_batch));
    qs_grad_sync_set_local_batch(&j->sync, j->local_batch, c->batch);
    qs_host_free(j->x);
    qs_host_free(j->y);
    j->x = qs_host_alloc((size_t)(j->local_batch * j->train.h * j->train.w * j->train.c) * sizeof(float));
    j->y = qs_host_alloc((size_t)(j->local_batch * j->train.label_len) * sizeof(int32_t));
    return j->x && j->y ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory for a batch of %lld", (long long)j->local_batch);
}

/* Dynamic batching, after every step: record this step's compute time (its time minus the
 * wait for the gradient all-reduce); at the end of a window, re-split in proportion to the
 * ranks' speeds when the shares change by more than 2%. */
static qs_status qs_train_rebalance(const qs_train_config *c, qs_train_job *j, double step_ms, int64_t step) {
    if (!j->dynamic) return QS_OK;
    qs_batch_balance_record(&j->balance, step_ms - j->m->comm_wait_time.last_ms);
    if (!qs_batch_balance_due(&j->balance)) return QS_OK;
    int64_t *next = calloc((size_t)j->world, sizeof *next);
    double *speed = calloc((size_t)j->world, sizeof *speed);
    qs_status st = next && speed ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory re-splitting the batch");
    if (st == QS_OK) st = qs_batch_balance_propose(&j->balance, c->comm, c->collective_timeout_s, j->split, next, speed);
    if (st == QS_OK && qs_batch_split_changed(j->split, next, j->world, 0.02)) {
        char from[256], to[256], sp[256];
        size_t n = 0;
        qs_batch_split_format(j->split, j->world, from, sizeof from);
        qs_batch_split_format(next, j->world, to, sizeof to);
        sp[0] = 0;
        for (int r = 0; r < j->world && n < sizeof sp; r++)
            n += (size_t)snprintf(sp + n, sizeof sp - n, "%s%.2f", r ? ", " : "", speed[r]);
        qs_log_info(c->log, "dynamic batching after step %lld: speeds %s samples/ms, local batches %s -> %s",
                    (long long)step, sp, from, to);
        st = qs_train_apply_split(c, j, next);
        qs_batch_balance_restart(&j->balance);
        j->rebalances++;
    }
    free(next);
    free(speed);
    return st;
}

static qs_status qs_train_build(const qs_train_config *c, qs_train_job *j, qs_model_options *mo) {
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

static void qs_train_log_config(const qs_train_config *c, const qs_train_job *j, int64_t total, int64_t spe) {
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
                (long long)(c->warmup_steps >= 0 ? c->warmup_steps : (total / 10 < 50 ? total / 10 : 50)), c->optim.weight_decay, (unsigned long long)c->seed,
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
static qs_status qs_train_write_header(const qs_train_config *c, qs_train_job *j, int64_t total, int64_t first) {
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
static qs_status qs_train_checkpoint(const qs_train_config *c, qs_train_job *j, const qs_model_options *mo,
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

static qs_status qs_train_resume(const qs_train_config *c, qs_train_job *j, int64_t *step) {
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

/* Training-loss window between two step records. */
typedef struct qs_train_window {
    int64_t n, correct;
    double loss, t0;
} qs_train_window;

/* Write a step record (and the progress line on a terminal) for the window, then reset it. */
static qs_status qs_train_log_step(const qs_train_config *c, qs_train_job *j, qs_train_window *w, int64_t step,
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

/* The profiling window: before step `begin`, reset the op timers and time every op... */
static void qs_train_profile_begin(const qs_train_config *c, qs_train_job *j, int64_t step, int64_t begin) {
    if (c->profile_steps > 0 && step == begin) {
        qs_model_reset_times(j->m);
        j->m->timing = true;
    }
}

/* The GPU-busy window: from step `begin` for gpu_busy_steps steps, events around every op... */
static qs_status qs_train_busy_begin(const qs_train_config *c, qs_train_job *j, int64_t step, int64_t begin) {
    return c->gpu_busy_steps > 0 && step == begin ? qs_model_busy_start(j->m) : QS_OK;
}

/* ...after each step of it, their GPU time and the step's wall time added up; at its end, the
 * per-step means in res and a log line. */
static qs_status qs_train_busy_after(const qs_train_config *c, qs_train_job *j, double step_ms,
                                     qs_train_result *res) {
    if (!j->m->busy.on) return QS_OK;
    QS_TRY(qs_model_busy_collect(j->m, &res->gpu_busy_ms));
    res->gpu_busy_step_ms += step_ms;
    if (++res->gpu_busy_steps < c->gpu_busy_steps) return QS_OK;
    qs_model_busy_stop(j->m);
    res->gpu_busy_ms /= (double)res->gpu_busy_steps;
    res->gpu_busy_step_ms /= (double)res->gpu_busy_steps;
    qs_log_info(c->log, "GPU busy %.1f%% of the step: %.3f of %.3f ms per step in the model's ops and the optimizer "
                "(%lld steps, events around every op)", 100.0 * res->gpu_busy_ms / res->gpu_busy_step_ms,
                res->gpu_busy_ms, res->gpu_busy_step_ms, (long long)res->gpu_busy_steps);
    return QS_OK;
}

/* ...and after profile_steps steps, stop timing and report (res->profile, and on stderr). */
static void qs_train_profile_end(const qs_train_config *c, qs_train_job *j, int64_t step, int64_t begin,
                                 qs_train_result *res) {
    if (!j->m->timing || step != begin + c->profile_steps) return;
    j->m->timing = false;
    size_t opt_bytes = (size_t)j->opt.n_state * j->m->params.bytes;
    res->profile = qs_op_report_json(j->m, c->profile_steps, opt_bytes);
    if (c->log->level <= QS_LOG_INFO) qs_op_report_print(j->m, c->profile_steps, opt_bytes, stderr);
}

/* After `step`: evaluate and checkpoint at epoch ends, checkpoint every N steps, and stop (with a
 * checkpoint) at --stop-at or on an interruption signal. Sets *stop. */
static qs_status qs_train_after_step(const qs_train_config *c, qs_train_job *j, const qs_model_options *mo,
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

/* Median of this run's step times after the first `skip` (all of them when there are fewer). */
static double qs_train_median_step_ms(qs_train_job *j, int64_t skip) {
    if (j->step_ms.n <= skip) skip = 0;
    return qs_median_inplace(j->step_ms.v + skip, j->step_ms.n - skip);
}

/* This rank's figures for the worker report (train/worker_report.h); gathered on every rank,
 * reported by rank 0 (logged only for several ranks or an emulated one; always in the JSON). The median step leaves out 5 warm-up steps and every rank's unslowed
 * calibration window (train/emulator.h). */
static qs_status qs_train_worker_report(const qs_train_config *c, qs_train_job *j, qs_train_result *res) {
    uint64_t skip = 5, lo, hi;
    if (j->emu.on_after > 0 && (uint64_t)(j->emu.on_after + QS_EMULATOR_WARMUP) > skip)
        skip = (uint64_t)(j->emu.on_after + QS_EMULATOR_WARMUP);
    if (j->world > 1) {
        QS_TRY(qs_comm_allreduce_minmax_u64(c->comm, skip, &lo, &hi, c->collective_timeout_s));
        skip = hi;
    }
    double steps = j->step_ms.n > 0 ? (double)j->step_ms.n : 1, total = 0;
    for (int64_t i = 0; i < j->step_ms.n; i++) total += j->step_ms.v[i];
    qs_worker_figures f = {.slowdown_asked = c->slowdown > 1 ? c->slowdown : 1,
                           .emulation_method = c->mps_sm_percent > 0       ? "mps"
                                               : c->sm_partition_count > 0 ? "green-context"
                                                                           : j->emu.how,
                           .sm_percent = c->mps_sm_percent,
                           .sm_count = c->sm_partition_count,
                           .mean_step_ms = total / steps,
                           .median_step_ms = qs_train_median_step_ms(j, (int64_t)skip),
                           .local_batch = (double)j->local_batch,
                           .comm_wait_ms = j->m->comm_wait_time.total_ms / steps};
    f.slowdown_measured = qs_emulator_measured(&j->emu, j->m, &f.calibrated);
    size_t in_use = 0;
    j->be->ops->memory_stats(j->be, &in_use, NULL);
    f.memory_bytes = (double)in_use;
    qs_model_precision_counts(j->m, f.precision_counts);
    return qs_worker_report_gather(c->comm, j->rank, j->world, c->collective_timeout_s, &f, c->worker_types,
                                   c->device_type, c->log, j->world > 1 || c->slowdown > 1, &res->workers);
}

/* How many training passes ran as captured graphs and op by op, and why the latter where no
 * pass could be captured (logged on a GPU, where capture is the default). */
static void qs_train_graph_report(const qs_train_config *c, qs_train_job *j, qs_train_result *res) {
    const qs_capture *cap = &j->m->capture;
    res->graph_passes = cap->replays[QS_PASS_FORWARD] + cap->replays[QS_PASS_BACKWARD];
    res->eager_passes = cap->eager[QS_PASS_FORWARD] + cap->eager[QS_PASS_BACKWARD];
    const char *why = c->no_graphs ? "--no-graphs" : cap->failed ? cap->failure
                                                                   : qs_capture_blocker(j->m);
    res->eager_reason[0] = '\0';
    if ((res->graph_passes == 0 || cap->failed) && why) snprintf(res->eager_reason, sizeof res->eager_reason, "%s", why);
    if (c->cuda)
        qs_log_info(c->log, "training passes: %lld replayed as CUDA graphs, %lld op by op%s%s",
                    (long long)res->graph_passes, (long long)res->eager_passes, res->eager_reason[0] ? ": " : "",
                    res->eager_reason);
}

static qs_status qs_train_loop(const qs_train_config *c, qs_train_job *j, const qs_model_options *mo,
                               qs_train_result *res) {
    int64_t spe = qs_loader_steps_per_epoch(&j->loader);
    int64_t total = c->steps > 0 ? c->steps : c->epochs * spe;
    qs_lr_schedule sched;
    memset(&sched, 0, sizeof sched);
    QS_TRY(qs_lr_schedule_parse(c->lr_schedule, &sched));
    sched.base_lr = c->optim.lr;
    /* auto warm-up: 50 steps, but never more than a tenth of the run */
    sched.warmup_steps = c->warmup_steps >= 0 ? c->warmup_steps : (total / 10 < 50 ? total / 10 : 50);
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

qs_status qs_train_run(const qs_train_config *c, qs_train_result *res) {
    memset(res, 0, sizeof *res);
    res->test_accuracy = -1;
    qs_train_job j;
    memset(&j, 0, sizeof j);
    qs_model_options mo;
    qs_status st = qs_train_load_data(c, &j);
    if (st == QS_OK) st = qs_train_build(c, &j, &mo);
    if (st == QS_OK) st = qs_train_loop(c, &j, &mo, res);
    if (st == QS_OK) {
        res->precision = qs_precision_report_json(j.m, j.be);
        qs_precision_report_line(j.m, j.be, res->precision_line, sizeof res->precision_line);
        snprintf(res->loss_scale_mode, sizeof res->loss_scale_mode, "%s", qs_loss_scale_mode_name(j.scaler.mode));
        res->loss_scale = j.scaler.scale;
        res->skipped_steps = j.scaler.skipped;
        res->rebalances = j.rebalances;
        if (j.split) qs_batch_split_format(j.split, j.world, res->batch_split, sizeof res->batch_split);
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "type", "summary");
        cJSON_AddNumberToObject(r, "steps", (double)res->steps);
        cJSON_AddNumberToObject(r, "test_accuracy", res->test_accuracy);
        cJSON_AddNumberToObject(r, "test_loss", res->test_loss);
        cJSON_AddNumberToObject(r, "train_wall_s", res->wall_s);
        cJSON_AddNumberToObject(r, "images_per_s", res->images_per_s);
        cJSON *prec = qs_precision_report_json(j.m, j.be);
        if (prec) cJSON_AddItemToObject(r, "precision", prec);
        if (res->workers) cJSON_AddItemReferenceToObject(r, "workers", res->workers);
        if (j.split && j.world > 1) {
            cJSON_AddStringToObject(r, "batch_split_mode", j.dynamic ? "dynamic" : c->batch_split ? "given" : "even");
            cJSON_AddStringToObject(r, "batch_split", res->batch_split);
            cJSON_AddNumberToObject(r, "rebalances", (double)res->rebalances);
        }
        cJSON_AddStringToObject(r, "loss_scale_mode", res->loss_scale_mode);
        cJSON_AddNumberToObject(r, "loss_scale", res->loss_scale);
        cJSON_AddNumberToObject(r, "skipped_steps", (double)res->skipped_steps);
        st = qs_metrics_write(&j.metrics, r);
    }
    qs_train_job_free(&j);
    return st;
}
