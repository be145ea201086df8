/* src/plan/model_data.c — dataset, model and loader of an analysis job (model_data.h). */
#include "plan/model_data.h"

#include <stdio.h>
#include <string.h>

#include "models/models.h"
#include "io/checkpoint_model.h"
#include "backends/backends.h"

/* The model's architecture and options: the checkpoint's (checked against r->model, r->width
 * and the data's shape), else r->model at the data's shape with r->width. */
static qs_status qs_model_data_arch(const qs_model_data_request *r, const qs_dataset *ds, char *arch, size_t cap,
                                    qs_model_options *mo) {
    if (!r->checkpoint) {
        snprintf(arch, cap, "%s", r->model);
        *mo = qs_models_default_options(ds->h, ds->w, ds->c, ds->classes);
        mo->width = r->width;
        return QS_OK;
    }
    char path[4096];
    qs_checkpoint_model_path(r->checkpoint, path, sizeof path);
    QS_TRY(qs_checkpoint_read_arch(r->checkpoint, arch, cap, mo));
    if (r->model && strcmp(r->model, arch) != 0)
        return QS_FAIL(QS_ERR_MISMATCH, "--model %s, but checkpoint %s holds a %s", r->model, path, arch);
    if (r->width > 0 && r->width != mo->width)
        return QS_FAIL(QS_ERR_MISMATCH, "--width %lld, but checkpoint %s has width %lld", (long long)r->width, path,
                       (long long)mo->width);
    if (!ds->raw_bytes && /* text: checked on the built model (qs_model_data_model) */
        (ds->h != mo->in_h || ds->w != mo->in_w || ds->c != mo->in_c || ds->classes != mo->num_classes))
        return QS_FAIL(QS_ERR_MISMATCH,
                       "checkpoint %s expects %lldx%lldx%lld inputs and %lld classes, data %s has %lldx%lldx%lld and %lld",
                       path, (long long)mo->in_h, (long long)mo->in_w, (long long)mo->in_c, (long long)mo->num_classes,
                       r->data, (long long)ds->h, (long long)ds->w, (long long)ds->c, (long long)ds->classes);
    return QS_OK;
}

/* Build and set up the model of r on a fresh backend (CPU, or r->cuda_device's GPU), with the
 * checkpoint's weights if any;
 * the model must fit the data d->ds (input, labels per sample, classes). */
static qs_status qs_model_data_model(const qs_model_data_request *r, const qs_model_options *mo, qs_model_data *d) {
    QS_TRY(qs_models_build(d->arch, mo, &d->m));
    const qs_model *m = d->m;
    qs_status st = qs_dataset_check_model(&d->ds, r->data, d->arch, m->in_h, m->in_w, m->in_c, m->label_len,
                                          m->num_classes);
    if (st != QS_OK && r->checkpoint) {
        char path[4096];
        qs_checkpoint_model_path(r->checkpoint, path, sizeof path);
        return qs_error_wrap(st, "checkpoint %s: ", path);
    }
    QS_TRY(st);
    if (r->cuda)
        QS_TRY(qs_backend_cuda_create(r->cuda_device, &d->be));
    else
        QS_TRY(qs_backend_cpu_create(r->threads, &d->be));
    QS_TRY(qs_model_setup(d->m, d->be, r->batch, r->seed));
    if (!r->checkpoint) return QS_OK;
    char path[4096];
    qs_checkpoint_model_path(r->checkpoint, path, sizeof path);
    return qs_checkpoint_load_model(path, d->m);
}

qs_status qs_model_data_open(const qs_model_data_request *r, qs_model_data *out) {
    memset(out, 0, sizeof *out);
    if (!r->model && !r->checkpoint) return QS_FAIL(QS_ERR_INVALID_ARG, "a model or a checkpoint is required");
    if (r->batch < 1) return QS_FAIL(QS_ERR_INVALID_ARG, "batch must be >= 1 (got %lld)", (long long)r->batch);
    QS_TRY(qs_dataset_load(r->data, r->data_dir, true, &out->ds));
    out->have_ds = true;
    qs_model_options mo;
    QS_TRY(qs_model_data_arch(r, &out->ds, out->arch, sizeof out->arch, &mo));
    if (out->ds.n < r->batch)
        return QS_FAIL(QS_ERR_INVALID_ARG, "--batch %lld is larger than the %lld training samples of %s",
                       (long long)r->batch, (long long)out->ds.n, r->data);
    QS_TRY(qs_model_data_model(r, &mo, out));
    qs_loader_options lo = {.global_batch = r->batch, .rank = 0, .world = 1, .seed = r->seed, .shuffle = true,
                            .drop_last = true, .augment = false, .crop_pad = 2};
    QS_TRY(qs_loader_init(&out->ld, &out->ds, &lo));
    out->have_ld = true;
    return QS_OK;
}

void qs_model_data_close(qs_model_data *d) {
    if (!d) return;
    if (d->have_ld) qs_loader_free(&d->ld);
    qs_model_free(d->m);
    if (d->be) d->be->ops->destroy(d->be);
    if (d->have_ds) qs_dataset_free(&d->ds);
    memset(d, 0, sizeof *d);
}

qs_status qs_model_data_next(void *ctx, float *x, int32_t *y) {
    qs_model_data *d = ctx;
    int64_t valid;
    return qs_loader_next(&d->ld, x, y, &valid, NULL);
}
