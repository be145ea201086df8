/* src/train/trainer.h — defines: the single-process training and evaluation jobs behind
 * `qsync train` and `qsync eval`: data, model, optimizer, schedule, metrics, checkpoints,
 * resume, per-op profiling and the end-of-run summary. */
#ifndef QSYNC_TRAIN_TRAINER_H
#define QSYNC_TRAIN_TRAINER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "qsync/status.h"
#include "qsync/log.h"
#include "models/models.h"
#include "optim/optim.h"
#include "io/plan_file.h"

typedef struct qs_train_config {
    const char *model;          /* built-in model name */
    qs_model_options model_opt; /* only width and dropout are read; the rest comes from the data */
    bool imagenet_stem;         /* resnet: 7×7/2 stem + max-pool even for small inputs */
    bool no_fuse;               /* keep BatchNorm and ReLU as separate ops (qs_model_fuse) */
    /* Precisions (docs/PLANS.md): a uniform precision of every GEMM-like layer, or a plan file
     * (or a checkpoint directory, whose recorded plan is reused), not both. */
    qs_precision precision;     /* default fp32 */
    const char *plan;           /* NULL → uniform `precision` */
    const char *plan_text;      /* non-NULL: the plan document itself (e.g. broadcast by qsync run);
                                 * `plan` then names where it came from, for messages and reports */
    bool allow_emulated;        /* permit precisions the backend only emulates (fp16/fp8 on the cpu) */
    qs_grad_rounding grad_rounding;  /* UNSET → the plan's, else stochastic */
    qs_weight_scales weight_scales;  /* UNSET → the plan's, else tensor */
    int fp8_amax_history;       /* 0: FP8 current scaling; N: delayed, N-step amax histories */
    /* Loss scaling (optim/loss_scale.h): NULL or "auto" → dynamic when any layer is fp16,
     * none otherwise; "none", "dynamic", "dynamic:INIT", or a number (static scale). */
    const char *loss_scale;
    int64_t loss_scale_window;  /* dynamic: good steps before the scale doubles (0 → 2000) */
    const char *data;           /* "fashion-mnist", "cifar10", "synthetic" */
    const char *data_dir;       /* NULL → the dataset's default */
    int64_t epochs;             /* used when steps == 0 */
    int64_t steps;              /* total optimizer steps (0 → epochs × steps per epoch) */
    int64_t batch;
    int64_t train_subset;       /* use only the first N training samples (0 = all) */
    int64_t eval_subset;        /* evaluate on the first N test samples (0 = all) */
    qs_optim_config optim;
    const char *lr_schedule;    /* "constant", "cosine", "step:S:G" */
    int64_t warmup_steps;       /* -1 = auto: min(50, total steps / 10) */
    bool augment;
    uint64_t seed;
    int threads;                /* compute threads (0 = OpenMP default) */
    bool cuda;                  /* train on CUDA device cuda_device (ranks under mpirun share it: CUDA IPC); else the CPU */
    int cuda_device;
    const char *metrics_path;
    const char *checkpoint_dir; /* written at every epoch end and at the end; NULL → none */
    const char *resume;         /* checkpoint directory to continue from */
    int64_t eval_every;         /* evaluate every N epochs (and at the end); 0 → only at the end */
    int64_t log_every;          /* step records every N steps */
    int64_t profile_steps;      /* time every op for N steps after 2 warm-up steps and report */
    int64_t gpu_busy_steps;     /* GPU only: over N steps after 2 warm-up steps, the fraction of the
                                 * step time the GPU spent in the model's ops and the optimizer
                                 * (events around each; not with profile_steps) */
    bool no_graphs;             /* run every training pass op by op, never as a captured graph
                                 * (graph/graph.h "captured passes"; only the GPU captures) */
    int64_t stop_at;            /* stop after this step with a checkpoint, as if interrupted (0 = off) */
    int64_t checkpoint_every;   /* also checkpoint every N steps (0 = only at epoch ends) */
    /* Set asynchronously (non-zero, by the signal-waiting thread) to ask the loop to checkpoint
     * and stop after the current step; NULL = never. */
    const atomic_int *interrupt;
    bool progress;              /* live progress line on stderr */
    /* Data parallelism (src/parallel): the process group (NULL = a single process). --batch is
     * the global batch, split evenly over the ranks; gradients are averaged in buckets of
     * bucket_bytes, overlapped with backward unless no_overlap; collectives time out after
     * collective_timeout_s; replicas are compared every check_replicas_every steps (0: at
     * epoch ends and the end only). Rank 0 alone writes metrics and checkpoints. */
    struct qs_comm *comm;
    size_t bucket_bytes;
    bool no_overlap;
    double collective_timeout_s;
    int64_t check_replicas_every;
    /* This worker's entry of a cluster file (src/io/cluster.h): its device-type label, an
     * emulated slowdown (≥ 1; 1 = none) and how it is enforced, and a memory cap in MiB
     * (0 = none), checked against the measured allocation after setup. */
    const char *device_type;
    double slowdown;
    const char *emulation_method; /* "auto"/NULL (cgroup CPU quota where writable, else duty cycle), "cgroup", "duty-cycle" */
    int64_t emulation_calibration_steps; /* unslowed steps measured before the slowdown starts (train/emulator.h) */
    int64_t memory_cap_mb;
    int mps_sm_percent;         /* a GPU worker's MPS SM share, set by the caller's environment before the
                                 * CUDA context (parallel/mps.h): reported, not applied here (0 = none) */
    int sm_partition_count;     /* SMs of a GPU worker's green-context partition, likewise set through the
                                 * environment (QS_CUDA_SM_PARTITION) and only reported here (0 = none) */
    const char *const *worker_types; /* every worker's label (world entries), for rank 0's report; may be NULL */
    /* How the global batch is split over the ranks (parallel/batch_split.h): NULL or "even" →
     * equal shares (--batch must be divisible by the ranks); "dynamic" → in proportion to
     * each rank's measured speed, re-measured every rebalance_every steps (dynamic batching);
     * "b0,b1,..." → these local batches. Unequal shares weight each rank's gradients by its
     * share, so the update is the global-batch mean in every case. */
    const char *batch_split;
    int64_t rebalance_every;
    qs_logger *log;
} qs_train_config;

