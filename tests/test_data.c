/* tests/test_data.c — datasets (real Fashion-MNIST, crafted IDX and CIFAR-10 files, synthetic)
 * and the batch loader (sharding, determinism, epochs, resume, eval padding, augmentation). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "data/dataset.h"
#include "run_cmd.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
