/* tests/support/gpu_harness.c — the harness of the CUDA-vs-CPU op suites (gpu_harness.h). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "check.h"
#include "gpu_harness.h"
#include "graph_helpers.h"
#include "backends/backends.h"

/* ================================================================== state and bookkeeping */

qs_backend *g_cpu, *g_gpu;
const char *g_test = "";
char g_test_buf[64];
int g_fail;
qs_rng g_rng;

static gh_suite g_suite;      /* set by gh_start */
static size_t g_gpu_baseline; /* memory_stats in_use after the previous test's teardown */
static FILE *g_json;
static int g_json_n;

int gh_start(const gh_suite *suite) {
    g_suite = *suite;
    const char *name = g_suite.name;
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *dev_env = getenv("QS_CUDA_DEVICE"), *req_env = getenv("QS_REQUIRE_GPU");
    const int device = dev_env ? atoi(dev_env) : 0;
    const bool require = req_env && *req_env && strcmp(req_env, "0") != 0;
    qs_status st = qs_backend_cuda_create(device, &g_gpu);
    if (st != QS_OK) {
        printf("%s: no CUDA backend on device %d (%s: %s)\n", name, device, qs_status_name(st), qs_last_error());
        if (st != QS_ERR_UNSUPPORTED && st != QS_ERR_BACKEND) return 1; /* creation itself is broken */
        if (require) {
            printf("%s: QS_REQUIRE_GPU is set, so this is a failure, not a skip\n", name);
            return 1;
        }
        printf("%s: SKIPPED (needs a CUDA build and a GPU)\n", name);
        return 77;
    }
    if (qs_backend_cpu_create(1, &g_cpu) != QS_OK) {
        printf("%s: cannot create the CPU backend (the reference): %s\n", name, qs_last_error());
        g_gpu->ops->destroy(g_gpu);
        return 1;
    }
    g_gpu->ops->memory_stats(g_gpu, &g_gpu_baseline, NULL);
    const char *json = getenv("QS_GPU_TESTS_JSON");
    if (json && *json) {
        g_json = fopen(json, "w");
        if (!g_json) printf("%s: cannot write %s; continuing without JSON\n", name, json);
        else fprintf(g_json, "{\"suite\": \"%s\", \"device\": %d, \"cases\": [", name, device);
    }
    printf("%s: CUDA device %d; CPU reference backend with 1 thread\n", name, device);
    return 0;
}

int gh_finish(int failed) {
    if (g_json) {
        fprintf(g_json, "\n], \"failed_tests\": %d}\n", failed);
        fclose(g_json);
        g_json = NULL;
    }
    g_cpu->ops->destroy(g_cpu);
    g_gpu->ops->destroy(g_gpu);
    g_cpu = g_gpu = NULL;
    return failed ? 1 : 0;
}

void json_case(const char *what, const char *metric, double value, double limit, bool pass) {
    if (!g_json) return;
    fprintf(g_json, "%s\n  {\"test\": \"", g_json_n++ ? "," : "");
    for (const char *p = g_test; *p; p++) fputc(*p, g_json);
    fprintf(g_json, "\", \"case\": \"");
    for (const char *p = what; *p; p++) {
        if (*p == '"' || *p == '\\') fputc('\\', g_json);
        fputc((unsigned char)*p < 0x20 ? ' ' : *p, g_json);
    }
    /* JSON has no NaN/Inf: non-finite figures are written as null */
    fprintf(g_json, "\", \"metric\": \"%s\", \"value\": ", metric);
    if (isfinite(value)) fprintf(g_json, "%.6e", value); else fprintf(g_json, "null");
    fprintf(g_json, ", \"limit\": ");
    if (isfinite(limit)) fprintf(g_json, "%.6e", limit); else fprintf(g_json, "null");
    fprintf(g_json, ", \"pass\": %s}", pass ? "true" : "false");
    fflush(g_json);
}

bool gpu_ok_(qs_status st, const char *expr) {
    if (st == QS_OK) return true;
    printf("  FAIL %s -> %s: %s\n", expr, qs_status_name(st), qs_last_error());
    fflush(stdout);
    json_case(expr, "status", (double)st, 0.0, false);
    g_fail++;
    return false;
}

