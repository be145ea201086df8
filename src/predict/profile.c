/* src/predict/profile.c — defines: per-op costs of a model at each precision, measured by the engine's
 * own timers (see profile.h and docs/PROFILE.md). */
#include "predict/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backends.h"
#include "core/stats.h"
#include "core/timer.h"
#include "graph/graph.h"
#include "graph/memory_plan.h"
#include "graph/tensor_access.h"
#include "optim/loss_scale.h"
#include "predict/profile_comm.h"

/* The categories recorded per op, in the order of their JSON names. */
static const qs_cost_cat qs_prof_cats[] = {QS_CAT_FORWARD, QS_CAT_BACKWARD_DATA, QS_CAT_BACKWARD_WEIGHTS,
                                           QS_CAT_CAST};
static const char *const qs_prof_cat_keys[] = {"forward_ms", "backward_data_ms", "backward_weights_ms", "cast_ms"};
#define QS_PROF_NCAT 4

/* Every cast of every run: (from, to) dtypes, elements, median ms per step. */
typedef struct qs_prof_cast {
    qs_dtype from, to;
    double elements, ms;
} qs_prof_cast;

typedef struct qs_prof_casts {
    qs_prof_cast *v;
    int n, cap;
} qs_prof_casts;

static qs_status qs_prof_casts_add(qs_prof_casts *c, qs_prof_cast x) {
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 64;
        qs_prof_cast *t = realloc(c->v, (size_t)cap * sizeof *t);
        if (!t) return QS_FAIL(QS_ERR_OOM, "out of memory recording casts");
        c->v = t;
        c->cap = cap;
    }
    c->v[c->n++] = x;
    return QS_OK;
}

/* One model set up at one uniform precision, with its optimizer. */
typedef struct qs_prof_run {
    qs_backend *be;
    qs_model *m;
    qs_optimizer opt;
    bool opt_ready;
    qs_loss_scaler scaler;
    float lr;  /* the optimizer's step size (see qs_prof_run_setup) */
} qs_prof_run;

qs_optim_config qs_profile_optim_config(qs_optim_kind kind) {
    /* The steps repeat one batch, and only their time counts: a step size that keeps the
     * weights finite over every step a run takes (warm-up, reps, and under mpirun the
     * gradient-sync measurement's); AdamW moves every weight by about lr per step whatever its
     * gradient (docs/BENCHMARKS.md, "Measurements behind design choices"). */
    qs_optim_config oc = qs_optim_config_default(kind, kind == QS_OPTIM_ADAMW ? 1e-5f : 0.01f);
    if (kind == QS_OPTIM_SGD) oc.momentum = 0.9f;
    return oc;
}

static void qs_prof_run_free(qs_prof_run *r) {
    if (r->opt_ready) qs_optimizer_free(&r->opt, r->be);
    qs_model_free(r->m);
    if (r->be) r->be->ops->destroy(r->be);
}

static qs_status qs_prof_run_setup(const qs_profile_options *o, qs_precision p, qs_prof_run *r) {
    memset(r, 0, sizeof *r);
    QS_TRY(qs_backend_open(o->cuda, o->cuda_device, o->threads, &r->be));
    QS_TRY(qs_models_build(o->model, &o->model_opt, &r->m));
    qs_model_fuse(r->m);
    qs_precision_options po;
    qs_precision_options_default(&po);
    po.uniform = p;
    po.allow_emulated = o->allow_emulated;
    po.fp8_amax_history = o->fp8_amax_history;
    QS_TRY(qs_precision_setup(r->m, r->be, &po));
    QS_TRY(qs_model_setup(r->m, r->be, o->batch, 1));
    qs_optim_config oc = qs_profile_optim_config(o->optimizer);
    r->lr = oc.lr;
    QS_TRY(qs_optimizer_init(&r->opt, r->be, &r->m->params, &oc));
    r->opt_ready = true;
    qs_loss_scaler_init(&r->scaler, QS_LOSS_SCALE_NONE, 1.0f, 0);
    r->m->timing = true;
    if (o->emulated_slowdown > 1 && o->emulation_method && strcmp(o->emulation_method, "duty-cycle") == 0)
        r->m->emulation.slowdown = o->emulated_slowdown;
    return QS_OK;
}

