/* tests/test_plan.c — precision plan files (src/io/plan_file.h, docs/PLANS.md): parsing with
 * precise errors, validation against a built model and the CPU backend (unknown layers,
 * layers without a selectable precision, plans for another model, unsupported and emulated
 * precisions), applying, the write → read → apply round trip, the comparison used on resume,
 * the run set-up shared by train and eval, per-device-type sections (version 2: parsing,
 * selecting a device type, precedence, errors, round trip), and that every example plan is
 * valid. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "graph/precision.h"
#include "graph_helpers.h"
#include "models/models.h"
#include "io/plan_file.h"
#include "run_cmd.h"

static qs_backend *g_be;

static int group_setup(void **state) {
    if (qs_test_backend_create(1, &g_be) != 0) return -1;
    return qs_test_tmpdir_setup(state);
}

static int group_teardown(void **state) {
    qs_test_backend_destroy(&g_be);
    return qs_test_tmpdir_teardown(state);
}

/* `arch` for 28×28×1 inputs with base width `width`, finalized and fused (not set up). */
/* `arch` with default options on Fashion-MNIST-shaped inputs, or (transformers) 64-byte sequences. */
static qs_model *build(const char *arch, int64_t width) {
    qs_model_options o = qs_models_is_transformer(arch) ? qs_models_default_options(1, 1, 64, 256)
                                                        : qs_models_default_options(28, 28, 1, 10);
    o.width = width;
    qs_model *m = NULL;
    ASSERT_OK(qs_models_build(arch, &o, &m));
    qs_model_fuse(m);
    return m;
}

static qs_node *node(qs_model *m, const char *name) {
    for (int i = 0; i < m->n_nodes; i++)
        if (strcmp(m->nodes[i].name, name) == 0) return &m->nodes[i];
    fail_msg("model %s has no node %s", m->arch, name);
    return NULL;
}

/* Expect status `want` and every needle (NULL-terminated list) in the error message. */
static void expect_error(qs_status got, qs_status want, const char *what, ...) {
    const char *msg = qs_last_error();
    if (got != want)
        fail_msg("%s: got %s (%s), want %s", what, qs_status_name(got), msg, qs_status_name(want));
    va_list ap;
    va_start(ap, what);
    for (const char *needle = va_arg(ap, const char *); needle; needle = va_arg(ap, const char *))
        if (!strstr(msg, needle)) {
            va_end(ap);
            fail_msg("%s: message lacks \"%s\": %s", what, needle, msg);
        }
    va_end(ap);
    printf("  %s -> %s: %s\n", what, qs_status_name(got), msg);
}

/* Parse text and expect failure `want` with the needles in the message. */
#define PARSE_FAILS(text, want, ...)                                                  \
    do {                                                                              \
        qs_plan p_;                                                                   \
        qs_status st_ = qs_plan_parse((text), "t.json", &p_);                         \
        expect_error(st_, (want), #text, __VA_ARGS__, (const char *)NULL);            \
        assert_int_equal(p_.n_layers, 0);                                             \
        qs_plan_free(&p_);                                                            \
    } while (0)

#define HDR "\"format\": \"qsync-plan\", \"version\": 1, "

static void test_parse_valid(void **state) {
    const char *text = "{" HDR "\"model\": \"cnn\", \"config\": \"in_h=28\", \"backend\": \"cpu\", "
                       "\"device_type\": \"xeon\", \"default\": \"bf16\", \"comment\": \"hi\", \"predictions\": {\"t\": 1},"
                       "\"precisions\": {\"conv1\": \"int8\", \"fc1\": \"fp16\"},"
                       "\"options\": {\"grad_rounding\": \"nearest\", \"weight_scales\": \"channel\"}}";
    qs_plan p;
    ASSERT_OK(qs_plan_parse(text, "t.json", &p));
    assert_string_equal(p.model, "cnn");
    assert_string_equal(p.config, "in_h=28");
    assert_string_equal(p.backend, "cpu");
    assert_string_equal(p.device_type, "xeon");
    assert_int_equal(p.default_prec, QS_PREC_BF16);
    assert_int_equal(p.n_layers, 2);
    assert_string_equal(p.layers[0].name, "conv1");
    assert_int_equal(p.layers[0].prec, QS_PREC_INT8);
    assert_string_equal(p.layers[1].name, "fc1");
    assert_int_equal(p.layers[1].prec, QS_PREC_FP16);
    assert_int_equal(p.grad_rounding, QS_GRAD_ROUND_NEAREST);
    assert_int_equal(p.weight_scales, QS_WEIGHT_SCALES_CHANNEL);
    qs_plan_free(&p);
    /* the minimum: format, version, model */
    ASSERT_OK(qs_plan_parse("{" HDR "\"model\": \"mlp\"}", "t.json", &p));
    assert_int_equal(p.default_prec, QS_PREC_FP32);
    assert_int_equal(p.n_layers, 0);
    assert_int_equal(p.grad_rounding, QS_GRAD_ROUND_UNSET);
    assert_int_equal(p.weight_scales, QS_WEIGHT_SCALES_UNSET);
    qs_plan_free(&p);
}

/* "predictions": the keys qsync plan writes are typed (and checked) when present, the others
 * left alone; a plan without it has none. */
static void test_predictions(void **state) {
    (void)state;
    const char *text = "{\"format\": \"qsync-plan\", \"version\": 2, \"model\": \"cnn\", \"device_types\": "
                       "{\"fast\": {\"default\": \"fp32\"}, \"slow\": {\"precisions\": {}}}, \"predictions\": "
                       "{\"target_ms\": 10, \"target_source\": \"fastest device type, all fp32\", \"fastest_type\": "
                       "\"fast\", \"synchronized_ms\": 9.5, \"target_met\": true, \"rounds\": 1, \"note\": \"free\", "
                       "\"calibration\": {\"applied\": false}, \"types\": {\"slow\": {\"omega\": 1.5, \"solver\": "
                       "\"exact\", \"base_synchronized_ms\": 12}}, \"workers\": [{\"rank\": 1, \"type\": \"slow\", "
                       "\"iteration_ms\": 9.5, \"memory_bytes\": 1024}]}}";
    qs_plan p;
    ASSERT_OK(qs_plan_parse(text, "t.json", &p));
    const qs_plan_predictions *pr = &p.predictions;
    assert_true(pr->present && pr->target_ms == 10 && pr->synchronized_ms == 9.5 && pr->target_met && pr->rounds == 1);
    assert_true(pr->has_fastest_type);
    assert_string_equal(pr->fastest_type, "fast");
    assert_true(isnan(pr->target_asked_ms));
    const qs_plan_type_prediction *t = qs_plan_predictions_type(pr, "slow");
    assert_non_null(t);
    assert_true(t->omega == 1.5 && t->base_synchronized_ms == 12 && isnan(t->model_ms));
    assert_string_equal(t->solver, "exact");
    assert_int_equal(pr->n_workers, 1);
    assert_true(pr->workers[0].rank == 1 && pr->workers[0].memory_bytes == 1024);
    assert_true(p.types[1].has_precisions && p.types[1].n_layers == 0 && !p.types[0].has_precisions);
    qs_plan_free(&p);
    ASSERT_OK(qs_plan_parse("{" HDR "\"model\": \"mlp\"}", "t.json", &p));
    assert_false(p.predictions.present);
    assert_true(isnan(p.predictions.target_ms) && !p.predictions.has_fastest_type);
    qs_plan_free(&p);
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"predictions\": {\"target_ms\": \"soon\"}}", QS_ERR_FORMAT,
                "plan t.json: predictions.target_ms must be a finite number >= 0 (got \"soon\")");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"predictions\": {\"target_met\": 1}}", QS_ERR_FORMAT,
                "predictions.target_met must be true or false");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"predictions\": {\"types\": {\"slow\": {\"omega\": -1}}}}", QS_ERR_FORMAT,
                "predictions.types[\"slow\"].omega must be a finite number >= 0 (got -1)");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"predictions\": {\"workers\": [{\"rank\": 0.5}]}}", QS_ERR_FORMAT,
                "predictions.workers[0].rank must be a whole number");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"predictions\": {\"workers\": {}}}", QS_ERR_FORMAT,
                "predictions.workers must be an array");
}

