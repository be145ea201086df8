/* tests/test_data.c — datasets (real Fashion-MNIST, crafted IDX and CIFAR-10 files, synthetic;
 * text: the real and crafted fortunes corpus, llm.c token files, synthetic token streams) and the
 * batch loader (sharding, determinism, epochs, resume, eval padding, augmentation, token windows,
 * label buffers of label_len labels per sample). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "data/dataset.h"
#include "data/readers.h"
#include "run_cmd.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"
#define FORTUNES_DIR "/usr/share/games/fortunes"

/* ---------- file helpers ---------- */

static void path_in(char *out, size_t cap, const char *dir, const char *name) { snprintf(out, cap, "%s/%s", dir, name); }

/* Write bytes to dir/name, gzip-compressed when gz. */
static void write_file(const char *dir, const char *name, const uint8_t *data, size_t len, int gz) {
    char p[1024];
    path_in(p, sizeof p, dir, name);
    if (gz) {
        gzFile f = gzopen(p, "wb");
        assert_non_null(f);
        assert_int_equal(gzwrite(f, data, (unsigned)len), (int)len);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(p, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(data, 1, len, f), len);
        assert_int_equal(fclose(f), 0);
    }
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* IDX image file of n images h×w with pixel (i, y, x) = (i*31 + y*7 + x) & 255; returns malloc'd bytes. */
static uint8_t *idx_images(uint32_t n, uint32_t h, uint32_t w, size_t *len) {
    *len = 16 + (size_t)n * h * w;
    uint8_t *b = malloc(*len);
    assert_non_null(b);
    put_be32(b, 0x803);
    put_be32(b + 4, n);
    put_be32(b + 8, h);
    put_be32(b + 12, w);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t y = 0; y < h; y++)
            for (uint32_t x = 0; x < w; x++) b[16 + (i * h + y) * w + x] = (uint8_t)((i * 31 + y * 7 + x) & 255);
    return b;
}

/* IDX label file of n labels i % 10. */
static uint8_t *idx_labels(uint32_t n, size_t *len) {
    *len = 8 + n;
    uint8_t *b = malloc(*len);
    assert_non_null(b);
    put_be32(b, 0x801);
    put_be32(b + 4, n);
    for (uint32_t i = 0; i < n; i++) b[8 + i] = (uint8_t)(i % 10);
    return b;
}

/* Write a consistent test split (t10k) of n images; gz selects compression. */
static void write_fmnist(const char *dir, uint32_t n, int gz) {
    size_t il, ll;
    uint8_t *img = idx_images(n, 4, 3, &il), *lbl = idx_labels(n, &ll);
    write_file(dir, gz ? "t10k-images-idx3-ubyte.gz" : "t10k-images-idx3-ubyte", img, il, gz);
    write_file(dir, gz ? "t10k-labels-idx1-ubyte.gz" : "t10k-labels-idx1-ubyte", lbl, ll, gz);
    free(img);
    free(lbl);
}

/* Overwrite the images file of write_fmnist(dir, 5, gz) with a damaged copy: the big-endian
 * word at byte `patch_at` set to `patch` (patch_at < 0: none), then the last `cut` bytes left
 * out. */
static void write_images_damaged(const char *dir, int gz, int patch_at, uint32_t patch, size_t cut) {
    size_t il;
    uint8_t *img = idx_images(5, 4, 3, &il);
    if (patch_at >= 0) put_be32(img + patch_at, patch);
    write_file(dir, gz ? "t10k-images-idx3-ubyte.gz" : "t10k-images-idx3-ubyte", img, il - cut, gz);
    free(img);
}

/* Check status and message; build with -DQS_TEST_SHOW_ERRORS to print each message for review. */
static void expect_error(qs_status st, qs_status want, const char *needle1, const char *needle2) {
#ifdef QS_TEST_SHOW_ERRORS
    print_message("    [%s] %s\n", qs_status_name(st), qs_last_error());
#endif
    if (st != want) fail_msg("status %s, expected %s: %s", qs_status_name(st), qs_status_name(want), qs_last_error());
    if (needle1 && !strstr(qs_last_error(), needle1)) fail_msg("message lacks '%s': %s", needle1, qs_last_error());
    if (needle2 && !strstr(qs_last_error(), needle2)) fail_msg("message lacks '%s': %s", needle2, qs_last_error());
}

/* Load dataset `name` from dir (the training split when train) into *ds, failing the test with
 * the loader's message on an error, and check that it holds n images of h×w×c. */
static void load_checked(qs_dataset *ds, const char *name, const char *dir, bool train, int64_t n, int64_t h,
                         int64_t w, int64_t c) {
    qs_status st = qs_dataset_load(name, dir, train, ds);
    if (st != QS_OK) fail_msg("%s", qs_last_error());
    assert_int_equal(ds->n, n);
    assert_int_equal(ds->h, h);
    assert_int_equal(ds->w, w);
    assert_int_equal(ds->c, c);
}

/* ---------- real Fashion-MNIST ---------- */

static void test_fmnist_real(void **state) {
    char probe[512];
    path_in(probe, sizeof probe, FMNIST_DIR, "train-images-idx3-ubyte.gz");
    if (access(probe, R_OK) != 0) {
        print_message("skipping: %s missing (apt-get install dataset-fashion-mnist)\n", probe);
        skip();
    }
    qs_dataset ds;
    load_checked(&ds, "fashion-mnist", NULL, true, 60000, 28, 28, 1);
    assert_string_equal(ds.name, "fashion-mnist");
    assert_int_equal(ds.classes, 10);
    assert_int_equal(ds.label_len, 1);
    assert_int_equal(ds.labels[0], 9); /* Ankle boot */
    int64_t hist[10] = {0};
    for (int64_t i = 0; i < ds.n; i++) {
        assert_true(ds.labels[i] >= 0 && ds.labels[i] < 10);
        hist[ds.labels[i]]++;
    }
    for (int k = 0; k < 10; k++) assert_int_equal(hist[k], 6000);
    /* the normalisation constants match the training split (measured 0.286041 / 0.353024) */
    double m, s;
    assert_int_equal(qs_dataset_channel_stats(&ds, &m, &s), QS_OK);
    assert_true(m > 0.2860 - 1e-4 && m < 0.2860 + 1e-4);
    assert_true(s > 0.3530 - 1e-4 && s < 0.3530 + 1e-4);
    assert_true(ds.mean[0] == 0.2860f && ds.std[0] == 0.3530f);
    qs_dataset_free(&ds);
    assert_null(ds.pixels);

    assert_int_equal(qs_dataset_load("fashion-mnist", FMNIST_DIR, false, &ds), QS_OK);
    assert_int_equal(ds.n, 10000);
    assert_int_equal(ds.labels[0], 9);
    qs_dataset_free(&ds);
}

/* ---------- crafted IDX files ---------- */

static void test_idx_good(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    for (int gz = 0; gz <= 1; gz++) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s/%s", dir, gz ? "gz" : "plain");
        assert_int_equal(mkdir(sub, 0700), 0);
        write_fmnist(sub, 5, gz);
        qs_dataset ds;
        load_checked(&ds, "fashion-mnist", sub, false, 5, 4, 3, 1);
        assert_int_equal(ds.label_len, 1);
        assert_false(ds.raw_bytes);
        assert_null(ds.tokens);
        for (int i = 0; i < 5; i++) {
            assert_int_equal(ds.labels[i], i);
            for (int y = 0; y < 4; y++)
                for (int x = 0; x < 3; x++) assert_int_equal(ds.pixels[(i * 4 + y) * 3 + x], (i * 31 + y * 7 + x) & 255);
        }
        qs_dataset_free(&ds);
    }
}

static void test_idx_bad_magic(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    write_fmnist(dir, 5, 1);
    write_images_damaged(dir, 1, 0, 0x1f8b0803, 0); /* wrong magic */
    qs_dataset ds;
    expect_error(qs_dataset_load("fashion-mnist", dir, false, &ds), QS_ERR_FORMAT, "t10k-images-idx3-ubyte.gz",
                 "magic");
    assert_null(ds.pixels);
    assert_null(ds.labels);
    write_images_damaged(dir, 1, 8, 0, 0); /* zero rows */
    expect_error(qs_dataset_load("fashion-mnist", dir, false, &ds), QS_ERR_FORMAT, "implausible dimension 1 = 0",
                 "byte offset 8");
}

static void test_idx_truncated_plain(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    write_fmnist(dir, 5, 0);
    write_images_damaged(dir, 0, -1, 0, 20); /* cut inside image 3 */
    qs_dataset ds;
    expect_error(qs_dataset_load("fashion-mnist", dir, false, &ds), QS_ERR_FORMAT, "t10k-images-idx3-ubyte",
                 "truncated");
    assert_non_null(strstr(qs_last_error(), "byte offset 56")); /* 16 + 40 */
    assert_non_null(strstr(qs_last_error(), "record 3"));
    /* a complete gzip stream whose content is shorter than its header says */
    write_fmnist(dir, 5, 1);
    write_images_damaged(dir, 1, -1, 0, 12);
    expect_error(qs_dataset_load("fashion-mnist", dir, false, &ds), QS_ERR_FORMAT, "decompressed data ends at byte offset 64",
                 "record 4");
}

