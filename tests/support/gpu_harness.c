/* tests/support/gpu_harness.c — defines: the harness of the suites that compare a backend under
 * test with the CPU reference op by op (gpu_harness.h). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bits.h"
#include "check.h"
#include "gpu_harness.h"
#include "graph_helpers.h"
#include "backends/backends.h"

/* ================================================================== state and bookkeeping */

qs_backend *g_cpu, *g_dut;
const char *g_test = "";
char g_test_buf[200];
int g_fail;
qs_rng g_rng;

static gh_suite g_suite;      /* set by gh_start / gh_open */
static size_t g_dut_baseline; /* memory_stats in_use after the previous test's teardown */
static FILE *g_json;
static int g_json_n;
static qs_backend *g_owned[2]; /* the DUTs gh_finish destroys */
static int g_nowned;

/* Whether QS_REQUIRE_GPU is set (to anything but "0"). */
static bool gpu_required(void) {
    const char *req = getenv("QS_REQUIRE_GPU");
    return req && *req && strcmp(req, "0") != 0;
}

/* The CUDA backend on QS_CUDA_DEVICE into *out (NULL when absent, with the reason printed);
 * returns 0, or the exit code when its absence is a failure (creation broken, or required). */
static int open_cuda(const char *name, int *device, qs_backend **out) {
    const char *dev_env = getenv("QS_CUDA_DEVICE");
    *device = dev_env ? atoi(dev_env) : 0;
    *out = NULL;
    qs_status st = qs_backend_cuda_create(*device, out);
    if (st == QS_OK) return 0;
    *out = NULL;
    printf("%s: no CUDA backend on device %d (%s: %s)\n", name, *device, qs_status_name(st), qs_last_error());
    if (st != QS_ERR_UNSUPPORTED && st != QS_ERR_BACKEND) return 1; /* creation itself is broken */
    if (gpu_required()) {
        printf("%s: QS_REQUIRE_GPU is set, so this is a failure, not a skip\n", name);
        return 1;
    }
    return 0;
}

/* The CPU reference (1 thread) and the JSON file; returns 0 or the exit code. */
static int open_reference(const char *name, int device) {
    if (qs_backend_cpu_create(1, &g_cpu) != QS_OK) {
        printf("%s: cannot create the CPU backend (the reference): %s\n", name, qs_last_error());
        return 1;
    }
    const char *json = getenv("QS_GPU_TESTS_JSON");
    if (json && *json) {
        g_json = fopen(json, "w");
        if (!g_json) printf("%s: cannot write %s; continuing without JSON\n", name, json);
        else fprintf(g_json, "{\"suite\": \"%s\", \"device\": %d, \"cases\": [", name, device); /* } in gh_finish */
    }
    return 0;
}

int gh_start(const gh_suite *suite) {
    g_suite = *suite;
    const char *name = g_suite.name;
    setvbuf(stdout, NULL, _IOLBF, 0);
    int device = 0;
    qs_backend *cuda = NULL;
    const int rc = open_cuda(name, &device, &cuda);
    if (rc) return rc;
    if (!cuda) {
        printf("%s: SKIPPED (needs a CUDA build and a GPU)\n", name);
        return 77;
    }
    g_owned[g_nowned++] = cuda;
    if (open_reference(name, device)) {
        cuda->ops->destroy(cuda);
        g_nowned = 0;
        return 1;
    }
    gh_use(cuda);
    printf("%s: CUDA device %d; CPU reference backend with 1 thread\n", name, device);
    return 0;
}