static void test_parse_errors(void **state) {
    PARSE_FAILS("{" HDR "\n\"model\": \"cnn\",\n\"precisions\": {\"conv1\": \"int8\",}}", QS_ERR_FORMAT, "t.json",
                "malformed JSON at line 3");
    PARSE_FAILS("", QS_ERR_FORMAT, "malformed JSON at line 1, column 1");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\"} trailing", QS_ERR_FORMAT, "malformed JSON");
    PARSE_FAILS("[1, 2]", QS_ERR_FORMAT, "must be a JSON object");
    PARSE_FAILS("{\"version\": 1, \"model\": \"cnn\"}", QS_ERR_FORMAT, "\"format\" must be \"qsync-plan\"", "nothing");
    PARSE_FAILS("{\"format\": \"qsync.model\", \"version\": 1, \"model\": \"cnn\"}", QS_ERR_FORMAT,
                "(got \"qsync.model\")", "not a qsync plan");
    PARSE_FAILS("{\"format\": \"qsync-plan\", \"version\": 3, \"model\": \"cnn\"}", QS_ERR_FORMAT, "version 3",
                "reads plan version 1 to 2");
    PARSE_FAILS("{\"format\": \"qsync-plan\", \"version\": 0, \"model\": \"cnn\"}", QS_ERR_FORMAT, "version 0");
    PARSE_FAILS("{\"format\": \"qsync-plan\", \"version\": \"1\", \"model\": \"cnn\"}", QS_ERR_FORMAT,
                "\"version\" must be an integer, 1 or 2");
    PARSE_FAILS("{\"format\": \"qsync-plan\", \"model\": \"cnn\"}", QS_ERR_FORMAT, "\"version\"");
    PARSE_FAILS("{" HDR "\"precisions\": {}}", QS_ERR_FORMAT, "\"model\" is missing");
    PARSE_FAILS("{" HDR "\"model\": 3}", QS_ERR_FORMAT, "\"model\" must be a string");
    PARSE_FAILS("{" HDR "\"model\": \"\"}", QS_ERR_FORMAT, "\"model\" is empty");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"precision\": {\"conv1\": \"int8\"}}", QS_ERR_FORMAT,
                "unknown key \"precision\"", "precisions");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"device_types\": {\"cpu-slow\": {\"default\": \"int8\"}}}", QS_ERR_FORMAT,
                "t.json: per-device-type sections (\"device_types\") need plan version 2", "\"version\": 2",
                "one plan per device type");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"model\": \"mlp\"}", QS_ERR_FORMAT, "\"model\" appears twice");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"precisions\": [\"int8\"]}", QS_ERR_FORMAT,
                "\"precisions\" must be an object");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"precisions\": {\"conv1\": \"int4\"}}", QS_ERR_FORMAT,
                "t.json: precisions[\"conv1\"]: unknown precision \"int4\"", "fp32, tf32, bf16, fp16, fp8, int8");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"precisions\": {\"conv1\": 8}}", QS_ERR_FORMAT,
                "precisions[\"conv1\"] must be a precision name");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"precisions\": {\"conv1\": \"int8\", \"conv1\": \"bf16\"}}",
                QS_ERR_FORMAT, "precisions[\"conv1\"] appears twice");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"precisions\": {\"\": \"int8\"}}", QS_ERR_FORMAT, "empty layer name");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"default\": \"fp64\"}", QS_ERR_FORMAT, "\"default\": unknown precision");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"options\": {\"rounding\": \"nearest\"}}", QS_ERR_FORMAT,
                "options.rounding is not a plan option");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"options\": {\"grad_rounding\": \"down\"}}", QS_ERR_FORMAT,
                "options.grad_rounding must be \"stochastic\" or \"nearest\" (got \"down\")");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"options\": {\"weight_scales\": 1}}", QS_ERR_FORMAT,
                "options.weight_scales must be \"tensor\" or \"channel\"");
    PARSE_FAILS("{" HDR "\"model\": \"cnn\", \"comment\": 5}", QS_ERR_FORMAT, "\"comment\" must be a string");
}