static void test_idx_truncated_gzip(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    write_fmnist(dir, 200, 1);
    char p[1024];
    path_in(p, sizeof p, dir, "t10k-images-idx3-ubyte.gz");
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(truncate(p, sb.st_size / 2), 0); /* cut the compressed stream */
    qs_dataset ds;
    expect_error(qs_dataset_load("fashion-mnist", dir, false, &ds), QS_ERR_FORMAT, p, "truncated gzip");
    /* only the gzip trailer missing: the payload is complete but the stream is not */
    write_fmnist(dir, 200, 1);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(truncate(p, sb.st_size - 4), 0);
    expect_error(qs_dataset_load("fashion-mnist", dir, false, &ds), QS_ERR_FORMAT, p, "truncated gzip");
    assert_non_null(strstr(qs_last_error(), "after 2416 decompressed bytes")); /* 16 + 200·12 */
    /* a damaged CRC in the gzip trailer */
    write_fmnist(dir, 200, 1);
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, -8, SEEK_END), 0);
    int ch = fgetc(f);
    assert_int_equal(fseek(f, -8, SEEK_END), 0);
    fputc(ch ^ 0x5a, f);
    assert_int_equal(fclose(f), 0);
    expect_error(qs_dataset_load("fashion-mnist", dir, false, &ds), QS_ERR_FORMAT, p, "corrupt gzip");
    assert_null(ds.pixels);
}

static void test_idx_count_mismatch(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    write_fmnist(dir, 5, 1);
    size_t ll;
    uint8_t *lbl = idx_labels(6, &ll);
    write_file(dir, "t10k-labels-idx1-ubyte.gz", lbl, ll, 1);
    free(lbl);
    qs_dataset ds;
    expect_error(qs_dataset_load("fashion-mnist", dir, false, &ds), QS_ERR_FORMAT, "count mismatch",
                 "t10k-labels-idx1-ubyte.gz");
    /* a header count smaller than the data is caught as trailing bytes */
    lbl = idx_labels(5, &ll);
    uint8_t big[64];
    memcpy(big, lbl, ll);
    big[ll] = 1;
    write_file(dir, "t10k-labels-idx1-ubyte.gz", big, ll + 1, 1);
    free(lbl);
    expect_error(qs_dataset_load("fashion-mnist", dir, false, &ds), QS_ERR_FORMAT, "trailing", "labels");
}

static void test_idx_label_range(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    write_fmnist(dir, 5, 1);
    size_t ll;
    uint8_t *lbl = idx_labels(5, &ll);
    lbl[8 + 3] = 10;
    write_file(dir, "t10k-labels-idx1-ubyte.gz", lbl, ll, 1);
    free(lbl);
    qs_dataset ds;
    expect_error(qs_dataset_load("fashion-mnist", dir, false, &ds), QS_ERR_FORMAT, "out of range", "record 3");
    assert_non_null(strstr(qs_last_error(), "t10k-labels-idx1-ubyte.gz"));
}

static void test_idx_missing(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    qs_dataset ds;
    expect_error(qs_dataset_load("fashion-mnist", dir, true, &ds), QS_ERR_NOT_FOUND, "dataset-fashion-mnist",
                 "--data-dir");
    assert_non_null(strstr(qs_last_error(), dir));
    /* only the labels exist: the images file is named */
    size_t ll;
    uint8_t *lbl = idx_labels(5, &ll);
    write_file(dir, "t10k-labels-idx1-ubyte", lbl, ll, 0);
    free(lbl);
    expect_error(qs_dataset_load("fashion-mnist", dir, false, &ds), QS_ERR_NOT_FOUND, "t10k-images-idx3-ubyte",
                 "apt-get install dataset-fashion-mnist");
    expect_error(qs_dataset_load("no-such-set", NULL, true, &ds), QS_ERR_NOT_FOUND, "no-such-set", "fashion-mnist");
}

/* ---------- crafted CIFAR-10 files ---------- */

/* n records: label (r*3+1) % 10, channel ch of pixel (y, x) = (r + ch*50 + y*3 + x) & 255. */
static uint8_t *cifar_records(int n, size_t *len) {
    *len = (size_t)n * 3073;
    uint8_t *b = malloc(*len);
    assert_non_null(b);
    for (int r = 0; r < n; r++) {
        uint8_t *rec = b + (size_t)r * 3073;
        rec[0] = (uint8_t)((r * 3 + 1) % 10);
        for (int ch = 0; ch < 3; ch++)
            for (int y = 0; y < 32; y++)
                for (int x = 0; x < 32; x++) rec[1 + ch * 1024 + y * 32 + x] = (uint8_t)((r + ch * 50 + y * 3 + x) & 255);
    }
    return b;
}

static void check_cifar_record(const qs_dataset *ds, int64_t i, int r) {
    assert_int_equal(ds->labels[i], (r * 3 + 1) % 10);
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 32; x++)
            for (int ch = 0; ch < 3; ch++)
                assert_int_equal(ds->pixels[((i * 32 + y) * 32 + x) * 3 + ch], (r + ch * 50 + y * 3 + x) & 255);
}

static void test_cifar_crafted(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    size_t len;
    uint8_t *b = cifar_records(3, &len);
    write_file(dir, "test_batch.bin", b, len, 0);
    qs_dataset ds;
    load_checked(&ds, "cifar10", dir, false, 3, 32, 32, 3);
    assert_string_equal(ds.name, "cifar10");
    assert_int_equal(ds.classes, 10);
    assert_int_equal(ds.label_len, 1);
    for (int r = 0; r < 3; r++) check_cifar_record(&ds, r, r);
    assert_true(ds.std[0] > 0 && ds.std[1] > 0 && ds.std[2] > 0);
    qs_dataset_free(&ds);

    /* train split: five batch files in the archive's subfolder, concatenated in order */
    char sub[512];
    snprintf(sub, sizeof sub, "%s/cifar-10-batches-bin", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    expect_error(qs_dataset_load("cifar10", dir, true, &ds), QS_ERR_NOT_FOUND, "data_batch_1.bin", "--data-dir");
    for (int k = 1; k <= 5; k++) {
        char name[32];
        snprintf(name, sizeof name, "data_batch_%d.bin", k);
        write_file(sub, name, b + (size_t)(k % 3) * 3073, 3073, 0);
        if (k == 4) {
            expect_error(qs_dataset_load("cifar10", dir, true, &ds), QS_ERR_NOT_FOUND, "data_batch_5.bin", NULL);
        }
    }
    qs_status st = qs_dataset_load("cifar10", dir, true, &ds);
    if (st != QS_OK) fail_msg("%s", qs_last_error());
    assert_int_equal(ds.n, 5);
    for (int k = 1; k <= 5; k++) check_cifar_record(&ds, k - 1, k % 3);
    qs_dataset_free(&ds);
    free(b);

    expect_error(qs_dataset_load("cifar10", NULL, true, &ds), QS_ERR_INVALID_ARG, "data directory", NULL);
}

static void test_cifar_truncated(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    size_t len;
    uint8_t *b = cifar_records(3, &len);
    write_file(dir, "test_batch.bin", b, len - 100, 0);
    qs_dataset ds;
    expect_error(qs_dataset_load("cifar10", dir, false, &ds), QS_ERR_FORMAT, "test_batch.bin", "truncated");
    assert_non_null(strstr(qs_last_error(), "record 2"));
    assert_non_null(strstr(qs_last_error(), "byte offset 6146"));
    assert_null(ds.pixels);
    b[3073] = 12; /* label out of range in record 1 */
    write_file(dir, "test_batch.bin", b, len, 0);
    expect_error(qs_dataset_load("cifar10", dir, false, &ds), QS_ERR_FORMAT, "out of range", "record 1");
    write_file(dir, "test_batch.bin", b, 0, 0);
    expect_error(qs_dataset_load("cifar10", dir, false, &ds), QS_ERR_FORMAT, "empty", NULL);
    free(b);
}

/* ---------- synthetic ---------- */

/* "synthetic:HxWxC" gives that shape (the default is Fashion-MNIST's 28x28x1); a malformed one is refused. */
static void test_synthetic_shape(void **state) {
    (void)state;
    qs_dataset d;
    assert_int_equal(qs_dataset_load("synthetic:32x32x3", NULL, false, &d), QS_OK);
    assert_int_equal(d.h, 32);
    assert_int_equal(d.w, 32);
    assert_int_equal(d.c, 3);
    assert_int_equal(d.classes, 10);
    qs_dataset_free(&d);
    assert_int_equal(qs_dataset_load("synthetic", NULL, false, &d), QS_OK);
    assert_int_equal(d.h * 100 + d.c, 2801);
    qs_dataset_free(&d);
    const char *bad[] = {"synthetic:32x32", "synthetic:32x32x3x", "synthetic:0x32x3", "synthetic:32x32x0", "synthetic:"};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(qs_dataset_load(bad[i], NULL, false, &d), QS_ERR_INVALID_ARG);
        assert_non_null(strstr(qs_last_error(), "must be HxWxC"));
    }
}

