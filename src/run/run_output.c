/* src/run/run_output.c — `qsync run`'s report as text and its plot (run_report.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/atomic_file.h"
#include "run/run_report.h"

/* The number under key, NAN when absent or null. */
static double qs_run_num(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItem(o, key);
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

/* The report's base precision, the base arm's label ("fp32" for a report without one). */
static const char *qs_run_base_label(const cJSON *doc) {
    const char *b = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "base_precision"));
    return b ? b : "fp32";
}

/* The comparison object `<prefix><base>` of the report (NULL when absent). */
static const cJSON *qs_run_comparison(const cJSON *doc, const char *prefix) {
    char key[64];
    snprintf(key, sizeof key, "%s%s", prefix, qs_run_base_label(doc));
    return cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "comparison"), key);
}

/* "  12.34" or "      —" in a field of width w. */
static void qs_run_print_ms(FILE *f, double x, int w, int decimals) {
    if (isfinite(x)) fprintf(f, " %*.*f", w, decimals, x);
    else fprintf(f, " %*s", w, "-");
}

static void qs_run_print_plan(const cJSON *doc, FILE *f) {
    const cJSON *plan = cJSON_GetObjectItem(doc, "plan"), *ty, *l, *k;
    if (cJSON_IsTrue(cJSON_GetObjectItem(plan, "given")))
        fprintf(f, "plan: given (%s)\n", cJSON_GetStringValue(cJSON_GetObjectItem(doc, "plan_file")));
    else
        fprintf(f, "plan: T = %.2f ms (the fastest type, %s, all %s)%s\n", qs_run_num(plan, "target_ms"),
                cJSON_GetStringValue(cJSON_GetObjectItem(plan, "fastest_type")), qs_run_base_label(doc),
                cJSON_IsTrue(cJSON_GetObjectItem(plan, "target_met")) ? "" : "; not met: the fastest plans were taken");
    cJSON_ArrayForEach(ty, cJSON_GetObjectItem(plan, "types")) {
        fprintf(f, "  %s (%s", ty->string, cJSON_GetStringValue(cJSON_GetObjectItem(ty, "solver")));
        if (isfinite(qs_run_num(ty, "omega"))) fprintf(f, ", sum omega %.4g", qs_run_num(ty, "omega"));
        fprintf(f, "):");
        cJSON_ArrayForEach(k, cJSON_GetObjectItem(ty, "layers_at")) fprintf(f, " %s %d", k->string, (int)k->valuedouble);
        fprintf(f, " of %d layers; %.0f%% above %s\n   ", (int)qs_run_num(ty, "layers"),
                100 * qs_run_num(ty, "share_above_low_precision"),
                cJSON_GetStringValue(cJSON_GetObjectItem(doc, "low_precision")));
        cJSON_ArrayForEach(l, cJSON_GetObjectItem(ty, "precisions")) fprintf(f, " %s=%s", l->string, l->valuestring);
        fprintf(f, "\n");
    }
}

void qs_run_report_print(const cJSON *doc, FILE *f) {
    const cJSON *a, *x;
    double steps = qs_run_num(doc, "steps");
    fprintf(f, "\nqsync run: %s on %s, cluster %s, global batch %.0f, ", cJSON_GetStringValue(cJSON_GetObjectItem(doc, "model")),
            cJSON_GetStringValue(cJSON_GetObjectItem(doc, "data")), cJSON_GetStringValue(cJSON_GetObjectItem(doc, "cluster")),
            qs_run_num(doc, "global_batch"));
    if (steps > 0) fprintf(f, "%.0f steps per run", steps);
    else fprintf(f, "%.0f epoch(s) per run", qs_run_num(doc, "epochs"));
    if (qs_run_num(doc, "train_subset") > 0) fprintf(f, " (first %.0f training samples)", qs_run_num(doc, "train_subset"));
    fprintf(f, ", %.0f seed(s)\n", qs_run_num(doc, "seeds"));
    qs_run_print_plan(doc, f);
    fprintf(f, "%-8s %12s %10s %7s %9s %9s %10s\n", "arm", "iteration ms", "predicted", "error", "images/s",
            "test acc", "train loss");
    cJSON_ArrayForEach(a, cJSON_GetObjectItem(doc, "arms")) {
        const cJSON *runs = cJSON_GetObjectItem(a, "runs");
        double loss = 0;
        int n = 0;
        cJSON_ArrayForEach(x, runs) {
            loss += qs_run_num(x, "final_train_loss");
            n++;
        }
        fprintf(f, "%-8s", a->string);
        qs_run_print_ms(f, qs_run_num(a, "synchronized_ms"), 12, 2);
        qs_run_print_ms(f, qs_run_num(a, "predicted_synchronized_ms"), 10, 2);
        double err = qs_run_num(a, "prediction_error");
        if (isfinite(err)) fprintf(f, " %+6.1f%%", 100 * err);
        else fprintf(f, " %7s", "-");
        qs_run_print_ms(f, qs_run_num(a, "mean_images_per_s"), 9, 0);
        qs_run_print_ms(f, 100 * qs_run_num(a, "mean_test_accuracy"), 8, 2);
        fprintf(f, "%%");
        qs_run_print_ms(f, n ? loss / n : NAN, 10, 4);
        fprintf(f, "\n");
    }
    fprintf(f, "(iteration: median step, slowest worker, median over seeds; predicted: the plan's replay, "
               "calibrated where measured)\n");
    const cJSON *cmp = cJSON_GetObjectItem(doc, "comparison");
    const char *base = qs_run_base_label(doc);
    fprintf(f, "gap closed, (T_%s - T_arm) / (T_%s - T_ideal):", base, base);
    cJSON_ArrayForEach(x, cJSON_GetObjectItem(cmp, "gap_closure"))
        if (cJSON_IsNumber(x)) fprintf(f, "  %s %.2f", x->string, x->valuedouble);
        else fprintf(f, "  %s - (needs the %s arm, and the ideal arm or --ideal-ms)", x->string, base);
    fprintf(f, "\ntest accuracy minus %s's, paired by seed:", base);
    cJSON_ArrayForEach(x, qs_run_comparison(doc, "test_accuracy_minus_"))
        fprintf(f, "  %s %+.2f pp", x->string, 100 * qs_run_num(x, "mean"));
    fprintf(f, "\nmean |loss - %s's loss| at the same steps:", base);
    cJSON_ArrayForEach(x, qs_run_comparison(doc, "loss_curve_distance_to_"))
        if (cJSON_IsNumber(x)) fprintf(f, "  %s %.4f", x->string, x->valuedouble);
    char key[64];
    snprintf(key, sizeof key, "seed_spread_%s", base);
    const cJSON *spread = cJSON_GetObjectItem(cmp, key);
    if (spread)
        fprintf(f, "\n%s against itself, consecutive seeds (the scale of the differences above): mean |loss "
                   "difference| %.4f, |test accuracy difference| %.2f pp", base, qs_run_num(spread, "loss_curve_distance"),
                100 * qs_run_num(spread, "test_accuracy_abs_diff"));
    fprintf(f, "\nqsync arm per worker: predicted vs measured iteration, memory\n");
    cJSON_ArrayForEach(x, cJSON_GetObjectItem(doc, "qsync_workers")) {
        fprintf(f, "  rank %d (%s): %.2f ms predicted, %.2f ms measured (%+.1f%%); %.1f MiB predicted, %.1f MiB measured\n",
                (int)qs_run_num(x, "rank"), cJSON_GetStringValue(cJSON_GetObjectItem(x, "type")),
                qs_run_num(x, "predicted_iteration_ms"), qs_run_num(x, "measured_median_step_ms"),
                100 * qs_run_num(x, "iteration_error"), qs_run_num(x, "predicted_memory_bytes") / 1048576.0,
                qs_run_num(x, "measured_memory_bytes") / 1048576.0);
    }
}