static int count_kind(const qs_model *m, qs_node_kind k) {
    int c = 0;
    for (int i = 0; i < m->n_nodes; i++) c += m->nodes[i].kind == k;
    return c;
}

#define HDR2 "\"format\": \"qsync-plan\", \"version\": 2, "

/* A cnn plan with two device-type sections: everything bf16 and fc2 fp32 by default, int8
 * convolutions and nearest rounding on cpu-slow (which also puts fc2 at int8), channel scales
 * and an fp16 default on cpu-fast. */
static const char *const two_types =
    "{" HDR2 "\"model\": \"cnn\", \"default\": \"bf16\", \"precisions\": {\"fc2\": \"fp32\", \"conv1\": \"fp32\"}, "
    "\"options\": {\"grad_rounding\": \"stochastic\"}, \"device_types\": {"
    "\"cpu-fast\": {\"default\": \"fp16\", \"options\": {\"weight_scales\": \"channel\"}},"
    "\"cpu-slow\": {\"precisions\": {\"conv1\": \"int8\", \"conv2\": \"int8\", \"fc2\": \"int8\"}, "
    "\"options\": {\"grad_rounding\": \"nearest\"}}}}";

static void test_device_types_parse(void **state) {
    qs_plan p;
    ASSERT_OK(qs_plan_parse(two_types, "t.json", &p));
    assert_true(qs_plan_has_device_types(&p));
    assert_int_equal(qs_plan_device_type_count(&p), 2);
    assert_string_equal(qs_plan_device_type_at(&p, 0), "cpu-fast");
    assert_string_equal(qs_plan_device_type_at(&p, 1), "cpu-slow");
    assert_null(qs_plan_device_type_at(&p, 2));
    assert_null(qs_plan_device_type_at(&p, -1));
    assert_int_equal(p.default_prec, QS_PREC_BF16);
    assert_int_equal(p.n_layers, 2);
    const qs_plan_section *fast = &p.types[0], *slow = &p.types[1];
    assert_true(fast->has_default);
    assert_int_equal(fast->default_prec, QS_PREC_FP16);
    assert_int_equal(fast->n_layers, 0);
    assert_int_equal(fast->grad_rounding, QS_GRAD_ROUND_UNSET);
    assert_int_equal(fast->weight_scales, QS_WEIGHT_SCALES_CHANNEL);
    assert_false(slow->has_default);
    assert_int_equal(slow->n_layers, 3);
    assert_string_equal(slow->layers[2].name, "fc2");
    assert_int_equal(slow->layers[2].prec, QS_PREC_INT8);
    assert_int_equal(slow->grad_rounding, QS_GRAD_ROUND_NEAREST);
    qs_plan_free(&p);
    assert_int_equal(p.n_types, 0);
    assert_null(p.types);
    /* version 2 without sections is version 1; an empty section is allowed */
    ASSERT_OK(qs_plan_parse("{" HDR2 "\"model\": \"cnn\", \"precisions\": {\"conv1\": \"int8\"}}", "t.json", &p));
    assert_false(qs_plan_has_device_types(&p));
    assert_int_equal(qs_plan_device_type_count(&p), 0);
    ASSERT_OK(qs_plan_select_device_type(&p, "anything")); /* no sections: nothing to select */
    assert_string_equal(p.device_type, "");
    assert_int_equal(p.n_layers, 1);
    qs_plan_free(&p);
    ASSERT_OK(qs_plan_parse("{" HDR2 "\"model\": \"cnn\", \"device_types\": {\"a\": {}}}", "t.json", &p));
    assert_int_equal(qs_plan_device_type_count(&p), 1);
    qs_plan_free(&p);
}

#define SECTION_FAILS(types, want, ...) PARSE_FAILS("{" HDR2 "\"model\": \"cnn\", \"device_types\": " types "}", want, __VA_ARGS__)