static void test_synthetic(void **state) {
    qs_dataset a, b, te;
    assert_int_equal(qs_dataset_synthetic(400, 8, 8, 2, 5, 42, &a), QS_OK);
    assert_int_equal(qs_dataset_synthetic(400, 8, 8, 2, 5, 42, &b), QS_OK);
    assert_string_equal(a.name, "synthetic");
    assert_int_equal(a.label_len, 1);
    assert_memory_equal(a.pixels, b.pixels, 400 * 8 * 8 * 2);
    assert_memory_equal(a.labels, b.labels, 400 * sizeof(int32_t));
    qs_dataset_free(&b);
    assert_int_equal(qs_dataset_synthetic(400, 8, 8, 2, 5, 43, &b), QS_OK);
    assert_true(memcmp(a.pixels, b.pixels, 400 * 8 * 8 * 2) != 0);
    qs_dataset_free(&b);
    /* normalisation constants agree with the data */
    double m[2], s[2];
    assert_int_equal(qs_dataset_channel_stats(&a, m, s), QS_OK);
    for (int ch = 0; ch < 2; ch++) {
        assert_true(m[ch] > a.mean[ch] - 0.03 && m[ch] < a.mean[ch] + 0.03);
        assert_true(s[ch] > a.std[ch] * 0.85 && s[ch] < a.std[ch] * 1.15);
    }
    /* learnable: nearest class mean, fitted on one range, classifies a disjoint range */
    assert_int_equal(qs_dataset_synthetic_range(200, 8, 8, 2, 5, 42, 1000000, &te), QS_OK);
    const int D = 8 * 8 * 2;
    double cen[5][128] = {{0}};
    int cnt[5] = {0};
    for (int i = 0; i < 400; i++) {
        cnt[a.labels[i]]++;
        for (int j = 0; j < D; j++) cen[a.labels[i]][j] += a.pixels[i * D + j];
    }
    for (int k = 0; k < 5; k++)
        for (int j = 0; j < D; j++) cen[k][j] /= cnt[k];
    int correct = 0;
    for (int i = 0; i < 200; i++) {
        int best = -1;
        double bd = 0;
        for (int k = 0; k < 5; k++) {
            double d = 0;
            for (int j = 0; j < D; j++) d += (te.pixels[i * D + j] - cen[k][j]) * (te.pixels[i * D + j] - cen[k][j]);
            if (best < 0 || d < bd) best = k, bd = d;
        }
        correct += best == te.labels[i];
    }
    assert_true(correct >= 190);
    qs_dataset_free(&a);
    qs_dataset_free(&te);
    expect_error(qs_dataset_synthetic(10, 8, 8, 5, 3, 1, &a), QS_ERR_INVALID_ARG, "channels", NULL);
    assert_int_equal(qs_dataset_load("synthetic", NULL, false, &a), QS_OK);
    assert_int_equal(a.n, 2000);
    assert_int_equal(qs_dataset_truncate(&a, 300), QS_OK);
    assert_int_equal(a.n, 300);
    expect_error(qs_dataset_truncate(&a, 301), QS_ERR_INVALID_ARG, "1..300", NULL);
    qs_dataset_free(&a);
}

/* ---------- loader ---------- */

/* A loader-test dataset: n samples 5×4×3. */
static void small_ds(qs_dataset *ds, int64_t n) { assert_int_equal(qs_dataset_synthetic(n, 5, 4, 3, 7, 9, ds), QS_OK); }

static qs_loader_options opts(int64_t gb, int rank, int world) {
    qs_loader_options o = {.global_batch = gb, .rank = rank, .world = world, .seed = 123, .shuffle = true,
                           .drop_last = true, .augment = true, .crop_pad = 1};
    return o;
}

static void test_loader_sharding(void **state) {
    qs_dataset ds;
    small_ds(&ds, 103);
    const int64_t S = 5 * 4 * 3, GB = 7;
    for (int world = 2; world <= 3; world++) {
        qs_loader one, *parts = calloc((size_t)world, sizeof *parts);
        qs_loader_options o1 = opts(GB, 0, 1);
        assert_int_equal(qs_loader_init(&one, &ds, &o1), QS_OK);
        assert_int_equal(qs_loader_local_batch(&one), GB);
        int64_t sum = 0;
        for (int r = 0; r < world; r++) {
            qs_loader_options o = opts(GB, r, world);
            assert_int_equal(qs_loader_init(&parts[r], &ds, &o), QS_OK);
            int64_t lb = qs_loader_local_batch(&parts[r]);
            assert_int_equal(lb, GB / world + (r < GB % world ? 1 : 0));
            assert_int_equal(qs_loader_steps_per_epoch(&parts[r]), 103 / GB);
            sum += lb;
        }
        assert_int_equal(sum, GB);
        float xg[7 * 60], xr[7 * 60];
        int32_t yg[7], yr[7];
        for (int step = 0; step < 20; step++) { /* crosses the epoch boundary at 14 */
            int64_t v;
            bool es1, es;
            assert_int_equal(qs_loader_next(&one, xg, yg, &v, &es1), QS_OK);
            assert_int_equal(v, GB);
            assert_int_equal(es1, step % 14 == 0);
            int64_t off = 0;
            for (int r = 0; r < world; r++) {
                int64_t lb = qs_loader_local_batch(&parts[r]);
                assert_int_equal(qs_loader_next(&parts[r], xr, yr, &v, &es), QS_OK);
                assert_int_equal(v, lb);
                assert_int_equal(es, es1);
                assert_memory_equal(xr, xg + off * S, (size_t)(lb * S) * sizeof(float));
                assert_memory_equal(yr, yg + off, (size_t)lb * sizeof(int32_t));
                off += lb;
            }
        }
        qs_loader_free(&one);
        for (int r = 0; r < world; r++) qs_loader_free(&parts[r]);
        free(parts);
    }
    qs_loader bad;
    qs_loader_options o = opts(2, 0, 3);
    expect_error(qs_loader_init(&bad, &ds, &o), QS_ERR_INVALID_ARG, "world size", NULL);
    o = opts(8, 3, 3);
    expect_error(qs_loader_init(&bad, &ds, &o), QS_ERR_INVALID_ARG, "rank 3", NULL);
    o = opts(200, 0, 1);
    expect_error(qs_loader_init(&bad, &ds, &o), QS_ERR_INVALID_ARG, "fewer than one global batch", NULL);
    qs_dataset_free(&ds);
}

/* Labels of one full epoch (drop_last, 1 rank) into out[steps*gb]. */
static void epoch_labels(qs_loader *ld, int32_t *out, float *x) {
    int64_t gb = qs_loader_local_batch(ld), steps = qs_loader_steps_per_epoch(ld);
    for (int64_t s = 0; s < steps; s++) assert_int_equal(qs_loader_next(ld, x, out + s * gb, NULL, NULL), QS_OK);
}

static void test_loader_determinism_epochs(void **state) {
    qs_dataset ds;
    small_ds(&ds, 100);
    /* unique labels make the visiting order visible */
    for (int i = 0; i < 100; i++) ds.labels[i] = i;
    qs_loader a, b, c;
    qs_loader_options o = opts(10, 0, 1), oc = o;
    oc.seed = 124;
    assert_int_equal(qs_loader_init(&a, &ds, &o), QS_OK);
    assert_int_equal(qs_loader_init(&b, &ds, &o), QS_OK);
    assert_int_equal(qs_loader_init(&c, &ds, &oc), QS_OK);
    float x[10 * 60];
    int32_t la0[100], la1[100], lb0[100], lb1[100], lc0[100];
    epoch_labels(&a, la0, x);
    epoch_labels(&a, la1, x);
    epoch_labels(&b, lb0, x);
    epoch_labels(&b, lb1, x);
    epoch_labels(&c, lc0, x);
    assert_memory_equal(la0, lb0, sizeof la0);
    assert_memory_equal(la1, lb1, sizeof la1);
    assert_true(memcmp(la0, la1, sizeof la0) != 0); /* epochs differ */
    assert_true(memcmp(la0, lc0, sizeof la0) != 0); /* seeds differ */
    /* each epoch is a permutation */
    int seen[100] = {0};
    for (int i = 0; i < 100; i++) seen[la1[i]]++;
    for (int i = 0; i < 100; i++) assert_int_equal(seen[i], 1);
    /* without shuffle: identity order */
    qs_loader d;
    o.shuffle = false;
    assert_int_equal(qs_loader_init(&d, &ds, &o), QS_OK);
    epoch_labels(&d, la0, x);
    for (int i = 0; i < 100; i++) assert_int_equal(la0[i], i);
    qs_loader_free(&a);
    qs_loader_free(&b);
    qs_loader_free(&c);
    qs_loader_free(&d);
    qs_dataset_free(&ds);
}