bool check_fact(const char *what, bool pass, const char *detail) {
    printf("  %-4s %-*s %s\n", pass ? "ok" : "FAIL", g_suite.name_width, what, detail);
    fflush(stdout);
    json_case(what, "fact", pass ? 1.0 : 0.0, 1.0, pass);
    if (!pass) g_fail++;
    return pass;
}

/* ---- host memory: zeroed, 64-byte aligned like the CPU backend's, freed by the teardown ---- */
#define MAX_HOST 8192
static void *g_host[MAX_HOST];
static int g_nhost;

void *halloc(size_t bytes) {
    size_t rounded = (bytes + 63) / 64 * 64;
    if (!rounded) rounded = 64;
    void *p = aligned_alloc(64, rounded);
    assert_non_null(p);
    memset(p, 0, rounded);
    assert_true(g_nhost < MAX_HOST);
    g_host[g_nhost++] = p;
    return p;
}
float *hf(int64_t n) { return halloc((size_t)n * sizeof(float)); }
float *hcopy(const float *x, int64_t n) {
    float *p = hf(n);
    if (n) memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}

/* ---- GPU memory: views with guard bytes ---- */
typedef struct dbuf {
    unsigned char *base; /* from GOPS->alloc: GUARD + bytes + GUARD */
    size_t bytes;        /* size of the view at base + GUARD */
} dbuf;
#define MAX_DEV 1024
static dbuf g_dev[MAX_DEV];
static int g_ndev;

void *dalloc(size_t bytes, int fill) {
    assert_true(g_ndev < MAX_DEV);
    void *base = NULL;
    const size_t total = bytes + 2 * GUARD;
    ASSERT_OK(GOPS->alloc(g_gpu, total, &base));
    assert_non_null(base);
    g_dev[g_ndev++] = (dbuf){base, bytes};
    if (g_suite.check_alignment && ((uintptr_t)base % 256) != 0)
        fail_msg("GPU alloc returned %p: not 256-byte aligned", base);
    unsigned char *stage = halloc(total);
    memset(stage, GUARD_BYTE, total);
    memset(stage + GUARD, fill, bytes);
    ASSERT_OK(GOPS->copy_h2d(g_gpu, GST, base, stage, total));
    ASSERT_OK(GOPS->stream_sync(g_gpu, GST));
    return (unsigned char *)base + GUARD;
}
float *dalloc_f(int64_t n) { return dalloc((size_t)n * sizeof(float), POISON); }
void *dup_gpu(const void *host, size_t bytes) {
    void *d = dalloc(bytes, 0);
    if (bytes) ASSERT_OK(GOPS->copy_h2d(g_gpu, GST, d, host, bytes));
    ASSERT_OK(GOPS->stream_sync(g_gpu, GST));
    return d;
}
float *dup_gpu_f(const float *x, int64_t n) { return dup_gpu(x, (size_t)n * sizeof(float)); }

/* The record of GPU view `view`, NULL when it is not one of ours. */
static const dbuf *dfind(const void *view) {
    for (int i = 0; i < g_ndev; i++)
        if (g_dev[i].base + GUARD == (const unsigned char *)view) return &g_dev[i];
    return NULL;
}

/* Whether both guards of b still hold GUARD_BYTE (prints the first damaged byte otherwise).
 * Does not assert, so the teardown can use it. */
static bool guards_intact(const dbuf *b, const char *what) {
    unsigned char g[2][GUARD];
    if (GOPS->copy_d2h(g_gpu, GST, g[0], b->base, GUARD) != QS_OK ||
        GOPS->copy_d2h(g_gpu, GST, g[1], b->base + GUARD + b->bytes, GUARD) != QS_OK ||
        GOPS->stream_sync(g_gpu, GST) != QS_OK) {
        printf("  FAIL %s: cannot read the guard bytes back: %s\n", what, qs_last_error());
        return false;
    }
    for (int side = 0; side < 2; side++)
        for (int i = 0; i < GUARD; i++)
            if (g[side][i] != GUARD_BYTE) {
                printf("  FAIL %s: guard byte %s the %zu-byte view overwritten (offset %d %s it: 0x%02x)\n", what,
                       side ? "after" : "before", b->bytes, side ? i : GUARD - i, side ? "past" : "before",
                       g[side][i]);
                return false;
            }
    return true;
}