static void test_device_types_parse_errors(void **state) {
    SECTION_FAILS("{\"cpu-slow\": {\"precisions\": {\"conv1\": \"int3\"}}}", QS_ERR_FORMAT,
                  "t.json: device_types[\"cpu-slow\"].precisions[\"conv1\"]: unknown precision \"int3\"",
                  "fp32, tf32, bf16, fp16, fp8, int8");
    SECTION_FAILS("{\"cpu-slow\": {\"precision\": {\"conv1\": \"int8\"}}}", QS_ERR_FORMAT,
                  "device_types[\"cpu-slow\"]: unknown key \"precision\"", "default, precisions, options");
    SECTION_FAILS("{\"cpu-slow\": {\"model\": \"cnn\"}}", QS_ERR_FORMAT, "unknown key \"model\"");
    SECTION_FAILS("{\"a\": {}, \"b\": {}, \"a\": {\"default\": \"int8\"}}", QS_ERR_FORMAT,
                  "device_types[\"a\"] appears twice");
    SECTION_FAILS("{\"\": {\"default\": \"int8\"}}", QS_ERR_FORMAT, "empty device-type label");
    SECTION_FAILS("{\"a\": {\"default\": \"int8\", \"default\": \"fp32\"}}", QS_ERR_FORMAT,
                  "device_types[\"a\"].default appears twice");
    SECTION_FAILS("{\"a\": {\"default\": \"fp64\"}}", QS_ERR_FORMAT, "device_types[\"a\"].default: unknown precision");
    SECTION_FAILS("{\"a\": {\"precisions\": {\"fc1\": \"int8\", \"fc1\": \"bf16\"}}}", QS_ERR_FORMAT,
                  "device_types[\"a\"].precisions[\"fc1\"] appears twice");
    SECTION_FAILS("{\"a\": {\"precisions\": {\"\": \"int8\"}}}", QS_ERR_FORMAT,
                  "device_types[\"a\"].precisions has an empty layer name");
    SECTION_FAILS("{\"a\": {\"precisions\": [\"int8\"]}}", QS_ERR_FORMAT,
                  "device_types[\"a\"].precisions must be an object");
    SECTION_FAILS("{\"a\": {\"options\": {\"grad_rounding\": \"down\"}}}", QS_ERR_FORMAT,
                  "device_types[\"a\"].options.grad_rounding must be \"stochastic\" or \"nearest\" (got \"down\")");
    SECTION_FAILS("{\"a\": {\"options\": {\"scales\": \"tensor\"}}}", QS_ERR_FORMAT,
                  "device_types[\"a\"].options.scales is not a plan option");
    SECTION_FAILS("{\"a\": {\"options\": 1}}", QS_ERR_FORMAT, "device_types[\"a\"].options must be an object");
    SECTION_FAILS("{\"a\": \"int8\"}", QS_ERR_FORMAT, "device_types[\"a\"] must be an object");
    SECTION_FAILS("[\"a\"]", QS_ERR_FORMAT, "\"device_types\" must be an object mapping device-type labels");
    SECTION_FAILS("{}", QS_ERR_FORMAT, "\"device_types\" is empty");
    SECTION_FAILS("{\"a-label-of-more-than-sixty-three-characters-which-no-cluster-file-uses-at-all\": {}}",
                  QS_ERR_FORMAT, "device-type label longer than 63 characters");
    PARSE_FAILS("{" HDR2 "\"model\": \"cnn\", \"device_type\": \"x\", \"device_types\": {\"a\": {}}}", QS_ERR_FORMAT,
                "\"device_type\"", "exclude each other");
    /* a failed parse leaves nothing to free (the sections included) */
    qs_plan p;
    assert_int_not_equal(qs_plan_parse("{" HDR2 "\"model\": \"cnn\", \"device_types\": {\"a\": {\"precisions\": "
                                       "{\"fc1\": \"int8\"}}, \"b\": {\"default\": \"x\"}}}", "t.json", &p), QS_OK);
    assert_int_equal(p.n_types, 0);
    assert_null(p.types);
    qs_plan_free(&p);
}

/* two_types resolved for `type` and applied to a fresh cnn (returned; the caller frees). */
static qs_model *apply_for_type(const char *type, qs_plan *p) {
    ASSERT_OK(qs_plan_parse(two_types, "t.json", p));
    ASSERT_OK(qs_plan_select_device_type(p, type));
    assert_false(qs_plan_has_device_types(p));
    assert_null(p->types);
    assert_string_equal(p->device_type, type);
    qs_model *m = build("cnn", 4);
    ASSERT_OK(qs_plan_apply(p, m, NULL, false));
    return m;
}

static void test_device_types_select(void **state) {
    qs_plan p;
    /* cpu-slow: its precisions override (conv1, fc2) and extend (conv2) the top-level ones; no
     * default of its own, so fc1 keeps the top-level bf16; its rounding overrides */
    qs_model *m = apply_for_type("cpu-slow", &p);
    assert_int_equal(node(m, "conv1")->prec, QS_PREC_INT8);
    assert_int_equal(node(m, "conv2")->prec, QS_PREC_INT8);
    assert_int_equal(node(m, "fc1")->prec, QS_PREC_BF16);
    assert_int_equal(node(m, "fc2")->prec, QS_PREC_INT8);
    assert_true(m->grad_round_nearest);
    assert_false(m->weight_per_channel);
    assert_int_equal(p.n_layers, 3); /* fc2, conv1 (overridden), then conv2 (added) */
    assert_string_equal(p.layers[2].name, "conv2");
    assert_int_equal(p.grad_rounding, QS_GRAD_ROUND_NEAREST);
    assert_int_equal(p.weight_scales, QS_WEIGHT_SCALES_UNSET);
    ASSERT_OK(qs_plan_select_device_type(&p, "cpu-fast")); /* resolved: no-op */
    assert_string_equal(p.device_type, "cpu-slow");
    qs_plan_free(&p);
    qs_model_free(m);
    /* cpu-fast: its default replaces the top-level one, but the layers listed at the top level
     * keep their precisions; the top-level rounding stays, its weight scales are added */
    m = apply_for_type("cpu-fast", &p);
    assert_int_equal(node(m, "conv1")->prec, QS_PREC_FP32);
    assert_int_equal(node(m, "conv2")->prec, QS_PREC_FP16);
    assert_int_equal(node(m, "fc1")->prec, QS_PREC_FP16);
    assert_int_equal(node(m, "fc2")->prec, QS_PREC_FP32);
    assert_false(m->grad_round_nearest);
    assert_true(m->weight_per_channel);
    assert_int_equal(p.default_prec, QS_PREC_FP16);
    assert_int_equal(p.grad_rounding, QS_GRAD_ROUND_STOCHASTIC);
    qs_plan_free(&p);
    qs_model_free(m);
}

