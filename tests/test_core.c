/* tests/test_core.c — core pieces: Philox-4x32-10 against the Random123 known-answer
 * vectors, the sequential stream (uniform range, unbiased bounded draws, shuffles are
 * permutations, determinism), status messages, dtype/precision names, tensor helpers, the
 * parameter table's aligned offsets and the logger's whole-line output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "qsync/log.h"
#include "qsync/rng.h"

/* Known-answer vectors of Random123 (kat_vectors, philox4x32 with 10 rounds):
 * counter words c0..c3, key words k0..k1, expected outputs. */
static void test_philox_known_answers(void **state) {
    static const struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
        {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu},
         {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
        {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u},
         {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint64_t lo = kat[i].ctr[0] | (uint64_t)kat[i].ctr[1] << 32;
        uint64_t hi = kat[i].ctr[2] | (uint64_t)kat[i].ctr[3] << 32;
        uint64_t key = kat[i].key[0] | (uint64_t)kat[i].key[1] << 32;
        uint32_t out[4];
        qs_philox4x32(key, hi, lo, out);
        for (int k = 0; k < 4; k++) assert_int_equal(out[k], kat[i].out[k]);
    }
}

static void test_rng_stream(void **state) {
    qs_rng a, b;
    qs_rng_init(&a, qs_rng_key(1, "test", 0), 0);
    qs_rng_init(&b, qs_rng_key(1, "test", 0), 0);
    for (int i = 0; i < 100; i++) assert_int_equal(qs_rng_u32(&a), qs_rng_u32(&b));
    assert_int_not_equal(qs_rng_key(1, "test", 0), qs_rng_key(1, "test", 1));
    assert_int_not_equal(qs_rng_key(1, "test", 0), qs_rng_key(2, "test", 0));
    assert_int_not_equal(qs_rng_key(1, "test", 0), qs_rng_key(1, "other", 0));
    /* uniform in [0,1) with mean 1/2 (±5σ over 100k draws, σ = 1/sqrt(12·1e5)) */
    double sum = 0;
    int counts[7] = {0};
    for (int i = 0; i < 100000; i++) {
        float u = qs_rng_uniform(&a);
        assert_true(u >= 0.0f && u < 1.0f);
        sum += u;
        counts[qs_rng_below(&a, 7)]++;
    }
    assert_true(fabs(sum / 1e5 - 0.5) < 5.0 / sqrt(12.0 * 1e5));
    /* each of 7 outcomes: binomial(1e5, 1/7), ±5σ */
    double sd = sqrt(1e5 * (1.0 / 7) * (6.0 / 7));
    for (int k = 0; k < 7; k++) assert_true(fabs(counts[k] - 1e5 / 7) < 5 * sd);
    int64_t perm[1000];
    int seen[1000] = {0};
    for (int i = 0; i < 1000; i++) perm[i] = i;
    qs_rng_shuffle_i64(&a, perm, 1000);
    int moved = 0;
    for (int i = 0; i < 1000; i++) {
        seen[perm[i]]++;
        moved += perm[i] != i;
    }
    for (int i = 0; i < 1000; i++) assert_int_equal(seen[i], 1);
    assert_true(moved > 900);
    /* standard normal: mean 0 and variance 1 within 5σ over 100k draws */
    double s1 = 0, s2 = 0;
    for (int i = 0; i < 100000; i++) {
        double z = qs_rng_normal(&a);
        s1 += z;
        s2 += z * z;
    }
    assert_true(fabs(s1 / 1e5) < 5.0 / sqrt(1e5));
    assert_true(fabs(s2 / 1e5 - 1.0) < 5.0 * sqrt(2.0 / 1e5));
}

static void test_status_and_names(void **state) {
    qs_error_clear();
    assert_string_equal(qs_last_error(), "");
    assert_int_equal(QS_FAIL(QS_ERR_IO, "cannot open %s", "x.bin"), QS_ERR_IO);
    assert_string_equal(qs_last_error(), "cannot open x.bin");
    assert_int_equal(qs_error_wrap(QS_ERR_IO, "loading %s: ", "ckpt"), QS_ERR_IO);
    assert_string_equal(qs_last_error(), "loading ckpt: cannot open x.bin");
    assert_string_equal(qs_status_name(QS_ERR_MISMATCH), "QS_ERR_MISMATCH");
    qs_precision p;
    assert_true(qs_precision_parse("int8", &p));
    assert_int_equal(p, QS_PREC_INT8);
    assert_false(qs_precision_parse("int4", &p));
    qs_dtype d;
    assert_true(qs_dtype_from_safetensors_name("BF16", &d));
    assert_int_equal(d, QS_BF16);
    assert_int_equal(qs_dtype_size(QS_I64), 8);
    assert_false(qs_dtype_from_safetensors_name("F128", &d));
}

static void test_tensor_and_table(void **state) {
    int64_t shape[3] = {2, 3, 5};
    qs_tensor t = qs_tensor_view(NULL, QS_BF16, 3, shape);
    assert_int_equal(qs_tensor_numel(&t), 30);
    assert_int_equal(qs_tensor_nbytes(&t), 60);
    char buf[32];
    qs_shape_format(3, shape, buf, sizeof buf);
    assert_string_equal(buf, "(2, 3, 5)");
    void *p = qs_host_alloc(10);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % QS_HOST_ALIGN, 0);
    qs_host_free(p);
    qs_table tb;
    memset(&tb, 0, sizeof tb);
    int idx;
    assert_int_equal(qs_table_add(&tb, "a.weight", QS_F32, 1, (int64_t[]){3}, 0, &idx), QS_OK);
    assert_int_equal(qs_table_add(&tb, "a.bias", QS_F32, 1, (int64_t[]){1}, 0, &idx), QS_OK);
    assert_int_equal(idx, 1);
    assert_int_equal(tb.entries[1].offset % QS_DEVICE_ALIGN, 0);
    assert_true(tb.entries[1].offset >= 12);
    assert_int_equal(qs_table_find(&tb, "a.bias"), 1);
    assert_int_equal(qs_table_find(&tb, "b"), -1);
    assert_int_equal(qs_table_add(&tb, "a.bias", QS_F32, 1, (int64_t[]){1}, 0, NULL), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "duplicate"));
    qs_table_free(&tb);
}

