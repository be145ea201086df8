/* tests/support/gpu_harness.h — defines: the harness of the suites that compare a backend under
 * test (the DUT: the CUDA backend, or a second CPU backend) with the CPU reference backend op by
 * op (test_backend_ops.c, test_cuda_attention.c): the backends and the start-up rules (the CUDA
 * backend absent: exit 77 for a CUDA-only suite, a note for test_backend_ops; QS_REQUIRE_GPU=1
 * makes that a failure; QS_CUDA_DEVICE picks the device), one printed line and one JSON record
 * (QS_GPU_TESTS_JSON=FILE) per case, failures counted per test, zeroed host memory and guarded
 * DUT views released at marks or by the per-test teardown, plans destroyed by the teardown, a
 * seeded uniform stream, and the NMSE / tolerance / bit comparisons.
 *
 * DUT views: every DUT buffer is an offset view of GUARD bytes into a larger allocation, with
 * GUARD bytes of GUARD_BYTE before and after it; the guards are checked whenever a view is read
 * back, released or torn down, so an overrun or a write through a wrong offset fails the test.
 * The allocation must have the DUT's alignment (gh_alignment).
 *
 * Helpers that assert report through cmocka (fail_msg / assert_*), so they may only be called
 * from inside a running cmocka test; a file using this header includes <cmocka.h> first. The
 * library part compiles in every build (without CUDA, qs_backend_cuda_create fails with
 * QS_ERR_UNSUPPORTED). */
#ifndef QSYNC_TESTS_GPU_HARNESS_H
#define QSYNC_TESTS_GPU_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backends.h"
#include "qsync/rng.h"
#include "qsync/status.h"

/* ------------------------------------------------------------------------- the suite */

/* What differs between the suites that use the harness. */
typedef struct gh_suite {
    const char *name;     /* program name: prefix of the start-up lines, "suite" of the JSON */
    uint64_t seed_key;    /* base key of seed(): qs_rng_key(seed_key, what, i) */
    int name_width;       /* column width of a case's name in the printed lines */
} gh_suite;

/* The CUDA backend as the DUT (QS_CUDA_DEVICE, default 0) and the 1-thread CPU reference, the
 * JSON file opened and the start-up line printed; returns 0 when ready, else the exit code
 * (77 = skip: no CUDA backend and QS_REQUIRE_GPU unset). */
int gh_start(const gh_suite *suite);

/* The DUTs of test_backend_ops: the CUDA backend when it can be created (its absence is printed;
 * a failure under QS_REQUIRE_GPU=1), then a second 1-thread CPU backend, into duts[0..*ndut);
 * `only` (NULL: both) keeps the one of that name. The reference and the JSON file as gh_start.
 * Returns 0 when ready, else the exit code. */
int gh_open(const gh_suite *suite, const char *only, qs_backend **duts, int *ndut);
/* Make dut the backend under test (g_dut) and take its memory_stats in_use as the baseline of
 * the teardown's note. */
void gh_use(qs_backend *dut);

/* Close the JSON record with `failed` tests and destroy every backend; returns the exit code. */
int gh_finish(int failed);

extern qs_backend *g_cpu, *g_dut; /* the CPU reference and the backend under test */
#define COPS (g_cpu->ops)
#define DOPS (g_dut->ops)
#define CST (g_cpu->ops->default_stream(g_cpu))
#define DST (g_dut->ops->default_stream(g_dut))
/* Whether the backend under test is the CUDA backend. */
bool gh_dut_is_cuda(void);
/* The alignment the DUT's alloc promises: 256 bytes on CUDA, 64 on the CPU. */
size_t gh_alignment(const qs_backend *be);

extern const char *g_test;    /* name of the running test (log lines, JSON records) */
extern char g_test_buf[200];  /* storage for g_test of tests named at run time */
extern int g_fail;            /* failed cases of the running test */
extern qs_rng g_rng;          /* the stream of rnd(), restarted by seed() */

#define GUARD 256             /* bytes before and after every DUT view (keeps 256-B alignment) */
#define GUARD_BYTE 0xA5
#define POISON 0xFF           /* NaN as float, -1 as int32 */

/* Start a test: name it for the log and the JSON records, reset its failure count. */
#define BEGIN()                                                   \
    do {                                                          \
        g_test = __func__;                                        \
        g_fail = 0;                                               \
    } while (0)
/* End a test: fail it when any of its cases failed (all were printed first). */
#define END()                                                                                  \
    do {                                                                                       \
        if (g_fail) fail_msg("%s: %d case(s) failed (see the FAIL lines above)", g_test, g_fail); \
    } while (0)

/* ------------------------------------------------------------------ cases and records */

