/* tests/test_safetensors.c — safetensors writer/reader: round trip, every validation error on
 * crafted files, atomicity of writes, and interchange with PyTorch through
 * tools/safetensors_torch.py (fixture tests/fixtures/st_from_python.safetensors made by
 * tools/gen_st_fixture.py; the reverse direction runs when a Python with torch exists). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "run_cmd.h"
#include "io/safetensors.h"

/* ---- helpers ---- */

/* dir/name of the test's scratch directory (qs_test_tmp) into buf. */
static void path_in(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", qs_test_tmp, name); }

/* Write a crafted file: 8-byte length (hlen_override if >= 0, else strlen(header)), header,
 * then data_len bytes of data. */
static void write_raw(const char *path, const char *header, long long hlen_override, size_t data_len) {
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    uint64_t n = hlen_override >= 0 ? (uint64_t)hlen_override : strlen(header);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(n >> (8 * i));
    assert_int_equal(fwrite(len8, 1, 8, fp), 8);
    size_t hl = strlen(header);
    if (hl) assert_int_equal(fwrite(header, 1, hl, fp), hl);
    for (size_t i = 0; i < data_len; i++) fputc((int)(i & 0xff), fp);
    fclose(fp);
}

/* Open a crafted file and expect `want`, with every `needles` substring in the message. */
static void expect_open_error(const char *header, long long hlen, size_t data_len, qs_status want,
                              const char *needle1, const char *needle2) {
    char path[256];
    path_in(path, sizeof path, "crafted.safetensors");
    write_raw(path, header, hlen, data_len);
    qs_st_file *f = (qs_st_file *)0x1;
    qs_error_clear();
    qs_status st = qs_safetensors_open(path, &f);
    if (st != want) fprintf(stderr, "header %s: got %s: %s\n", header, qs_status_name(st), qs_last_error());
    assert_int_equal(st, want);
    assert_null(f);
    const char *msg = qs_last_error();
    if (getenv("QS_TEST_VERBOSE")) fprintf(stderr, "  %s\n", msg);
    if (!strstr(msg, path) || (needle1 && !strstr(msg, needle1)) || (needle2 && !strstr(msg, needle2)))
        fprintf(stderr, "message lacks '%s'/'%s'/'%s': %s\n", path, needle1 ? needle1 : "",
                needle2 ? needle2 : "", msg);
    assert_non_null(strstr(msg, path));
    if (needle1) assert_non_null(strstr(msg, needle1));
    if (needle2) assert_non_null(strstr(msg, needle2));
}

/* ---- round trip ---- */

static void test_round_trip(void **state) {
    char path[256];
    path_in(path, sizeof path, "rt.safetensors");
    float w[6] = {1.0f, -2.5f, 3.25f, 0.0f, -0.0f, 1e-30f};
    uint16_t bf[3] = {0x3f80, 0xc000, 0x7fc0};
    int64_t steps = -1234567890123LL;
    uint8_t odd[3] = {1, 2, 3}; /* makes the following tensor unaligned */
    qs_st_tensor t[5] = {
        {.name = "layer1.0.conv1.weight", .dtype = QS_F32, .ndim = 2, .shape = {2, 3}, .data = w},
        {.name = "odd \"quoted\\\" name", .dtype = QS_U8, .ndim = 1, .shape = {3}, .data = odd},
        {.name = "bf", .dtype = QS_BF16, .ndim = 1, .shape = {3}, .data = bf},
        {.name = "empty", .dtype = QS_F32, .ndim = 2, .shape = {0, 4}, .data = NULL},
        {.name = "step", .dtype = QS_I64, .ndim = 0, .data = &steps},
    };
    qs_st_meta meta[2] = {{"format", "pt"}, {"config", "arch=cnn\nlr=\"0.1\"\t\\"}};
    assert_int_equal(qs_safetensors_write(path, t, 5, meta, 2), QS_OK);

    /* header padded to a multiple of 8 with spaces */
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    unsigned char len8[8];
    assert_int_equal(fread(len8, 1, 8, fp), 8);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)len8[i] << (8 * i);
    assert_int_equal(hlen % 8, 0);
    char *hdr = malloc(hlen + 1);
    assert_int_equal(fread(hdr, 1, hlen, fp), hlen);
    hdr[hlen] = '\0';
    fclose(fp);
    assert_int_equal(hdr[0], '{');
    assert_non_null(strstr(hdr, "\"__metadata__\":{\"format\":\"pt\""));
    free(hdr);

    qs_st_file *f = NULL;
    assert_int_equal(qs_safetensors_open(path, &f), QS_OK);
    assert_int_equal(qs_safetensors_count(f), 5);
    for (int i = 0; i < 5; i++) assert_string_equal(qs_safetensors_name_at(f, i), t[i].name);
    assert_null(qs_safetensors_name_at(f, 5));
    assert_null(qs_safetensors_name_at(f, -1));
    assert_string_equal(qs_safetensors_path(f), path);

    for (int i = 0; i < 5; i++) {
        qs_st_tensor g;
        assert_int_equal(qs_safetensors_get(f, t[i].name, &g), QS_OK);
        assert_string_equal(g.name, t[i].name);
        assert_int_equal(g.dtype, t[i].dtype);
        assert_int_equal(g.ndim, t[i].ndim);
        uint64_t bytes = qs_dtype_size(g.dtype);
        for (int d = 0; d < g.ndim; d++) {
            assert_int_equal(g.shape[d], t[i].shape[d]);
            bytes *= (uint64_t)g.shape[d];
        }
        if (bytes) assert_memory_equal(g.data, t[i].data, bytes);
    }
    qs_tensor qt;
    assert_int_equal(qs_safetensors_lookup(f, "bf", &qt), QS_OK);
    assert_int_equal(qt.dtype, QS_BF16);
    assert_int_equal(qs_tensor_numel(&qt), 3);

    assert_string_equal(qs_safetensors_meta(f, "format"), "pt");
    assert_string_equal(qs_safetensors_meta(f, "config"), meta[1].value);
    assert_null(qs_safetensors_meta(f, "nope"));

    qs_st_tensor g;
    qs_error_clear();
    assert_int_equal(qs_safetensors_get(f, "missing.weight", &g), QS_ERR_NOT_FOUND);
    assert_non_null(strstr(qs_last_error(), "missing.weight"));
    assert_non_null(strstr(qs_last_error(), path));
    qs_safetensors_close(f);

    /* an empty file (no tensors, no metadata) is valid too */
    assert_int_equal(qs_safetensors_write(path, NULL, 0, NULL, 0), QS_OK);
    assert_int_equal(qs_safetensors_open(path, &f), QS_OK);
    assert_int_equal(qs_safetensors_count(f), 0);
    qs_safetensors_close(f);
}