/* Every line carries its rank prefix and kind, whatever its length (one write per line, so
 * ranks sharing stderr cannot split each other's lines); info lines of rank ≠ 0 are dropped. */
static void test_logger_lines(void **state) {
    FILE *f = tmpfile();
    assert_non_null(f);
    qs_logger lg;
    qs_logger_init(&lg, 1, 2, QS_LOG_INFO);
    lg.out = f;
    char *long_msg = malloc(5001);
    assert_non_null(long_msg);
    memset(long_msg, 'x', 5000);
    long_msg[5000] = '\0';
    qs_log_info(&lg, "not shown");
    qs_log_warn(&lg, "short %d", 7);
    qs_log_warn(&lg, "%s", long_msg);
    rewind(f);
    char *got = malloc(6000);
    assert_non_null(got);
    assert_non_null(fgets(got, 6000, f));
    assert_string_equal(got, "[rank 1] warning: short 7\n");
    assert_non_null(fgets(got, 6000, f));
    assert_int_equal(strncmp(got, "[rank 1] warning: xxx", 21), 0);
    assert_int_equal(strlen(got), strlen("[rank 1] warning: ") + 5000 + 1);
    assert_null(fgets(got, 6000, f));
    fclose(f);
    free(got);
    free(long_msg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_logger_lines),
        cmocka_unit_test(test_rng_stream),
        cmocka_unit_test(test_status_and_names),
        cmocka_unit_test(test_tensor_and_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