/* One training step on the fixed batch; its wall time into *ms. */
static qs_status qs_prof_step(const qs_profile_options *o, qs_prof_run *r, double *ms) {
    double t0 = qs_now_ms();
    QS_TRY(qs_model_forward(r->m, o->x, o->y, true));
    QS_TRY(qs_loss_scaler_step(&r->scaler, r->m, &r->opt, r->lr, NULL));
    QS_TRY(r->be->ops->stream_sync(r->be, r->m->stream));
    *ms = qs_now_ms() - t0;
    return QS_OK;
}

typedef struct qs_prof_step_ctx {
    const qs_profile_options *o;
    qs_prof_run *r;
} qs_prof_step_ctx;

static qs_status qs_prof_step_cb(void *ctx, double *ms) {
    qs_prof_step_ctx *c = ctx;
    return qs_prof_step(c->o, c->r, ms);
}

/* The op entry of node n: identity, memory and the medians of its per-step times. */
static cJSON *qs_prof_op_json(const qs_model *m, const qs_node *n, double *const samples[QS_PROF_NCAT], int reps) {
    cJSON *op = cJSON_CreateObject();
    cJSON_AddStringToObject(op, "name", n->name);
    cJSON_AddStringToObject(op, "kind", qs_layer_impl_for(n->kind)->kind_name);
    cJSON *ins = cJSON_AddArrayToObject(op, "inputs");
    for (int k = 0; k < n->n_inputs; k++) cJSON_AddItemToArray(ins, cJSON_CreateString(m->nodes[n->inputs[k]].name));
    if (!qs_node_runs(n))
        cJSON_AddStringToObject(op, "fused_into", m->nodes[n->alias_of >= 0 ? n->alias_of : n->fused_into].name);
    cJSON_AddStringToObject(op, "precision", qs_precision_name(n->prec));
    cJSON_AddStringToObject(op, "out_dtype", qs_dtype_name(n->out_dtype));
    cJSON_AddNumberToObject(op, "out_elements", (double)qs_shape_numel(n->out_ndim, n->out_shape));
    size_t out, grad, saved;
    qs_node_memory(m, n, &out, &grad, &saved);
    cJSON_AddNumberToObject(op, "out_bytes", (double)out);
    cJSON_AddNumberToObject(op, "grad_bytes", (double)grad);
    cJSON_AddNumberToObject(op, "saved_bytes", (double)saved);
    cJSON_AddNumberToObject(op, "workspace_bytes", (double)qs_mem_footprint(n->workspace)); /* in its arena */
    cJSON_AddNumberToObject(op, "param_count", (double)n->param_count);
    for (int c = 0; c < QS_PROF_NCAT; c++)
        cJSON_AddNumberToObject(op, qs_prof_cat_keys[c], qs_median_inplace(samples[c], reps));
    return op;
}

/* The run's memory: memory_bytes (the model's categories, the optimizer state and the backend's
 * own count) and memory_facts (what the memory plan took from the backend, docs/PROFILE.md). */
static void qs_prof_memory_json(const qs_prof_run *r, cJSON *run) {
    const qs_model *m = r->m;
    qs_memory_report mr;
    qs_model_memory(m, &mr);
    size_t in_use = 0, peak = 0;
    r->be->ops->memory_stats(r->be, &in_use, &peak);
    cJSON *mem = cJSON_AddObjectToObject(run, "memory_bytes");
    cJSON_AddNumberToObject(mem, "params", (double)mr.params);
    cJSON_AddNumberToObject(mem, "grads", (double)mr.grads);
    cJSON_AddNumberToObject(mem, "optimizer", (double)qs_optim_state_bytes(&r->opt.cfg, &m->params));
    cJSON_AddNumberToObject(mem, "buffers", (double)mr.buffers);
    cJSON_AddNumberToObject(mem, "activations", (double)mr.activations);
    cJSON_AddNumberToObject(mem, "activation_grads", (double)mr.activation_grads);
    cJSON_AddNumberToObject(mem, "saved", (double)mr.saved);
    cJSON_AddNumberToObject(mem, "workspace", (double)mr.workspace);
    cJSON_AddNumberToObject(mem, "labels", (double)mr.labels);
    cJSON_AddNumberToObject(mem, "backend_in_use", (double)in_use);
    cJSON_AddNumberToObject(mem, "backend_peak", (double)peak);
    cJSON *facts = cJSON_AddObjectToObject(run, "memory_facts");
    cJSON_AddBoolToObject(facts, "fp8_wants_transposed", m->facts.fp8_wants_transposed);
    cJSON_AddBoolToObject(facts, "pointwise_conv_as_linear", m->facts.pointwise_conv_as_linear);
    cJSON_AddBoolToObject(facts, "fused_attention", m->facts.fused_attention);
}