bool dget(void *host, const void *dev, size_t bytes, const char *what) {
    char ctx[256];
    snprintf(ctx, sizeof ctx, "stream_sync after: %s", what);
    if (!gpu_ok_(GOPS->stream_sync(g_gpu, GST), ctx)) return false;
    const dbuf *b = dfind(dev);
    assert_non_null(b);
    assert_true(bytes <= b->bytes);
    snprintf(ctx, sizeof ctx, "copy_d2h of: %s", what);
    if (bytes && !gpu_ok_(GOPS->copy_d2h(g_gpu, GST, host, dev, bytes), ctx)) return false;
    if (!gpu_ok_(GOPS->stream_sync(g_gpu, GST), ctx)) return false;
    if (!guards_intact(b, what)) {
        json_case(what, "guard", 1.0, 0.0, false);
        g_fail++;
    }
    return true;
}

mark mark_now(void) { return (mark){g_ndev, g_nhost}; }
void release_to(mark m) {
    (void)GPU_OK(GOPS->stream_sync(g_gpu, GST));
    for (int i = m.ndev; i < g_ndev; i++) {
        if (!guards_intact(&g_dev[i], "guard check at release")) {
            json_case("guard check at release", "guard", 1.0, 0.0, false);
            g_fail++;
        }
        GOPS->free(g_gpu, g_dev[i].base);
    }
    for (int i = m.nhost; i < g_nhost; i++) free(g_host[i]);
    g_ndev = m.ndev;
    g_nhost = m.nhost;
}

/* ---- plans ---- */
typedef struct tplan {
    qs_backend *be;
    void *plan;
} tplan;
#define MAX_PLANS 64
static tplan g_plans[MAX_PLANS];
static int g_nplans;

void keep_plan(qs_backend *be, void *plan) {
    assert_true(g_nplans < MAX_PLANS);
    if (plan) g_plans[g_nplans++] = (tplan){be, plan};
}

/* The backend's in_use is compared with its value after the previous test and a difference is
 * reported as a note only (a backend may keep lazily created resources, counted or not); the
 * suites' plan-lifetime tests check strictly that plans give back what they take. */
int teardown(void **state) {
    int bad = 0;
    if (GOPS->stream_sync(g_gpu, GST) != QS_OK) {
        printf("  FAIL %s: stream_sync at teardown: %s\n", g_test, qs_last_error());
        bad = 1;
    }
    for (int i = 0; i < g_ndev; i++)
        if (!guards_intact(&g_dev[i], "teardown guard check")) bad = 1;
    for (int i = 0; i < g_nplans; i++) g_plans[i].be->ops->plan_destroy(g_plans[i].be, g_plans[i].plan);
    for (int i = 0; i < g_ndev; i++) GOPS->free(g_gpu, g_dev[i].base);
    for (int i = 0; i < g_nhost; i++) free(g_host[i]);
    g_nplans = g_ndev = g_nhost = 0;
    size_t in_use = 0;
    GOPS->memory_stats(g_gpu, &in_use, NULL);
    if (in_use != g_gpu_baseline) {
        printf("  note %s: GPU memory_stats in_use %zu after freeing every test buffer and plan (was %zu)\n", g_test,
               in_use, g_gpu_baseline);
        g_gpu_baseline = in_use;
    }
    fflush(stdout);
    return bad ? -1 : 0;
}

/* ---- random inputs ---- */
void seed(const char *what, uint64_t i) { qs_rng_init(&g_rng, qs_rng_key(g_suite.seed_key, what, i), 0); }
float *rnd(int64_t n, float lo, float hi) {
    float *p = hf(n);
    for (int64_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * qs_rng_uniform(&g_rng);
    return p;
}

/* ============================================================================ comparisons */

/* Same kind of non-finite value (NaN, +Inf, -Inf). */
static bool same_nonfinite(float a, float b) { return (isnan(a) && isnan(b)) || (isinf(a) && a == b); }

bool check_nmse(const char *what, const float *got, const float *ref, int64_t n, double budget) {
    double se = 0, sr = 0;
    int64_t bad_nf = 0, first_nf = -1;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(ref[i]) || !isfinite(got[i])) {
            if (!same_nonfinite(got[i], ref[i])) {
                if (first_nf < 0) first_nf = i;
                bad_nf++;
            }
            continue;
        }
        double e = (double)got[i] - ref[i];
        se += e * e;
        sr += (double)ref[i] * ref[i];
    }
    double nmse = sr > 0 ? se / sr : (se > 0 ? INFINITY : 0.0);
    bool pass = bad_nf == 0 && nmse <= budget;
    printf("  %-4s %-*s nmse %9.3e  budget %9.3e (%6.2f%%)", pass ? "ok" : "FAIL", g_suite.name_width, what, nmse,
           budget, 100.0 * nmse / budget);
    if (bad_nf)
        printf(" — %lld non-finite mismatches (first [%lld]: gpu %g cpu %g)", (long long)bad_nf, (long long)first_nf,
               (double)got[first_nf], (double)ref[first_nf]);
    printf("\n");
    fflush(stdout);
    json_case(what, "nmse", bad_nf ? INFINITY : nmse, budget, pass);
    if (!pass) g_fail++;
    return pass;
}