int gh_open(const gh_suite *suite, const char *only, qs_backend **duts, int *ndut) {
    g_suite = *suite;
    const char *name = g_suite.name;
    setvbuf(stdout, NULL, _IOLBF, 0);
    *ndut = 0;
    int device = 0;
    qs_backend *cuda = NULL, *cpu = NULL;
    const bool want_cuda = !only || strcmp(only, "cuda") == 0, want_cpu = !only || strcmp(only, "cpu") == 0;
    if (!want_cuda && !want_cpu) {
        printf("%s: unknown backend '%s' (cuda or cpu)\n", name, only);
        return 2;
    }
    if (want_cuda) {
        const int rc = open_cuda(name, &device, &cuda);
        if (rc) return rc;
        if (cuda) duts[(*ndut)++] = g_owned[g_nowned++] = cuda;
        else printf("%s: the CUDA backend is absent: its rows do not run here\n", name);
    }
    if (want_cpu) {
        if (qs_backend_cpu_create(1, &cpu) != QS_OK) {
            printf("%s: cannot create the CPU backend under test: %s\n", name, qs_last_error());
            return 1;
        }
        duts[(*ndut)++] = g_owned[g_nowned++] = cpu;
    }
    if (open_reference(name, device)) return 1;
    printf("%s: backends under test:", name);
    if (cuda) printf(" cuda (device %d)", device);
    if (cpu) printf(" cpu (1 thread)");
    printf("; CPU reference backend with 1 thread\n");
    return 0;
}

void gh_use(qs_backend *dut) {
    g_dut = dut;
    g_dut->ops->memory_stats(g_dut, &g_dut_baseline, NULL);
}

bool gh_dut_is_cuda(void) { return g_dut && strcmp(g_dut->ops->name, "cuda") == 0; }
size_t gh_alignment(const qs_backend *be) { return strcmp(be->ops->name, "cuda") == 0 ? 256 : 64; }

int gh_finish(int failed) {
    if (g_json) {
        fprintf(g_json, "\n], \"failed_tests\": %d}\n", failed); /* { in open_reference */
        fclose(g_json);
        g_json = NULL;
    }
    if (g_cpu) g_cpu->ops->destroy(g_cpu);
    for (int i = 0; i < g_nowned; i++) g_owned[i]->ops->destroy(g_owned[i]);
    g_cpu = g_dut = NULL;
    g_nowned = 0;
    return failed ? 1 : 0;
}