static void test_device_types_select_errors(void **state) {
    qs_plan p;
    ASSERT_OK(qs_plan_parse(two_types, "t.json", &p));
    expect_error(qs_plan_select_device_type(&p, "cpu-slw"), QS_ERR_NOT_FOUND, "misspelt type",
                 "plan t.json has no section for device type \"cpu-slw\"", "\"cpu-fast\", \"cpu-slow\"",
                 "must name every type", (const char *)NULL);
    expect_error(qs_plan_select_device_type(&p, NULL), QS_ERR_NOT_FOUND, "no type",
                 "\"cpu-fast\", \"cpu-slow\"", "no device type", "cluster file", (const char *)NULL);
    /* unchanged by the failures */
    assert_int_equal(qs_plan_device_type_count(&p), 2);
    assert_int_equal(p.n_layers, 2);
    assert_int_equal(p.default_prec, QS_PREC_BF16);
    assert_string_equal(p.device_type, "");
    /* validate, apply and the run set-up refuse unresolved sections */
    qs_model *m = build("cnn", 4);
    expect_error(qs_plan_validate(&p, m, g_be, true), QS_ERR_INVALID_ARG, "validate unselected",
                 "plan t.json has per-device-type sections (device_types \"cpu-fast\", \"cpu-slow\")",
                 "select this rank's device type", "cluster file", (const char *)NULL);
    expect_error(qs_plan_apply(&p, m, NULL, true), QS_ERR_INVALID_ARG, "apply unselected", "device type",
                 (const char *)NULL);
    assert_int_equal(node(m, "conv2")->prec, QS_PREC_FP32);
    qs_precision_options o;
    qs_precision_options_default(&o);
    o.allow_emulated = true;
    expect_error(qs_plan_precision_setup(&p, m, g_be, &o), QS_ERR_INVALID_ARG, "setup unselected", "device_types",
                 (const char *)NULL);
    assert_int_equal(count_kind(m, QS_NODE_CAST), 0);
    qs_model_free(m);
    qs_plan_free(&p);
}

static void assert_layers_equal(const qs_layer_prec *a, int na, const qs_layer_prec *b, int nb) {
    assert_int_equal(na, nb);
    for (int i = 0; i < na; i++) {
        assert_string_equal(a[i].name, b[i].name);
        assert_int_equal(a[i].prec, b[i].prec);
    }
}

static void assert_plans_equal(const qs_plan *a, const qs_plan *b) {
    assert_string_equal(a->model, b->model);
    assert_string_equal(a->config, b->config);
    assert_string_equal(a->backend, b->backend);
    assert_string_equal(a->device_type, b->device_type);
    assert_int_equal(a->default_prec, b->default_prec);
    assert_layers_equal(a->layers, a->n_layers, b->layers, b->n_layers);
    assert_int_equal(a->grad_rounding, b->grad_rounding);
    assert_int_equal(a->weight_scales, b->weight_scales);
    assert_int_equal(a->n_types, b->n_types);
    for (int i = 0; i < a->n_types; i++) {
        const qs_plan_section *x = &a->types[i], *y = &b->types[i];
        assert_string_equal(x->type, y->type);
        assert_int_equal(x->has_default, y->has_default);
        if (x->has_default) assert_int_equal(x->default_prec, y->default_prec);
        assert_layers_equal(x->layers, x->n_layers, y->layers, y->n_layers);
        assert_int_equal(x->grad_rounding, y->grad_rounding);
        assert_int_equal(x->weight_scales, y->weight_scales);
    }
}

/* parse → to_json → parse gives the same plan; the written version is `version`. */
static void round_trip_text(const char *text, int version) {
    qs_plan a, b;
    ASSERT_OK(qs_plan_parse(text, "t.json", &a));
    cJSON *o = qs_plan_to_json(&a);
    assert_non_null(o);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "version")->valueint, version);
    char *json = cJSON_Print(o);
    cJSON_Delete(o);
    assert_non_null(json);
    ASSERT_OK(qs_plan_parse(json, "written", &b));
    assert_plans_equal(&a, &b);
    free(json);
    qs_plan_free(&a);
    qs_plan_free(&b);
}

static void test_device_types_round_trip(void **state) {
    round_trip_text(two_types, 2);
    round_trip_text("{" HDR2 "\"model\": \"cnn\", \"backend\": \"cpu\", \"device_types\": {\"x\": {}, \"y\": "
                    "{\"default\": \"int8\"}}}", 2);
    /* without sections: written as version 1, as before */
    round_trip_text("{" HDR2 "\"model\": \"cnn\", \"precisions\": {\"conv1\": \"int8\"}}", 1);
    round_trip_text("{" HDR "\"model\": \"cnn\", \"device_type\": \"xeon\", \"default\": \"bf16\", \"options\": "
                    "{\"weight_scales\": \"channel\"}}", 1);
    /* a resolved plan is written as the version-1 plan of its device type */
    qs_plan p;
    ASSERT_OK(qs_plan_parse(two_types, "t.json", &p));
    ASSERT_OK(qs_plan_select_device_type(&p, "cpu-slow"));
    cJSON *o = qs_plan_to_json(&p);
    assert_non_null(o);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "version")->valueint, 1);
    assert_null(cJSON_GetObjectItemCaseSensitive(o, "device_types"));
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "device_type")->valuestring, "cpu-slow");
    cJSON_Delete(o);
    qs_plan_free(&p);
}

static void test_read_errors(void **state) {
    char path[512];
    qs_plan p;
    snprintf(path, sizeof path, "%s/none.json", qs_test_tmp);
    expect_error(qs_plan_read(path, &p), QS_ERR_NOT_FOUND, "missing file", "none.json", (const char *)NULL);
    snprintf(path, sizeof path, "%s/bad.json", qs_test_tmp);
    const char *bad = "{\"format\": \"qsync-plan\",\n \"version\": 1,\n \"model\": cnn}\n";
    ASSERT_OK(qs_write_file_atomic(path, bad, strlen(bad)));
    expect_error(qs_plan_read(path, &p), QS_ERR_FORMAT, "unquoted value", "bad.json", "line 3", (const char *)NULL);
    snprintf(path, sizeof path, "%s/nul.json", qs_test_tmp);
    ASSERT_OK(qs_write_file_atomic(path, "{\0}", 3));
    expect_error(qs_plan_read(path, &p), QS_ERR_FORMAT, "NUL byte", "NUL byte", (const char *)NULL);
}