static void test_loader_resume(void **state) {
    qs_dataset ds;
    small_ds(&ds, 50);
    qs_loader a, b;
    qs_loader_options o = opts(6, 1, 2); /* rank 1 of 2, 8 steps per epoch */
    assert_int_equal(qs_loader_init(&a, &ds, &o), QS_OK);
    assert_int_equal(qs_loader_steps_per_epoch(&a), 8);
    float xa[3 * 60], xb[3 * 60];
    int32_t ya[3], yb[3];
    int64_t e, bi;
    qs_loader_get_position(&a, &e, &bi);
    assert_true(e == 0 && bi == 0);
    for (int i = 0; i < 8; i++) assert_int_equal(qs_loader_next(&a, xa, ya, NULL, NULL), QS_OK);
    qs_loader_get_position(&a, &e, &bi); /* end of epoch 0 reads as the start of epoch 1 */
    assert_true(e == 1 && bi == 0);
    for (int i = 0; i < 5; i++) assert_int_equal(qs_loader_next(&a, xa, ya, NULL, NULL), QS_OK);
    qs_loader_get_position(&a, &e, &bi);
    assert_true(e == 1 && bi == 5);
    assert_int_equal(qs_loader_init(&b, &ds, &o), QS_OK);
    assert_int_equal(qs_loader_set_position(&b, e, bi), QS_OK);
    for (int i = 0; i < 12; i++) { /* into epochs 2 and 3 */
        bool esa, esb;
        assert_int_equal(qs_loader_next(&a, xa, ya, NULL, &esa), QS_OK);
        assert_int_equal(qs_loader_next(&b, xb, yb, NULL, &esb), QS_OK);
        assert_int_equal(esa, esb);
        assert_int_equal(esa, i % 8 == 3);
        assert_memory_equal(xa, xb, sizeof xa);
        assert_memory_equal(ya, yb, sizeof ya);
    }
    /* jumping back reproduces an earlier batch (no hidden history) */
    float first[3 * 60];
    assert_int_equal(qs_loader_set_position(&b, 0, 0), QS_OK);
    bool es;
    assert_int_equal(qs_loader_next(&b, first, yb, NULL, &es), QS_OK);
    assert_true(es);
    qs_loader c;
    assert_int_equal(qs_loader_init(&c, &ds, &o), QS_OK);
    assert_int_equal(qs_loader_next(&c, xa, ya, NULL, NULL), QS_OK);
    assert_memory_equal(first, xa, sizeof xa);
    expect_error(qs_loader_set_position(&b, 0, 9), QS_ERR_INVALID_ARG, "8 batches per epoch", NULL);
    qs_loader_free(&a);
    qs_loader_free(&b);
    qs_loader_free(&c);
    qs_dataset_free(&ds);
}

static void test_loader_eval_padding(void **state) {
    qs_dataset ds;
    small_ds(&ds, 10);
    const int64_t S = 60;
    qs_loader_options o = {.global_batch = 4, .rank = 0, .world = 1, .seed = 5};
    qs_loader one, r0, r1;
    assert_int_equal(qs_loader_init(&one, &ds, &o), QS_OK);
    assert_int_equal(qs_loader_steps_per_epoch(&one), 3);
    o.world = 2;
    assert_int_equal(qs_loader_init(&r0, &ds, &o), QS_OK);
    o.rank = 1;
    assert_int_equal(qs_loader_init(&r1, &ds, &o), QS_OK);
    float x[4 * 60], x0[2 * 60], x1[2 * 60];
    int32_t y[4], y0[2], y1[2];
    int64_t v, v0, v1;
    for (int s = 0; s < 3; s++) {
        assert_int_equal(qs_loader_next(&one, x, y, &v, NULL), QS_OK);
        assert_int_equal(qs_loader_next(&r0, x0, y0, &v0, NULL), QS_OK);
        assert_int_equal(qs_loader_next(&r1, x1, y1, &v1, NULL), QS_OK);
        assert_int_equal(v, s < 2 ? 4 : 2);
        assert_int_equal(v0, 2);
        assert_int_equal(v1, s < 2 ? 2 : 0);
        assert_memory_equal(x0, x, sizeof x0);
        assert_memory_equal(x1, x + 2 * S, sizeof x1);
    }
    /* last batch: samples 8, 9 real, then sample 9 repeated; identity order, no augmentation */
    for (int j = 0; j < 4; j++) {
        int64_t idx = j < 2 ? 8 + j : 9;
        assert_int_equal(y[j], ds.labels[idx]);
        for (int64_t k = 0; k < S; k++) {
            int ch = (int)(k % 3);
            float want = (float)((ds.pixels[idx * S + k] / 255.0 - ds.mean[ch]) / ds.std[ch]);
            assert_true(x[j * S + k] == want);
        }
    }
    bool es;
    assert_int_equal(qs_loader_next(&one, x, y, &v, &es), QS_OK); /* wraps to the next epoch */
    assert_true(es);
    assert_int_equal(v, 4);
    qs_loader_free(&one);
    qs_loader_free(&r0);
    qs_loader_free(&r1);
    qs_dataset_free(&ds);
}

static void test_loader_augment(void **state) {
    qs_dataset ds;
    small_ds(&ds, 40);
    const int64_t H = 5, W = 4, C = 3, S = H * W * C;
    qs_loader_options o = {.global_batch = 40, .rank = 0, .world = 1, .seed = 77, .drop_last = true};
    qs_loader plain, aug, aug2, flip;
    assert_int_equal(qs_loader_init(&plain, &ds, &o), QS_OK);
    o.augment = true;
    o.crop_pad = 2;
    assert_int_equal(qs_loader_init(&aug, &ds, &o), QS_OK);
    assert_int_equal(qs_loader_init(&aug2, &ds, &o), QS_OK);
    o.crop_pad = 0; /* flip only */
    assert_int_equal(qs_loader_init(&flip, &ds, &o), QS_OK);
    static float xp[40 * 60], xa[40 * 60], xa2[40 * 60], xf[40 * 60];
    int32_t yp[40], ya[40], ya2[40], yf[40];
    assert_int_equal(qs_loader_next(&plain, xp, yp, NULL, NULL), QS_OK);
    assert_int_equal(qs_loader_next(&aug, xa, ya, NULL, NULL), QS_OK);
    assert_int_equal(qs_loader_next(&aug2, xa2, ya2, NULL, NULL), QS_OK);
    assert_int_equal(qs_loader_next(&flip, xf, yf, NULL, NULL), QS_OK);
    assert_memory_equal(yp, ya, sizeof yp); /* labels kept */
    assert_memory_equal(yp, yf, sizeof yp);
    assert_memory_equal(xa, xa2, sizeof xa); /* deterministic */
    int changed = 0, flipped = 0, zero_seen = 0;
    for (int i = 0; i < 40; i++) {
        changed += memcmp(xp + i * S, xa + i * S, S * sizeof(float)) != 0;
        /* every flip-only sample is the original or its mirror image */
        bool same = true, mirror = true;
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++)
                for (int64_t ch = 0; ch < C; ch++) {
                    float got = xf[i * S + (y * W + x) * C + ch];
                    same &= got == xp[i * S + (y * W + x) * C + ch];
                    mirror &= got == xp[i * S + (y * W + (W - 1 - x)) * C + ch];
                }
        assert_true(same || mirror);
        flipped += !same;
        /* a crop window outside the image reads zero pixels: value (0 - mean)/std */
        for (int64_t k = 0; k < S; k++) zero_seen += xa[i * S + k] == (float)((0.0 - ds.mean[k % 3]) / ds.std[k % 3]);
    }
    assert_true(changed >= 30);
    assert_true(flipped >= 10 && flipped <= 30);
    assert_true(zero_seen > 0);
    /* a different epoch draws different crops */
    assert_int_equal(qs_loader_next(&aug, xa2, ya2, NULL, NULL), QS_OK);
    assert_true(memcmp(xa, xa2, sizeof xa) != 0);
    qs_loader_free(&plain);
    qs_loader_free(&aug);
    qs_loader_free(&aug2);
    qs_loader_free(&flip);
    qs_dataset_free(&ds);
}

/* ---------- text: the fortunes corpus ---------- */

/* Figures of the Debian 12 packages fortunes + fortunes-min 1:1.99.1-7.3 (docs/DATA.md). */
#define FORTUNES_TRAIN_TOKENS 2300293
#define FORTUNES_TEST_TOKENS 261153
static const int64_t topics_train[9] = {946, 182, 178, 186, 135, 67, 632, 563, 132};
static const int64_t topics_test[9] = {105, 21, 20, 20, 15, 7, 71, 62, 15};

/* Skip the current test when the fortunes packages are not installed. */
static void need_fortunes(void) {
    char probe[512];
    path_in(probe, sizeof probe, FORTUNES_DIR, "computers");
    if (access(probe, R_OK) != 0) {
        print_message("skipping: %s missing (apt-get install fortunes fortunes-min)\n", probe);
        skip();
    }
}

/* Check that a loader over the token stream ds (no shuffle) gives window j of the stream for
 * its first `batch` samples: x the tokens as floats, y the same positions shifted by one. */
