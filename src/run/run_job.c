/* src/run/run_job.c — defines: the `qsync run` pipeline (run_job.h). */
#include "run/run_job.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "core/timer.h"
#include "parallel/comm.h"
#include "plan/indicate_job.h"
#include "plan/plan_build.h"
#include "io/plan_file.h"
#include "predict/profile_job.h"
#include "run/run_report.h"

const char *qs_run_arm_label(const qs_run_config *c, qs_run_arm a) {
    switch (a) {
    case QS_ARM_QSYNC: return "qsync";
    case QS_ARM_BASE: return qs_precision_name(c->base_precision);
    case QS_ARM_LOW: return qs_precision_name(c->low_precision);
    case QS_ARM_DYNAMIC: return "dynamic";
    case QS_ARM_IDEAL: return "ideal";
    default: return "?";
    }
}

/* Whether the n characters at s are the word w. */
static bool qs_run_word_is(const char *s, size_t n, const char *w) { return strlen(w) == n && strncmp(s, w, n) == 0; }

bool qs_run_arms_parse(const qs_run_config *c, const char *list, bool on[QS_ARM_COUNT], char *err, size_t cap) {
    memset(on, 0, QS_ARM_COUNT * sizeof on[0]);
    for (const char *s = list; s && *s;) {
        const char *e = strchr(s, ',');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        int a = 0;
        while (a < QS_ARM_COUNT && !qs_run_word_is(s, n, qs_run_arm_label(c, (qs_run_arm)a))) a++;
        if (a == QS_ARM_COUNT && qs_run_word_is(s, n, "base")) a = QS_ARM_BASE;
        if (a == QS_ARM_COUNT && qs_run_word_is(s, n, "low")) a = QS_ARM_LOW;
        if (a == QS_ARM_COUNT) {
            snprintf(err, cap, "unknown arm '%.*s' (arms: qsync, %s or base, %s or low, dynamic, ideal)", (int)n, s,
                     qs_run_arm_label(c, QS_ARM_BASE), qs_run_arm_label(c, QS_ARM_LOW));
            return false;
        }
        on[a] = true;
        s = e ? e + 1 : s + n;
    }
    return true;
}

/* The pipeline's state on one rank. */
typedef struct qs_run_state {
    const qs_run_config *c;
    qs_comm *comm;
    int rank, world;
    const qs_cluster_worker *me;
    int64_t local_batch;
    qs_profile **profiles;      /* per worker: its type's profile (shared by the workers of a type) */
    qs_indicator_file indicator; /* rank 0, when it measured one */
    char *plan_text;            /* every rank, after the broadcast */
    qs_plan plan;               /* parsed plan_text (its sections and predictions) */
    bool has_plan;
    const char *fastest;        /* the plan's fastest device type (points into plan or the cluster) */
} qs_run_state;

static void qs_run_state_free(qs_run_state *s) {
    const int n = s->c->cluster->n_workers;
    for (int r = 0; s->profiles && r < n; r++) {
        bool first = true; /* workers of one type share the profile */
        for (int q = 0; q < r && first; q++) first = s->profiles[q] != s->profiles[r];
        if (first && s->profiles[r]) {
            qs_profile_free(s->profiles[r]);
            free(s->profiles[r]);
        }
    }
    free(s->profiles);
    qs_indicator_file_free(&s->indicator);
    if (s->has_plan) qs_plan_free(&s->plan);
    free(s->plan_text);
}

/* The first rank (worker index) of worker r's device type. */
static int qs_run_type_root(const qs_cluster *cl, int r) {
    int q = 0;
    while (strcmp(cl->workers[q].type, cl->workers[r].type) != 0) q++;
    return q;
}