static void test_write_rejects_bad_input(void **state) {
    char path[256];
    path_in(path, sizeof path, "bad_input.safetensors");
    float x = 1.0f;
    qs_st_tensor dup[2] = {{.name = "a", .dtype = QS_F32, .ndim = 0, .data = &x},
                           {.name = "a", .dtype = QS_F32, .ndim = 0, .data = &x}};
    assert_int_equal(qs_safetensors_write(path, dup, 2, NULL, 0), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "twice"));
    qs_st_tensor reserved = {.name = "__metadata__", .dtype = QS_F32, .ndim = 0, .data = &x};
    assert_int_equal(qs_safetensors_write(path, &reserved, 1, NULL, 0), QS_ERR_INVALID_ARG);
    qs_st_tensor neg = {.name = "n", .dtype = QS_F32, .ndim = 1, .shape = {-1}, .data = &x};
    assert_int_equal(qs_safetensors_write(path, &neg, 1, NULL, 0), QS_ERR_INVALID_ARG);
    qs_st_tensor nodata = {.name = "n", .dtype = QS_F32, .ndim = 1, .shape = {2}, .data = NULL};
    assert_int_equal(qs_safetensors_write(path, &nodata, 1, NULL, 0), QS_ERR_INVALID_ARG);
    qs_st_meta m2[2] = {{"k", "1"}, {"k", "2"}};
    assert_int_equal(qs_safetensors_write(path, NULL, 0, m2, 2), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_test_count_entries(qs_test_tmp), 0); /* nothing was created */
}

/* ---- validation on crafted files ---- */

