/* src/predict/profile_job.c — defines: one rank's profile job (profile_job.h). */
#include "predict/profile_job.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backends.h"
#include "core/stats.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "parallel/cpu_quota.h"
#include "models/models.h"
#include "io/profile_file.h"
#include "predict/profile_comm.h"
#include "predict/profile_mixed.h"
#include "qsync/tensor.h"

int qs_profile_native_precisions(qs_precision *out, bool cuda, int device, int threads) {
    qs_backend *be = NULL;
    int n = 0;
    if (qs_backend_open(cuda, device, threads, &be) != QS_OK) return 0;
    for (int p = 0; p < QS_PREC_COUNT; p++)
        if (be->ops->precision_support(be, (qs_precision)p) == QS_PREC_NATIVE) out[n++] = (qs_precision)p;
    be->ops->destroy(be);
    return n;
}

/* The training loader's median time for one batch (shuffled, no augmentation) over reps calls
 * after warm-up ones. */
static qs_status qs_profile_loader_ms(const qs_dataset *ds, int64_t batch, int warmup, int reps, double *ms) {
    qs_loader ld;
    qs_loader_options lo = {.global_batch = batch, .rank = 0, .world = 1, .seed = 1, .shuffle = true,
                            .drop_last = true, .augment = false, .crop_pad = 2};
    QS_TRY(qs_loader_init(&ld, ds, &lo));
    int64_t per = ds->h * ds->w * ds->c, valid;
    float *x = qs_host_alloc((size_t)(batch * per) * sizeof(float));
    int32_t *y = qs_host_alloc((size_t)(batch * ds->label_len) * sizeof(int32_t));
    double *t = calloc((size_t)reps, sizeof *t);
    qs_status st = x && y && t ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory timing the loader");
    for (int k = -warmup; k < reps && st == QS_OK; k++) {
        double t0 = qs_now_ms();
        st = qs_loader_next(&ld, x, y, &valid, NULL);
        if (k >= 0) t[k] = qs_now_ms() - t0;
    }
    if (st == QS_OK) *ms = qs_median_inplace(t, reps);
    free(t);
    qs_host_free(x);
    qs_host_free(y);
    qs_loader_free(&ld);
    return st;
}

/* The first `batch` test samples of the dataset as the loader gives them (normalised images, or
 * token ids and their label_len labels each) into x, y (allocated here; the caller frees them with
 * qs_host_free, also on failure). */
static qs_status qs_profile_batch(const qs_dataset *ds, int64_t batch, float **x, int32_t **y) {
    if (ds->n < batch)
        return QS_FAIL(QS_ERR_INVALID_ARG, "--batch %lld is larger than the %lld samples of %s (test and training split)", (long long)batch,
                       (long long)ds->n, ds->name);
    int64_t per = ds->h * ds->w * ds->c, valid;
    *x = qs_host_alloc((size_t)(batch * per) * sizeof(float));
    *y = qs_host_alloc((size_t)(batch * ds->label_len) * sizeof(int32_t));
    if (!*x || !*y) return QS_FAIL(QS_ERR_OOM, "out of memory for a batch of %lld", (long long)batch);
    qs_loader ld;
    qs_loader_options lo = {.global_batch = batch, .rank = 0, .world = 1, .seed = 1, .shuffle = false,
                            .drop_last = true, .augment = false};
    QS_TRY(qs_loader_init(&ld, ds, &lo));
    qs_status st = qs_loader_next(&ld, *x, *y, &valid, NULL);
    qs_loader_free(&ld);
    return st;
}

/* Check that model j->model (options mo) fits the data ds: input shape, labels per sample, classes. */
static qs_status qs_profile_check_data(const qs_profile_job *j, const qs_model_options *mo, const qs_dataset *ds) {
    qs_model *m = NULL;
    QS_TRY(qs_models_build(j->model, mo, &m));
    qs_status st = qs_dataset_check_model(ds, j->data, j->model, m->in_h, m->in_w, m->in_c, m->label_len,
                                          m->num_classes);
    qs_model_free(m);
    return st;
}

/* Apply the worker's emulated slowdown for the profile: a CPU quota on this process (method
 * cgroup, or auto where writable; released by the caller), else a duty cycle over the ops. */
static qs_status qs_profile_emulate(const qs_cluster_worker *w, int threads, qs_cpu_quota *q, qs_profile_options *o) {
    if (!w || !(w->slowdown > 1)) return QS_OK;
    o->emulated_slowdown = w->slowdown;
    o->emulation_method = "duty-cycle";
    if (strcmp(w->emulation_method, "duty-cycle") == 0) return QS_OK;
    qs_status st = qs_cpu_quota_apply(w->slowdown, threads > 0 ? threads : 1, q);
    if (st == QS_OK) o->emulation_method = "cgroup-quota";
    else if (strcmp(w->emulation_method, "cgroup") == 0 || st != QS_ERR_UNSUPPORTED) return st;
    return QS_OK;
}

