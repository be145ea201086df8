/* tests/backend_ops/runner.c — defines: the runner of the registry (bo.h): tensors declared by an
 * op's inputs, made on both sides, the op run on the reference and on the DUT, outputs judged
 * by the row's budget, the FP64 check of the CPU, the plan refusal of an unsupported precision,
 * and --perf timing (median of N after a warm-up; events where the backend has them). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "bo.h"
#include "gpu_harness.h"
#include "graph_helpers.h"

/* ------------------------------------------------------------------ declaring tensors */

/* Tensor i of c, counted into c->nt, reset to a zeroed record named name. */
static bo_tensor *tensor(bo_case *c, int i, const char *name) {
    assert_true(i >= 0 && i < BO_MAX_T);
    if (i >= c->nt) c->nt = i + 1;
    bo_tensor *t = &c->t[i];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->scale = -1.0;
    t->es = 1;
    return t;
}

void bo_in(bo_case *c, int i, const char *name, const void *host, size_t bytes) {
    bo_tensor *t = tensor(c, i, name);
    t->host = host;
    t->bytes = bytes;
}

void bo_out(bo_case *c, int i, const char *name, int64_t n, size_t es, bo_rule_kind rule, double K) {
    bo_tensor *t = tensor(c, i, name);
    t->bytes = (size_t)n * es;
    t->es = es;
    t->fill = POISON;
    t->out = true;
    t->rule = rule;
    t->K = K;
}

void bo_inout(bo_case *c, int i, const char *name, const void *host, int64_t n, size_t es, bo_rule_kind rule, double K) {
    bo_out(c, i, name, n, es, rule, K);
    c->t[i].host = host;
}

void bo_host_out(bo_case *c, int i, const char *name, int64_t n, size_t es, bo_rule_kind rule, double K) {
    bo_out(c, i, name, n, es, rule, K);
    c->t[i].host_mem = true;
}

void bo_none(bo_case *c, int i, const char *name) { tensor(c, i, name)->null = true; }

qs_precision bo_prec(const bo_case *c, const bo_side *s) { return s->idx ? c->prec : cpu_prec(c->prec); }
void bo_seed(const bo_case *c, const char *what, uint64_t i) { seed_with(c->op->seed_key, what, i); }

void *bo_at(const bo_case *c, const bo_side *s, int i) { return c->t[i].at[s->idx]; }

void *bo_quantized(bo_case *c, int i, const char *name, const float *x, int64_t rows, int64_t cols, qs_dtype dt,
                   const qs_sr *sr) {
    const size_t bytes = (size_t)(rows * cols) * qs_dtype_size(dt);
    void *data = halloc(bytes);
    float *scale = hf(1);
    ASSERT_OK(COPS->quantize(g_cpu, CST, rows, cols, x, NULL, dt, data, scale, false, sr, NULL, NULL));
    bo_in(c, i, name, data, bytes);
    if (dt == QS_S8 || dt == QS_F8E4M3 || dt == QS_F8E5M2) bo_in(c, i + 1, "scale", scale, 4);
    else bo_none(c, i + 1, "scale");
    return data;
}

float *bo_dequantized(const bo_case *c, int i, int64_t n, qs_dtype dt) {
    const qs_operand op = {c->t[i].at[0], dt, c->t[i + 1].null ? NULL : c->t[i + 1].at[0], false, NULL};
    float *out = hf(n);
    ASSERT_OK(COPS->dequantize(g_cpu, CST, 1, n, &op, out));
    return out;
}

/* ---------------------------------------------------------------------- judging */

const char *bo_what(const bo_case *c, const char *suffix) {
    static char buf[4][320];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "%s: %s", c->name, suffix);
    return b;
}

const void *bo_fetch(bo_case *c, bo_side *dut, int i) {
    const bo_tensor *t = &c->t[i];
    if (t->host_mem) return DUT_OK(DOPS->stream_sync(g_dut, DST)) ? t->at[dut->idx] : NULL;
    void *h = halloc(t->bytes);
    return dget(h, t->at[dut->idx], t->bytes, bo_what(c, t->name)) ? h : NULL;
}

