/* cli/cmd_train.c — `qsync train`. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include "commands.h"
#include "optim/loss_scale.h"
#include "options.h"
#include "precision_args.h"
#include "stop_signals.h"
#include "io/cluster.h"
#include "parallel/mps.h"
#include "parallel/comm.h"
#include "train/trainer.h"

static const char *const qs_train_summary =
    "Train a built-in model (see qsync models) on fashion-mnist (Debian package dataset-fashion-mnist),\n"
    "cifar10 (binary version, --data-dir required) or synthetic data, on the CPU. GEMM-like layers\n"
    "(Linear, Conv2d) run at one --precision or at the per-layer precisions of a --plan (docs/PLANS.md).";

/* Translate the textual options that need checking into the config; 0 or 2. */
static int qs_train_check(qs_train_config *c, const char *optimizer, const char *precision, const char *device,
                          const char *grad_rounding, const char *weight_scales, const char *fp8_scaling) {
    if (strcmp(optimizer, "sgd") == 0) c->optim.kind = QS_OPTIM_SGD;
    else if (strcmp(optimizer, "adamw") == 0) c->optim.kind = QS_OPTIM_ADAMW;
    else {
        fprintf(stderr, "qsync train: --optimizer must be sgd or adamw (got '%s')\n", optimizer);
        return 2;
    }
    int rc = qs_cli_precision_options("train", precision, c->plan, grad_rounding, weight_scales, &c->precision,
                                      &c->grad_rounding, &c->weight_scales);
    if (rc) return rc;
    if ((rc = qs_cli_fp8_scaling("train", fp8_scaling, &c->fp8_amax_history))) return rc;
    qs_loss_scaler ls;
    if (c->loss_scale && strcmp(c->loss_scale, "auto") != 0 && qs_loss_scaler_parse(c->loss_scale, 0, &ls) != QS_OK) {
        fprintf(stderr, "qsync train: --loss-scale must be auto, none, dynamic, dynamic:INIT or a positive number "
                "(got '%s')\n", c->loss_scale);
        return 2;
    }
    if (c->rebalance_every < 2) {
        fprintf(stderr, "qsync train: --rebalance-every must be ≥ 2 (steps per speed measurement)\n");
        return 2;
    }
    if (c->loss_scale_window < 0) {
        fprintf(stderr, "qsync train: --loss-scale-window must be ≥ 1\n");
        return 2;
    }
    if (!qs_cli_parse_device(device, &c->cuda, &c->cuda_device)) {
        fprintf(stderr, "qsync train: --device must be cpu, cuda or cuda:N (got '%s')\n", device);
        return 2;
    }
    if (c->batch < 1 || c->epochs < 0 || c->steps < 0 || (c->epochs == 0 && c->steps == 0) || c->log_every < 1) {
        fprintf(stderr, "qsync train: --batch and --log-every must be ≥ 1, and --epochs or --steps must be > 0\n");
        return 2;
    }
    if (!(c->optim.lr > 0)) {
        fprintf(stderr, "qsync train: --lr must be > 0 (got %g)\n", c->optim.lr);
        return 2;
    }
    if (c->gpu_busy_steps < 0 || (c->gpu_busy_steps > 0 && (!c->cuda || c->profile_steps > 0))) {
        fprintf(stderr, "qsync train: --gpu-busy-steps needs --device cuda (on the CPU every op runs synchronously: "
                "the whole step is busy) and not --profile-steps (which synchronises after every op)\n");
        return 2;
    }
    return 0;
}

/* Set to the signal's number by SIGINT/SIGTERM: the trainer checkpoints and stops after the
 * current step (cli/stop_signals.h). Process-wide by nature. */
static atomic_int qs_train_interrupted;

