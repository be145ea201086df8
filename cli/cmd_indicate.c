/* cli/cmd_indicate.c — `qsync indicate`: per selectable layer and precision the indicator ω
 * (src/plan/indicator.h, docs/INDICATOR.md) from full-precision statistics over some training
 * batches, written as versioned JSON for `qsync plan`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "commands.h"
#include "core/atomic_file.h"
#include "core/backend.h"
#include "data/dataset.h"
#include "models/models.h"
#include "options.h"
#include "plan/indicator.h"
#include "train/checkpoint.h"

static const char *const qs_indicate_summary =
    "Measure, per Linear/Conv2d layer and per precision, how much quantizing that layer would hurt:\n"
    "statistics of X, W, Y, dY and dW over --batches training batches at FP32 (forward + backward,\n"
    "no optimizer step), the rounding error each precision's quantizer makes on them, and the\n"
    "indicator omega by --method (gvar: the bi-directional variance form, default; qsync: QSync's\n"
    "exact formula; wvar, hess, random: ablations). Writes versioned JSON (docs/INDICATOR.md).";

/* Batch source over a loader. */
typedef struct qs_indicate_src {
    qs_loader ld;
} qs_indicate_src;

/* qs_indicator_batch_fn over the training loader. */
static qs_status qs_indicate_next(void *ctx, float *x, int32_t *y) {
    qs_indicate_src *s = ctx;
    int64_t valid;
    return qs_loader_next(&s->ld, x, y, &valid, NULL);
}

/* Print one line per layer: ω at every precision. */
static void qs_indicate_print(const cJSON *doc) {
    printf("indicator (%s) of %s, %d batches of %d:\n", cJSON_GetObjectItem(doc, "method")->valuestring,
           cJSON_GetObjectItem(doc, "model")->valuestring, (int)cJSON_GetObjectItem(doc, "batches")->valuedouble,
           (int)cJSON_GetObjectItem(doc, "batch")->valuedouble);
    const cJSON *l;
    bool header = false;
    cJSON_ArrayForEach(l, cJSON_GetObjectItem(doc, "layers")) {
        const cJSON *om = cJSON_GetObjectItem(l, "omega"), *p;
        if (!header) {
            printf("  %-24s %5s", "layer", "depth");
            cJSON_ArrayForEach(p, om) printf(" %11s", p->string);
            printf("\n");
            header = true;
        }
        printf("  %-24s %5d", l->string, (int)cJSON_GetObjectItem(l, "depth")->valuedouble);
        cJSON_ArrayForEach(p, om) printf(" %11.4g", p->valuedouble);
        printf("\n");
    }
}