bo_rule bo_tol(const bo_case *c, int i) { return (bo_rule){BO_TOL, c->t[i].K, c->t[i].scale}; }
bo_rule bo_exact(const bo_case *c, int i) {
    (void)c, (void)i;
    return (bo_rule){BO_EXACT, 0, 0};
}
bo_rule bo_bits(const bo_case *c, int i) {
    (void)c, (void)i;
    return (bo_rule){BO_BITS, 0, 0};
}

void bo_judge_outputs(bo_case *c, bo_side *ref, bo_side *dut) {
    for (int i = 0; i < c->nt; i++) {
        const bo_tensor *t = &c->t[i];
        if (!t->out || t->null || t->rule == BO_NOCMP) continue;
        const bo_rule r = t->rule == BO_ROW ? c->row->budget(c, i) : (bo_rule){t->rule, t->K, t->scale};
        const void *got = bo_fetch(c, dut, i);
        if (!got) continue;
        const void *want = t->at[ref->idx];
        const int64_t n = (int64_t)(t->bytes / t->es);
        const char *what = bo_what(c, t->name);
        switch (r.kind) {
        case BO_NMSE: check_nmse(what, got, want, n, r.value); break;
        case BO_TOL: check_tol(what, got, want, n, r.value, r.scale); break;
        case BO_EXACT: check_exact(what, got, want, n); break;
        case BO_BITS: check_bits(what, got, want, n, t->es, t->src); break;
        default: fail_msg("%s: output %s has no rule", c->name, t->name);
        }
    }
}

/* --------------------------------------------------------------------- a case */

void bo_row_name(const bo_row *r, qs_precision p, bool has_prec, char *buf, size_t n) {
    snprintf(buf, n, "%s%s%s%s%s", r->op->name, has_prec ? "_" : "", has_prec ? qs_precision_name(p) : "",
             r->variant ? "_" : "", r->variant ? r->variant : "");
}

/* The shapes of row r for the current DUT. */
static int row_shapes(const bo_row *r, const int64_t (**shapes)[BO_V]) {
    const bool cpu = !gh_dut_is_cuda();
    *shapes = cpu && r->cpu_shapes ? r->cpu_shapes : r->shapes;
    return cpu && r->cpu_shapes ? r->ncpu : r->nshapes;
}

/* Case `shape` of row r at p: its name, before any input exists. */
static void case_init(bo_case *c, const bo_row *r, qs_precision p, int shape) {
    const int64_t(*shapes)[BO_V];
    row_shapes(r, &shapes);
    memset(c, 0, sizeof *c);
    c->row = r;
    c->op = r->op;
    c->prec = r->precs ? p : QS_PREC_FP32;
    c->v = shapes[shape];
    c->shape = shape;
    c->dut_cpu = !gh_dut_is_cuda();
    char sh[120] = "";
    if (c->op->describe) c->op->describe(c, sh, sizeof sh);
    snprintf(c->name, sizeof c->name, "%s%s%s %s%s%s", c->op->name, r->precs ? " " : "",
             r->precs ? qs_precision_name(p) : "", sh, r->variant ? " " : "", r->variant ? r->variant : "");
}

static bool matches(const bo_case *c, const char *filter) { return !filter || strstr(c->name, filter) != NULL; }

bool bo_row_matches(const bo_row *r, qs_precision p, const char *filter) {
    const int64_t(*shapes)[BO_V];
    const int ns = row_shapes(r, &shapes);
    bo_case c;
    for (int i = 0; i < ns; i++) {
        case_init(&c, r, p, i);
        if (matches(&c, filter)) return true;
    }
    return false;
}

/* Whether both backends' tables have every entry the op calls (else a failed case each, naming
 * the entry and the table that lacks it). */