bool check_tol(const char *what, const float *got, const float *ref, int64_t n, double Kr, double scale) {
    double rtol = 0, atol = 0;
    if (Kr > 0) {
        qs_tol t = qs_tol_fp32(4.0 * Kr, scale < 0 ? qs_max_abs(ref, n) : scale);
        rtol = t.rtol;
        atol = t.atol;
    }
    double se = 0, sr = 0, worst = 0;
    int64_t nbad = 0, wi = -1, first_bad = -1;
    for (int64_t i = 0; i < n; i++) {
        double frac;
        if (!isfinite(ref[i]) || !isfinite(got[i])) {
            frac = same_nonfinite(got[i], ref[i]) ? 0.0 : INFINITY;
        } else {
            double e = fabs((double)got[i] - ref[i]), lim = atol + rtol * fabs(ref[i]);
            se += e * e;
            sr += (double)ref[i] * ref[i];
            frac = lim > 0 ? e / lim : (e > 0 ? INFINITY : 0.0);
        }
        if (wi < 0 || frac > worst) worst = frac, wi = i;
        if (frac > 1.0) {
            if (first_bad < 0) first_bad = i;
            nbad++;
        }
    }
    double nmse = sr > 0 ? se / sr : (se > 0 ? INFINITY : 0.0);
    bool pass = nbad == 0;
    if (Kr > 0)
        printf("  %-4s %-*s nmse %9.3e  rtol %.2e atol %.2e  worst %6.2f%%", pass ? "ok" : "FAIL", g_suite.name_width,
               what, nmse, rtol, atol, 100.0 * worst);
    else
        printf("  %-4s %-*s exact (n=%lld)", pass ? "ok" : "FAIL", g_suite.name_width, what, (long long)n);
    if (nbad)
        printf(" — %lld elements off (first [%lld]: gpu %.9g cpu %.9g)", (long long)nbad, (long long)first_bad,
               (double)got[first_bad], (double)ref[first_bad]);
    printf("\n");
    fflush(stdout);
    json_case(what, Kr > 0 ? "max_err_fraction_of_tol" : "exact_mismatches", Kr > 0 ? worst : (double)nbad,
              Kr > 0 ? 1.0 : 0.0, pass);
    if (!pass) g_fail++;
    return pass;
}

void cmp_tol(const char *what, const float *dev, const float *ref, int64_t n, double Kr, double scale) {
    float *h = hf(n);
    if (dget(h, dev, (size_t)n * 4, what)) check_tol(what, h, ref, n, Kr, scale);
}

/* ========================================================================== GEMM operands */

qmat quant_both(const float *x, int64_t rows, int64_t cols, qs_dtype dt, const qs_sr *sr) {
    qmat q;
    const size_t bytes = (size_t)(rows * cols) * qs_dtype_size(dt);
    void *data = halloc(bytes);
    float *scale = hf(1);
    const bool scaled = dt == QS_S8 || dt == QS_F8E4M3 || dt == QS_F8E5M2;
    ASSERT_OK(COPS->quantize(g_cpu, CST, rows, cols, x, NULL, dt, data, scale, false, sr, NULL, NULL));
    q.cpu = (qs_operand){data, dt, scaled ? scale : NULL, false, NULL};
    q.gpu = (qs_operand){dup_gpu(data, bytes), dt, scaled ? dup_gpu_f(scale, 1) : NULL, false, NULL};
    return q;
}

qs_precision cpu_prec(qs_precision p) { return p == QS_PREC_TF32 ? QS_PREC_FP32 : p; }
