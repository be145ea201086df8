/* cli/cmd_indicate.c — defines: `qsync indicate`: per selectable layer and precision the indicator ω
 * (src/plan/indicator.h, docs/INDICATOR.md) from full-precision statistics over some training
 * batches, written as versioned JSON for `qsync plan`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "commands.h"
#include "core/atomic_file.h"
#include "options.h"
#include "plan/indicate_job.h"
#include "io/indicator_file.h"
#include "plan/indicator.h"

static const char *const qs_indicate_summary =
    "Measure, per Linear/Conv2d/MatMul layer and per precision, how much quantizing that layer would hurt:\n"
    "statistics of X, W, Y, dY and dW over --batches training batches at FP32 (forward + backward,\n"
    "no optimizer step), the rounding error each precision's quantizer makes on them, and the\n"
    "indicator omega by --method (gvar: the bi-directional variance form, default; qsync: QSync's\n"
    "exact formula; wvar, hess, random: ablations). Writes versioned JSON (docs/INDICATOR.md).";

/* Print one line per layer: ω at every precision (the document as qsync plan reads it). */
static void qs_indicate_print(const qs_indicator_file *f) {
    printf("indicator (%s) of %s, %d batches of %d:\n", f->method, f->model, (int)f->batches, (int)f->batch);
    if (f->n_layers > 0) {
        printf("  %-24s %5s", "layer", "depth");
        for (int p = 0; p < QS_PREC_COUNT; p++) printf(" %11s", qs_precision_name((qs_precision)p));
        printf("\n");
    }
    for (int i = 0; i < f->n_layers; i++) {
        const qs_indicator_file_layer *l = &f->layers[i];
        printf("  %-24s %5d", l->name, (int)l->depth);
        for (int p = 0; p < QS_PREC_COUNT; p++) printf(" %11.4g", l->omega[p]);
        printf("\n");
    }
}

int qs_cmd_indicate(int argc, char **argv) {
    const char *model = NULL, *data = "fashion-mnist", *data_dir = NULL, *checkpoint = NULL, *out_path = NULL;
    const char *method_s = "gvar", *device = "cpu";
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
        {"device", QS_CLI_STR, &device, "D", "where forward and backward run: cpu (default), cuda or cuda:N"},
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
    qs_indicate_job job = {.in = {.model = model, .width = width, .data = data, .data_dir = data_dir,
                                  .checkpoint = checkpoint, .batch = batch, .seed = seed, .threads = threads},
                           .batches = batches, .method = method, .gamma = gamma};
    if (!qs_cli_parse_device(device, &job.in.cuda, &job.in.cuda_device)) {
        fprintf(stderr, "qsync indicate: --device must be cpu, cuda or cuda:N (got '%s')\n", device);
        return 2;
    }
    cJSON *doc = NULL;
    qs_indicator_file f;
    memset(&f, 0, sizeof f);
    qs_status st = qs_indicate_job_run(&job, &doc);
    char *text = st == QS_OK ? cJSON_Print(doc) : NULL;
    if (st == QS_OK && !text) st = QS_FAIL(QS_ERR_OOM, "out of memory writing the indicator");
    if (st == QS_OK) st = qs_indicator_file_from_json(doc, out_path, &f); /* what qsync plan will read */
    if (st == QS_OK) st = qs_write_file_atomic(out_path, text, strlen(text));
    if (st == QS_OK && json)
        printf("%s\n", text);
    else if (st == QS_OK && !quiet) {
        qs_indicate_print(&f);
        printf("written to %s\n", out_path);
    }
    qs_indicator_file_free(&f);
    free(text);
    cJSON_Delete(doc);
    return st == QS_OK ? 0 : qs_cmd_fail("indicate");
}