/* Write doc as JSON text to <out>/<name>; *text (may be NULL) receives the text (caller frees). */
static qs_status qs_run_write_json(const qs_run_config *c, const char *name, const cJSON *doc, char **text,
                                   char *path, size_t cap) {
    char *s = cJSON_Print(doc);
    if (!s) return QS_FAIL(QS_ERR_OOM, "out of memory writing %s", name);
    snprintf(path, cap, "%s/%s", c->out_dir, name);
    qs_status st = qs_write_file_atomic(path, s, strlen(s));
    if (st == QS_OK && text) *text = s;
    else free(s);
    return st;
}

/* Every rank learns whether every rank succeeded: a failure anywhere fails all (no rank is left
 * waiting in a later collective). `what` names the stage in the message of the healthy ranks. */
static qs_status qs_run_agree(qs_run_state *s, qs_status st, const char *what) {
    if (s->world == 1) return st;
    uint64_t lo = 0, hi = 0;
    qs_status ag = qs_comm_allreduce_minmax_u64(s->comm, st == QS_OK, &lo, &hi, s->c->train.collective_timeout_s);
    if (st != QS_OK) return st;
    if (ag != QS_OK) return ag;
    return lo == 1 ? QS_OK : QS_FAIL(QS_ERR_INTERNAL, "another rank failed during %s (that rank prints its message)", what);
}

/* The precisions stage 1 profiles on this rank, into out: the menu given (--precisions), else
 * with an fp32 base none (n_precs 0: every precision the device runs natively, fp32 first),
 * else the base first and then every precision below it the device runs natively (the
 * planner's base is the profiles' highest). */
static int qs_run_profile_precisions(const qs_run_state *s, qs_precision out[QS_PREC_COUNT]) {
    const qs_precision base = s->c->base_precision;
    if (s->c->n_menu > 0) {
        memcpy(out, s->c->menu, (size_t)s->c->n_menu * sizeof *out);
        return s->c->n_menu;
    }
    if (base == QS_PREC_FP32) return 0;
    qs_precision native[QS_PREC_COUNT];
    int n = qs_profile_native_precisions(native, s->me->cuda, s->me->cuda_device, s->me->threads), k = 0;
    out[k++] = base;
    for (int i = 0; i < n; i++)
        if (native[i] > base) out[k++] = native[i];
    return k;
}

/* Stage 1: profile in lockstep; the first rank of each type writes its profile and broadcasts
 * it, so every rank ends with every worker's profile. */
static qs_status qs_run_profile(qs_run_state *s) {
    const qs_run_config *c = s->c;
    const qs_cluster *cl = c->cluster;
    qs_optim_kind opt = c->train.optim.kind;
    qs_precision precs[QS_PREC_COUNT];
    qs_profile_job job = {.model = c->train.model, .width = c->train.model_opt.width, .batch = s->local_batch,
                          .data = c->train.data, .data_dir = c->train.data_dir, .optimizer = opt,
                          .allow_emulated = c->train.allow_emulated, .fp8_amax_history = c->train.fp8_amax_history,
                          .warmup = c->profile_warmup, .reps = c->profile_reps, .bucket_bytes = c->train.bucket_bytes,
                          .worker = s->me, .cluster = cl, .comm = s->comm, .log = c->log, .precs = precs,
                          .n_precs = qs_run_profile_precisions(s, precs)};
    qs_log_info(c->log, "[1/4] profiling %s at local batch %lld on every worker (%d reps per precision)",
                c->train.model, (long long)s->local_batch, c->profile_reps);
    cJSON *mine = NULL;
    char path[4096];
    QS_TRY(qs_profile_job_run(&job, &mine));
    char *text = NULL;
    size_t n = 0;
    qs_status st = QS_OK;
    if (qs_run_type_root(cl, s->rank) == s->rank) {
        char name[96];
        snprintf(name, sizeof name, "profile-%s.json", s->me->type);
        st = qs_run_write_json(c, name, mine, &text, path, sizeof path);
        n = text ? strlen(text) : 0;
    }
    cJSON_Delete(mine);
    st = qs_run_agree(s, st, "profiling");
    for (int r = 0; r < cl->n_workers && st == QS_OK; r++) {
        int root = qs_run_type_root(cl, r);
        if (root != r) { /* the type's profile, already received */
            s->profiles[r] = s->profiles[root];
            continue;
        }
        char *buf = r == s->rank ? text : NULL;
        size_t len = r == s->rank ? n : 0;
        st = qs_comm_bcast_bytes(s->comm, r, &buf, &len, c->train.collective_timeout_s);
        if (st == QS_OK && !(s->profiles[r] = malloc(sizeof *s->profiles[r]))) st = QS_FAIL(QS_ERR_OOM, "out of memory");
        snprintf(path, sizeof path, "%s/profile-%s.json", c->out_dir, cl->workers[r].type);
        if (st == QS_OK) st = qs_profile_parse(buf, path, s->profiles[r]);
        if (buf != text) free(buf);
    }
    free(text);
    return st;
}