static void qs_train_print_json(const qs_train_result *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "steps", (double)r->steps);
    cJSON_AddNumberToObject(o, "steps_this_run", (double)r->steps_this_run);
    cJSON_AddNumberToObject(o, "final_train_loss", r->final_loss);
    cJSON_AddNumberToObject(o, "test_accuracy", r->test_accuracy);
    cJSON_AddNumberToObject(o, "test_loss", r->test_loss);
    cJSON_AddNumberToObject(o, "train_wall_s", r->wall_s);
    cJSON_AddNumberToObject(o, "images_per_s", r->images_per_s);
    cJSON_AddBoolToObject(o, "interrupted", r->interrupted);
    if (r->profile) cJSON_AddItemReferenceToObject(o, "profile", r->profile);
    if (r->gpu_busy_steps > 0) {
        cJSON *b = cJSON_AddObjectToObject(o, "gpu_busy");
        cJSON_AddNumberToObject(b, "fraction", r->gpu_busy_step_ms > 0 ? r->gpu_busy_ms / r->gpu_busy_step_ms : 0);
        cJSON_AddNumberToObject(b, "busy_ms_per_step", r->gpu_busy_ms);
        cJSON_AddNumberToObject(b, "step_ms", r->gpu_busy_step_ms);
        cJSON_AddNumberToObject(b, "steps", (double)r->gpu_busy_steps);
    }
    cJSON *g = cJSON_AddObjectToObject(o, "graphs");
    cJSON_AddNumberToObject(g, "replayed_passes", (double)r->graph_passes);
    cJSON_AddNumberToObject(g, "eager_passes", (double)r->eager_passes);
    if (r->eager_reason[0]) cJSON_AddStringToObject(g, "eager_reason", r->eager_reason);
    if (r->precision) cJSON_AddItemReferenceToObject(o, "precision", r->precision);
    if (r->workers) cJSON_AddItemReferenceToObject(o, "workers", r->workers);
    cJSON_AddStringToObject(o, "loss_scale_mode", r->loss_scale_mode);
    cJSON_AddNumberToObject(o, "loss_scale", r->loss_scale);
    cJSON_AddNumberToObject(o, "skipped_steps", (double)r->skipped_steps);
    if (r->batch_split[0] && strchr(r->batch_split, ',')) {
        cJSON_AddStringToObject(o, "batch_split", r->batch_split);
        cJSON_AddNumberToObject(o, "rebalances", (double)r->rebalances);
    }
    char *s = cJSON_Print(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
}

/* An error before training on one rank: print it and end the whole job (the peers would wait). */
static int qs_train_fail_early(qs_comm *comm, int world) {
    if (world > 1) {
        fprintf(stderr, "qsync train: error: %s\n", qs_last_error());
        qs_comm_abort(comm, 1);
    }
    qs_comm_finalize(comm);
    return qs_cmd_fail("train");
}