int qs_cmd_indicate(int argc, char **argv) {
    const char *model = NULL, *data = "fashion-mnist", *data_dir = NULL, *checkpoint = NULL, *out_path = NULL;
    const char *method_s = "gvar";
    int64_t width = 0, batch = 64, batches = 8;
    uint64_t seed = 1;
    double gamma = 4;
    int threads = 0;
    bool json = false, quiet = false;
    qs_cli_opt opts[] = {
        {"model", QS_CLI_STR, &model, "NAME", "built-in model (required unless --checkpoint; see `qsync models`)"},
        {"width", QS_CLI_I64, &width, "N", "model width (0 = the architecture's default)"},
        {"data", QS_CLI_STR, &data, "NAME", "dataset whose training batches are used (default fashion-mnist)"},
        {"data-dir", QS_CLI_STR, &data_dir, "DIR", "dataset directory"},
        {"batch", QS_CLI_I64, &batch, "N", "batch size (default 64)"},
        {"batches", QS_CLI_I64, &batches, "N", "batches the statistics are averaged over (default 8)"},
        {"checkpoint", QS_CLI_STR, &checkpoint, "DIR", "take the weights (and model) from this checkpoint"},
        {"method", QS_CLI_STR, &method_s, "NAME", "gvar (default), qsync, wvar, hess or random"},
        {"gamma", QS_CLI_DOUBLE, &gamma, "G", "weight of the forward term (gvar, qsync; default 4, QSync's)"},
        {"seed", QS_CLI_U64, &seed, "N",
         "seed of the batches, the gradient rounding and the random method (default 1)"},
        {"threads", QS_CLI_INT, &threads, "N", "compute threads (default OpenMP's)"},
        {"out", QS_CLI_STR, &out_path, "FILE", "where to write the indicator (required)"},
        {"json", QS_CLI_FLAG, &json, NULL, "print the document on stdout instead of the table"},
        {"quiet", QS_CLI_FLAG, &quiet, NULL, "print nothing on success"},
    };
    int rc = qs_cli_parse(argc, argv, 2, opts, (int)(sizeof opts / sizeof opts[0]), "indicate", qs_indicate_summary);
    if (rc) return rc == 1 ? 0 : rc;
    qs_indicator_method method;
    if (!qs_indicator_method_parse(method_s, &method)) {
        fprintf(stderr, "qsync indicate: --method: unknown method '%s' (gvar, qsync, wvar, hess, random)\n", method_s);
        return 2;
    }
    if (!out_path) {
        fprintf(stderr, "qsync indicate: --out is required\n");
        return 2;
    }
    if (!model && !checkpoint) {
        fprintf(stderr, "qsync indicate: --model (or --checkpoint) is required\n");
        return 2;
    }
    if (batch < 1 || batches < 1 || batches > 1000000 || width < 0 || !(gamma >= 0)) {
        fprintf(stderr, "qsync indicate: --batch and --batches must be >= 1, --width >= 0, --gamma >= 0\n");
        return 2;
    }
    char arch[32] = "", model_path[4096] = "";
    qs_model_options mo;
    qs_dataset ds;
    memset(&ds, 0, sizeof ds);
    bool have_ds = false;
    qs_model *m = NULL;
    qs_backend *be = NULL;
    qs_indicate_src src;
    bool have_ld = false;
    qs_indicator ind;
    memset(&ind, 0, sizeof ind);
    cJSON *doc = NULL;
    qs_status st = qs_dataset_load(data, data_dir, true, &ds);
    have_ds = st == QS_OK;
    if (st == QS_OK && checkpoint) {
        qs_checkpoint_model_path(checkpoint, model_path, sizeof model_path);
        st = qs_checkpoint_read_arch(checkpoint, arch, sizeof arch, &mo);
        if (st == QS_OK && model && strcmp(model, arch) != 0)
            st = QS_FAIL(QS_ERR_MISMATCH, "--model %s, but checkpoint %s holds a %s", model, model_path, arch);
        if (st == QS_OK && width > 0 && width != mo.width)
            st = QS_FAIL(QS_ERR_MISMATCH, "--width %lld, but checkpoint %s has width %lld", (long long)width,
                         model_path, (long long)mo.width);
        if (st == QS_OK && (ds.h != mo.in_h || ds.w != mo.in_w || ds.c != mo.in_c || ds.classes != mo.num_classes))
            st = QS_FAIL(QS_ERR_MISMATCH,
                         "checkpoint %s expects %lldx%lldx%lld inputs and %lld classes, data %s has "
                         "%lldx%lldx%lld and %lld",
                         model_path, (long long)mo.in_h, (long long)mo.in_w, (long long)mo.in_c,
                         (long long)mo.num_classes, data, (long long)ds.h, (long long)ds.w, (long long)ds.c,
                         (long long)ds.classes);
    } else if (st == QS_OK) {
        snprintf(arch, sizeof arch, "%s", model);
        mo = qs_models_default_options(ds.h, ds.w, ds.c, ds.classes);
        mo.width = width;
    }
    if (st == QS_OK && ds.n < batch)
        st = QS_FAIL(QS_ERR_INVALID_ARG, "--batch %lld is larger than the %lld training samples of %s",
                     (long long)batch, (long long)ds.n, data);
    if (st == QS_OK) st = qs_models_build(arch, &mo, &m);
    if (st == QS_OK) st = qs_backend_cpu_create(threads, &be);
    if (st == QS_OK) st = qs_model_setup(m, be, batch, seed);
    if (st == QS_OK && checkpoint) st = qs_checkpoint_load_model(model_path, m);
    if (st == QS_OK) {
        qs_loader_options lo = {.global_batch = batch,
                                .rank = 0,
                                .world = 1,
                                .seed = seed,
                                .shuffle = true,
                                .drop_last = true,
                                .augment = false,
                                .crop_pad = 2};
        st = qs_loader_init(&src.ld, &ds, &lo);
        have_ld = st == QS_OK;
    }
    if (st == QS_OK) st = qs_indicator_collect(m, (int)batches, qs_indicate_next, &src, seed, &ind);
    if (st == QS_OK) {
        qs_indicator_meta meta = {.model = arch,
                                  .config = m->config,
                                  .data = data,
                                  .batch = batch,
                                  .batches = (int)batches,
                                  .method = method,
                                  .gamma = gamma,
                                  .seed = seed,
                                  .checkpoint = checkpoint};
        doc = qs_indicator_to_json(&ind, &meta);
        if (!doc) st = QS_FAIL(QS_ERR_OOM, "out of memory building the indicator document");
    }
    char *text = st == QS_OK ? cJSON_Print(doc) : NULL;
    if (st == QS_OK && !text) st = QS_FAIL(QS_ERR_OOM, "out of memory writing the indicator");
    if (st == QS_OK) st = qs_write_file_atomic(out_path, text, strlen(text));
    if (st == QS_OK && json)
        printf("%s\n", text);
    else if (st == QS_OK && !quiet) {
        qs_indicate_print(doc);
        printf("written to %s\n", out_path);
    }
    free(text);
    cJSON_Delete(doc);
    qs_indicator_free(&ind);
    if (have_ld) qs_loader_free(&src.ld);
    qs_model_free(m);
    if (be) be->ops->destroy(be);
    if (have_ds) qs_dataset_free(&ds);
    return st == QS_OK ? 0 : qs_cmd_fail("indicate");
}