/* Write the first seed's curve of each arm as "train_s step loss" lines to <out>/curve-<arm>.dat;
 * the plot script's `plot` clauses for them go into cmd. */
static qs_status qs_run_plot_data(const qs_run_report *r, char *cmd_time, char *cmd_step, size_t cap) {
    size_t lt = 0, ls = 0;
    for (int i = 0; i < r->n; i++) {
        const qs_run_entry *e = &r->e[i];
        if (e->seed != r->c->train.seed) continue;
        qs_run_curve cv;
        QS_TRY(qs_run_curve_read(e->metrics, &cv));
        size_t len = 0, size = (size_t)cv.n * 64 + 1;
        char *text = malloc(size), path[4200];
        qs_status st = text ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory writing the plot data");
        for (int k = 0; st == QS_OK && k < cv.n; k++)
            len += (size_t)snprintf(text + len, size - len, "%.3f %.0f %.6g\n", cv.train_s[k], cv.step[k], cv.loss[k]);
        const char *label = qs_run_arm_label(r->c, e->arm);
        snprintf(path, sizeof path, "%s/curve-%s.dat", r->c->out_dir, label);
        if (st == QS_OK) st = qs_write_file_atomic(path, text, len);
        free(text);
        qs_run_curve_free(&cv);
        QS_TRY(st);
        lt += (size_t)snprintf(cmd_time + lt, cap - lt, "%s'%s' using 1:3 with lines lw 2 title '%s'", lt ? ", " : "",
                               path, label);
        ls += (size_t)snprintf(cmd_step + ls, cap - ls, "%s'%s' using 2:3 with lines lw 2 title '%s'", ls ? ", " : "",
                               path, label);
        if (lt >= cap || ls >= cap) return QS_FAIL(QS_ERR_INVALID_ARG, "plot: output directory path too long");
    }
    return QS_OK;
}

qs_status qs_run_plot(const qs_run_report *r, const char *png) {
    if (strchr(png, '\'') || strchr(r->c->out_dir, '\''))
        return QS_FAIL(QS_ERR_INVALID_ARG, "plot: paths with a single quote are not supported (%s)", png);
    size_t cap = 16384;
    char *by_time = malloc(cap), *by_step = malloc(cap), *script = malloc(3 * cap), path[4200];
    qs_status st = by_time && by_step && script ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory drawing the plot");
    if (st == QS_OK) st = qs_run_plot_data(r, by_time, by_step, cap);
    if (st == QS_OK) {
        int n = snprintf(script, 3 * cap,
                         "set terminal png size 1400,560\nset output '%s'\nset multiplot layout 1,2 title "
                         "'qsync run: %s, training loss per arm (seed %llu)'\nset grid\nset key top right\n"
                         "set xlabel 'training time (s)'\nset ylabel 'training loss'\nplot %s\n"
                         "set xlabel 'step'\nplot %s\nunset multiplot\n",
                         png, r->c->train.model, (unsigned long long)r->c->train.seed, by_time, by_step);
        snprintf(path, sizeof path, "%s/plot.gp", r->c->out_dir);
        st = qs_write_file_atomic(path, script, (size_t)n);
    }
    if (st == QS_OK) {
        char cmd[4300];
        snprintf(cmd, sizeof cmd, "gnuplot '%s'", path);
        int rc = system(cmd);
        if (rc != 0)
            st = QS_FAIL(QS_ERR_IO, "gnuplot %s failed (exit status %d): is gnuplot installed (Debian: gnuplot-nox)?",
                         path, WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
    }
    free(by_time);
    free(by_step);
    free(script);
    return st;
}
