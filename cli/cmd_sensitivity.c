/* cli/cmd_sensitivity.c — `qsync sensitivity`: the direct check of the indicator. Quantize one
 * Linear/Conv2d layer at a time, measure the loss and gradient deviation from full precision on
 * fixed batches, and report how well each indicator method's ω ranks them
 * (src/plan/sensitivity.h, docs/INDICATOR.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "commands.h"
#include "core/atomic_file.h"
#include "options.h"
#include "plan/model_data.h"
#include "plan/sensitivity.h"
#include "qsync/log.h"

static const char *const qs_sensitivity_summary =
    "Check the indicator directly: quantize one Linear/Conv2d/MatMul layer at a time to each of --precisions\n"
    "(everything else fp32, casts as training inserts them), run forward + backward on the same\n"
    "--batches training batches with the same weights and rounding seeds (no optimizer step), and\n"
    "measure the loss deviation mean |L_q - L_fp32| and the gradient deviation mean\n"
    "||g_q - g_fp32||^2 / ||g_fp32||^2 over all parameters. Then rank every indicator method's omega\n"
    "(gvar, qsync, wvar, hess, random) against both: Spearman's rho over all (layer, precision)\n"
    "points and per precision across layers. Writes versioned JSON (docs/INDICATOR.md).";

/* The command line of `qsync sensitivity`. */
typedef struct qs_sens_args {
    qs_model_data_request rq;
    int64_t batches;
    const char *precisions, *out_path;
    bool allow_emulated, json, quiet;
    double gamma;
} qs_sens_args;

/* Parse and check argv into *a; 0, 1 after --help, or 2 after printing a usage error. The
 * precision list goes to precs/n_precs (n_precs 0: the backend's default). */
static int qs_sens_parse(int argc, char **argv, qs_sens_args *a, qs_precision *precs, int *n_precs) {
    *a = (qs_sens_args){.rq = {.data = "fashion-mnist", .batch = 64, .seed = 1}, .batches = 4, .gamma = 4};
    qs_cli_opt opts[] = {
        {"model", QS_CLI_STR, &a->rq.model, "NAME", "built-in model (required unless --checkpoint; see `qsync models`)"},
        {"width", QS_CLI_I64, &a->rq.width, "N", "model width (0 = the architecture's default)"},
        {"data", QS_CLI_STR, &a->rq.data, "NAME", "dataset whose training batches are used (default fashion-mnist)"},
        {"data-dir", QS_CLI_STR, &a->rq.data_dir, "DIR", "dataset directory"},
        {"checkpoint", QS_CLI_STR, &a->rq.checkpoint, "DIR", "take the weights (and model) from this checkpoint"},
        {"batch", QS_CLI_I64, &a->rq.batch, "N", "batch size (default 64)"},
        {"batches", QS_CLI_I64, &a->batches, "N", "fixed batches every measurement runs on (default 4)"},
        {"precisions", QS_CLI_STR, &a->precisions, "LIST",
         "comma-separated precisions to quantize to (default: the backend's native ones but fp32)"},
        {"allow-emulated", QS_CLI_FLAG, &a->allow_emulated, NULL,
         "permit precisions the backend only emulates (default list: add them)"},
        {"gamma", QS_CLI_DOUBLE, &a->gamma, "G", "the indicator's forward weight (gvar, qsync; default 4)"},
        {"seed", QS_CLI_U64, &a->rq.seed, "N",
         "seed of the initialisation, the batches, the rounding and the random method (default 1)"},
        {"threads", QS_CLI_INT, &a->rq.threads, "N", "compute threads (default OpenMP's)"},
        {"out", QS_CLI_STR, &a->out_path, "FILE", "where to write the measurements (required)"},
        {"json", QS_CLI_FLAG, &a->json, NULL, "print the document on stdout instead of the tables"},
        {"quiet", QS_CLI_FLAG, &a->quiet, NULL, "print nothing on success (no progress either)"},
    };
    int rc = qs_cli_parse(argc, argv, 2, opts, (int)(sizeof opts / sizeof opts[0]), "sensitivity",
                          qs_sensitivity_summary);
    if (rc) return rc;
    char err[128];
    *n_precs = 0;
    if (a->precisions && !qs_precision_list_parse(a->precisions, precs, QS_PREC_COUNT, n_precs, err, sizeof err)) {
        fprintf(stderr, "qsync sensitivity: --precisions: %s\n", err);
        return 2;
    }
    if (!a->out_path) {
        fprintf(stderr, "qsync sensitivity: --out is required\n");
        return 2;
    }
    if (!a->rq.model && !a->rq.checkpoint) {
        fprintf(stderr, "qsync sensitivity: --model (or --checkpoint) is required\n");
        return 2;
    }
    if (a->rq.batch < 1 || a->batches < 1 || a->batches > 100000 || a->rq.width < 0 || !(a->gamma >= 0)) {
        fprintf(stderr, "qsync sensitivity: --batch and --batches must be >= 1 (--batches at most 100000), "
                        "--width >= 0, --gamma >= 0\n");
        return 2;
    }
    return 0;
}