/* The samples of node i's category c over the timed steps (reps of them) in a profile's buffer
 * of nn nodes (after the nn·QS_PROF_NCAT running totals). */
static double *qs_prof_samples(double *buf, int nn, int reps, int i, int c) {
    return buf + (size_t)nn * QS_PROF_NCAT + ((size_t)i * QS_PROF_NCAT + (size_t)c) * (size_t)reps;
}

/* The warm-up and timed steps of run r (nn nodes, the ranks in lockstep under mpirun): per timed
 * step its wall time into step_ms, its optimizer time into opt_ms and each node's time per
 * category into buf (qs_prof_samples). */
static qs_status qs_prof_time_steps(const qs_profile_options *o, qs_prof_run *r, int nn, double *buf, double *step_ms,
                                    double *opt_ms) {
    const qs_model *m = r->m;
    double *prev = buf;
    qs_status st = QS_OK;
    for (int s = 0; s < o->warmup + o->reps && st == QS_OK; s++) {
        for (int i = 0; i < nn; i++)
            for (int c = 0; c < QS_PROF_NCAT; c++) prev[i * QS_PROF_NCAT + c] = m->nodes[i].time[qs_prof_cats[c]].total_ms;
        double opt_before = m->optimizer_time.total_ms, ms = 0;
        if (o->comm && qs_comm_world(o->comm) > 1) { /* in lockstep, as training's ranks run */
            uint64_t lo, hi;
            st = qs_comm_allreduce_minmax_u64(o->comm, (uint64_t)s, &lo, &hi, 300.0);
        }
        if (st == QS_OK) st = qs_prof_step(o, r, &ms);
        int k = s - o->warmup;
        if (st != QS_OK || k < 0) continue;
        step_ms[k] = ms;
        opt_ms[k] = m->optimizer_time.total_ms - opt_before;
        for (int i = 0; i < nn; i++)
            for (int c = 0; c < QS_PROF_NCAT; c++)
                qs_prof_samples(buf, nn, o->reps, i, c)[k] =
                    m->nodes[i].time[qs_prof_cats[c]].total_ms - prev[i * QS_PROF_NCAT + c];
    }
    return st;
}

/* Profile one precision: warm-up, timed steps, medians; appends its casts to *casts; the median
 * step into *step_median. */
static qs_status qs_prof_precision(const qs_profile_options *o, qs_precision p, qs_prof_casts *casts, cJSON **out,
                                   double *step_median) {
    qs_prof_run r;
    qs_status st = qs_prof_run_setup(o, p, &r);
    qs_model *m = r.m;
    int nn = st == QS_OK ? m->n_nodes : 0, reps = o->reps;
    double *buf = st == QS_OK ? calloc((size_t)nn * QS_PROF_NCAT * (size_t)(reps + 1) + 3 * (size_t)reps, sizeof *buf)
                              : NULL;
    if (st == QS_OK && !buf) st = QS_FAIL(QS_ERR_OOM, "out of memory for the profile of %s", o->model);
    double *step_ms = buf ? buf + (size_t)nn * QS_PROF_NCAT * (size_t)(reps + 1) : NULL;
    double *opt_ms = step_ms ? step_ms + reps : NULL, *avg_ms = step_ms ? step_ms + 2 * reps : NULL;
    if (st == QS_OK) st = qs_prof_time_steps(o, &r, nn, buf, step_ms, opt_ms);
    /* with several ranks, training ends the gradient sync with one scale of every gradient by
     * 1/world (grad_sync.c): its cost, the same at any world size */
    for (int k = 0; k < reps && st == QS_OK; k++) {
        double t0 = qs_now_ms();
        st = qs_model_grads_scale(m, 0.5f);
        avg_ms[k] = qs_now_ms() - t0;
    }
    cJSON *sync = NULL;
    if (st == QS_OK && o->comm && qs_comm_world(o->comm) > 1) {
        qs_prof_step_ctx sc = {o, &r};
        st = qs_profile_model_sync(o->comm, m, o->bucket_bytes, reps, qs_prof_step_cb, &sc, &sync);
    }
    cJSON *run = NULL;
    if (st == QS_OK) {
        run = cJSON_CreateObject();
        cJSON_AddStringToObject(run, "precision", qs_precision_name(p));
        cJSON_AddStringToObject(run, "support", qs_prec_support_name(r.be->ops->precision_support(r.be, p)));
        cJSON *steps = cJSON_AddArrayToObject(run, "step_samples_ms"); /* in order, for the jitter */
        for (int k = 0; k < reps; k++) cJSON_AddItemToArray(steps, cJSON_CreateNumber(step_ms[k]));
        *step_median = qs_median_inplace(step_ms, reps);
        cJSON_AddNumberToObject(run, "step_ms", *step_median);
        cJSON_AddNumberToObject(run, "optimizer_ms", qs_median_inplace(opt_ms, reps));
        cJSON_AddNumberToObject(run, "grad_average_ms", qs_median_inplace(avg_ms, reps));
        if (sync) cJSON_AddItemToObject(run, "grad_sync", sync);
        qs_prof_memory_json(&r, run);
        cJSON *ops = cJSON_AddArrayToObject(run, "ops");
        for (int i = 1; i < nn && st == QS_OK; i++) { /* node 0 is the input */
            double *samples[QS_PROF_NCAT];
            for (int c = 0; c < QS_PROF_NCAT; c++) samples[c] = qs_prof_samples(buf, nn, reps, i, c);
            const qs_node *n = &m->nodes[i];
            cJSON *op = qs_prof_op_json(m, n, samples, reps);
            cJSON_AddItemToArray(ops, op);
            if (n->kind == QS_NODE_CAST) {
                qs_prof_cast pc = {.from = m->nodes[n->inputs[0]].out_dtype, .to = n->out_dtype,
                                   .elements = (double)qs_shape_numel(n->out_ndim, n->out_shape),
                                   .ms = qs_median_inplace(samples[QS_PROF_NCAT - 1], reps)}; /* its cast_ms */
                st = qs_prof_casts_add(casts, pc);
            }
        }
    }
    free(buf);
    qs_prof_run_free(&r);
    if (st != QS_OK) {
        cJSON_Delete(run);
        return qs_error_wrap(st, "profiling %s at %s: ", o->model, qs_precision_name(p));
    }
    *out = run;
    return QS_OK;
}