/* Append one case to the JSON results (no-op without QS_GPU_TESTS_JSON; non-finite as null). */
void json_case(const char *what, const char *metric, double value, double limit, bool pass);
/* Record a failed call (status and message) as a failed case named expr; returns st == QS_OK. */
bool dut_ok_(qs_status st, const char *expr);
#define DUT_OK(expr) dut_ok_((expr), #expr)
/* A pass/fail fact (status parity, a count) as one line and one record; counts a failure. */
bool check_fact(const char *what, bool pass, const char *detail);
/* A figure against its limit as one line and one record (metric names it); counts a failure. */
bool check_figure(const char *what, const char *metric, double value, double limit, bool pass, const char *detail);

/* --------------------------------------------------------------------------- memory */

/* Zeroed, 64-byte aligned host memory, freed by release_to or the teardown. */
void *halloc(size_t bytes);
/* halloc of n floats. */
float *hf(int64_t n);
/* halloc'ed copy of n floats. */
float *hcopy(const float *x, int64_t n);

/* A guarded DUT view of `bytes` filled with byte `fill` (POISON for outputs); fails the test
 * when the backend cannot allocate. */
void *dalloc(size_t bytes, int fill);
/* dalloc of n floats filled with POISON (NaN). */
float *dalloc_f(int64_t n);
/* A guarded DUT view holding a copy of `bytes` of host data. */
void *dup_dev(const void *host, size_t bytes);
/* dup_dev of n floats. */
float *dup_dev_f(const float *x, int64_t n);
/* Sync, copy `bytes` of view dev to host and check its guards (damage is a failed case named
 * what); returns false when the DUT reports an error (recorded as a failed case). */
bool dget(void *host, const void *dev, size_t bytes, const char *what);

/* The numbers of DUT views and host blocks allocated so far. */
typedef struct mark {
    int ndev, nhost;
} mark;
/* The current mark, for release_to. */
mark mark_now(void);
/* Free (after checking their guards) the DUT views and host blocks allocated since m. */
void release_to(mark m);

/* Destroy plan (of backend be; NULL is ignored) at the teardown. */
void keep_plan(qs_backend *be, void *plan);

/* Per-test cmocka teardown: pending DUT errors and guards (-1 when bad), plans, memory; an
 * in_use that differs from after the previous test is printed as a note. */
int teardown(void **state);

/* ------------------------------------------------------------------------ random inputs */

/* Restart g_rng at key qs_rng_key(suite seed_key, what, i). */
void seed(const char *what, uint64_t i);
/* Restart g_rng at key qs_rng_key(key, what, i) (rows that keep the key of their former suite). */
void seed_with(uint64_t key, const char *what, uint64_t i);
/* n host floats uniform in [lo, hi) from g_rng. */
float *rnd(int64_t n, float lo, float hi);

/* ------------------------------------------------------------------------- comparisons */

/* NMSE = Σ(g−c)²/Σc² over elements where both are finite (non-finite ones must match in kind)
 * against budget; prints and records one line, counts a failure; returns pass. */
bool check_nmse(const char *what, const float *got, const float *ref, int64_t n, double budget);
/* |g−c| ≤ atol + rtol·|c|, rtol = 4·u·sqrt(4·Kr), atol = rtol·scale (scale < 0: max|c|); Kr == 0
 * demands equal values; non-finite must match in kind; prints, records, counts; returns pass. */
bool check_tol(const char *what, const float *got, const float *ref, int64_t n, double Kr, double scale);
/* check_tol of one implementation against an exact (FP64) reference: rtol = 4·u·sqrt(K)
 * (tests/support/check.h), atol = rtol·scale (scale < 0: max|ref|). */
bool check_fp64(const char *what, const float *got, const double *ref, int64_t n, double K, double scale);
/* Equal values (check_tol with Kr 0). */
bool check_exact(const char *what, const float *got, const float *ref, int64_t n);
/* Bit identity of n elements of `es` bytes; on a mismatch prints the first one (hex) and, when
 * src is given, the FP32 source element. */
bool check_bits(const char *what, const void *got, const void *ref, int64_t n, size_t es, const float *src);
/* Download n floats of DUT view dev and check_tol them against ref at Kr and scale. */
void cmp_tol(const char *what, const float *dev, const float *ref, int64_t n, double Kr, double scale);
/* Two DUT arrays of n elements of es bytes downloaded and compared bit for bit. */
void same_elems(const char *what, const void *got, const void *ref, int64_t n, size_t es);

/* ------------------------------------------------------------------- GEMM operands */

/* A matrix quantized by the CPU backend (host memory) and its DUT copy. */
typedef struct qmat {
    qs_operand cpu, dut;
} qmat;
/* Quantize x (rows, cols) per tensor into dt with the CPU backend (sr NULL = RNE) and copy the
 * codes and the scale (S8, FP8 only) to the DUT. */
qmat quant_both(const float *x, int64_t rows, int64_t cols, qs_dtype dt, const qs_sr *sr);
/* The CPU plan precision for a DUT precision: FP32 for TF32 (the CPU has none), else p. */
qs_precision cpu_prec(qs_precision p);

#endif