/* The fixed batches: the loader's next `count` batches of d, into b (x and y malloc'ed; free
 * them also after a failure). */
static qs_status qs_sens_take_batches(qs_model_data *d, int count, qs_sens_batches *b, float **x, int32_t **y) {
    const int64_t per = d->m->in_h * d->m->in_w * d->m->in_c, batch = d->m->batch, L = d->m->label_len;
    *x = malloc((size_t)(count * batch * per) * sizeof(float));
    *y = malloc((size_t)(count * batch * L) * sizeof(int32_t));
    if (!*x || !*y) return QS_FAIL(QS_ERR_OOM, "out of memory for %d batches of %lld", count, (long long)batch);
    for (int k = 0; k < count; k++)
        QS_TRY(qs_model_data_next(d, *x + (size_t)(k * batch * per), *y + (size_t)(k * batch * L)));
    *b = (qs_sens_batches){.count = count, .batch = batch, .x = *x, .y = *y};
    return QS_OK;
}

/* Progress on stderr through the logger: one line per measured layer. */
static void qs_sens_progress(void *ctx, int layer, int n_layers, const char *name, double elapsed_s) {
    qs_log_info((const qs_logger *)ctx, "sensitivity: layer %d/%d %s measured (%.1f s)", layer + 1, n_layers, name,
                elapsed_s);
}

/* A correlation for the table: "+0.83", or "n/a" where it is undefined. */
static const char *qs_sens_rho(double r, char *buf, size_t cap) {
    if (isnan(r)) snprintf(buf, cap, "n/a");
    else snprintf(buf, cap, "%+.2f", r);
    return buf;
}

/* Print one row of correlations ("all" or a precision) for both deviations. */
static void qs_sens_print_corr(const char *label, const qs_sens_corr *c) {
    char buf[16], row[24];
    snprintf(row, sizeof row, "%s (%d)", label, c->points);
    for (int dev = 0; dev < 2; dev++) {
        printf("  %-12s %-9s", dev == 0 ? row : "", dev == 0 ? "loss_dev" : "grad_dev");
        for (int meth = 0; meth < QS_IND_COUNT; meth++)
            printf(" %7s", qs_sens_rho(dev == 0 ? c->loss[meth] : c->grad[meth], buf, sizeof buf));
        printf("\n");
    }
}