qs_status qs_profile_run(const qs_profile_options *o, qs_precision p, cJSON **run) {
    qs_prof_casts casts = {0};
    double step = 0;
    qs_status st = qs_prof_precision(o, p, &casts, run, &step);
    free(casts.v);
    return st;
}

/* One fitted line per (from, to) pair among the casts seen. */
static cJSON *qs_prof_cast_fits(const qs_prof_casts *c) {
    cJSON *arr = cJSON_CreateArray();
    double *x = malloc((size_t)(c->n + 1) * sizeof *x), *y = malloc((size_t)(c->n + 1) * sizeof *y);
    bool *done = calloc((size_t)c->n + 1, sizeof *done);
    for (int i = 0; x && y && done && i < c->n; i++) {
        if (done[i]) continue;
        int k = 0;
        for (int j = i; j < c->n; j++) {
            if (c->v[j].from != c->v[i].from || c->v[j].to != c->v[i].to) continue;
            done[j] = true;
            x[k] = c->v[j].elements;
            y[k++] = c->v[j].ms;
        }
        double alpha, beta;
        qs_linear_fit(x, y, k, &alpha, &beta);
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "from", qs_dtype_name(c->v[i].from));
        cJSON_AddStringToObject(f, "to", qs_dtype_name(c->v[i].to));
        cJSON_AddNumberToObject(f, "alpha_ms", alpha);
        cJSON_AddNumberToObject(f, "beta_ms_per_element", beta);
        cJSON *pts = cJSON_AddArrayToObject(f, "points");
        for (int j = 0; j < k; j++) {
            cJSON *pt = cJSON_CreateArray();
            cJSON_AddItemToArray(pt, cJSON_CreateNumber(x[j]));
            cJSON_AddItemToArray(pt, cJSON_CreateNumber(y[j]));
            cJSON_AddItemToArray(pts, pt);
        }
        cJSON_AddItemToArray(arr, f);
    }
    free(x);
    free(y);
    free(done);
    return arr;
}

/* What a GPU profile was taken on: the GPU as this process sees it, and the MPS SM share the
 * process was started with (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), if any. */
static cJSON *qs_prof_gpu(const qs_profile_options *o) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "backend", "cuda");
    cJSON_AddNumberToObject(d, "device", o->cuda_device);
    qs_backend *be = NULL;
    qs_gpu_facts f;
    if (qs_backend_cuda_create(o->cuda_device, &be) == QS_OK && qs_backend_cuda_facts(be, &f) == QS_OK) {
        cJSON_AddStringToObject(d, "gpu", f.name);
        cJSON_AddNumberToObject(d, "sms", f.sms);
        cJSON_AddNumberToObject(d, "memory_bytes", (double)f.memory_bytes);
    }
    if (be) be->ops->destroy(be);
    const char *share = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    if (share && share[0]) cJSON_AddNumberToObject(d, "mps_sm_percent", atof(share));
    const char *part = getenv(QS_CUDA_SM_PARTITION_ENV);
    if (part && part[0]) cJSON_AddStringToObject(d, "sm_partition", part);
    return d;
}