static void check_windows(const qs_dataset *ds, int64_t batch) {
    const int64_t T = ds->c;
    qs_loader ld;
    qs_loader_options o = {.global_batch = batch, .rank = 0, .world = 1, .seed = 1};
    assert_int_equal(qs_loader_init(&ld, ds, &o), QS_OK);
    float *x = malloc((size_t)(batch * T) * sizeof *x);
    int32_t *y = malloc((size_t)(batch * T) * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    int64_t v;
    assert_int_equal(qs_loader_next(&ld, x, y, &v, NULL), QS_OK);
    assert_int_equal(v, batch);
    for (int64_t j = 0; j < batch; j++)
        for (int64_t t = 0; t < T; t++) {
            assert_true(x[j * T + t] == (float)ds->tokens[j * T + t]);
            assert_int_equal(y[j * T + t], ds->tokens[j * T + t + 1]);
        }
    free(x);
    free(y);
    qs_loader_free(&ld);
}

/* The installed corpus: the documented token counts, windows and where the stream starts. */
static void test_fortunes_real(void **state) {
    (void)state;
    need_fortunes();
    qs_dataset tr, te;
    qs_status st = qs_dataset_load("fortunes", NULL, true, &tr);
    if (st != QS_OK) fail_msg("%s", qs_last_error());
    assert_int_equal(qs_dataset_load("fortunes", FORTUNES_DIR, false, &te), QS_OK);
    assert_string_equal(tr.name, "fortunes");
    assert_int_equal(tr.n_tokens, FORTUNES_TRAIN_TOKENS);
    assert_int_equal(te.n_tokens, FORTUNES_TEST_TOKENS);
    assert_int_equal(tr.n, (FORTUNES_TRAIN_TOKENS - 1) / 256);
    assert_int_equal(te.n, (FORTUNES_TEST_TOKENS - 1) / 256);
    assert_true(tr.h == 1 && tr.w == 1 && tr.c == 256 && tr.label_len == 256 && tr.classes == 256 && tr.raw_bytes);
    assert_null(tr.pixels);
    assert_null(tr.labels);
    /* the stream starts with the first fortune of the first file (art) */
    FILE *f = fopen(FORTUNES_DIR "/art", "rb");
    assert_non_null(f);
    uint8_t head[40];
    assert_int_equal(fread(head, 1, sizeof head, f), sizeof head);
    fclose(f);
    for (int i = 0; i < 40; i++) assert_int_equal(tr.tokens[i], head[i]);
    for (int64_t i = 0; i < te.n_tokens; i++) assert_true(te.tokens[i] > 0 && te.tokens[i] < 256);
    assert_true(te.tokens[te.n_tokens - 1] == '\n' && te.tokens[te.n_tokens - 2] == '\n');
    check_windows(&tr, 8);
    check_windows(&te, 8);
    qs_dataset_free(&tr);
    qs_dataset_free(&te);
    /* another sequence length: the same stream, other windows */
    assert_int_equal(qs_dataset_load("fortunes:1000", NULL, false, &te), QS_OK);
    assert_int_equal(te.n, (FORTUNES_TEST_TOKENS - 1) / 1000);
    assert_int_equal(te.label_len, 1000);
    qs_dataset_free(&te);
}

/* The installed corpus as topics: the documented per-class counts; padding only at the end. */
static void test_fortune_topics_real(void **state) {
    (void)state;
    need_fortunes();
    for (int split = 0; split < 2; split++) {
        qs_dataset ds;
        qs_status st = qs_dataset_load("fortune-topics", NULL, split == 0, &ds);
        if (st != QS_OK) fail_msg("%s", qs_last_error());
        const int64_t *want = split == 0 ? topics_train : topics_test;
        int64_t hist[9] = {0}, total = 0, padded = 0;
        for (int k = 0; k < 9; k++) total += want[k];
        assert_string_equal(ds.name, "fortune-topics");
        assert_int_equal(ds.n, total);
        assert_true(ds.h == 1 && ds.w == 1 && ds.c == 128 && ds.label_len == 1 && ds.classes == 9 && ds.raw_bytes);
        for (int64_t i = 0; i < ds.n; i++) {
            assert_true(ds.labels[i] >= 0 && ds.labels[i] < 9);
            hist[ds.labels[i]]++;
            const uint8_t *p = ds.pixels + i * 128;
            int64_t len = 0;
            while (len < 128 && p[len]) len++;
            assert_true(len > 0);
            for (int64_t t = len; t < 128; t++) assert_int_equal(p[t], 0); /* padding only at the end */
            padded += len < 128;
        }
        for (int k = 0; k < 9; k++) assert_int_equal(hist[k], want[k]);
        assert_true(padded > ds.n / 3 && padded < ds.n); /* both short and truncated fortunes */
        qs_dataset_free(&ds);
    }
    assert_string_equal(qs_fortune_topics[0], "computers");
    assert_string_equal(qs_fortune_topics[8], "sports");
}

/* A crafted corpus in dir: file a with 11 fortunes (an empty one skipped, the last one without a
 * final newline), file b with B0..B8, and things the corpus must skip. Corpus fortunes 9 (A9) and
 * 19 (B8) form the test split. */
static void write_fortune_dir(const char *dir) {
    const char *a = "A0\n%\nA1 x\n\nA1 y\n\n\n%\n\n%\nA2\n%\nA3\n%\nA4\n%\nA5\n%\nA6\n%\nA7\n%\nA8\n%\nA9\n%\nA10";
    const char *b = "B0\n%\nB1\n%\nB2\n%\nB3\n%DCL not a separator\n%\nB4\n%\nB5\n%\nB6\n%\nB7\n%\nB8\n%\n";
    write_file(dir, "b", (const uint8_t *)b, strlen(b), 0);
    write_file(dir, "a", (const uint8_t *)a, strlen(a), 0);
    write_file(dir, "a.dat", (const uint8_t *)"%\nDAT\n", 6, 0);
    write_file(dir, ".hidden", (const uint8_t *)"H\n", 2, 0);
    char p[1024], q[1100];
    path_in(p, sizeof p, dir, "a.u8");
    assert_int_equal(symlink("a", p), 0);
    path_in(p, sizeof p, dir, "zlink");
    assert_int_equal(symlink("b", p), 0);
    path_in(p, sizeof p, dir, "sub");
    assert_int_equal(mkdir(p, 0700), 0);
    path_in(q, sizeof q, p, "c");
    FILE *f = fopen(q, "wb");
    assert_non_null(f);
    fputs("C\n", f);
    fclose(f);
}

/* True when ds's token stream is exactly the bytes of want. */
static bool stream_is(const qs_dataset *ds, const char *want) {
    if (ds->n_tokens != (int64_t)strlen(want)) {
        print_message("stream of %lld tokens, expected %zu\n", (long long)ds->n_tokens, strlen(want));
        return false;
    }
    for (int64_t i = 0; i < ds->n_tokens; i++)
        if (ds->tokens[i] != (uint8_t)want[i]) return false;
    return true;
}

/* Corpus rules (skipped files, separators, empty fortunes), the every-10th split, errors. */
static void test_fortunes_crafted(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    write_fortune_dir(dir);
    qs_dataset tr, te;
    qs_status st = qs_dataset_load("fortunes:3", dir, true, &tr);
    if (st != QS_OK) fail_msg("%s", qs_last_error());
    assert_int_equal(qs_dataset_load("fortunes:3", dir, false, &te), QS_OK);
    assert_true(stream_is(&tr, "A0\n\nA1 x\n\nA1 y\n\nA2\n\nA3\n\nA4\n\nA5\n\nA6\n\nA7\n\nA8\n\nA10\n\n"
                               "B0\n\nB1\n\nB2\n\nB3\n%DCL not a separator\n\nB4\n\nB5\n\nB6\n\nB7\n\n"));
    assert_true(stream_is(&te, "A9\n\nB8\n\n"));
    assert_int_equal(te.n, 2);          /* (8 - 1) / 3 windows */
    assert_int_equal(tr.n, (tr.n_tokens - 1) / 3);
    check_windows(&tr, tr.n);
    check_windows(&te, 2);
    qs_dataset_free(&tr);
    qs_dataset_free(&te);
    /* a sequence longer than the test stream allows */
    expect_error(qs_dataset_load("fortunes:8", dir, false, &te), QS_ERR_INVALID_ARG, "fewer than one window", "test split");
    /* malformed names */
    const char *bad[] = {"fortunes:", "fortunes:0", "fortunes:x", "fortunes:65537", "fortunes:-3"};
    for (int i = 0; i < 5; i++) expect_error(qs_dataset_load(bad[i], dir, true, &tr), QS_ERR_INVALID_ARG, "fortunes:T", NULL);
    /* no directory, no files */
    char missing[1024];
    path_in(missing, sizeof missing, dir, "nothing-here");
    expect_error(qs_dataset_load("fortunes", missing, true, &tr), QS_ERR_NOT_FOUND, "apt-get install fortunes fortunes-min",
                 missing);
    expect_error(qs_dataset_load("fortune-topics", missing, true, &tr), QS_ERR_NOT_FOUND, "fortunes-min", "--data-dir");
    path_in(missing, sizeof missing, dir, "sub/none");
    assert_int_equal(mkdir(missing, 0700), 0);
    expect_error(qs_dataset_load("fortunes", missing, true, &tr), QS_ERR_NOT_FOUND, "no fortune files", missing);
    assert_null(tr.tokens);
}

/* Fortunes of the crafted topic corpus: file index (into names), text. */
typedef struct crafted_fortune {
    int file;
    char text[64];
} crafted_fortune;

/* Topic labels, truncation and zero padding, the split by corpus index, the pad-byte and
 * missing-file errors. */
static void test_fortune_topics_crafted(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    /* "aaa" (not a topic) first, then every topic file; corpus order is by name */
    const char *names[10] = {"aaa"};
    for (int k = 0; k < 9; k++) names[k + 1] = qs_fortune_topics[k];
    crafted_fortune fs[64];
    int nf = 0;
    for (int i = 0; i < 10; i++) {
        char body[1024] = "";
        int count = 2 + i % 3;
        for (int j = 0; j < count; j++) {
            crafted_fortune *f = &fs[nf++];
            f->file = i;
            if (i == 1 && j == 0) snprintf(f->text, sizeof f->text, "a long fortune about computers\nand more");
            else snprintf(f->text, sizeof f->text, "%s %d", names[i], j);
            strcat(body, f->text);
            strcat(body, "\n%\n");
        }
        write_file(dir, names[i], (const uint8_t *)body, strlen(body), 0);
    }
    const int64_t T = 16;
    for (int split = 0; split < 2; split++) {
        qs_dataset ds;
        qs_status st = qs_dataset_load("fortune-topics:16", dir, split == 0, &ds);
        if (st != QS_OK) fail_msg("%s", qs_last_error());
        assert_int_equal(ds.c, T);
        int64_t j = 0;
        for (int k = 0; k < nf; k++) {
            if (fs[k].file == 0 || (k % 10 == 9) != (split == 1)) continue;
            assert_true(j < ds.n);
            assert_int_equal(ds.labels[j], fs[k].file - 1);
            uint8_t want[16] = {0};
            size_t len = strlen(fs[k].text);
            memcpy(want, fs[k].text, len < 16 ? len : 16);
            assert_memory_equal(ds.pixels + j * T, want, 16);
            j++;
        }
        assert_int_equal(ds.n, j);
        /* the loader hands the bytes over unnormalised, one label per sample */
        qs_loader ld;
        qs_loader_options o = {.global_batch = 2, .rank = 0, .world = 1, .seed = 3};
        assert_int_equal(qs_loader_init(&ld, &ds, &o), QS_OK);
        float x[2 * 16];
        int32_t y[3] = {-7, -7, -7};
        assert_int_equal(qs_loader_next(&ld, x, y, NULL, NULL), QS_OK);
        for (int i = 0; i < 32; i++) assert_true(x[i] == (float)ds.pixels[i]);
        assert_true(y[0] == ds.labels[0] && y[1] == ds.labels[1] && y[2] == -7);
        qs_loader_free(&ld);
        o.augment = true;
        expect_error(qs_loader_init(&ld, &ds, &o), QS_ERR_INVALID_ARG, "token sequences", "--augment");
        qs_dataset_free(&ds);
    }
    /* byte 0 in a topic fortune: it is the pad byte */
    write_file(dir, "law", (const uint8_t *)"law\0zero\n%\n", 11, 0);
    qs_dataset ds;
    expect_error(qs_dataset_load("fortune-topics:16", dir, true, &ds), QS_ERR_FORMAT, "law", "byte 0 at byte offset 3");
    /* a topic file missing */
    char p[1024];
    path_in(p, sizeof p, dir, "sports");
    assert_int_equal(unlink(p), 0);
    expect_error(qs_dataset_load("fortune-topics", dir, true, &ds), QS_ERR_NOT_FOUND, "sports", "apt-get install fortunes");
}

/* ---------- text: llm.c token files ---------- */

/* Write raw bytes as an llm.c token file by hand: header words h[0..2], then ntok tokens i*3 % 1000. */
static void write_raw_tokens(const char *dir, const char *name, int32_t magic, int32_t version, int32_t count,
                             int64_t ntok, size_t cut) {
    size_t len = 1024 + 2 * (size_t)ntok;
    uint8_t *b = calloc(1, len);
    assert_non_null(b);
    int32_t h[3] = {magic, version, count};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 4; i++) b[4 * k + i] = (uint8_t)((uint32_t)h[k] >> (8 * i));
    for (int64_t i = 0; i < ntok; i++) {
        uint16_t t = (uint16_t)(i * 3 % 1000);
        b[1024 + 2 * i] = (uint8_t)t;
        b[1024 + 2 * i + 1] = (uint8_t)(t >> 8);
    }
    write_file(dir, name, b, len - cut, 0);
    free(b);
}