int qs_cmd_train(int argc, char **argv) {
    qs_train_config c;
    qs_train_config_defaults(&c);
    const char *optimizer = "sgd", *precision = "fp32", *device = "cpu", *grad_rounding = NULL, *weight_scales = NULL;
    const char *fp8_scaling = "current";
    double bucket_mb = 25;
    const char *cluster_path = NULL;
    const char **worker_types = NULL; /* the cluster's labels, for rank 0's report */
    bool json = false, quiet = false, no_progress = false;
    qs_cli_opt opts[] = {
        {"model", QS_CLI_STR, &c.model, "NAME", "model: mlp, cnn, resnet18/34/50, vgg11/16, gpt, gpt-mini, bert, bert-mini (default cnn)"},
        {"data", QS_CLI_STR, &c.data, "NAME", "fashion-mnist (default), cifar10, synthetic[:HxWxC], fortunes[:T], fortune-topics[:T], tokens:PATH[:T[:V]], synthetic-text:V:T (docs/DATA.md)"},
        {"data-dir", QS_CLI_STR, &c.data_dir, "DIR", "dataset directory (default: the Debian package's)"},
        {"epochs", QS_CLI_I64, &c.epochs, "N", "epochs (default 1; ignored when --steps is given)"},
        {"steps", QS_CLI_I64, &c.steps, "N", "total optimizer steps"},
        {"batch", QS_CLI_I64, &c.batch, "N", "batch size (default 128)"},
        {"lr", QS_CLI_FLOAT, &c.optim.lr, "X", "peak learning rate (default 0.1)"},
        {"optimizer", QS_CLI_STR, &optimizer, "NAME", "sgd (default) or adamw"},
        {"momentum", QS_CLI_FLOAT, &c.optim.momentum, "X", "SGD momentum (default 0.9)"},
        {"no-nesterov", QS_CLI_NOFLAG, &c.optim.nesterov, NULL, "plain momentum instead of Nesterov"},
        {"weight-decay", QS_CLI_FLOAT, &c.optim.weight_decay, "X", "weight decay (default 5e-4)"},
        {"beta1", QS_CLI_DOUBLE, &c.optim.beta1, "X", "AdamW beta1 (default 0.9)"},
        {"beta2", QS_CLI_DOUBLE, &c.optim.beta2, "X", "AdamW beta2 (default 0.999)"},
        {"clip", QS_CLI_FLOAT, &c.optim.clip_norm, "X", "clip the gradient global norm to X (default off)"},
        {"schedule", QS_CLI_STR, &c.lr_schedule, "S", "constant, cosine (default), step:EVERY:GAMMA"},
        {"warmup", QS_CLI_I64, &c.warmup_steps, "N", "linear warm-up steps (default min(50, steps/10))"},
        {"augment", QS_CLI_FLAG, &c.augment, NULL, "random crop and horizontal flip"},
        {"width", QS_CLI_I64, &c.model_opt.width, "N", "base width (resnet 64, vgg 64, cnn 32, mlp 1024; gpt, bert: embedding width)"},
        {"imagenet-stem", QS_CLI_FLAG, &c.imagenet_stem, NULL, "resnet: 7x7/2 stem + max-pool for small inputs too"},
        {"dropout", QS_CLI_FLOAT, &c.model_opt.dropout, "P", "dropout (mlp, cnn, vgg: classifier; gpt, bert: every dropout)"},
        {"layers", QS_CLI_I64, &c.model_opt.layers, "N", "gpt, bert: transformer blocks (0 = the model's default)"},
        {"heads", QS_CLI_I64, &c.model_opt.heads, "N", "gpt, bert: attention heads (0 = the model's default)"},
        {"no-fuse", QS_CLI_FLAG, &c.no_fuse, NULL, "keep BatchNorm and ReLU as separate ops"},
        {"precision", QS_CLI_STR, &precision, "P", "precision of every Linear/Conv2d/MatMul: fp32 (default), bf16, int8, fp16, fp8"},
        {"plan", QS_CLI_STR, &c.plan, "FILE", "per-layer precisions from a plan file (docs/PLANS.md) or a checkpoint"},
        {"allow-emulated", QS_CLI_FLAG, &c.allow_emulated, NULL, "permit precisions the backend only emulates (on the cpu: fp16, fp8, and bf16/int8 without AVX-512 BF16/VNNI; `qsync models` lists them)"},
        {"grad-rounding", QS_CLI_STR, &grad_rounding, "R", "low-precision gradients: stochastic (default) or nearest"},
        {"weight-scales", QS_CLI_STR, &weight_scales, "S", "INT8 weight scales: tensor (default) or channel"},
        {"fp8-scaling", QS_CLI_STR, &fp8_scaling, "MODE", "FP8 scales: current (default: each tensor's amax) or delayed[:N] "
                                                          "(from the last N steps' amax, default 16; docs/PRECISION.md)"},
        {"loss-scale", QS_CLI_STR, &c.loss_scale, "S", "auto (dynamic if any fp16), none, dynamic[:INIT], or N"},
        {"loss-scale-window", QS_CLI_I64, &c.loss_scale_window, "N", "dynamic loss scale doubles after N good steps (2000)"},
        {"device", QS_CLI_STR, &device, "D", "cpu (default), cuda or cuda:N (under mpirun every rank shares that GPU; a --cluster sets it per worker)"},
        {"seed", QS_CLI_U64, &c.seed, "N", "seed of initialisation, data order, dropout (default 1)"},
        {"threads", QS_CLI_INT, &c.threads, "N", "compute threads (default: all cores)"},
        {"train-subset", QS_CLI_I64, &c.train_subset, "N", "train on the first N samples only"},
        {"eval-subset", QS_CLI_I64, &c.eval_subset, "N", "evaluate on the first N test samples only"},
        {"eval-every", QS_CLI_I64, &c.eval_every, "N", "evaluate every N epochs (default: at the end)"},
        {"log-every", QS_CLI_I64, &c.log_every, "N", "metrics record every N steps (default 50)"},
        {"metrics", QS_CLI_STR, &c.metrics_path, "FILE", "write metrics as JSON lines"},
        {"checkpoint-dir", QS_CLI_STR, &c.checkpoint_dir, "DIR", "checkpoint at each epoch end and at the end"},
        {"resume", QS_CLI_STR, &c.resume, "DIR", "continue bit-exactly from a checkpoint directory"},
        {"checkpoint-every", QS_CLI_I64, &c.checkpoint_every, "N", "also checkpoint every N steps"},
        {"stop-at", QS_CLI_I64, &c.stop_at, "STEP", "stop after STEP with a checkpoint (resume later)"},
        {"profile-steps", QS_CLI_I64, &c.profile_steps, "N", "time every op for N steps and print the breakdown"},
        {"gpu-busy-steps", QS_CLI_I64, &c.gpu_busy_steps, "N",
         "GPU: over N steps, the share of the step time the GPU spends in the ops (events around each op)"},
        {"no-graphs", QS_CLI_FLAG, &c.no_graphs, NULL,
         "GPU: run every training pass op by op instead of replaying it as a captured CUDA graph"},
        {"no-progress", QS_CLI_FLAG, &no_progress, NULL, "no live progress line"},
        {"json", QS_CLI_FLAG, &json, NULL, "print the end-of-run summary as JSON on stdout"},
        {"quiet", QS_CLI_FLAG, &quiet, NULL, "only errors on stderr"},
        {"cluster", QS_CLI_STR, &cluster_path, "FILE",
         "under mpirun: the workers (docs/CLUSTERS.md); rank i takes entry i: precisions, threads, emulation"},
        {"bucket-mb", QS_CLI_DOUBLE, &bucket_mb, "MB", "under mpirun: gradient all-reduce bucket size (default 25)"},
        {"no-overlap", QS_CLI_FLAG, &c.no_overlap, NULL, "under mpirun: all-reduce after backward instead of during it"},
        {"collective-timeout", QS_CLI_DOUBLE, &c.collective_timeout_s, "S",
         "under mpirun: end the job when a collective waits longer than S seconds (default 300; 0 = never)"},
        {"batch-split", QS_CLI_STR, &c.batch_split, "S",
         "under mpirun: even (default), dynamic (per-rank batch by measured speed), or B0,B1,... local batches"},
        {"rebalance-every", QS_CLI_I64, &c.rebalance_every, "N", "dynamic batching: re-measure speeds every N steps (20)"},
        {"check-replicas", QS_CLI_I64, &c.check_replicas_every, "N",
         "under mpirun: compare the ranks' parameters every N steps (default: every epoch end)"},
    };
    int rc = qs_cli_parse(argc, argv, 2, opts, (int)(sizeof opts / sizeof opts[0]), "train", qs_train_summary);
    if (rc) return rc == 1 ? 0 : rc;
    if (!(bucket_mb > 0) || c.collective_timeout_s < 0 || c.check_replicas_every < 0) {
        fprintf(stderr, "qsync train: --bucket-mb must be > 0, --collective-timeout and --check-replicas >= 0\n");
        return 2;
    }
    c.bucket_bytes = (size_t)(bucket_mb * 1048576.0);
    qs_stop_signals_start(&qs_train_interrupted); /* before MPI's and OpenMP's threads exist */
    qs_comm *comm = NULL;
    if (qs_comm_init(&argc, &argv, &comm) != QS_OK) return qs_cmd_fail("train");
    c.comm = comm;
    const int rank = qs_comm_rank(comm), world = qs_comm_world(comm);
    qs_cluster cluster;
    memset(&cluster, 0, sizeof cluster);
    if (cluster_path) { /* this rank's worker: its precisions, threads, memory cap, emulation */
        const qs_cluster_worker *w = NULL;
        if (qs_cluster_read(cluster_path, &cluster) != QS_OK || qs_cluster_worker_for(&cluster, rank, world, &w) != QS_OK ||
            qs_cluster_check_devices(&cluster) != QS_OK) {
            qs_cluster_free(&cluster);
            return qs_train_fail_early(comm, world);
        }
        /* checked on the whole file, so that every rank refuses alike (none waits for another) */
        for (int i = 0; i < cluster.n_workers; i++) {
            const qs_cluster_worker *wi = &cluster.workers[i];
            if ((wi->precision[0] || wi->plan[0]) && (strcmp(precision, "fp32") != 0 || c.plan)) {
                if (rank == 0)
                    fprintf(stderr, "qsync train: %s sets the precisions of worker %d; do not also give --precision/"
                            "--plan (a plan with per-device-type sections goes with a cluster that sets none)\n",
                            cluster_path, i);
                qs_cluster_free(&cluster);
                qs_comm_finalize(comm);
                return 2;
            }
        }
        /* a GPU worker: its device, and its MPS limits set before the CUDA context exists */
        static char cluster_device[24];
        if (w->cuda) {
            snprintf(cluster_device, sizeof cluster_device, "cuda:%d", w->cuda_device);
            bool given_cuda = false;
            int given_dev = 0;
            if (strcmp(device, "cpu") != 0 && (!qs_cli_parse_device(device, &given_cuda, &given_dev) ||
                                               !given_cuda || given_dev != w->cuda_device)) {
                (void)QS_FAIL(QS_ERR_INVALID_ARG, "--device %s, but %s puts worker %d on %s: give one of them", device,
                              cluster_path, rank, cluster_device);
                qs_cluster_free(&cluster);
                return qs_train_fail_early(comm, world);
            }
            device = cluster_device;
        }
        if (qs_mps_apply(w, rank) != QS_OK) {
            qs_cluster_free(&cluster);
            return qs_train_fail_early(comm, world);
        }
        if (w->precision[0]) precision = w->precision;
        if (w->plan[0]) c.plan = w->plan;
        if (w->threads > 0) c.threads = w->threads;
        c.device_type = w->type;
        c.slowdown = w->slowdown;
        c.emulation_method = w->emulation_method;
        c.emulation_calibration_steps = w->calibration_steps;
        c.memory_cap_mb = w->memory_mb;
        c.mps_sm_percent = w->sm_percent;
        c.sm_partition_count = w->sm_count;
        worker_types = calloc((size_t)cluster.n_workers, sizeof *worker_types);
        for (int i = 0; worker_types && i < cluster.n_workers; i++) worker_types[i] = cluster.workers[i].type;
        c.worker_types = worker_types;
    }
    if ((rc = qs_train_check(&c, optimizer, precision, device, grad_rounding, weight_scales, fp8_scaling))) {
        free(worker_types);
        qs_cluster_free(&cluster);
        qs_comm_finalize(comm);
        return rc;
    }
    qs_logger lg; /* rank 0 speaks; the others only report errors */
    qs_logger_init(&lg, rank, world, quiet || rank != 0 ? QS_LOG_WARN : QS_LOG_INFO);
    c.log = &lg;
    c.progress = !no_progress && !quiet && rank == 0;
    c.interrupt = &qs_train_interrupted;
    qs_train_result r;
    qs_status run_st = qs_train_run(&c, &r);
    free(worker_types);
    qs_cluster_free(&cluster);
    if (run_st != QS_OK) {
        cJSON_Delete(r.profile);
        cJSON_Delete(r.precision);
        cJSON_Delete(r.workers);
        if (world > 1) { /* the peers would wait for this rank: end the whole job */
            fprintf(stderr, "qsync train: error: %s\n", qs_last_error());
            qs_comm_abort(comm, 1);
        }
        qs_comm_finalize(comm);
        return qs_cmd_fail("train");
    }
    qs_comm_finalize(comm);
    if (rank != 0) { /* replicas are identical; rank 0 reports */
        cJSON_Delete(r.profile);
        cJSON_Delete(r.precision);
        cJSON_Delete(r.workers);
        return r.interrupted ? 128 + r.interrupt_signal : 0;
    }
    if (json) qs_train_print_json(&r);
    else {
        if (r.label_len > 1)
            printf("trained %lld steps in %.1f s (%.1f sequences/s, %.0f tokens/s)", (long long)r.steps_this_run, r.wall_s,
                   r.images_per_s, r.images_per_s * (double)r.label_len);
        else
            printf("trained %lld steps in %.1f s (%.0f images/s)", (long long)r.steps_this_run, r.wall_s, r.images_per_s);
        if (r.steps != r.steps_this_run) printf(", now at step %lld", (long long)r.steps);
        if (r.test_accuracy >= 0 && r.label_len > 1)
            printf("; test loss %.4f (%.4f bits per token), next-token accuracy %.2f%%\n", r.test_loss,
                   r.test_loss / log(2.0), 100.0 * r.test_accuracy);
        else if (r.test_accuracy >= 0) printf("; test accuracy %.2f%%, loss %.4f\n", 100.0 * r.test_accuracy, r.test_loss);
        else printf("; not evaluated (stopped early)\n");
        printf("precisions: %s\n", r.precision_line);
        if (strcmp(r.loss_scale_mode, "none") != 0)
            printf("loss scaling %s: final scale %g, %lld steps skipped for non-finite gradients\n", r.loss_scale_mode,
                   r.loss_scale, (long long)r.skipped_steps);
    }
    cJSON_Delete(r.profile);
    cJSON_Delete(r.precision);
    cJSON_Delete(r.workers);
    /* interrupted by a signal: exit as the shell convention for it (128 + signal number) */
    return r.interrupted ? 128 + r.interrupt_signal : 0;
}