/* Stage 2 (rank 0): the indicator, at FP32 on the local batch, on rank 0's device (its GPU, or
 * the CPU with its threads). */
static qs_status qs_run_indicate(qs_run_state *s) {
    const qs_run_config *c = s->c;
    if (s->rank != 0 || c->plan_path) return QS_OK;
    qs_log_info(c->log, "[2/4] indicator (%s) over %lld batches of %lld", qs_indicator_method_name(c->method),
                (long long)c->indicator_batches, (long long)s->local_batch);
    qs_indicate_job job = {.in = {.model = c->train.model, .width = c->train.model_opt.width, .data = c->train.data,
                                  .data_dir = c->train.data_dir, .batch = s->local_batch, .seed = c->train.seed,
                                  .threads = s->me->threads, .cuda = s->me->cuda, .cuda_device = s->me->cuda_device},
                           .batches = c->indicator_batches, .method = c->method, .gamma = c->gamma};
    cJSON *doc = NULL;
    QS_TRY(qs_indicate_job_run(&job, &doc));
    char path[4096];
    qs_status st = qs_run_write_json(c, "indicator.json", doc, NULL, path, sizeof path);
    if (st == QS_OK) st = qs_indicator_file_from_json(doc, path, &s->indicator); /* as the planner reads it */
    cJSON_Delete(doc);
    return st;
}

/* Stage 3 with a given plan (rank 0): it must parse as a plan with a section per device type;
 * copied to <out>/plan.json. */
static qs_status qs_run_given_plan(qs_run_state *s) {
    const qs_run_config *c = s->c;
    qs_log_info(c->log, "[3/4] the given plan %s (no indicator, no planning)", c->plan_path);
    void *text = NULL;
    size_t size = 0;
    QS_TRY(qs_read_file(c->plan_path, (size_t)64 << 20, &text, &size));
    qs_plan p;
    qs_status st = qs_plan_parse(text, c->plan_path, &p);
    if (st == QS_OK && !qs_plan_has_device_types(&p))
        st = QS_FAIL(QS_ERR_INVALID_ARG, "plan %s has no per-device-type sections: qsync run compares a plan for a "
                     "cluster (\"device_types\", docs/PLANS.md)", c->plan_path);
    for (int t = 0; st == QS_OK && t < qs_plan_device_type_count(&p); t++) {
        bool known = false;
        for (int r = 0; r < c->cluster->n_workers; r++)
            known |= strcmp(c->cluster->workers[r].type, qs_plan_device_type_at(&p, t)) == 0;
        if (!known)
            st = QS_FAIL(QS_ERR_MISMATCH, "plan %s has a section for device type \"%s\", which no worker of %s is",
                         c->plan_path, qs_plan_device_type_at(&p, t), c->cluster->origin);
    }
    qs_plan_free(&p);
    char path[4096];
    snprintf(path, sizeof path, "%s/plan.json", c->out_dir);
    if (st == QS_OK) st = qs_write_file_atomic(path, text, size);
    if (st == QS_OK) s->plan_text = text;
    else free(text);
    return st;
}

