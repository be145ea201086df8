/* src/train/eval_job.c — `qsync eval`: rebuild the model a checkpoint names, load it and
 * measure accuracy and loss on the test split; optionally dump the logits. */
#include <stdio.h>
#include <string.h>

#include "data/dataset.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "io/safetensors.h"
#include "train/trainer.h"
#include "backends/backends.h"

/* Write logits as one f32 tensor "logits" plus the s32 "labels": (n, classes) and (n) for a
 * classifier, (n, T, classes) and (n, T) for a language model (label_len T). */
static qs_status qs_eval_write_logits(const char *path, const float *logits, const int32_t *labels,
                                      const qs_dataset *ds) {
    const bool seq = ds->label_len > 1;
    qs_st_tensor t[2] = {
        {.name = "logits", .dtype = QS_F32, .ndim = seq ? 3 : 2,
         .shape = {ds->n, seq ? ds->label_len : ds->classes, ds->classes}, .data = logits},
        {.name = "labels", .dtype = QS_S32, .ndim = seq ? 2 : 1, .shape = {ds->n, ds->label_len}, .data = labels},
    };
    qs_st_meta meta[1] = {{"format", "qsync.logits"}};
    return qs_safetensors_write(path, t, 2, meta, 1);
}

void qs_eval_config_defaults(qs_eval_config *c) {
    memset(c, 0, sizeof *c);
    c->data = "fashion-mnist";
    c->batch = 256;
    c->precision = QS_PREC_FP32;
    c->grad_rounding = QS_GRAD_ROUND_UNSET;
    c->weight_scales = QS_WEIGHT_SCALES_UNSET;
}

/* Precisions of the evaluation: the plan (file or checkpoint) or the uniform precision. */
static qs_status qs_eval_precisions(const qs_eval_config *c, qs_model *m, qs_backend *be) {
    qs_plan plan;
    memset(&plan, 0, sizeof plan);
    if (c->plan) QS_TRY(qs_train_load_plan(c->plan, &plan));
    qs_precision_options po;
    qs_train_precision_options(c->precision, c->allow_emulated, c->grad_rounding, c->weight_scales, &po);
    qs_status st = qs_plan_precision_setup(c->plan ? &plan : NULL, m, be, &po);
    qs_plan_free(&plan);
    return st;
}

qs_status qs_eval_run(const qs_eval_config *c, qs_eval_result *res) {
    memset(res, 0, sizeof *res);
    char arch[32], model_path[4096];
    qs_model_options mo;
    qs_dataset ds;
    memset(&ds, 0, sizeof ds);
    qs_model *m = NULL;
    qs_backend *be = NULL;
    float *logits = NULL;
    int32_t *labels = NULL;
    qs_checkpoint_model_path(c->checkpoint, model_path, sizeof model_path);
    qs_status st = qs_checkpoint_read_arch(c->checkpoint, arch, sizeof arch, &mo);
    if (st == QS_OK) st = qs_dataset_load(c->data, c->data_dir, false, &ds);
    if (st == QS_OK && c->eval_subset > 0 && c->eval_subset < ds.n) st = qs_dataset_truncate(&ds, c->eval_subset);
    if (st == QS_OK && !ds.raw_bytes && /* text: checked on the built model below */
        (ds.h != mo.in_h || ds.w != mo.in_w || ds.c != mo.in_c || ds.classes != mo.num_classes))
        st = QS_FAIL(QS_ERR_MISMATCH,
                     "checkpoint %s expects %lldx%lldx%lld inputs and %lld classes, but data %s has %lldx%lldx%lld "
                     "and %lld classes",
                     model_path, (long long)mo.in_h, (long long)mo.in_w, (long long)mo.in_c, (long long)mo.num_classes,
                     c->data, (long long)ds.h, (long long)ds.w, (long long)ds.c, (long long)ds.classes);
    if (st == QS_OK) st = qs_models_build(arch, &mo, &m);
    if (st == QS_OK) {
        st = qs_dataset_check_model(&ds, c->data, arch, m->in_h, m->in_w, m->in_c, m->label_len, m->num_classes);
        if (st != QS_OK) st = qs_error_wrap(st, "checkpoint %s: ", model_path);
    }
    if (st == QS_OK) st = qs_backend_cpu_create(c->threads, &be);
    if (st == QS_OK && !c->no_fuse) qs_model_fuse(m);
    if (st == QS_OK) st = qs_eval_precisions(c, m, be);
    if (st == QS_OK) st = qs_model_setup(m, be, c->batch, 1);
    if (st == QS_OK) st = qs_checkpoint_load_model(model_path, m);
    if (st == QS_OK && c->logits_out) {
        logits = qs_host_alloc((size_t)(ds.n * ds.label_len * ds.classes) * sizeof(float));
        labels = qs_host_alloc((size_t)(ds.n * ds.label_len) * sizeof(int32_t));
        if (!logits || !labels)
            st = QS_FAIL(QS_ERR_OOM, "out of memory for the logits of %lld samples", (long long)ds.n);
    }
    qs_eval_stats ev;
    if (st == QS_OK) st = qs_evaluate_logits(m, &ds, &ev, logits, labels);
    if (st == QS_OK && c->logits_out) st = qs_eval_write_logits(c->logits_out, logits, labels, &ds);
    if (st == QS_OK) {
        res->accuracy = ev.accuracy;
        res->loss = ev.loss;
        res->samples = ev.samples;
        res->precision = qs_precision_report_json(m, be);
        qs_precision_report_line(m, be, res->precision_line, sizeof res->precision_line);
    }
    qs_host_free(logits);
    qs_host_free(labels);
    qs_model_free(m);
    if (be) be->ops->destroy(be);
    qs_dataset_free(&ds);
    return st;
}