/* Parse text (must succeed) and validate it against m on the CPU backend. */
static qs_status validate(const char *text, qs_model *m, bool allow_emulated) {
    qs_plan p;
    ASSERT_OK(qs_plan_parse(text, "t.json", &p));
    qs_status st = qs_plan_validate(&p, m, g_be, allow_emulated);
    qs_plan_free(&p);
    return st;
}

static void test_validate_model(void **state) {
    qs_model *cnn = build("cnn", 4), *rn = build("resnet18", 4);
    ASSERT_OK(validate("{" HDR "\"model\": \"cnn\", \"precisions\": {\"conv1\": \"fp32\", \"fc2\": \"fp32\"}}", cnn,
                       false));
    expect_error(validate("{" HDR "\"model\": \"cnn\", \"precisions\": {\"conv3\": \"int8\"}}", cnn, true),
                 QS_ERR_NOT_FOUND, "unknown layer", "t.json: precisions[\"conv3\"]", "no layer \"conv3\"",
                 "conv1, conv2, fc1, fc2", "qsync models cnn", (const char *)NULL);
    expect_error(validate("{" HDR "\"model\": \"resnet18\", \"precisions\": {\"layer9.conv\": \"int8\"}}", rn, true),
                 QS_ERR_NOT_FOUND, "unknown layer of resnet18", "conv1, layer1.0.conv1", "(21 in all)",
                 (const char *)NULL);
    expect_error(validate("{" HDR "\"model\": \"resnet18\", \"precisions\": {\"bn1\": \"bf16\"}}", rn, true),
                 QS_ERR_INVALID_ARG, "BatchNorm layer", "precisions[\"bn1\"]", "BatchNorm2d",
                 "cannot be chosen", "remove it", (const char *)NULL);
    expect_error(validate("{" HDR "\"model\": \"cnn\", \"precisions\": {\"pool1\": \"int8\"}}", cnn, true),
                 QS_ERR_INVALID_ARG, "pooling layer", "MaxPool2d", (const char *)NULL);
    expect_error(validate("{" HDR "\"model\": \"resnet18\", \"precisions\": {\"conv1\": \"int8\"}}", cnn, true),
                 QS_ERR_MISMATCH, "plan for another model", "is for model resnet18", "model is cnn",
                 (const char *)NULL);
    expect_error(validate("{" HDR "\"model\": \"cnn\", \"config\": \"in_h=32 in_w=32 in_c=3 classes=10 width=4 "
                          "dropout=0\"}", cnn, true),
                 QS_ERR_MISMATCH, "plan for other build options", "in_h=32", cnn->config, (const char *)NULL);
    char text[512];
    snprintf(text, sizeof text, "{" HDR "\"model\": \"cnn\", \"config\": \"%s\"}", cnn->config);
    ASSERT_OK(validate(text, cnn, false));
    expect_error(validate("{" HDR "\"model\": \"cnn\", \"backend\": \"cuda\"}", cnn, true), QS_ERR_MISMATCH,
                 "plan for another backend", "cuda backend", "uses cpu", (const char *)NULL);
    qs_model_free(cnn);
    qs_model_free(rn);
}

static void test_validate_backend(void **state) {
    qs_model *cnn = build("cnn", 4);
    assert_int_equal(g_be->ops->precision_support(g_be, QS_PREC_TF32), QS_PREC_UNSUPPORTED);
    assert_int_equal(g_be->ops->precision_support(g_be, QS_PREC_FP16), QS_PREC_EMULATED);
    assert_int_equal(g_be->ops->precision_support(g_be, QS_PREC_FP8), QS_PREC_EMULATED);
    expect_error(validate("{" HDR "\"model\": \"cnn\", \"precisions\": {\"fc1\": \"tf32\"}}", cnn, true),
                 QS_ERR_UNSUPPORTED, "tf32 on the cpu", "precisions[\"fc1\"] = tf32", "cannot run tf32",
                 "fp16, fp8", "(emulated", (const char *)NULL);
    expect_error(validate("{" HDR "\"model\": \"cnn\", \"precisions\": {\"conv2\": \"fp16\"}}", cnn, false),
                 QS_ERR_UNSUPPORTED, "emulated fp16", "precisions[\"conv2\"] = fp16", "only emulated",
                 "--allow-emulated", (const char *)NULL);
    expect_error(validate("{" HDR "\"model\": \"cnn\", \"default\": \"fp8\", \"precisions\": {\"conv2\": \"fp32\"}}",
                          cnn, false),
                 QS_ERR_UNSUPPORTED, "emulated default", "\"default\" = fp8 (layer conv1 and others)",
                 "--allow-emulated", (const char *)NULL);
    ASSERT_OK(validate("{" HDR "\"model\": \"cnn\", \"precisions\": {\"conv2\": \"fp16\"}}", cnn, true));
    /* a default no layer gets is not checked */
    ASSERT_OK(validate("{" HDR "\"model\": \"cnn\", \"default\": \"fp16\", \"precisions\": {\"conv1\": \"fp32\", "
                       "\"conv2\": \"fp32\", \"fc1\": \"fp32\", \"fc2\": \"fp32\"}}", cnn, false));
    /* the uniform plan of --precision goes the same way */
    qs_plan u;
    qs_plan_uniform("cnn", QS_PREC_FP16, NULL, &u);
    expect_error(qs_plan_validate(&u, cnn, g_be, false), QS_ERR_UNSUPPORTED, "--precision fp16",
                 "--precision fp16: fp16 is only emulated", "--allow-emulated", (const char *)NULL);
    ASSERT_OK(qs_plan_validate(&u, cnn, g_be, true));
    qs_plan_uniform("cnn", QS_PREC_TF32, NULL, &u);
    expect_error(qs_plan_validate(&u, cnn, g_be, true), QS_ERR_UNSUPPORTED, "--precision tf32",
                 "--precision tf32: the cpu backend cannot run tf32", (const char *)NULL);
    /* without a backend only the model is checked */
    ASSERT_OK(qs_plan_validate(&u, cnn, NULL, false));
    qs_model_free(cnn);
}