/* Worker r's profiled step at the base precision (NAN without that run). */
static double qs_run_base_step_ms(const qs_run_state *s, int r) {
    const qs_profile_prec_run *run = qs_profile_run_at(s->profiles[r], s->c->base_precision);
    return run ? run->step_ms : NAN;
}

/* The fastest device type: the plan's, else (a given plan) the type whose profiled step at the
 * base precision is shortest. NULL when neither tells. */
static const char *qs_run_fastest_type(const qs_run_state *s) {
    const qs_plan_predictions *pred = &s->plan.predictions;
    const char *f = pred->has_fastest_type ? pred->fastest_type : NULL;
    double best = INFINITY;
    for (int r = 0; !f && r < s->world; r++) best = fmin(best, qs_run_base_step_ms(s, r));
    for (int r = 0; !f && r < s->world; r++)
        if (qs_run_base_step_ms(s, r) == best) return s->c->cluster->workers[r].type;
    return f;
}

/* Stage 3 on rank 0 without a given plan: plan (best effort) from the profiles and the
 * indicator, and write <out>/plan.json (its text into s->plan_text). */
static qs_status qs_run_build_plan(qs_run_state *s) {
    const qs_run_config *c = s->c;
    const qs_cluster *cl = c->cluster;
    qs_log_info(c->log, "[3/4] planning: per slower device type, the least Σω within the fastest type's time");
    qs_planb_worker *w = calloc((size_t)cl->n_workers, sizeof *w);
    cJSON *doc = NULL;
    qs_status st = w ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory");
    if (st == QS_OK) st = qs_planb_workers_from_cluster(cl, (const qs_profile *const *)s->profiles, w);
    if (st == QS_OK) {
        qs_planb_request rq = {.workers = w, .n_workers = cl->n_workers, .arch = c->train.model,
                               .config = s->profiles[0]->config, .batch = s->local_batch, .indicator = &s->indicator,
                               .target_ms = c->target_ms, .greedy_only = !c->exact, .tolerance = 0.005,
                               .max_rounds = 4, .bucket_bytes = c->train.bucket_bytes,
                               .overlap = !c->train.no_overlap, .best_effort = true};
        st = qs_plan_build(&rq, &doc);
    }
    char path[4096];
    if (st == QS_OK) st = qs_run_write_json(c, "plan.json", doc, &s->plan_text, path, sizeof path);
    cJSON_Delete(doc);
    free(w);
    return st;
}

/* Stage 3: rank 0 plans (or takes the given plan) and writes <out>/plan.json; the text is
 * broadcast and parsed everywhere. */
static qs_status qs_run_plan(qs_run_state *s) {
    const qs_run_config *c = s->c;
    qs_status st = QS_OK;
    size_t n = 0;
    if (s->rank == 0 && c->plan_path) {
        st = qs_run_given_plan(s);
        if (st == QS_OK) n = strlen(s->plan_text);
    } else if (s->rank == 0) {
        st = qs_run_build_plan(s);
        if (st == QS_OK) n = strlen(s->plan_text);
    }
    st = qs_run_agree(s, st, "planning");
    if (st == QS_OK) st = qs_comm_bcast_bytes(s->comm, 0, &s->plan_text, &n, c->train.collective_timeout_s);
    if (st == QS_OK) st = qs_plan_parse(s->plan_text, "the broadcast plan", &s->plan);
    s->has_plan = st == QS_OK;
    const qs_plan_predictions *pred = &s->plan.predictions;
    if (st == QS_OK && s->rank == 0 && !c->plan_path && !pred->target_met)
        qs_log_warn(c->log, "no plan meets T = %.3f ms: each slower type takes its fastest plan (predicted %.3f ms)",
                    !isnan(pred->target_asked_ms) ? pred->target_asked_ms : pred->target_ms, pred->synchronized_ms);
    if (st == QS_OK && !(s->fastest = qs_run_fastest_type(s)))
        st = QS_FAIL(QS_ERR_FORMAT, "no fastest device type: the profiles hold no run at the base precision %s",
                     qs_precision_name(c->base_precision));
    return st;
}