void json_case(const char *what, const char *metric, double value, double limit, bool pass) {
    if (!g_json) return;
    fprintf(g_json, "%s\n  {\"backend\": \"%s\", \"test\": \"", g_json_n++ ? "," : "", g_dut ? DOPS->name : "");
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

bool dut_ok_(qs_status st, const char *expr) {
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

bool check_figure(const char *what, const char *metric, double value, double limit, bool pass, const char *detail) {
    printf("  %-4s %-*s %s\n", pass ? "ok" : "FAIL", g_suite.name_width, what, detail);
    fflush(stdout);
    json_case(what, metric, value, limit, pass);
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

/* ---- DUT memory: views with guard bytes ---- */
typedef struct dbuf {
    unsigned char *base; /* from DOPS->alloc: GUARD + bytes + GUARD */
    size_t bytes;        /* size of the view at base + GUARD */
} dbuf;
#define MAX_DEV 1024
static dbuf g_dev[MAX_DEV];
static int g_ndev;

void *dalloc(size_t bytes, int fill) {
    assert_true(g_ndev < MAX_DEV);
    void *base = NULL;
    const size_t total = bytes + 2 * GUARD;
    ASSERT_OK(DOPS->alloc(g_dut, total, &base));
    assert_non_null(base);
    g_dev[g_ndev++] = (dbuf){base, bytes};
    if (((uintptr_t)base % gh_alignment(g_dut)) != 0)
        fail_msg("%s alloc returned %p: not %zu-byte aligned", DOPS->name, base, gh_alignment(g_dut));
    unsigned char *stage = halloc(total);
    memset(stage, GUARD_BYTE, total);
    memset(stage + GUARD, fill, bytes);
    ASSERT_OK(DOPS->copy_h2d(g_dut, DST, base, stage, total));
    ASSERT_OK(DOPS->stream_sync(g_dut, DST));
    return (unsigned char *)base + GUARD;
}
float *dalloc_f(int64_t n) { return dalloc((size_t)n * sizeof(float), POISON); }
void *dup_dev(const void *host, size_t bytes) {
    void *d = dalloc(bytes, 0);
    if (bytes) ASSERT_OK(DOPS->copy_h2d(g_dut, DST, d, host, bytes));
    ASSERT_OK(DOPS->stream_sync(g_dut, DST));
    return d;
}
float *dup_dev_f(const float *x, int64_t n) { return dup_dev(x, (size_t)n * sizeof(float)); }

/* The record of DUT view `view`, NULL when it is not one of ours. */
static const dbuf *dfind(const void *view) {
    for (int i = 0; i < g_ndev; i++)
        if (g_dev[i].base + GUARD == (const unsigned char *)view) return &g_dev[i];
    return NULL;
}

/* Whether both guards of b still hold GUARD_BYTE (prints the first damaged byte otherwise).
 * Does not assert, so the teardown can use it. */
static bool guards_intact(const dbuf *b, const char *what) {
    unsigned char g[2][GUARD];
    if (DOPS->copy_d2h(g_dut, DST, g[0], b->base, GUARD) != QS_OK ||
        DOPS->copy_d2h(g_dut, DST, g[1], b->base + GUARD + b->bytes, GUARD) != QS_OK ||
        DOPS->stream_sync(g_dut, DST) != QS_OK) {
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
    if (!dut_ok_(DOPS->stream_sync(g_dut, DST), ctx)) return false;
    const dbuf *b = dfind(dev);
    assert_non_null(b);
    assert_true(bytes <= b->bytes);
    snprintf(ctx, sizeof ctx, "copy_d2h of: %s", what);
    if (bytes && !dut_ok_(DOPS->copy_d2h(g_dut, DST, host, dev, bytes), ctx)) return false;
    if (!dut_ok_(DOPS->stream_sync(g_dut, DST), ctx)) return false;
    if (!guards_intact(b, what)) {
        json_case(what, "guard", 1.0, 0.0, false);
        g_fail++;
    }
    return true;
}

mark mark_now(void) { return (mark){g_ndev, g_nhost}; }
void release_to(mark m) {
    (void)DUT_OK(DOPS->stream_sync(g_dut, DST));
    for (int i = m.ndev; i < g_ndev; i++) {
        if (!guards_intact(&g_dev[i], "guard check at release")) {
            json_case("guard check at release", "guard", 1.0, 0.0, false);
            g_fail++;
        }
        DOPS->free(g_dut, g_dev[i].base);
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
    if (DOPS->stream_sync(g_dut, DST) != QS_OK) {
        printf("  FAIL %s: stream_sync at teardown: %s\n", g_test, qs_last_error());
        bad = 1;
    }
    for (int i = 0; i < g_ndev; i++)
        if (!guards_intact(&g_dev[i], "teardown guard check")) bad = 1;
    for (int i = 0; i < g_nplans; i++) g_plans[i].be->ops->plan_destroy(g_plans[i].be, g_plans[i].plan);
    for (int i = 0; i < g_ndev; i++) DOPS->free(g_dut, g_dev[i].base);
    for (int i = 0; i < g_nhost; i++) free(g_host[i]);
    g_nplans = g_ndev = g_nhost = 0;
    size_t in_use = 0;
    DOPS->memory_stats(g_dut, &in_use, NULL);
    if (in_use != g_dut_baseline) {
        printf("  note %s: %s memory_stats in_use %zu after freeing every test buffer and plan (was %zu)\n", g_test, DOPS->name,
               in_use, g_dut_baseline);
        g_dut_baseline = in_use;
    }
    fflush(stdout);
    return bad ? -1 : 0;
}

/* ---- random inputs ---- */
void seed(const char *what, uint64_t i) { seed_with(g_suite.seed_key, what, i); }
void seed_with(uint64_t key, const char *what, uint64_t i) { qs_rng_init(&g_rng, qs_rng_key(key, what, i), 0); }
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
        printf(" — %lld non-finite mismatches (first [%lld]: dut %g ref %g)", (long long)bad_nf, (long long)first_nf,
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
        printf(" — %lld elements off (first [%lld]: dut %.9g ref %.9g)", (long long)nbad, (long long)first_bad,
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

bool check_exact(const char *what, const float *got, const float *ref, int64_t n) {
    return check_tol(what, got, ref, n, 0, 0);
}

bool check_fp64(const char *what, const float *got, const double *ref, int64_t n, double K, double scale) {
    double maxr = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(ref[i])) maxr = fmax(maxr, fabs(ref[i]));
    const qs_tol t = qs_tol_fp32(K, scale < 0 ? maxr : scale);
    double worst = 0;
    int64_t nbad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - ref[i]), lim = t.atol + t.rtol * fabs(ref[i]);
        double frac = !isfinite(got[i]) ? INFINITY : lim > 0 ? e / lim : (e > 0 ? INFINITY : 0.0);
        if (!isfinite(ref[i]) || !isfinite(got[i])) /* non-finite: the same kind on both */
            frac = (isnan(ref[i]) && isnan(got[i])) || (isinf(ref[i]) && ref[i] == got[i]) ? 0.0 : INFINITY;
        if (frac > worst) worst = frac;
        if (frac > 1.0 && nbad++ == 0) first = i;
    }
    const bool pass = nbad == 0;
    printf("  %-4s %-*s fp64: rtol %.2e atol %.2e  worst %6.2f%%", pass ? "ok" : "FAIL", g_suite.name_width, what,
           t.rtol, t.atol, 100.0 * worst);
    if (nbad)
        printf(" — %lld elements off (first [%lld]: cpu %.9g fp64 %.17g)", (long long)nbad, (long long)first,
               (double)got[first], ref[first]);
    printf("\n");
    fflush(stdout);
    json_case(what, "fp64_max_err_fraction_of_tol", worst, 1.0, pass);
    if (!pass) g_fail++;
    return pass;
}

bool check_bits(const char *what, const void *got, const void *ref, int64_t n, size_t es, const float *src) {
    const unsigned char *g = got, *r = ref;
    int64_t nbad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(g + (size_t)i * es, r + (size_t)i * es, es) != 0) {
            if (first < 0) first = i;
            nbad++;
        }
    const bool pass = nbad == 0;
    printf("  %-4s %-*s %s (n=%lld)", pass ? "ok" : "FAIL", g_suite.name_width, what,
           pass ? "bit-identical" : "BITS DIFFER", (long long)n);
    if (nbad) {
        uint64_t a = 0, b = 0;
        memcpy(&a, g + (size_t)first * es, es);
        memcpy(&b, r + (size_t)first * es, es);
        printf(" — %lld elements differ, first [%lld]: dut 0x%llx ref 0x%llx", (long long)nbad, (long long)first,
               (unsigned long long)a, (unsigned long long)b);
        if (src) printf(" (source %a = 0x%08x)", (double)src[first], fbits(src[first]));
    }
    printf("\n");
    fflush(stdout);
    json_case(what, "differing_elements", (double)nbad, 0.0, pass);
    if (!pass) g_fail++;
    return pass;
}

void same_elems(const char *what, const void *got, const void *ref, int64_t n, size_t es) {
    void *hg = halloc((size_t)n * es), *hr = halloc((size_t)n * es);
    if (dget(hg, got, (size_t)n * es, what) && dget(hr, ref, (size_t)n * es, what)) check_bits(what, hg, hr, n, es, NULL);
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
    q.dut = (qs_operand){dup_dev(data, bytes), dt, scaled ? dup_dev_f(scale, 1) : NULL, false, NULL};
    return q;
}

qs_precision cpu_prec(qs_precision p) { return p == QS_PREC_TF32 ? QS_PREC_FP32 : p; }
