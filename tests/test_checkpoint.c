/* tests/test_checkpoint.c — checkpoint files against models: a round trip restores every
 * parameter and buffer bit for bit; a checkpoint of another shape, one lacking a tensor, one
 * with an extra tensor, or a file that is not a qsync model file is refused with a message
 * naming the tensor or the file; a state file from another step is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"
#include "run_cmd.h"
#include "train/checkpoint.h"
#include "io/safetensors.h"
#include "backends/backends.h"

typedef struct fixture {
    char dir[256];
    qs_backend *be;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    qs_test_make_tmpdir(f->dir, sizeof f->dir);
    if (!f->dir[0] || qs_backend_cpu_create(1, &f->be) != QS_OK) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    qs_test_remove_tree(f->dir);
    f->be->ops->destroy(f->be);
    free(f);
    return 0;
}

/* A set-up cnn of the given width on 28×28×1 with seed-dependent weights. */
static qs_model *make_cnn(fixture *f, int64_t width, uint64_t seed) {
    qs_model_options o = qs_models_default_options(28, 28, 1, 10);
    o.width = width;
    qs_model *m = NULL;
    assert_int_equal(qs_models_build("cnn", &o, &m), QS_OK);
    assert_int_equal(qs_model_setup(m, f->be, 4, seed), QS_OK);
    return m;
}

/* A set-up width-4 `name` (resnet18, vgg11) on 28×28×1. */
static qs_model *make_width4(fixture *f, const char *name, uint64_t seed) {
    qs_model_options o = qs_models_default_options(28, 28, 1, 10);
    o.width = 4;
    qs_model *m = NULL;
    assert_int_equal(qs_models_build(name, &o, &m), QS_OK);
    assert_int_equal(qs_model_setup(m, f->be, 4, seed), QS_OK);
    return m;
}

static void save(fixture *f, qs_model *m, const char *sub) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", f->dir, sub);
    qs_train_state ts = {.step = 3, .seed = 1, .global_batch = 4};
    snprintf(ts.data, sizeof ts.data, "fashion-mnist");
    assert_int_equal(qs_checkpoint_save(dir, m, m->arch, NULL, NULL, &ts), QS_OK);
}

static qs_status load(fixture *f, qs_model *m, const char *sub) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/model.safetensors", f->dir, sub);
    return qs_checkpoint_load_model(path, m);
}

static void test_round_trip_bit_exact(void **state) {
    fixture *f = *state;
    qs_model *a = make_width4(f, "resnet18", 1), *b = make_width4(f, "resnet18", 2);
    /* make the buffers differ from their initial values too */
    float *rm = qs_model_buffer_ptr(a, 0);
    rm[0] = 0.25f;
    a->step = 3;
    save(f, a, "rt");
    assert_memory_not_equal(a->param_data, b->param_data, a->params.bytes);
    assert_int_equal(load(f, b, "rt"), QS_OK);
    assert_memory_equal(a->param_data, b->param_data, a->params.bytes);
    assert_float_equal(((float *)qs_model_buffer_ptr(b, 0))[0], 0.25f, 0);
    char arch[32];
    qs_model_options o;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/rt", f->dir);
    assert_int_equal(qs_checkpoint_read_arch(dir, arch, sizeof arch, &o), QS_OK);
    assert_string_equal(arch, "resnet18");
    assert_int_equal(o.width, 4);
    qs_model_free(a);
    qs_model_free(b);
}

static void test_other_shape_refused(void **state) {
    fixture *f = *state;
    qs_model *a = make_cnn(f, 4, 1), *b = make_cnn(f, 8, 1);
    save(f, a, "w4");
    assert_int_equal(load(f, b, "w4"), QS_ERR_MISMATCH);
    assert_non_null(strstr(qs_last_error(), "conv1.weight"));
    qs_model_free(a);
    qs_model_free(b);
}

static void test_missing_and_extra_tensors(void **state) {
    fixture *f = *state;
    qs_model *cnn = make_cnn(f, 4, 1), *vgg = make_width4(f, "vgg11", 1);
    save(f, cnn, "cnn");
    /* a vgg needs tensors the cnn file lacks */
    assert_int_equal(load(f, vgg, "cnn"), QS_ERR_MISMATCH);
    assert_non_null(strstr(qs_last_error(), "has no tensor"));
    /* a file with every tensor of the cnn plus one more */
    char path[512];
    snprintf(path, sizeof path, "%s/extra.safetensors", f->dir);
    int n = cnn->params.count + 1;
    qs_st_tensor *t = calloc((size_t)n, sizeof *t);
    for (int i = 0; i < cnn->params.count; i++) {
        const qs_table_entry *e = &cnn->params.entries[i];
        t[i] = (qs_st_tensor){.name = e->name, .dtype = e->dtype, .ndim = e->ndim, .data = qs_model_param_ptr(cnn, i)};
        memcpy(t[i].shape, e->shape, sizeof e->shape);
    }
    float one = 1.0f;
    t[n - 1] = (qs_st_tensor){.name = "stray.weight", .dtype = QS_F32, .ndim = 1, .shape = {1}, .data = &one};
    qs_st_meta meta[] = {{"format", "qsync.model"}, {"version", "1"}, {"arch", "cnn"}, {"config", cnn->config},
                         {"step", "0"}};
    assert_int_equal(qs_safetensors_write(path, t, n, meta, 5), QS_OK);
    assert_int_equal(qs_checkpoint_load_model(path, cnn), QS_ERR_MISMATCH);
    assert_non_null(strstr(qs_last_error(), "stray.weight"));
    /* not a qsync model file: wrong format tag */
    meta[0].value = "something.else";
    assert_int_equal(qs_safetensors_write(path, t, n - 1, meta, 5), QS_OK);
    assert_int_equal(qs_checkpoint_load_model(path, cnn), QS_ERR_FORMAT);
    assert_non_null(strstr(qs_last_error(), "extra.safetensors"));
    free(t);
    qs_model_free(cnn);
    qs_model_free(vgg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_bit_exact),
        cmocka_unit_test(test_other_shape_refused),
        cmocka_unit_test(test_missing_and_extra_tensors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