/* This rank's training job for one arm and seed: the template with its worker's threads,
 * emulation and memory cap, and the arm's precisions (the plan; the low precision on a slower
 * worker of the low arm; else every layer at the base). */
static void qs_run_arm_config(const qs_run_state *s, qs_run_arm arm, uint64_t seed, const char *const *types,
                              char *metrics, size_t cap, char *plan_origin, qs_train_config *t) {
    const qs_run_config *c = s->c;
    *t = c->train;
    t->seed = seed;
    t->log = c->train_log;
    t->threads = s->me->threads;
    t->device_type = s->me->type;
    t->worker_types = types;
    t->memory_cap_mb = s->me->memory_mb;
    t->slowdown = arm == QS_ARM_IDEAL ? 1 : s->me->slowdown;
    t->cuda = s->me->cuda;
    t->cuda_device = s->me->cuda_device;
    t->mps_sm_percent = s->me->sm_percent;
    t->sm_partition_count = s->me->sm_count;
    t->emulation_method = s->me->emulation_method;
    t->emulation_calibration_steps = s->me->calibration_steps;
    t->precision = arm == QS_ARM_QSYNC ? QS_PREC_FP32 : c->base_precision; /* a plan sets every layer itself */
    t->plan = NULL;
    t->plan_text = NULL;
    t->batch_split = arm == QS_ARM_DYNAMIC ? "dynamic" : NULL;
    if (arm == QS_ARM_QSYNC) {
        snprintf(plan_origin, 4096, "%s/plan.json", c->out_dir);
        t->plan = plan_origin;
        t->plan_text = s->plan_text;
    }
    if (arm == QS_ARM_LOW && strcmp(s->me->type, s->fastest) != 0) {
        t->precision = c->low_precision;
        t->allow_emulated |= c->low_emulated_ok;
    }
    snprintf(metrics, cap, "%s/%s-seed%llu.jsonl", c->out_dir, qs_run_arm_label(c, arm), (unsigned long long)seed);
    t->metrics_path = metrics;
}

/* Stage 4: every arm and seed (seeds outer, so that slow drifts of the machine spread over the
 * arms); the results go into the report builder. */
static qs_status qs_run_train(qs_run_state *s, qs_run_report *rep) {
    const qs_run_config *c = s->c;
    const qs_cluster *cl = c->cluster;
    const char **types = calloc((size_t)cl->n_workers, sizeof *types);
    if (!types) return QS_FAIL(QS_ERR_OOM, "out of memory");
    for (int r = 0; r < cl->n_workers; r++) types[r] = cl->workers[r].type;
    int total = 0, done = 0;
    for (int a = 0; a < QS_ARM_COUNT; a++) total += c->arms[a] ? c->seeds : 0;
    qs_status st = QS_OK;
    for (int k = 0; k < c->seeds && st == QS_OK; k++)
        for (int a = 0; a < QS_ARM_COUNT && st == QS_OK; a++) {
            if (!c->arms[a]) continue;
            char metrics[4200], plan_origin[4096];
            qs_train_config t;
            uint64_t seed = c->train.seed + (uint64_t)k;
            qs_run_arm_config(s, (qs_run_arm)a, seed, types, metrics, sizeof metrics, plan_origin, &t);
            qs_log_info(c->log, "[4/4] training %d/%d: arm %s, seed %llu", ++done, total,
                        qs_run_arm_label(c, (qs_run_arm)a), (unsigned long long)seed);
            qs_train_result r;
            st = qs_train_run(&t, &r);
            if (st == QS_OK && s->rank == 0) st = qs_run_report_add(rep, (qs_run_arm)a, seed, metrics, &r);
            if (st == QS_OK && s->rank == 0)
                qs_log_info(c->log, "      %s seed %llu: %.1f s, %.0f images/s, test accuracy %.2f%%, final loss %.4f",
                            qs_run_arm_label(c, (qs_run_arm)a), (unsigned long long)seed, r.wall_s, r.images_per_s,
                            100 * r.test_accuracy, r.final_loss);
            cJSON_Delete(r.profile);
            cJSON_Delete(r.precision);
            cJSON_Delete(r.workers);
            if (r.interrupted)
                st = QS_FAIL(QS_ERR_INTERNAL, "interrupted by signal %d during arm %s", r.interrupt_signal,
                             qs_run_arm_label(c, (qs_run_arm)a));
        }
    free(types);
    return st;
}