static bool have_entries(const bo_case *c) {
    bool ok = true;
    for (int k = 0; k < 6 && c->op->need[k].name; k++) {
        const size_t off = c->op->need[k].off;
        void *cf, *df;
        memcpy(&cf, (const char *)COPS + off, sizeof cf);
        memcpy(&df, (const char *)DOPS + off, sizeof df);
        if (cf && df) continue;
        char what[320], detail[200];
        snprintf(what, sizeof what, "%s: ops table has %s", c->name, c->op->need[k].name);
        snprintf(detail, sizeof detail, "%s%s%s entry is NULL: nothing to compare (register it in that backend's table)",
                 cf ? "" : "the CPU backend's", !cf && !df ? " and " : "", df ? "" : "the DUT's");
        check_fact(what, false, detail);
        ok = false;
    }
    return ok;
}

/* Plans of side s (and their workspaces); a DUT precision the backend does not run must be
 * refused by the plan: QS_ERR_UNSUPPORTED naming the precision, no plan. Returns whether the
 * case goes on. */
static bool make_plans(bo_case *c, bo_side *s) {
    if (!c->op->plan) return true;
    const bool refuse = s->idx == 1 && c->row->precs &&
                        DOPS->precision_support(g_dut, c->prec) == QS_PREC_UNSUPPORTED;
    qs_error_clear();
    const qs_status st = c->op->plan(c, s);
    if (refuse) {
        const bool none = !s->plan[0] && !s->plan[1] && !s->plan[2];
        char detail[400];
        snprintf(detail, sizeof detail, "%s: %s", qs_status_name(st), st == QS_OK ? "plan created" : qs_last_error());
        check_fact(bo_what(c, "unsupported here: the plan refuses naming the precision"),
                   st == QS_ERR_UNSUPPORTED && none && strstr(qs_last_error(), qs_precision_name(c->prec)), detail);
        qs_error_clear();
        return false;
    }
    if (!dut_ok_(st, bo_what(c, s->idx ? "plan" : "reference plan"))) return false;
    for (int i = 0; i < BO_MAX_PLANS; i++)
        if (s->wsb[i]) s->ws[i] = s->idx ? dalloc(s->wsb[i], POISON) : halloc(s->wsb[i]);
    return true;
}

/* Destroy the plans of side s. */
static void drop_plans(bo_side *s) {
    for (int i = 0; i < BO_MAX_PLANS; i++)
        if (s->plan[i]) s->be->ops->plan_destroy(s->be, s->plan[i]);
    memset(s->plan, 0, sizeof s->plan);
}

/* Every tensor of c on side s. */
static void make_tensors(bo_case *c, bo_side *s) {
    for (int i = 0; i < c->nt; i++) {
        bo_tensor *t = &c->t[i];
        if (t->null || !t->name) continue; /* absent, or a slot the op leaves unused */
        if (s->idx == 0 || t->host_mem) {
            t->at[s->idx] = halloc(t->bytes);
            if (t->host) memcpy(t->at[s->idx], t->host, t->bytes);
            else memset(t->at[s->idx], t->fill, t->bytes);
        } else {
            t->at[1] = t->host ? dup_dev(t->host, t->bytes) : dalloc(t->bytes, t->fill);
        }
    }
}

/* One case on the current DUT: inputs, plans, both sides, the judgement, the FP64 check. */
static void run_case(bo_case *c) {
    if (!have_entries(c)) return;
    mark m = mark_now();
    (c->row->inputs ? c->row->inputs : c->op->inputs)(c);
    bo_side ref = {.be = g_cpu, .st = CST, .idx = 0}, dut = {.be = g_dut, .st = DST, .idx = 1};
    const bool ref_runs = !c->op->dut_only;
    if ((!ref_runs || make_plans(c, &ref)) && make_plans(c, &dut)) {
        if (ref_runs) make_tensors(c, &ref);
        make_tensors(c, &dut);
        bool ok = !ref_runs || dut_ok_(c->op->exec(c, &ref), bo_what(c, "the reference"));
        ok = ok && dut_ok_(c->op->exec(c, &dut), c->name);
        if (ok) (c->op->judge ? c->op->judge : bo_judge_outputs)(c, &ref, &dut);
        if (ok && ref_runs && c->dut_cpu && c->row->fp64) c->row->fp64(c);
    }
    (void)DOPS->stream_sync(g_dut, DST);
    drop_plans(&ref);
    drop_plans(&dut);
    release_to(m);
}