typedef struct qs_train_result {
    int64_t steps;              /* optimizer steps done in total (including resumed ones) */
    int64_t steps_this_run;     /* of which this process did */
    double final_loss;          /* mean training loss of the last logged window */
    double test_accuracy;       /* last evaluation; -1 if none */
    double test_loss;
    double wall_s;              /* this process's wall time in the training loop */
    double images_per_s;        /* training throughput over this process's steps (samples: images or sequences) */
    int64_t label_len;          /* labels per sample: > 1 for language models (tokens per sequence) */
    bool interrupted;           /* stopped early by c->interrupt (a checkpoint was written if asked) */
    int interrupt_signal;       /* the signal's number when interrupted (any rank's), else 0 */
    cJSON *profile;             /* per-op report when profile_steps > 0 (caller frees) */
    int64_t gpu_busy_steps;     /* steps measured for the GPU-busy figures (0: none) */
    double gpu_busy_ms;         /* per step: GPU time of the ops and the optimizer */
    double gpu_busy_step_ms;    /* per step: the wall time of those steps */
    cJSON *precision;           /* qs_precision_report_json of the run's model (caller frees) */
    cJSON *workers;             /* per rank: type, emulated slowdown asked and measured, step time
                                 * (NULL for a single process without emulation; caller frees) */
    char precision_line[256];   /* the same in one line (qs_precision_report_line) */
    char loss_scale_mode[16];   /* "none", "static", "dynamic" */
    double loss_scale;          /* the final loss scale (1 for none) */
    int64_t skipped_steps;      /* optimizer steps skipped for non-finite gradients (in total) */
    int64_t graph_passes;       /* training passes (forward, backward) of this run replayed as captured graphs */
    int64_t eager_passes;       /* those run op by op */
    char eager_reason[288];     /* why passes run op by op, where none could be captured or a capture
                                 * failed ("" otherwise) */
    char batch_split[256];      /* the ranks' local batches at the end, "36,28" */
    int64_t rebalances;         /* dynamic batching: times the split changed */
} qs_train_result;

/* Fill defaults: cnn on fashion-mnist, 1 epoch, batch 128, SGD lr 0.1 (50 warm-up steps) momentum 0.9 nesterov,
 * weight decay 5e-4, cosine schedule, seed 1, eval at the end, fp32, automatic loss scaling. */
void qs_train_config_defaults(qs_train_config *c);
qs_status qs_train_run(const qs_train_config *c, qs_train_result *res);

typedef struct qs_eval_config {
    const char *checkpoint;     /* directory or model.safetensors */
    const char *data, *data_dir;
    int64_t batch, eval_subset;
    int threads;
    const char *logits_out;     /* write logits (N, classes) as f32 safetensors; NULL → no */
    bool no_fuse;               /* keep BatchNorm and ReLU as separate ops */
    /* precisions as in qs_train_config (zeroed: fp32; the options then count as unset) */
    qs_precision precision;
    const char *plan;
    bool allow_emulated;
    qs_grad_rounding grad_rounding;
    qs_weight_scales weight_scales;
    qs_logger *log;
} qs_eval_config;

typedef struct qs_eval_result {
    double accuracy, loss;
    int64_t samples;
    cJSON *precision;           /* qs_precision_report_json (caller frees) */
    char precision_line[256];
} qs_eval_result;

/* Zeroed config with fashion-mnist, batch 256, fp32 and unset precision options. */
void qs_eval_config_defaults(qs_eval_config *c);
qs_status qs_eval_run(const qs_eval_config *c, qs_eval_result *res);

/* A plan from `path`: a plan file, or a checkpoint (directory or model.safetensors) whose
 * recorded plan is taken (qs_checkpoint_read_plan). */
qs_status qs_train_load_plan(const char *path, qs_plan *out);
/* The run's precision options from the shared fields (a plan is added by
 * qs_plan_precision_setup). */
void qs_train_precision_options(qs_precision precision, bool allow_emulated, qs_grad_rounding gr, qs_weight_scales ws,
                                qs_precision_options *out);

#endif