qs_status qs_run_check(const qs_run_config *c, int world) {
    const qs_cluster *cl = c->cluster;
    if (cl->n_workers < 2)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s describes %d worker: qsync run needs a cluster of at least 2 workers of "
                       "at least 2 device types (for one worker, use qsync train)", cl->origin, cl->n_workers);
    bool two_types = false;
    for (int r = 1; r < cl->n_workers; r++) two_types |= strcmp(cl->workers[r].type, cl->workers[0].type) != 0;
    if (!two_types)
        return QS_FAIL(QS_ERR_INVALID_ARG, "every worker of %s is of type \"%s\": there is no slower device type to "
                       "plan for (a homogeneous cluster trains with qsync train)", cl->origin, cl->workers[0].type);
    const qs_cluster_worker *w = NULL;
    QS_TRY(qs_cluster_worker_for(cl, 0, world, &w));
    QS_TRY(qs_cluster_check_devices(cl));
    for (int r = 0; r < cl->n_workers; r++)
        if (cl->workers[r].precision[0] || cl->workers[r].plan[0])
            return QS_FAIL(QS_ERR_INVALID_ARG, "%s sets the precisions of worker %d: qsync run chooses them (remove "
                           "\"precision\"/\"plan\")", cl->origin, r);
    if (c->train.batch % world != 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "--batch %lld is not divisible by the %d workers", (long long)c->train.batch,
                       world);
    if (c->seeds < 1) return QS_FAIL(QS_ERR_INVALID_ARG, "--seeds must be >= 1");
    if (c->n_menu > 0) { /* the base first, the rest below it, the low precision among them */
        bool low = false;
        if (c->menu[0] != c->base_precision)
            return QS_FAIL(QS_ERR_INVALID_ARG, "--precisions must start with the base precision %s (got %s first)",
                           qs_precision_name(c->base_precision), qs_precision_name(c->menu[0]));
        for (int i = 1; i < c->n_menu; i++) {
            if (c->menu[i] <= c->base_precision)
                return QS_FAIL(QS_ERR_INVALID_ARG, "--precisions: %s is not below the base precision %s",
                               qs_precision_name(c->menu[i]), qs_precision_name(c->base_precision));
            low |= c->menu[i] == c->low_precision;
        }
        if (!low && c->arms[QS_ARM_LOW])
            return QS_FAIL(QS_ERR_INVALID_ARG, "--precisions lacks the low arm's precision %s: add it, or leave the "
                           "low arm out of --arms", qs_precision_name(c->low_precision));
    }
    if (c->ideal_ms > 0 && c->arms[QS_ARM_IDEAL])
        return QS_FAIL(QS_ERR_INVALID_ARG, "--ideal-ms gives the ideal iteration measured elsewhere: leave the ideal "
                       "arm out of --arms, or drop --ideal-ms");
    for (int r = 0; r < cl->n_workers && c->arms[QS_ARM_IDEAL]; r++) {
        const qs_cluster_worker *wk = &cl->workers[r];
        char lim[64];
        if (wk->sm_percent > 0) snprintf(lim, sizeof lim, "%d%% of the GPU's SMs through MPS", wk->sm_percent);
        else snprintf(lim, sizeof lim, "%d of the GPU's SMs (a green-context partition)", wk->sm_count);
        if (wk->sm_percent > 0 || wk->sm_count > 0)
            return QS_FAIL(QS_ERR_INVALID_ARG, "%s limits worker %d to %s, which a process keeps for its life: the ideal "
                           "arm (no emulated limits) cannot run in this job; leave it out of --arms, measure the "
                           "cluster without the weaker workers' limits with qsync train and give its iteration as "
                           "--ideal-ms", cl->origin, r, lim);
    }
    if (c->low_precision <= c->base_precision)
        return QS_FAIL(QS_ERR_INVALID_ARG, "the low precision %s is not below the base precision %s (order: fp32, "
                       "tf32, bf16, fp16, fp8, int8): give --low-precision below --base-precision",
                       qs_precision_name(c->low_precision), qs_precision_name(c->base_precision));
    return QS_OK;
}

