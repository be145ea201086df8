/* src/run/run_output.c — defines: `qsync run`'s report as text and its plot (run_report.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/atomic_file.h"
#include "run/run_report.h"

/* "  12.34" or "      —" in a field of width w. */
static void qs_run_print_ms(FILE *f, double x, int w, int decimals) {
    if (isfinite(x)) fprintf(f, " %*.*f", w, decimals, x);
    else fprintf(f, " %*s", w, "-");
}

static void qs_run_print_plan(const qs_run_report *r, FILE *f) {
    const qs_run_config *c = r->c;
    const qs_plan_predictions *pred = r->has_plan ? &r->plan.predictions : NULL;
    if (c->plan_path)
        fprintf(f, "plan: given (%s)\n", c->plan_path);
    else
        fprintf(f, "plan: T = %.2f ms (the fastest type, %s, all %s)%s\n", pred ? pred->target_ms : NAN,
                pred ? pred->fastest_type : "", qs_run_arm_label(c, QS_ARM_BASE),
                pred && pred->target_met ? "" : "; not met: the fastest plans were taken");
    for (int i = 0; i < r->n_types; i++) {
        const qs_run_type_figures *t = &r->types[i];
        const qs_plan_section *s = t->section;
        fprintf(f, "  %s (%s", s->type, t->solver);
        if (isfinite(t->omega)) fprintf(f, ", sum omega %.4g", t->omega);
        fprintf(f, "):");
        for (int k = 0; k < t->n_at; k++) fprintf(f, " %s %d", qs_precision_name(t->at[k]), t->count[k]);
        fprintf(f, " of %d layers; %.0f%% above %s\n   ", s->n_layers, 100 * t->share_above_low,
                qs_precision_name(c->low_precision));
        for (int l = 0; l < s->n_layers; l++) fprintf(f, " %s=%s", s->layers[l].name, qs_precision_name(s->layers[l].prec));
        fprintf(f, "\n");
    }
}

/* The table of the arms: iteration, prediction, throughput, accuracy, final loss. */
static void qs_run_print_arms(const qs_run_report *r, FILE *f) {
    fprintf(f, "%-8s %12s %10s %7s %9s %9s %10s\n", "arm", "iteration ms", "predicted", "error", "images/s",
            "test acc", "train loss");
    for (int a = 0; a < QS_ARM_COUNT; a++) {
        if (!r->c->arms[a]) continue;
        const qs_run_arm_figures *x = &r->arm[a];
        fprintf(f, "%-8s", qs_run_arm_label(r->c, (qs_run_arm)a));
        qs_run_print_ms(f, x->synchronized_ms, 12, 2);
        qs_run_print_ms(f, x->predicted_ms, 10, 2);
        if (isfinite(x->prediction_error)) fprintf(f, " %+6.1f%%", 100 * x->prediction_error);
        else fprintf(f, " %7s", "-");
        qs_run_print_ms(f, x->mean_images_per_s, 9, 0);
        qs_run_print_ms(f, 100 * x->mean_test_accuracy, 8, 2);
        fprintf(f, "%%");
        qs_run_print_ms(f, x->mean_final_loss, 10, 4);
        fprintf(f, "\n");
    }
    fprintf(f, "(iteration: median step, slowest worker, median over seeds; predicted: the plan's replay, "
               "calibrated where measured)\n");
}

/* The comparisons against the base arm, and the qsync arm's workers against their predictions. */
static void qs_run_print_comparison(const qs_run_report *r, FILE *f) {
    const qs_run_config *c = r->c;
    const char *base = qs_run_arm_label(c, QS_ARM_BASE);
    fprintf(f, "gap closed, (T_%s - T_arm) / (T_%s - T_ideal):", base, base);
    for (int a = 0; a < QS_ARM_COUNT; a++) {
        if (a == QS_ARM_BASE || a == QS_ARM_IDEAL || !c->arms[a]) continue;
        const char *label = qs_run_arm_label(c, (qs_run_arm)a);
        if (isfinite(r->arm[a].gap_closure)) fprintf(f, "  %s %.2f", label, r->arm[a].gap_closure);
        else fprintf(f, "  %s - (needs the %s arm, and the ideal arm or --ideal-ms)", label, base);
    }
    fprintf(f, "\ntest accuracy minus %s's, paired by seed:", base);
    for (int a = 0; a < QS_ARM_COUNT; a++)
        if (a != QS_ARM_BASE && c->arms[a] && r->arm[a].paired)
            fprintf(f, "  %s %+.2f pp", qs_run_arm_label(c, (qs_run_arm)a), 100 * r->arm[a].accuracy_diff_mean);
    fprintf(f, "\nmean |loss - %s's loss| at the same steps:", base);
    for (int a = 0; a < QS_ARM_COUNT; a++)
        if (a != QS_ARM_BASE && c->arms[a] && r->arm[a].paired && isfinite(r->arm[a].curve_distance))
            fprintf(f, "  %s %.4f", qs_run_arm_label(c, (qs_run_arm)a), r->arm[a].curve_distance);
    if (r->has_spread)
        fprintf(f, "\n%s against itself, consecutive seeds (the scale of the differences above): mean |loss "
                   "difference| %.4f, |test accuracy difference| %.2f pp", base, r->spread_distance,
                100 * r->spread_accuracy);
    fprintf(f, "\nqsync arm per worker: predicted vs measured iteration, memory\n");
    for (int i = 0; i < r->n_workers; i++) {
        const qs_run_worker_prediction *x = &r->workers[i];
        fprintf(f, "  rank %d (%s): %.2f ms predicted, %.2f ms measured (%+.1f%%); %.1f MiB predicted, %.1f MiB measured\n",
                x->rank, x->type, x->predicted_ms, x->measured_ms, 100 * x->error, x->predicted_bytes / 1048576.0,
                x->measured_bytes / 1048576.0);
    }
}

void qs_run_report_print(const qs_run_report *r, FILE *f) {
    const qs_run_config *c = r->c;
    double steps = (double)c->train.steps;
    fprintf(f, "\nqsync run: %s on %s, cluster %s, global batch %.0f, ", c->train.model, c->train.data,
            c->cluster->origin, (double)c->train.batch);
    if (steps > 0) fprintf(f, "%.0f steps per run", steps);
    else fprintf(f, "%.0f epoch(s) per run", (double)(c->train.steps > 0 ? 0 : c->train.epochs));
    if (c->train.train_subset > 0) fprintf(f, " (first %.0f training samples)", (double)c->train.train_subset);
    fprintf(f, ", %.0f seed(s)\n", (double)c->seeds);
    qs_run_print_plan(r, f);
    qs_run_print_arms(r, f);
    qs_run_print_comparison(r, f);
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