/* What the profile was taken on. */
static cJSON *qs_prof_device(const qs_profile_options *o) {
    if (o->cuda) return qs_prof_gpu(o);
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "backend", "cpu");
    long cores = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    cJSON_AddNumberToObject(d, "cores", (double)cores);
    cJSON_AddNumberToObject(d, "threads", o->threads > 0 ? o->threads : (double)cores);
    cJSON_AddNumberToObject(d, "memory_bytes", pages > 0 && page > 0 ? (double)pages * (double)page : 0);
    char line[512], cpu[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            snprintf(cpu, sizeof cpu, "%s", colon + 2);
            cpu[strcspn(cpu, "\n")] = '\0';
            break;
        }
    }
    if (f) fclose(f);
    cJSON_AddStringToObject(d, "cpu", cpu);
    return d;
}

qs_status qs_profile_model(const qs_profile_options *o, cJSON **out) {
    *out = NULL;
    if (o->batch < 1 || o->warmup < 1 || o->reps < 3 || o->n_precs < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "profile: batch ≥ 1, warm-up ≥ 1, repetitions ≥ 3 and at least one "
                       "precision are needed (got batch %lld, warm-up %d, repetitions %d)", (long long)o->batch,
                       o->warmup, o->reps);
    cJSON *doc = cJSON_CreateObject(), *runs = NULL;
    cJSON_AddStringToObject(doc, "format", QS_PROFILE_FORMAT);
    cJSON_AddNumberToObject(doc, "version", QS_PROFILE_VERSION);
    cJSON_AddStringToObject(doc, "model", o->model);
    cJSON_AddStringToObject(doc, "data", o->data ? o->data : "");
    cJSON_AddNumberToObject(doc, "batch", (double)o->batch);
    cJSON_AddStringToObject(doc, "optimizer", qs_optim_kind_name(o->optimizer));
    cJSON_AddNumberToObject(doc, "fp8_amax_history", o->fp8_amax_history);
    cJSON_AddNumberToObject(doc, "warmup", o->warmup);
    cJSON_AddNumberToObject(doc, "reps", o->reps);
    if (o->data_ms >= 0) cJSON_AddNumberToObject(doc, "data_ms", o->data_ms);
    cJSON *dev = qs_prof_device(o);
    if (o->device_type) cJSON_AddStringToObject(dev, "type", o->device_type);
    cJSON_AddItemToObject(doc, "device", dev);
    if (o->emulated_slowdown > 1) {
        cJSON *e = cJSON_AddObjectToObject(doc, "emulation");
        cJSON_AddNumberToObject(e, "slowdown", o->emulated_slowdown);
        cJSON_AddStringToObject(e, "method", o->emulation_method ? o->emulation_method : "none");
    }
    runs = cJSON_AddObjectToObject(doc, "runs");
    qs_prof_casts casts = {0};
    qs_status st = QS_OK;
    for (int i = 0; i < o->n_precs && st == QS_OK; i++) {
        double t0 = qs_now_ms();
        cJSON *run = NULL;
        double step = 0;
        st = qs_prof_precision(o, o->precs[i], &casts, &run, &step);
        if (st != QS_OK) break;
        if (i == 0) { /* the model's resolved options, from the first run's build */
            qs_model *m = NULL;
            st = qs_models_build(o->model, &o->model_opt, &m);
            if (st == QS_OK) cJSON_AddStringToObject(doc, "config", m->config);
            qs_model_free(m);
        }
        cJSON_AddItemToObject(runs, qs_precision_name(o->precs[i]), run);
        if (o->log)
            qs_log_info(o->log, "profiled %s at %s: step %.2f ms (median of %d), %.1f s", o->model,
                        qs_precision_name(o->precs[i]), step, o->reps,
                        (qs_now_ms() - t0) / 1e3);
    }
    if (st == QS_OK) cJSON_AddItemToObject(doc, "casts", qs_prof_cast_fits(&casts));
    free(casts.v);
    if (st != QS_OK) {
        cJSON_Delete(doc);
        return st;
    }
    *out = doc;
    return QS_OK;
}