/* Stage 5 (rank 0): the report's figures, <out>/report.json and the plot; the report takes the
 * plan over. */
static qs_status qs_run_finish(qs_run_state *s, qs_run_report *rep) {
    const qs_run_config *c = s->c;
    qs_run_report_set_plan(rep, &s->plan);
    s->has_plan = false;
    QS_TRY(qs_run_report_finish(rep));
    cJSON *doc = qs_run_report_json(rep);
    char path[4096];
    qs_status st = doc ? qs_run_write_json(c, "report.json", doc, NULL, path, sizeof path)
                       : QS_FAIL(QS_ERR_OOM, "out of memory writing the report");
    cJSON_Delete(doc);
    if (st == QS_OK && c->plot_path) st = qs_run_plot(rep, c->plot_path);
    return st;
}

qs_status qs_run(const qs_run_config *c, qs_run_report **report) {
    *report = NULL;
    qs_run_state s = {.c = c, .comm = c->train.comm};
    s.rank = qs_comm_rank(s.comm);
    s.world = qs_comm_world(s.comm);
    QS_TRY(qs_run_check(c, s.world));
    QS_TRY(qs_cluster_worker_for(c->cluster, s.rank, s.world, &s.me));
    s.local_batch = c->train.batch / s.world;
    qs_status st = s.rank == 0 ? qs_dir_ensure_writable(c->out_dir) : QS_OK;
    st = qs_run_agree(&s, st, "setting up the output directory");
    s.profiles = calloc((size_t)s.world, sizeof *s.profiles);
    qs_run_report *rep = calloc(1, sizeof *rep);
    if (st == QS_OK && (!s.profiles || !rep)) st = QS_FAIL(QS_ERR_OOM, "out of memory");
    double t0 = qs_now_ms();
    if (st == QS_OK) st = qs_run_profile(&s);
    if (st == QS_OK) qs_log_info(c->log, "      profiles taken in %.1f s", (qs_now_ms() - t0) / 1e3);
    t0 = qs_now_ms();
    if (st == QS_OK) st = qs_run_agree(&s, qs_run_indicate(&s), "the indicator");
    if (st == QS_OK && !c->plan_path) qs_log_info(c->log, "      indicator taken in %.1f s", (qs_now_ms() - t0) / 1e3);
    t0 = qs_now_ms();
    if (st == QS_OK) st = qs_run_plan(&s);
    if (st == QS_OK) qs_log_info(c->log, "      plan ready in %.1f s", (qs_now_ms() - t0) / 1e3);
    if (rep) qs_run_report_init(rep, c);
    if (st == QS_OK) st = qs_run_train(&s, rep);
    if (st == QS_OK && s.rank == 0) st = qs_run_finish(&s, rep);
    qs_run_state_free(&s);
    if (st == QS_OK && s.rank == 0) {
        *report = rep;
        return QS_OK;
    }
    if (rep) qs_run_report_free(rep);
    free(rep);
    return st;
}