static void test_crafted_errors(void **state) {
    const qs_status F = QS_ERR_FORMAT;
    /* shorter than the length field */
    {
        char path[256];
        path_in(path, sizeof path, "short.safetensors");
        FILE *fp = fopen(path, "wb");
        fputs("abc", fp);
        fclose(fp);
        qs_st_file *f;
        assert_int_equal(qs_safetensors_open(path, &f), F);
        assert_non_null(strstr(qs_last_error(), path));
    }
    /* header length beyond the file size */
    expect_open_error("{}", 1000, 0, F, "header length 1000", NULL);
    expect_open_error("{}", (long long)1 << 62, 0, F, "header length", NULL);
    /* malformed JSON, not an object, trailing junk in the header */
    expect_open_error("{\"a\":{\"dtype\":\"F32\",", -1, 0, F, "malformed", NULL);
    expect_open_error("[1,2]", -1, 0, F, "start with '{'", NULL);
    expect_open_error("{} x", -1, 0, F, "malformed", NULL);
    /* unknown dtype, names the tensor */
    expect_open_error("{\"w\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}", -1, 4, F,
                      "'w'", "Q7");
    /* missing fields */
    expect_open_error("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", -1, 4, F, "'w'", "shape");
    expect_open_error("{\"w\":7}", -1, 0, F, "'w'", "not a JSON object");
    /* bad shapes and offsets */
    expect_open_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", -1, 4, F, "'w'",
                      "shape");
    expect_open_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", -1, 4, F, "'w'",
                      "shape");
    expect_open_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", -1, 4, F, "'w'",
                      "data_offsets");
    expect_open_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", -1, 4, F, "'w'",
                      "data_offsets");
    /* out of range */
    expect_open_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 4, F, "'w'",
                      "run past");
    /* inconsistent with shape × dtype size */
    expect_open_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", -1, 12, F,
                      "'w'", "(2, 2)");
    expect_open_error("{\"w\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,12]}}", -1, 12, F,
                      "'w'", "span 12");
    /* overlapping */
    expect_open_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                      -1, 12, F, "overlap", "'b'");
    /* hole, trailing bytes */
    expect_open_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, 8, F, "'a'",
                      "no holes");
    expect_open_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", -1, 8, F,
                      "cover 4", NULL);
    /* duplicate names (cJSON keeps both) */
    expect_open_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                      -1, 8, F, "'a'", "twice");
    /* metadata: non-string value, not an object */
    expect_open_error("{\"__metadata__\":{\"epoch\":3}}", -1, 0, F, "epoch", "not a string");
    expect_open_error("{\"__metadata__\":[\"x\"]}", -1, 0, F, "__metadata__", NULL);
    /* more dimensions than qsync handles */
    expect_open_error("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", -1, 1,
                      QS_ERR_UNSUPPORTED, "'w'", "7 dimensions");
    /* a well-formed crafted file with padding spaces opens */
    {
        char path[256];
        path_in(path, sizeof path, "ok.safetensors");
        write_raw(path, "{\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}      ", -1, 4);
        qs_st_file *f;
        assert_int_equal(qs_safetensors_open(path, &f), QS_OK);
        qs_st_tensor g;
        assert_int_equal(qs_safetensors_get(f, "a", &g), QS_OK);
        int32_t v;
        memcpy(&v, g.data, 4);
        assert_int_equal(v, 0x03020100);
        qs_safetensors_close(f);
    }
    /* missing file */
    {
        char path[256];
        path_in(path, sizeof path, "does_not_exist.safetensors");
        qs_st_file *f;
        assert_int_equal(qs_safetensors_open(path, &f), QS_ERR_NOT_FOUND);
        assert_non_null(strstr(qs_last_error(), path));
    }
}

/* ---- atomicity ---- */

static qs_st_tensor make_tensor(float *buf, int64_t n, float v) {
    for (int64_t i = 0; i < n; i++) buf[i] = v + (float)i;
    qs_st_tensor t = {.name = "w", .dtype = QS_F32, .ndim = 1, .shape = {n}, .data = buf};
    return t;
}

static void assert_file_holds(const char *path, int64_t n, float v) {
    qs_st_file *f = NULL;
    assert_int_equal(qs_safetensors_open(path, &f), QS_OK);
    qs_st_tensor g;
    assert_int_equal(qs_safetensors_get(f, "w", &g), QS_OK);
    assert_int_equal(g.shape[0], n);
    for (int64_t i = 0; i < n; i++) {
        float x;
        memcpy(&x, (const char *)g.data + 4 * i, 4);
        assert_true(x == v + (float)i);
    }
    qs_safetensors_close(f);
}