/* Number of entries in dir other than . and .. */
static int dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* Writer and reader agree byte for byte; vocabulary, val sibling and window rules. */
static void test_token_file_roundtrip(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    enum { N = 70001 };
    uint16_t *tok = malloc(N * sizeof *tok);
    assert_non_null(tok);
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)(i * 7 % 50000);
    tok[5] = 65535;
    tok[N - 1] = 65534;
    char tr[1024], va[1024], spec[1200];
    path_in(tr, sizeof tr, dir, "shakespeare_train.bin");
    path_in(va, sizeof va, dir, "shakespeare_val.bin");
    assert_int_equal(qs_token_file_write(tr, tok, N), QS_OK);
    assert_int_equal(dir_entries(dir), 1); /* no temporary file left */
    struct stat sb;
    assert_int_equal(stat(tr, &sb), 0);
    assert_int_equal(sb.st_size, 1024 + 2 * N);
    FILE *f = fopen(tr, "rb");
    assert_non_null(f);
    uint8_t h[16];
    assert_int_equal(fread(h, 1, 16, f), 16);
    fclose(f);
    const uint8_t want_h[16] = {0x88, 0xd8, 0x34, 0x01, 1, 0, 0, 0, 0x71, 0x11, 0x01, 0, 0, 0, 0, 0}; /* 20240520, 1, 70001 */
    assert_memory_equal(h, want_h, 16);
    uint16_t *back;
    int64_t n;
    assert_int_equal(qs_token_file_read(tr, 65536, &back, &n), QS_OK);
    assert_int_equal(n, N);
    assert_memory_equal(back, tok, N * sizeof *tok);
    free(back);
    /* as a dataset: GPT-2's vocabulary by default, so token 65535 at position 5 is refused */
    qs_dataset ds;
    snprintf(spec, sizeof spec, "tokens:%s:64", tr);
    expect_error(qs_dataset_load(spec, NULL, true, &ds), QS_ERR_FORMAT, tr, "token 65535 at position 5 (byte offset 1034)");
    assert_non_null(strstr(qs_last_error(), "vocabulary size 50257"));
    snprintf(spec, sizeof spec, "tokens:%s:64:65536", tr);
    qs_status st = qs_dataset_load(spec, NULL, true, &ds);
    if (st != QS_OK) fail_msg("%s", qs_last_error());
    assert_string_equal(ds.name, "tokens");
    assert_true(ds.n == (N - 1) / 64 && ds.c == 64 && ds.label_len == 64 && ds.classes == 65536 && ds.raw_bytes);
    check_windows(&ds, 16);
    qs_dataset_free(&ds);
    /* the test split: the sibling with "train" replaced by "val" */
    expect_error(qs_dataset_load(spec, NULL, false, &ds), QS_ERR_NOT_FOUND, va, "replaced by \"val\"");
    for (int i = 0; i < 1000; i++) tok[i] = (uint16_t)(i % 50257);
    assert_int_equal(qs_token_file_write(va, tok, 1000), QS_OK);
    snprintf(spec, sizeof spec, "tokens:%s", tr); /* T 1024: one window needs 1025 tokens */
    expect_error(qs_dataset_load(spec, NULL, false, &ds), QS_ERR_INVALID_ARG, va, "fewer than one window of T + 1 = 1025");
    snprintf(spec, sizeof spec, "tokens:%s:100", tr);
    assert_int_equal(qs_dataset_load(spec, NULL, false, &ds), QS_OK);
    assert_int_equal(ds.n, 9);
    assert_int_equal(ds.classes, 50257);
    for (int i = 0; i < 1000; i++) assert_int_equal(ds.tokens[i], i);
    qs_dataset_free(&ds);
    /* a name without "train" has no test split */
    char other[1024];
    path_in(other, sizeof other, dir, "tokens.bin");
    assert_int_equal(qs_token_file_write(other, tok, 10), QS_OK);
    snprintf(spec, sizeof spec, "tokens:%s:4", other);
    assert_int_equal(qs_dataset_load(spec, NULL, true, &ds), QS_OK);
    assert_int_equal(ds.n, 2);
    qs_dataset_free(&ds);
    expect_error(qs_dataset_load(spec, NULL, false, &ds), QS_ERR_NOT_FOUND, "no test split", "holds no \"train\"");
    /* empty files are valid files, too short for a dataset */
    assert_int_equal(qs_token_file_write(other, NULL, 0), QS_OK);
    assert_int_equal(qs_token_file_read(other, 50257, &back, &n), QS_OK);
    assert_true(n == 0 && back == NULL);
    /* the writer refuses a directory that does not exist and leaves nothing behind */
    char nowhere[1024];
    path_in(nowhere, sizeof nowhere, dir, "no/such/dir/x_train.bin");
    assert_int_not_equal(qs_token_file_write(nowhere, tok, 3), QS_OK);
    assert_int_equal(dir_entries(dir), 3);
    free(tok);
}