static void test_apply(void **state) {
    qs_model *m = build("cnn", 4);
    qs_plan p;
    ASSERT_OK(qs_plan_parse("{" HDR "\"model\": \"cnn\", \"default\": \"bf16\", \"precisions\": {\"conv1\": \"int8\", "
                            "\"fc2\": \"fp32\"}, \"options\": {\"grad_rounding\": \"nearest\"}}", "t.json", &p));
    ASSERT_OK(qs_plan_apply(&p, m, NULL, false));
    assert_int_equal(node(m, "conv1")->prec, QS_PREC_INT8);
    assert_int_equal(node(m, "conv2")->prec, QS_PREC_BF16);
    assert_int_equal(node(m, "fc1")->prec, QS_PREC_BF16);
    assert_int_equal(node(m, "fc2")->prec, QS_PREC_FP32);
    assert_int_equal(node(m, "pool1")->prec, QS_PREC_FP32);
    assert_true(m->grad_round_nearest);
    assert_false(m->weight_per_channel);
    int counts[QS_PREC_COUNT];
    qs_model_precision_counts(m, counts);
    assert_int_equal(counts[QS_PREC_INT8], 1);
    assert_int_equal(counts[QS_PREC_BF16], 2);
    assert_int_equal(counts[QS_PREC_FP32], 1);
    qs_plan_free(&p);
    /* a failing plan changes nothing */
    ASSERT_OK(qs_plan_parse("{" HDR "\"model\": \"cnn\", \"precisions\": {\"conv1\": \"fp32\", \"fc2\": \"fp16\"}, "
                            "\"options\": {\"weight_scales\": \"channel\"}}", "t.json", &p));
    assert_int_equal(qs_plan_apply(&p, m, g_be, false), QS_ERR_UNSUPPORTED);
    assert_int_equal(node(m, "conv1")->prec, QS_PREC_INT8);
    assert_int_equal(node(m, "fc2")->prec, QS_PREC_FP32);
    assert_false(m->weight_per_channel);
    qs_plan_free(&p);
    qs_model_free(m);
}

static void test_round_trip(void **state) {
    qs_model *m = build("resnet18", 4);
    qs_plan p;
    ASSERT_OK(qs_plan_parse("{" HDR "\"model\": \"resnet18\", \"default\": \"int8\", \"precisions\": {\"conv1\": "
                            "\"fp32\", \"layer2.0.downsample.0\": \"bf16\", \"fc\": \"fp16\"}, \"options\": "
                            "{\"weight_scales\": \"channel\"}}", "t.json", &p));
    ASSERT_OK(qs_plan_apply(&p, m, g_be, true));
    qs_plan_free(&p);
    char path[512];
    snprintf(path, sizeof path, "%s/rt.json", qs_test_tmp);
    ASSERT_OK(qs_plan_write(m, path));
    qs_plan r;
    ASSERT_OK(qs_plan_read(path, &r));
    assert_string_equal(r.model, "resnet18");
    assert_string_equal(r.config, m->config);
    assert_int_equal(r.n_layers, 21); /* every selectable layer, explicitly */
    assert_int_equal(r.grad_rounding, QS_GRAD_ROUND_STOCHASTIC);
    assert_int_equal(r.weight_scales, QS_WEIGHT_SCALES_CHANNEL);
    ASSERT_OK(qs_plan_compare(&r, m, "the plan has"));
    /* onto a fresh model: the same precisions everywhere */
    qs_model *m2 = build("resnet18", 4);
    ASSERT_OK(qs_plan_apply(&r, m2, g_be, true));
    assert_int_equal(m2->n_nodes, m->n_nodes);
    for (int i = 0; i < m->n_nodes; i++) assert_int_equal(m2->nodes[i].prec, m->nodes[i].prec);
    assert_int_equal(node(m2, "conv1")->prec, QS_PREC_FP32);
    assert_int_equal(node(m2, "layer1.0.conv1")->prec, QS_PREC_INT8);
    assert_int_equal(node(m2, "layer2.0.downsample.0")->prec, QS_PREC_BF16);
    assert_int_equal(node(m2, "fc")->prec, QS_PREC_FP16);
    assert_true(m2->weight_per_channel);
    qs_plan_free(&r);
    /* the compact form of checkpoints says the same */
    char *json = qs_plan_model_json(m);
    assert_non_null(json);
    assert_null(strchr(json, '\n'));
    ASSERT_OK(qs_plan_parse(json, "metadata", &r));
    ASSERT_OK(qs_plan_compare(&r, m2, "metadata"));
    free(json);
    /* differences are named */
    node(m2, "layer3.1.conv2")->prec = QS_PREC_FP32;
    m2->grad_round_nearest = true;
    expect_error(qs_plan_compare(&r, m2, "--resume x was trained with"), QS_ERR_MISMATCH, "changed model",
                 "--resume x was trained with other precisions", "layer3.1.conv2 at int8 (this run: fp32)",
                 "gradients rounded stochastically (this run: to nearest)", (const char *)NULL);
    /* a written plan for other build options is refused, without "config" it applies */
    qs_model *wide = build("resnet18", 8);
    qs_plan w;
    ASSERT_OK(qs_plan_read(path, &w));
    expect_error(qs_plan_validate(&w, wide, g_be, true), QS_ERR_MISMATCH, "other width", "width=4", "width=8",
                 (const char *)NULL);
    w.config[0] = '\0';
    ASSERT_OK(qs_plan_apply(&w, wide, g_be, true));
    qs_plan_free(&w);
    qs_plan_free(&r);
    qs_model_free(wide);
    qs_model_free(m2);
    qs_model_free(m);
}