static void test_readonly_directory(void **state) {
    char sub[256], path[300];
    path_in(sub, sizeof sub, "ro");
    assert_int_equal(mkdir(sub, 0700), 0);
    snprintf(path, sizeof path, "%s/ckpt.safetensors", sub);
    float buf[4];
    qs_st_tensor t = make_tensor(buf, 4, 1.0f);

    /* a directory that does not exist: fails, creates nothing */
    char nodir[320];
    snprintf(nodir, sizeof nodir, "%s/missing/ckpt.safetensors", sub);
    assert_int_equal(qs_safetensors_write(nodir, &t, 1, NULL, 0), QS_ERR_IO);
    assert_non_null(strstr(qs_last_error(), nodir));
    assert_int_equal(qs_test_count_entries(sub), 0);

    if (geteuid() == 0) {
        /* root ignores directory permissions; the RLIMIT_FSIZE test below covers failures
         * after the temporary file exists. */
        fprintf(stderr, "note: running as root, the read-only directory case is not testable\n");
        rmdir(sub);
        return;
    }
    assert_int_equal(chmod(sub, 0500), 0);
    qs_error_clear();
    assert_int_equal(qs_safetensors_write(path, &t, 1, NULL, 0), QS_ERR_IO);
    assert_non_null(strstr(qs_last_error(), path));
    assert_int_equal(qs_test_count_entries(sub), 0);
    chmod(sub, 0700);
    rmdir(sub);
}

static void test_failed_write_keeps_previous(void **state) {
    char path[256];
    path_in(path, sizeof path, "keep.safetensors");
    float small[4];
    qs_st_tensor t1 = make_tensor(small, 4, 10.0f);
    assert_int_equal(qs_safetensors_write(path, &t1, 1, NULL, 0), QS_OK);

    /* Make the second write fail half-way: a file size limit makes write() return EFBIG
     * (SIGXFSZ ignored), which also works for root. */
    enum { BIG = 1 << 16 };
    float *big = malloc(BIG * sizeof *big);
    qs_st_tensor t2 = make_tensor(big, BIG, -5.0f);
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    struct rlimit lim = old;
    lim.rlim_cur = 4096;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    qs_error_clear();
    qs_status st = qs_safetensors_write(path, &t2, 1, NULL, 0);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    assert_int_equal(st, QS_ERR_IO);
    assert_non_null(strstr(qs_last_error(), path));
    assert_file_holds(path, 4, 10.0f);    /* previous content intact */
    assert_int_equal(qs_test_count_entries(qs_test_tmp), 1); /* and no temporary file left */

    /* rename failure: the destination is a directory */
    char dpath[256];
    path_in(dpath, sizeof dpath, "is_a_dir.safetensors");
    assert_int_equal(mkdir(dpath, 0700), 0);
    assert_int_equal(qs_safetensors_write(dpath, &t1, 1, NULL, 0), QS_ERR_IO);
    assert_non_null(strstr(qs_last_error(), "rename"));
    assert_int_equal(qs_test_count_entries(qs_test_tmp), 2);
    rmdir(dpath);

    /* a successful write replaces the file */
    assert_int_equal(qs_safetensors_write(path, &t2, 1, NULL, 0), QS_OK);
    assert_file_holds(path, BIG, -5.0f);
    assert_int_equal(qs_test_count_entries(qs_test_tmp), 1);
    free(big);
    unlink(path);
}

/* ---- PyTorch interchange ---- */

static uint16_t bits16(const void *p, int i) {
    uint16_t v;
    memcpy(&v, (const char *)p + 2 * i, 2);
    return v;
}