/* Every malformed token file and data name fails with its own message naming the file. */
static void test_token_file_malformed(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    char p[1024], spec[1200];
    path_in(p, sizeof p, dir, "x_train.bin");
    snprintf(spec, sizeof spec, "tokens:%s:8", p);
    qs_dataset ds;
    write_raw_tokens(dir, "x_train.bin", QS_TOKEN_FILE_MAGIC, 1, 50, 50, 1024 + 100 - 500); /* 500 bytes */
    expect_error(qs_dataset_load(spec, NULL, true, &ds), QS_ERR_FORMAT, p, "malformed header");
    assert_non_null(strstr(qs_last_error(), "only 500 bytes"));
    write_raw_tokens(dir, "x_train.bin", 20240521, 1, 50, 50, 0);
    expect_error(qs_dataset_load(spec, NULL, true, &ds), QS_ERR_FORMAT, p, "bad magic 20240521");
    write_raw_tokens(dir, "x_train.bin", QS_TOKEN_FILE_MAGIC, 2, 50, 50, 0);
    expect_error(qs_dataset_load(spec, NULL, true, &ds), QS_ERR_FORMAT, p, "version 2");
    write_raw_tokens(dir, "x_train.bin", QS_TOKEN_FILE_MAGIC, 1, -5, 50, 0);
    expect_error(qs_dataset_load(spec, NULL, true, &ds), QS_ERR_FORMAT, p, "negative token count");
    write_raw_tokens(dir, "x_train.bin", QS_TOKEN_FILE_MAGIC, 1, 50, 50, 41); /* 29.5 tokens left */
    expect_error(qs_dataset_load(spec, NULL, true, &ds), QS_ERR_FORMAT, p, "truncated");
    assert_non_null(strstr(qs_last_error(), "declares 50 tokens"));
    assert_non_null(strstr(qs_last_error(), "byte offset 1083, after 29 tokens"));
    write_raw_tokens(dir, "x_train.bin", QS_TOKEN_FILE_MAGIC, 1, 40, 50, 0);
    expect_error(qs_dataset_load(spec, NULL, true, &ds), QS_ERR_FORMAT, p, "trailing bytes at byte offset 1104");
    write_raw_tokens(dir, "x_train.bin", QS_TOKEN_FILE_MAGIC, 1, 50, 50, 0); /* tokens up to 147 */
    snprintf(spec, sizeof spec, "tokens:%s:8:100", p);
    expect_error(qs_dataset_load(spec, NULL, true, &ds), QS_ERR_FORMAT, "token 102 at position 34 (byte offset 1092)",
                 "vocabulary size 100");
    snprintf(spec, sizeof spec, "tokens:%s:8:148", p);
    assert_int_equal(qs_dataset_load(spec, NULL, true, &ds), QS_OK);
    qs_dataset_free(&ds);
    snprintf(spec, sizeof spec, "tokens:%s:8:148:", p);
    expect_error(qs_dataset_load(spec, NULL, true, &ds), QS_ERR_INVALID_ARG, "tokens:PATH[:T[:V]]", NULL);
    snprintf(spec, sizeof spec, "tokens:%s:0", p);
    expect_error(qs_dataset_load(spec, NULL, true, &ds), QS_ERR_INVALID_ARG, "need T in 1..65536", NULL);
    snprintf(spec, sizeof spec, "tokens:%s:8:70000", p);
    expect_error(qs_dataset_load(spec, NULL, true, &ds), QS_ERR_INVALID_ARG, "V in 2..65536", NULL);
    expect_error(qs_dataset_load("tokens:", NULL, true, &ds), QS_ERR_INVALID_ARG, "tokens:PATH", NULL);
    path_in(p, sizeof p, dir, "absent_train.bin");
    snprintf(spec, sizeof spec, "tokens:%s:8", p);
    expect_error(qs_dataset_load(spec, NULL, true, &ds), QS_ERR_NOT_FOUND, p, "llm.c token file");
    assert_null(ds.tokens);
}

/* ---------- text: windows, ranks, label buffers ---------- */

/* A token-stream dataset of n_tokens tokens (token i = i % 1000), windows of T, vocabulary 1000. */
static void token_ds(qs_dataset *ds, int64_t n_tokens, int64_t T) {
    uint16_t *t = malloc((size_t)n_tokens * sizeof *t);
    assert_non_null(t);
    for (int64_t i = 0; i < n_tokens; i++) t[i] = (uint16_t)(i % 1000);
    assert_int_equal(qs_dataset_token_stream("tokens", "test stream", t, n_tokens, T, 1000, ds), QS_OK);
}

/* Token windows through the loader: x/y shifted by one, rank slices of the global batch,
 * resume, eval padding. */
static void test_token_windows_ranks(void **state) {
    (void)state;
    qs_dataset ds;
    token_ds(&ds, 203, 5); /* 40 windows */
    assert_int_equal(ds.n, 40);
    const int64_t T = 5, GB = 7;
    for (int world = 2; world <= 3; world++) {
        qs_loader one, parts[3];
        qs_loader_options o1 = {.global_batch = GB, .rank = 0, .world = 1, .seed = 9, .shuffle = true, .drop_last = true};
        assert_int_equal(qs_loader_init(&one, &ds, &o1), QS_OK);
        for (int r = 0; r < world; r++) {
            qs_loader_options o = o1;
            o.rank = r;
            o.world = world;
            assert_int_equal(qs_loader_init(&parts[r], &ds, &o), QS_OK);
        }
        float xg[7 * 5], xr[7 * 5];
        int32_t yg[7 * 5], yr[7 * 5];
        for (int step = 0; step < 8; step++) { /* 5 steps per epoch: crosses into epoch 1 */
            assert_int_equal(qs_loader_next(&one, xg, yg, NULL, NULL), QS_OK);
            for (int64_t j = 0; j < GB; j++) { /* every sample is a window: y = x shifted by one */
                int64_t pos = (int64_t)xg[j * T];
                assert_int_equal(pos % T, 0);
                for (int64_t t = 0; t < T; t++) {
                    assert_true(xg[j * T + t] == (float)(pos + t));
                    assert_int_equal(yg[j * T + t], pos + t + 1);
                }
            }
            int64_t off = 0;
            for (int r = 0; r < world; r++) {
                int64_t lb = qs_loader_local_batch(&parts[r]);
                assert_int_equal(qs_loader_next(&parts[r], xr, yr, NULL, NULL), QS_OK);
                assert_memory_equal(xr, xg + off * T, (size_t)(lb * T) * sizeof(float));
                assert_memory_equal(yr, yg + off * T, (size_t)(lb * T) * sizeof(int32_t));
                off += lb;
            }
        }
        /* resume at the position reached */
        int64_t e, b;
        qs_loader_get_position(&parts[0], &e, &b);
        qs_loader again;
        qs_loader_options o = o1;
        o.world = world;
        assert_int_equal(qs_loader_init(&again, &ds, &o), QS_OK);
        assert_int_equal(qs_loader_set_position(&again, e, b), QS_OK);
        assert_int_equal(qs_loader_next(&parts[0], xg, yg, NULL, NULL), QS_OK);
        assert_int_equal(qs_loader_next(&again, xr, yr, NULL, NULL), QS_OK);
        int64_t lb = qs_loader_local_batch(&again);
        assert_memory_equal(xg, xr, (size_t)(lb * T) * sizeof(float));
        assert_memory_equal(yg, yr, (size_t)(lb * T) * sizeof(int32_t));
        qs_loader_free(&again);
        qs_loader_free(&one);
        for (int r = 0; r < world; r++) qs_loader_free(&parts[r]);
    }
    /* eval: the last batch padded with the last window */
    qs_loader ev;
    qs_loader_options o = {.global_batch = 16, .rank = 1, .world = 2, .seed = 1};
    assert_int_equal(qs_loader_init(&ev, &ds, &o), QS_OK);
    assert_int_equal(qs_loader_steps_per_epoch(&ev), 3);
    float x[8 * 5];
    int32_t y[8 * 5];
    int64_t v;
    for (int s = 0; s < 3; s++) assert_int_equal(qs_loader_next(&ev, x, y, &v, NULL), QS_OK);
    assert_int_equal(v, 0); /* positions 40..47 of 40: all padding */
    for (int j = 0; j < 8; j++)
        for (int t = 0; t < 5; t++) assert_int_equal(y[j * 5 + t], 39 * 5 + t + 1);
    qs_loader_free(&ev);
    qs_dataset_free(&ds);
    /* a stream shorter than one window */
    uint16_t *t = calloc(5, sizeof *t);
    assert_non_null(t);
    expect_error(qs_dataset_token_stream("tokens", "five tokens", t, 5, 5, 1000, &ds), QS_ERR_INVALID_ARG, "five tokens",
                 "fewer than one window");
}