void bo_run_row(const bo_row *r, qs_precision p, const char *filter) {
    const int64_t(*shapes)[BO_V];
    const int ns = row_shapes(r, &shapes);
    static bo_case c; /* large: not on the stack */
    for (int i = 0; i < ns; i++) {
        case_init(&c, r, p, i);
        if (matches(&c, filter)) run_case(&c);
    }
}

/* ------------------------------------------------------------------------- --perf */

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* One exec of c on s, timed: between two events where the backend has them, else wall-clock
 * around the call and a stream_sync. Returns ms, or -1 when the op fails. */
static double time_exec(bo_case *c, bo_side *s, void *ev0, void *ev1) {
    if (ev0) {
        float ms = 0;
        if (DOPS->event_record(g_dut, s->st, ev0) != QS_OK || c->op->exec(c, s) != QS_OK ||
            DOPS->event_record(g_dut, s->st, ev1) != QS_OK || DOPS->stream_sync(g_dut, s->st) != QS_OK ||
            DOPS->event_elapsed_ms(g_dut, ev0, ev1, &ms) != QS_OK)
            return -1;
        return ms;
    }
    const double t0 = now_ms();
    if (c->op->exec(c, s) != QS_OK || DOPS->stream_sync(g_dut, s->st) != QS_OK) return -1;
    return now_ms() - t0;
}

/* The median time of reps execs of c on the DUT after one warm-up, and its line. */
static void perf_case(bo_case *c, int reps) {
    if (!have_entries(c)) return;
    mark m = mark_now();
    (c->row->inputs ? c->row->inputs : c->op->inputs)(c);
    bo_side dut = {.be = g_dut, .st = DST, .idx = 1};
    if (c->op->plan && c->row->precs && DOPS->precision_support(g_dut, c->prec) == QS_PREC_UNSUPPORTED) {
        printf("%-64s %-5s unsupported\n", c->name, DOPS->name);
        release_to(m);
        return;
    }
    void *ev0 = NULL, *ev1 = NULL;
    if (DOPS->event_create && (DOPS->event_create(g_dut, &ev0) != QS_OK || DOPS->event_create(g_dut, &ev1) != QS_OK))
        ev0 = ev1 = NULL;
    double *ms = calloc((size_t)reps, sizeof *ms);
    assert_non_null(ms);
    bool ok = make_plans(c, &dut);
    if (ok) make_tensors(c, &dut);
    ok = ok && time_exec(c, &dut, ev0, ev1) >= 0; /* warm-up */
    for (int i = 0; ok && i < reps; i++) ok = (ms[i] = time_exec(c, &dut, ev0, ev1)) >= 0;
    if (ok) {
        qsort(ms, (size_t)reps, sizeof *ms, cmp_double);
        const double med = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
        double bytes = 0;
        for (int i = 0; i < c->nt; i++) bytes += c->t[i].null || !c->t[i].name ? 0 : (double)c->t[i].bytes;
        const double flops = c->op->flops ? c->op->flops(c) : 0;
        if (flops > 0) printf("%-64s %-5s %10.4f ms %9.3f TFLOP/s\n", c->name, DOPS->name, med, flops / med * 1e-9);
        else printf("%-64s %-5s %10.4f ms %9.2f GB/s\n", c->name, DOPS->name, med, bytes / med * 1e-6);
    } else {
        printf("%-64s %-5s FAILED: %s\n", c->name, DOPS->name, qs_last_error());
        g_fail++;
    }
    free(ms);
    if (ev0) DOPS->event_destroy(g_dut, ev0);
    if (ev1) DOPS->event_destroy(g_dut, ev1);
    qs_error_clear();
    (void)DOPS->stream_sync(g_dut, DST);
    drop_plans(&dut);
    release_to(m);
}

void bo_perf_row(const bo_row *r, qs_precision p, const char *filter, int reps) {
    const int64_t(*shapes)[BO_V];
    const int ns = row_shapes(r, &shapes);
    static bo_case c;
    for (int i = 0; i < ns; i++) {
        case_init(&c, r, p, i);
        if (matches(&c, filter)) perf_case(&c, reps);
    }
}