static void test_precision_setup(void **state) {
    qs_precision_options o;
    qs_plan p;
    ASSERT_OK(qs_plan_parse("{" HDR "\"model\": \"mlp\", \"precisions\": {\"fc2\": \"bf16\"}, \"options\": "
                            "{\"grad_rounding\": \"nearest\", \"weight_scales\": \"channel\"}}", "t.json", &p));
    /* plan and a uniform precision together */
    qs_model *m = build("mlp", 16);
    qs_precision_options_default(&o);
    o.allow_emulated = true; /* bf16 is emulated on CPUs without optimized bf16 kernels */
    o.uniform = QS_PREC_INT8;
    expect_error(qs_plan_precision_setup(&p, m, g_be, &o), QS_ERR_INVALID_ARG, "plan and uniform", "both given",
                 (const char *)NULL);
    /* a plan, one option overridden; one cast in front of fc2 */
    o.uniform = QS_PREC_FP32;
    o.weight_scales = QS_WEIGHT_SCALES_TENSOR;
    ASSERT_OK(qs_plan_precision_setup(&p, m, g_be, &o));
    assert_int_equal(node(m, "fc2")->prec, QS_PREC_BF16);
    assert_int_equal(node(m, "fc1")->prec, QS_PREC_FP32);
    assert_true(m->grad_round_nearest);
    assert_false(m->weight_per_channel);
    assert_int_equal(count_kind(m, QS_NODE_CAST), 1);
    qs_model_free(m);
    qs_plan_free(&p);
    /* uniform int8 (allowed even if this CPU only emulates it) */
    m = build("mlp", 16);
    qs_precision_options_default(&o);
    o.uniform = QS_PREC_INT8;
    o.allow_emulated = true;
    ASSERT_OK(qs_precision_setup(m, g_be, &o));
    assert_int_equal(node(m, "fc3")->prec, QS_PREC_INT8);
    assert_int_equal(count_kind(m, QS_NODE_CAST), 3);
    qs_model_free(m);
    /* uniform fp16 without permission: nothing inserted */
    m = build("mlp", 16);
    qs_precision_options_default(&o);
    o.uniform = QS_PREC_FP16;
    assert_int_equal(qs_precision_setup(m, g_be, &o), QS_ERR_UNSUPPORTED);
    assert_int_equal(count_kind(m, QS_NODE_CAST), 0);
    assert_int_equal(node(m, "fc1")->prec, QS_PREC_FP32);
    qs_model_free(m);
}

/* The example plan at path validates against its model (default options), for each of its
 * device types if it has sections. */
static void validate_example(const char *path, const char *name) {
    qs_plan p;
    ASSERT_OK(qs_plan_read(path, &p));
    qs_model *m = build(p.model, 0);
    int n_types = qs_plan_device_type_count(&p);
    for (int i = 0; i < (n_types ? n_types : 1); i++) {
        qs_plan q;
        ASSERT_OK(qs_plan_read(path, &q));
        ASSERT_OK(qs_plan_select_device_type(&q, n_types ? qs_plan_device_type_at(&p, i) : NULL));
        ASSERT_OK(qs_plan_validate(&q, m, g_be, true));
        printf("  %s%s%s: %d layers listed, default %s\n", name, n_types ? " for " : "", q.device_type, q.n_layers,
               qs_precision_name(q.default_prec));
        qs_plan_free(&q);
    }
    qs_model_free(m);
    qs_plan_free(&p);
}

/* examples/plans/cnn-by-device-type.json: cpu-fast all fp32, cpu-slow int8 except fc2. */
static void test_example_by_device_type(void **state) {
    const char *src = getenv("QS_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/plans/cnn-by-device-type.json", src ? src : ".");
    const char *types[] = {"cpu-fast", "cpu-slow"};
    const qs_precision want[2][4] = {{QS_PREC_FP32, QS_PREC_FP32, QS_PREC_FP32, QS_PREC_FP32},
                                     {QS_PREC_INT8, QS_PREC_INT8, QS_PREC_INT8, QS_PREC_FP32}};
    const char *layers[] = {"conv1", "conv2", "fc1", "fc2"};
    for (int t = 0; t < 2; t++) {
        qs_plan p;
        ASSERT_OK(qs_plan_read(path, &p));
        assert_int_equal(qs_plan_device_type_count(&p), 2);
        assert_string_equal(qs_plan_device_type_at(&p, t), types[t]);
        ASSERT_OK(qs_plan_select_device_type(&p, types[t]));
        qs_model *m = build("cnn", 0);
        ASSERT_OK(qs_plan_apply(&p, m, g_be, true));
        for (int k = 0; k < 4; k++) assert_int_equal(node(m, layers[k])->prec, want[t][k]);
        qs_model_free(m);
        qs_plan_free(&p);
    }
}

/* Every .json file in examples/plans parses and validates against its model (default options). */
static void test_examples(void **state) {
    const char *src = getenv("QS_SOURCE_DIR");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/examples/plans", src ? src : ".");
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s (set QS_SOURCE_DIR to the source tree)", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        validate_example(path, e->d_name);
        n++;
    }
    closedir(d);
    assert_true(n >= 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),
        cmocka_unit_test(test_predictions),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_device_types_parse),
        cmocka_unit_test(test_device_types_parse_errors),
        cmocka_unit_test(test_device_types_select),
        cmocka_unit_test(test_device_types_select_errors),
        cmocka_unit_test(test_device_types_round_trip),
        cmocka_unit_test(test_read_errors),
        cmocka_unit_test(test_validate_model),
        cmocka_unit_test(test_validate_backend),
        cmocka_unit_test(test_apply),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_precision_setup),
        cmocka_unit_test(test_example_by_device_type),
        cmocka_unit_test(test_examples),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