static void test_reads_python_fixture(void **state) {
    char path[512];
    snprintf(path, sizeof path, "%s/st_from_python.safetensors", qs_fixture_dir());
    qs_st_file *f = NULL;
    qs_status st = qs_safetensors_open(path, &f);
    if (st != QS_OK) fprintf(stderr, "%s\n", qs_last_error());
    assert_int_equal(st, QS_OK);
    const char *order[] = {"q", "weight", "bias_bf16", "half", "steps", "idx", "u", "empty"};
    assert_int_equal(qs_safetensors_count(f), 8);
    for (int i = 0; i < 8; i++) assert_string_equal(qs_safetensors_name_at(f, i), order[i]);
    assert_string_equal(qs_safetensors_meta(f, "format"), "pt");
    assert_string_equal(qs_safetensors_meta(f, "qsync_test"), "from-python");

    qs_st_tensor g;
    assert_int_equal(qs_safetensors_get(f, "q", &g), QS_OK);
    assert_int_equal(g.dtype, QS_S8);
    const int8_t q[6] = {-128, -1, 0, 1, 2, 127};
    assert_memory_equal(g.data, q, 6);

    assert_int_equal(qs_safetensors_get(f, "weight", &g), QS_OK);
    assert_int_equal(g.dtype, QS_F32);
    assert_int_equal(g.ndim, 2);
    assert_int_equal(g.shape[0], 3);
    assert_int_equal(g.shape[1], 4);
    for (int i = 0; i < 12; i++) {
        float x;
        memcpy(&x, (const char *)g.data + 4 * i, 4); /* offset 6: unaligned */
        assert_true(x == (float)i * 0.5f - 1.0f);
    }

    assert_int_equal(qs_safetensors_get(f, "bias_bf16", &g), QS_OK);
    assert_int_equal(g.dtype, QS_BF16);
    const uint16_t bf[4] = {0x3fc0, 0xc000, 0x3e80, 0x4040}; /* 1.5 -2 0.25 3 */
    for (int i = 0; i < 4; i++) assert_int_equal(bits16(g.data, i), bf[i]);

    assert_int_equal(qs_safetensors_get(f, "half", &g), QS_OK);
    assert_int_equal(g.dtype, QS_F16);
    const uint16_t h[4] = {0x3800, 0xbc00, 0x7bff, 0x1400}; /* 0.5 -1 65504 2^-10 */
    for (int i = 0; i < 4; i++) assert_int_equal(bits16(g.data, i), h[i]);

    assert_int_equal(qs_safetensors_get(f, "steps", &g), QS_OK);
    assert_int_equal(g.dtype, QS_I64);
    assert_int_equal(g.ndim, 0);
    int64_t s64;
    memcpy(&s64, g.data, 8);
    assert_true(s64 == 123456789012LL);

    assert_int_equal(qs_safetensors_get(f, "idx", &g), QS_OK);
    assert_int_equal(g.dtype, QS_S32);
    for (int i = 0; i < 5; i++) {
        int32_t v;
        memcpy(&v, (const char *)g.data + 4 * i, 4);
        assert_int_equal(v, i - 2);
    }
    assert_int_equal(qs_safetensors_get(f, "u", &g), QS_OK);
    assert_int_equal(g.dtype, QS_U8);
    const uint8_t u[4] = {0, 1, 254, 255};
    assert_memory_equal(g.data, u, 4);

    assert_int_equal(qs_safetensors_get(f, "empty", &g), QS_OK);
    assert_int_equal(g.ndim, 2);
    assert_int_equal(g.shape[0], 0);
    assert_int_equal(g.shape[1], 3);
    qs_safetensors_close(f);
}

/* A C-written file loads in PyTorch via tools/safetensors_torch.py (skipped without torch). */
static void test_python_reads_ours(void **state) {
    const char *py = getenv("QS_PYTHON") ? getenv("QS_PYTHON") : "/usr/bin/python3";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s -c 'import torch' >/dev/null 2>&1", py);
    if (system(cmd) != 0) {
        fprintf(stderr, "note: %s has no torch; skipping the PyTorch read-back\n", py);
        skip();
    }
    char path[256];
    path_in(path, sizeof path, "for_python.safetensors");
    float w[6] = {0.5f, -1.0f, 2.0f, 3.0f, 4.0f, -5.0f};
    uint16_t bf[2] = {0x3fc0, 0xc000};
    int64_t step = 42;
    qs_st_tensor t[3] = {
        {.name = "fc.weight", .dtype = QS_F32, .ndim = 2, .shape = {2, 3}, .data = w},
        {.name = "fc.bias", .dtype = QS_BF16, .ndim = 1, .shape = {2}, .data = bf},
        {.name = "step", .dtype = QS_I64, .ndim = 0, .data = &step},
    };
    qs_st_meta meta = {"qsync_version", "0.1"};
    assert_int_equal(qs_safetensors_write(path, t, 3, &meta, 1), QS_OK);
    snprintf(cmd, sizeof cmd,
             "%s -c 'import sys, torch; sys.path.insert(0, \"%s/../../tools\"); "
             "from safetensors_torch import load_file, load_metadata; d = load_file(\"%s\"); "
             "assert list(d) == [\"fc.weight\", \"fc.bias\", \"step\"], list(d); "
             "assert torch.equal(d[\"fc.weight\"], torch.tensor([[0.5, -1, 2], [3, 4, -5]])); "
             "assert torch.equal(d[\"fc.bias\"], torch.tensor([1.5, -2], dtype=torch.bfloat16)); "
             "assert d[\"step\"].shape == () and int(d[\"step\"]) == 42; "
             "assert load_metadata(\"%s\") == {\"qsync_version\": \"0.1\"}'",
             py, qs_fixture_dir(), path, path);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        QS_TMPDIR_TEST(test_round_trip),
        QS_TMPDIR_TEST(test_write_rejects_bad_input),
        QS_TMPDIR_TEST(test_crafted_errors),
        QS_TMPDIR_TEST(test_readonly_directory),
        QS_TMPDIR_TEST(test_failed_write_keeps_previous),
        QS_TMPDIR_TEST(test_reads_python_fixture),
        QS_TMPDIR_TEST(test_python_reads_ours),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