/* This rank's model profile (no all-reduce): data, emulation, qs_profile_model. */
static qs_status qs_profile_job_model(const qs_profile_job *j, qs_profile_options *o, cJSON **doc) {
    qs_cpu_quota quota;
    memset(&quota, 0, sizeof quota);
    float *x = NULL;
    int32_t *y = NULL;
    qs_status st = qs_profile_emulate(j->worker, o->threads, &quota, o);
    if (st == QS_OK) { /* under mpirun every rank profiles at once, as they train: they share the memory system */
        qs_dataset ds;
        st = qs_dataset_load(j->data, j->data_dir, false, &ds);
        if (st == QS_OK && ds.n < j->batch) { /* a test split smaller than one batch: the training split's samples */
            qs_dataset_free(&ds);
            st = qs_dataset_load(j->data, j->data_dir, true, &ds);
        }
        if (st == QS_OK) {
            o->model_opt = qs_models_default_options(ds.h, ds.w, ds.c, ds.classes);
            o->model_opt.width = j->width;
            st = qs_profile_check_data(j, &o->model_opt, &ds);
            if (st == QS_OK) st = qs_profile_batch(&ds, j->batch, &x, &y);
            if (st == QS_OK) st = qs_profile_loader_ms(&ds, j->batch, j->warmup, j->reps, &o->data_ms);
            qs_dataset_free(&ds);
        }
        o->x = x;
        o->y = y;
        if (st == QS_OK) st = qs_profile_model(o, doc);
        /* on the GPU the ranks share one device: what the others run changes this one's step */
        if (st == QS_OK && j->cluster && o->cuda && o->comm)
            st = qs_profile_mixed_runs(o, j->cluster, qs_comm_rank(j->comm), qs_comm_world(j->comm), *doc);
    }
    qs_cpu_quota_release(&quota);
    qs_host_free(x);
    qs_host_free(y);
    return st;
}

/* The model's gradient bytes (its first run's memory_bytes.grads) from this rank's profile
 * document, read back as a profile file is (the profile must read). */
static qs_status qs_profile_job_grad_bytes(const cJSON *doc, double *bytes) {
    qs_profile p;
    qs_status st = qs_profile_from_json(doc, "the profile just taken", &p);
    if (st != QS_OK) return qs_error_wrap(QS_ERR_INTERNAL, "the profile does not read back: ");
    *bytes = (double)p.runs[0].memory.grads;
    qs_profile_free(&p);
    return QS_OK;
}

qs_status qs_profile_job_run(const qs_profile_job *j, cJSON **doc) {
    *doc = NULL;
    const int world = qs_comm_world(j->comm);
    qs_precision native[QS_PREC_COUNT];
    qs_profile_options o = {.model = j->model, .data = j->data, .batch = j->batch, .threads = j->threads,
                            .data_ms = -1, .allow_emulated = j->allow_emulated, .fp8_amax_history = j->fp8_amax_history,
                            .warmup = j->warmup, .reps = j->reps,
                            .optimizer = j->optimizer, .precs = j->precs, .n_precs = j->n_precs, .log = j->log,
                            .comm = world > 1 ? j->comm : NULL, .bucket_bytes = j->bucket_bytes,
                            .cuda = j->cuda, .cuda_device = j->cuda_device};
    if (j->worker) {
        o.device_type = j->worker->type;
        if (j->worker->threads > 0 && j->threads == 0) o.threads = j->worker->threads;
        if (j->worker->cuda) {
            o.cuda = true;
            o.cuda_device = j->worker->cuda_device;
        }
    }
    if (o.n_precs == 0) {
        o.n_precs = qs_profile_native_precisions(native, o.cuda, o.cuda_device, o.threads);
        o.precs = native;
    }
    qs_status st = qs_profile_job_model(j, &o, doc);
    if (st == QS_OK && world > 1) cJSON_AddNumberToObject(*doc, "co_running_ranks", world);
    if (world > 1) { /* then the all-reduce between the actual ranks; every rank learns whether all could profile */
        uint64_t lo = 0, hi = 0;
        if (qs_comm_allreduce_minmax_u64(j->comm, st == QS_OK, &lo, &hi, 0) != QS_OK || lo == 0) {
            if (st == QS_OK) st = QS_FAIL(QS_ERR_INTERNAL, "another rank could not profile the model");
        } else {
            /* the largest whole-step slowdown beside which the ranks measured their communication */
            bool quota = o.emulation_method && strcmp(o.emulation_method, "cgroup-quota") == 0;
            uint64_t mine = (uint64_t)llround(1e6 * (quota ? o.emulated_slowdown : 1)), s_lo = 0, s_hi = 0;
            st = qs_comm_allreduce_minmax_u64(j->comm, mine, &s_lo, &s_hi, 0);
            if (st == QS_OK) cJSON_AddNumberToObject(*doc, "co_running_slowdown", (double)s_hi / 1e6);
            cJSON *ar = NULL;
            qs_backend *be = NULL; /* the all-reduce on the device the gradients live on */
            double grad_bytes = 0;
            if (st == QS_OK) st = qs_profile_job_grad_bytes(*doc, &grad_bytes);
            if (st == QS_OK && o.cuda) st = qs_backend_cuda_create(o.cuda_device, &be);
            if (st == QS_OK) st = qs_profile_allreduce(j->comm, be, j->reps, grad_bytes, &ar);
            if (be) be->ops->destroy(be);
            if (st == QS_OK) cJSON_AddItemToObject(*doc, "allreduce", ar);
            else cJSON_Delete(ar);
        }
    }
    if (st != QS_OK) {
        cJSON_Delete(*doc);
        *doc = NULL;
    }
    return st;
}