/* A sequence classification set like fortune-topics: 30 sequences of 12 bytes (1..255), 9 classes. */
static void text_cls_ds(qs_dataset *ds) {
    assert_int_equal(qs_dataset_alloc_text(ds, "fortune-topics", 30, 12, 9), QS_OK);
    for (int64_t i = 0; i < 30 * 12; i++) ds->pixels[i] = (uint8_t)(1 + i % 255);
    for (int64_t i = 0; i < 30; i++) ds->labels[i] = (int32_t)(i % 9);
}

/* The loader writes exactly local_batch·label_len labels and local_batch·T inputs (guards after
 * both buffers stay untouched), for language modelling and for sequence classification. */
static void test_label_buffers(void **state) {
    (void)state;
    qs_dataset lm, cls;
    token_ds(&lm, 1001, 10);
    text_cls_ds(&cls);
    const qs_dataset *sets[2] = {&lm, &cls};
    for (int k = 0; k < 2; k++) {
        const qs_dataset *ds = sets[k];
        qs_loader ld;
        qs_loader_options o = {.global_batch = 9, .rank = 2, .world = 3, .seed = 4, .shuffle = true};
        assert_int_equal(qs_loader_init(&ld, ds, &o), QS_OK);
        const int64_t local = qs_loader_local_batch(&ld), L = ds->label_len, S = ds->c;
        float *x = malloc((size_t)(local * S + 4) * sizeof *x);
        int32_t *y = malloc((size_t)(local * L + 4) * sizeof *y);
        assert_non_null(x);
        assert_non_null(y);
        for (int g = 0; g < 4; g++) {
            x[local * S + g] = -1.5f;
            y[local * L + g] = -99;
        }
        for (int s = 0; s < 20; s++) assert_int_equal(qs_loader_next(&ld, x, y, NULL, NULL), QS_OK);
        for (int g = 0; g < 4; g++) {
            assert_true(x[local * S + g] == -1.5f);
            assert_int_equal(y[local * L + g], -99);
        }
        free(x);
        free(y);
        qs_loader_free(&ld);
    }
    /* the model check names model, data and what differs */
    expect_error(qs_dataset_check_model(&lm, "fortunes:10", "gpt", 1, 1, 256, 256, 1000), QS_ERR_MISMATCH,
                 "model gpt expects sequences of 256 tokens, data fortunes:10 gives 10", NULL);
    expect_error(qs_dataset_check_model(&cls, "fortune-topics:12", "bert", 1, 1, 12, 12, 9), QS_ERR_MISMATCH,
                 "model bert predicts 12 labels per sample", "data fortune-topics:12 gives 1");
    expect_error(qs_dataset_check_model(&lm, NULL, "gpt", 1, 1, 10, 10, 256), QS_ERR_MISMATCH,
                 "model gpt has 256 output classes, data tokens has 1000 (its vocabulary size)", NULL);
    expect_error(qs_dataset_check_model(&lm, "tokens", "cnn", 28, 28, 1, 1, 10), QS_ERR_MISMATCH,
                 "model cnn expects 28x28x1 images, data tokens gives sequences of 10 tokens", NULL);
    assert_int_equal(qs_dataset_check_model(&lm, "x", "gpt", 1, 1, 10, 10, 1000), QS_OK);
    assert_int_equal(qs_dataset_check_model(&cls, "x", "bert", 1, 1, 12, 1, 9), QS_OK);
    qs_dataset img;
    small_ds(&img, 10);
    expect_error(qs_dataset_check_model(&img, "synthetic:5x4x3", "cnn", 28, 28, 1, 1, 7), QS_ERR_MISMATCH,
                 "model cnn expects 28x28x1 inputs, data synthetic:5x4x3 gives 5x4x3", NULL);
    expect_error(qs_dataset_check_model(&img, "s", "gpt", 5, 4, 3, 60, 7), QS_ERR_MISMATCH, "predicts 60 labels", NULL);
    assert_int_equal(qs_dataset_check_model(&img, "s", "cnn", 5, 4, 3, 1, 7), QS_OK);
    expect_error(qs_dataset_channel_stats(&cls, (double[4]){0}, (double[4]){0}), QS_ERR_INVALID_ARG, "text", NULL);
    qs_dataset_free(&img);
    qs_dataset_free(&lm);
    qs_dataset_free(&cls);
}

/* ---------- text: synthetic token streams ---------- */

/* synthetic-text: sizes, determinism, split streams differ, the table is learnable. */
static void test_synthetic_text(void **state) {
    (void)state;
    qs_dataset a, b, te;
    assert_int_equal(qs_dataset_load("synthetic-text:50257:1024", NULL, true, &a), QS_OK);
    assert_int_equal(qs_dataset_load("synthetic-text:50257:1024", NULL, true, &b), QS_OK);
    assert_int_equal(qs_dataset_load("synthetic-text:50257:1024", NULL, false, &te), QS_OK);
    assert_string_equal(a.name, "synthetic-text");
    assert_int_equal(a.n_tokens, 256 * 1024 + 1);
    assert_int_equal(te.n_tokens, 64 * 1024 + 1);
    assert_true(a.n == 256 && te.n == 64 && a.c == 1024 && a.label_len == 1024 && a.classes == 50257 && a.raw_bytes);
    assert_memory_equal(a.tokens, b.tokens, (size_t)a.n_tokens * sizeof *a.tokens);
    assert_true(memcmp(a.tokens, te.tokens, (size_t)te.n_tokens * sizeof *te.tokens) != 0);
    int64_t seen_high = 0;
    for (int64_t i = 0; i < a.n_tokens; i++) {
        assert_true(a.tokens[i] < 50257);
        seen_high += a.tokens[i] >= 50000;
    }
    assert_true(seen_high > 0);
    check_windows(&te, 4);
    qs_dataset_free(&a);
    qs_dataset_free(&b);
    qs_dataset_free(&te);
    /* short sequences: at least 100k / 20k tokens */
    assert_int_equal(qs_dataset_load("synthetic-text:16:8", NULL, true, &a), QS_OK);
    assert_int_equal(qs_dataset_load("synthetic-text:16:8", NULL, false, &te), QS_OK);
    assert_true(a.n_tokens == 100001 && te.n_tokens == 20001);
    /* learnable: the most frequent successor of each token in the training stream predicts the
     * test stream about 0.8 + 0.2/16 of the time */
    static int64_t pairs[16][16];
    memset(pairs, 0, sizeof pairs);
    for (int64_t i = 0; i + 1 < a.n_tokens; i++) pairs[a.tokens[i]][a.tokens[i + 1]]++;
    int best[16];
    for (int v = 0; v < 16; v++) {
        best[v] = 0;
        for (int w = 1; w < 16; w++)
            if (pairs[v][w] > pairs[v][best[v]]) best[v] = w;
    }
    int64_t hit = 0;
    for (int64_t i = 0; i + 1 < te.n_tokens; i++) hit += te.tokens[i + 1] == best[te.tokens[i]];
    double acc = (double)hit / (double)(te.n_tokens - 1);
    assert_true(acc > 0.79 && acc < 0.84);
    qs_dataset_free(&a);
    qs_dataset_free(&te);
    const char *bad[] = {"synthetic-text", "synthetic-text:16", "synthetic-text:1:8", "synthetic-text:16:0",
                         "synthetic-text:65537:8", "synthetic-text:16:8:1", "synthetic-text:x:8"};
    for (int i = 0; i < 7; i++)
        expect_error(qs_dataset_load(bad[i], NULL, true, &a), QS_ERR_INVALID_ARG, "synthetic-text:V:T", NULL);
    expect_error(qs_dataset_load("text", NULL, true, &a), QS_ERR_NOT_FOUND, "fortune-topics[:T]", "synthetic-text:V:T");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fmnist_real),
        QS_TMPDIR_TEST(test_idx_good),
        QS_TMPDIR_TEST(test_idx_bad_magic),
        QS_TMPDIR_TEST(test_idx_truncated_plain),
        QS_TMPDIR_TEST(test_idx_truncated_gzip),
        QS_TMPDIR_TEST(test_idx_count_mismatch),
        QS_TMPDIR_TEST(test_idx_label_range),
        QS_TMPDIR_TEST(test_idx_missing),
        QS_TMPDIR_TEST(test_cifar_crafted),
        QS_TMPDIR_TEST(test_cifar_truncated),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_synthetic_shape),
        cmocka_unit_test(test_loader_sharding),
        cmocka_unit_test(test_loader_determinism_epochs),
        cmocka_unit_test(test_loader_resume),
        cmocka_unit_test(test_loader_eval_padding),
        cmocka_unit_test(test_loader_augment),
        cmocka_unit_test(test_fortunes_real),
        cmocka_unit_test(test_fortune_topics_real),
        QS_TMPDIR_TEST(test_fortunes_crafted),
        QS_TMPDIR_TEST(test_fortune_topics_crafted),
        QS_TMPDIR_TEST(test_token_file_roundtrip),
        QS_TMPDIR_TEST(test_token_file_malformed),
        cmocka_unit_test(test_token_windows_ranks),
        cmocka_unit_test(test_label_buffers),
        cmocka_unit_test(test_synthetic_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