/* The tables: deviations and ω per layer and precision, then the rank correlations. */
static void qs_sens_print(const qs_sensitivity *s, const char *arch) {
    printf("sensitivity of %s, %d batches of %lld (fp32 reference loss %.4f):\n", arch, s->batches,
           (long long)s->ind.batch, s->ref_loss);
    printf("  %-24s %-5s %10s %10s %10s", "layer", "prec", "loss_dev", "signed", "grad_dev");
    for (int meth = 0; meth < QS_IND_COUNT; meth++)
        printf(" %10s", qs_indicator_method_name((qs_indicator_method)meth));
    printf("\n");
    for (int i = 0; i < s->n_points; i++) {
        const qs_sens_point *pt = &s->points[i];
        printf("  %-24s %-5s %10.3g %10.3g %10.3g", s->ind.layers[pt->layer].name, qs_precision_name(pt->prec),
               pt->loss_dev, pt->loss_dev_signed, pt->grad_dev);
        for (int meth = 0; meth < QS_IND_COUNT; meth++) printf(" %10.3g", pt->omega[meth]);
        printf("\n");
    }
    printf("Spearman rank correlation of omega with the measured deviation:\n");
    printf("  %-12s %-9s", "points", "deviation");
    for (int meth = 0; meth < QS_IND_COUNT; meth++) printf(" %7s", qs_indicator_method_name((qs_indicator_method)meth));
    printf("\n");
    qs_sens_print_corr("all", &s->all);
    for (int k = 0; k < s->n_precs; k++) qs_sens_print_corr(qs_precision_name(s->precs[k]), &s->per_prec[k]);
}

/* Write the document of s atomically to a->out_path; its text into *text (caller frees). */
static qs_status qs_sens_write(const qs_sens_args *a, const qs_model_data *d, const qs_sensitivity *s, char **text) {
    qs_sensitivity_meta meta = {.model = d->arch, .config = d->m->config, .data = a->rq.data,
                                .checkpoint = a->rq.checkpoint, .data_seed = a->rq.seed};
    cJSON *doc = qs_sensitivity_to_json(s, &meta);
    *text = doc ? cJSON_Print(doc) : NULL;
    cJSON_Delete(doc);
    if (!*text) return QS_FAIL(QS_ERR_OOM, "out of memory writing the sensitivity document");
    return qs_write_file_atomic(a->out_path, *text, strlen(*text));
}

int qs_cmd_sensitivity(int argc, char **argv) {
    qs_sens_args a;
    qs_precision precs[QS_PREC_COUNT];
    int n_precs = 0;
    int rc = qs_sens_parse(argc, argv, &a, precs, &n_precs);
    if (rc) return rc == 1 ? 0 : rc;
    qs_logger lg;
    qs_logger_init(&lg, 0, 1, a.quiet ? QS_LOG_WARN : QS_LOG_INFO);
    qs_model_data d;
    qs_sens_batches b;
    float *x = NULL;
    int32_t *y = NULL;
    qs_sensitivity s;
    memset(&s, 0, sizeof s);
    char *text = NULL;
    qs_status st = qs_model_data_open(&a.rq, &d);
    if (st == QS_OK) st = qs_sens_take_batches(&d, (int)a.batches, &b, &x, &y);
    if (st == QS_OK) {
        qs_sensitivity_options o;
        qs_sensitivity_options_default(&o);
        o.precisions = n_precs ? precs : NULL;
        o.n_precisions = n_precs;
        o.allow_emulated = a.allow_emulated;
        o.gamma = a.gamma;
        o.seed = a.rq.seed;
        o.progress = qs_sens_progress;
        o.progress_ctx = &lg;
        st = qs_sensitivity_measure(d.m, &b, &o, &s);
    }
    if (st == QS_OK) st = qs_sens_write(&a, &d, &s, &text);
    if (st == QS_OK && a.json) printf("%s\n", text);
    else if (st == QS_OK && !a.quiet) {
        qs_sens_print(&s, d.arch);
        printf("written to %s\n", a.out_path);
    }
    free(text);
    qs_sensitivity_free(&s);
    free(x);
    free(y);
    qs_model_data_close(&d);
    return st == QS_OK ? 0 : qs_cmd_fail("sensitivity");
}
