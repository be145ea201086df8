/* cli/cmd_models.c — `qsync models [NAME]`: list models or print one's layer table, with the
 * layers whose precision a plan can choose and how the cpu backend runs each precision. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include "commands.h"
#include "backends/backends.h"
#include "graph/precision.h"
#include "models/models.h"
#include "options.h"
#include "io/plan_file.h"

/* Print cJSON o on stdout and free it. */
static void qs_models_emit(cJSON *o) {
    char *s = cJSON_Print(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
}

/* {"fp32": "native", "tf32": "unsupported", ...} for backend be. */
static cJSON *qs_models_support_json(qs_backend *be) {
    cJSON *o = cJSON_CreateObject();
    for (int p = 0; p < QS_PREC_COUNT; p++)
        cJSON_AddStringToObject(o, qs_precision_name((qs_precision)p),
                                qs_prec_support_name(be->ops->precision_support(be, (qs_precision)p)));
    return o;
}

/* "precisions": {"cpu": {...}} into o. */
static void qs_models_add_support(cJSON *o, qs_backend *be) {
    cJSON *p = cJSON_AddObjectToObject(o, "precisions");
    cJSON_AddItemToObject(p, be->ops->name, qs_models_support_json(be));
}

/* The names of m's precision-selectable (GEMM-like) layers as a JSON array. */
static cJSON *qs_models_gemm_json(const qs_model *m) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < m->n_nodes; i++)
        if (qs_node_precision_selectable(m->nodes[i].kind)) cJSON_AddItemToArray(a, cJSON_CreateString(m->nodes[i].name));
    return a;
}

static int qs_models_count_gemm(const qs_model *m) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++) n += qs_node_precision_selectable(m->nodes[i].kind);
    return n;
}

/* One line: "cpu backend: fp32 native, bf16 native, int8 native, fp16 emulated, fp8 emulated, tf32 unsupported". */
static void qs_models_print_support(qs_backend *be, FILE *f) {
    fprintf(f, "precisions on the %s backend:", be->ops->name);
    const qs_prec_support order[3] = {QS_PREC_NATIVE, QS_PREC_EMULATED, QS_PREC_UNSUPPORTED};
    int k = 0;
    for (int o = 0; o < 3; o++)
        for (int p = 0; p < QS_PREC_COUNT; p++)
            if (be->ops->precision_support(be, (qs_precision)p) == order[o])
                fprintf(f, "%s %s %s", k++ ? "," : "", qs_precision_name((qs_precision)p), qs_prec_support_name(order[o]));
    fprintf(f, "\n  (native: the backend's own low-precision kernels; emulated: operands rounded to the format,\n"
               "  arithmetic in fp32 - faithful numerics, no speed-up, needs --allow-emulated; see docs/PLANS.md)\n");
}

/* The model list: name, description, GEMM-like layers; as JSON [{"name", "description",
 * "gemm_layers", "precisions": {"cpu": {...}}}]. Models are built with options o. */
static int qs_models_list(const qs_model_options *o, qs_backend *be, bool json) {
    cJSON *a = json ? cJSON_CreateArray() : NULL;
    for (const char *const *n = qs_models_names(); *n; n++) {
        qs_model *m = NULL;
        qs_model_options to = *o; /* transformers are listed on byte sequences of 64 tokens */
        if (qs_models_is_transformer(*n)) to = qs_models_default_options(1, 1, 64, 256);
        if (qs_models_build(*n, &to, &m) != QS_OK) {
            cJSON_Delete(a);
            return qs_cmd_fail("models");
        }
        if (json) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", *n);
            cJSON_AddStringToObject(e, "description", qs_models_describe(*n));
            cJSON_AddItemToObject(e, "gemm_layers", qs_models_gemm_json(m));
            qs_models_add_support(e, be);
            cJSON_AddItemToArray(a, e);
        } else {
            printf("%-10s %s (%d precision-selectable layers)\n", *n, qs_models_describe(*n), qs_models_count_gemm(m));
        }
        qs_model_free(m);
    }
    if (json) qs_models_emit(a);
    else {
        printf("\n");
        qs_models_print_support(be, stdout);
    }
    return 0;
}

/* After the layer table: the precision-selectable layers, for writing plans. */
static void qs_models_print_gemm(const qs_model *m, qs_backend *be) {
    printf("\nprecision-selectable layers (%d; name them in a plan's \"precisions\"):\n", qs_models_count_gemm(m));
    int col = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        if (!qs_node_precision_selectable(m->nodes[i].kind)) continue;
        int len = (int)strlen(m->nodes[i].name);
        if (col > 0 && col + len + 2 > 96) {
            printf("\n");
            col = 0;
        }
        printf("%s%s", col ? ", " : "  ", m->nodes[i].name);
        col += len + 2;
    }
    printf("\n");
    qs_models_print_support(be, stdout);
}

/* One model as JSON: arch, config and every node with its kind, inputs, per-sample output shape
 * (channels-last, without the batch), parameter count and per-sample FLOPs. */
static void qs_models_model_json(const qs_model *m, qs_backend *be) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "arch", m->arch);
    cJSON_AddStringToObject(o, "config", m->config);
    cJSON *nodes = cJSON_AddArrayToObject(o, "nodes");
    double params = 0, fwd = 0, bwd = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *n = &m->nodes[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", n->name);
        cJSON_AddStringToObject(e, "kind", qs_layer_impl_for(n->kind)->kind_name);
        cJSON *in = cJSON_AddArrayToObject(e, "inputs");
        for (int k = 0; k < n->n_inputs; k++) cJSON_AddItemToArray(in, cJSON_CreateNumber(n->inputs[k]));
        cJSON *shape = cJSON_AddArrayToObject(e, "output_shape_nhwc");
        for (int d = 1; d < n->out_ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)n->out_shape[d]));
        cJSON_AddNumberToObject(e, "params", (double)n->param_count);
        cJSON_AddNumberToObject(e, "flops_fwd", n->flops_fwd);
        cJSON_AddNumberToObject(e, "flops_bwd", n->flops_bwd_data + n->flops_bwd_weights);
        cJSON_AddNumberToObject(e, "saved_bytes", (double)n->bytes_saved_for_backward);
        cJSON_AddBoolToObject(e, "precision_selectable", qs_node_precision_selectable(n->kind));
        cJSON_AddItemToArray(nodes, e);
        params += (double)n->param_count;
        fwd += n->flops_fwd;
        bwd += n->flops_bwd_data + n->flops_bwd_weights;
    }
    cJSON_AddNumberToObject(o, "params", params);
    cJSON_AddNumberToObject(o, "flops_fwd_per_sample", fwd);
    cJSON_AddNumberToObject(o, "flops_bwd_per_sample", bwd);
    cJSON_AddItemToObject(o, "gemm_layers", qs_models_gemm_json(m));
    qs_models_add_support(o, be);
    qs_models_emit(o);
}

int qs_cmd_models(int argc, char **argv) {
    qs_model_options o = qs_models_default_options(28, 28, 1, 10);
    bool imagenet_stem = false, json = false;
    const char *name = NULL, *write_plan = NULL, *precision = "fp32";
    int first = 2;
    if (argc > 2 && strncmp(argv[2], "--", 2) != 0) {
        name = argv[2];
        first = 3;
    }
    qs_cli_opt opts[] = {
        {"in-h", QS_CLI_I64, &o.in_h, "N", "input height (default 28)"},
        {"in-w", QS_CLI_I64, &o.in_w, "N", "input width (default 28)"},
        {"in-c", QS_CLI_I64, &o.in_c, "N", "input channels (default 1)"},
        {"classes", QS_CLI_I64, &o.num_classes, "N", "classes (default 10)"},
        {"width", QS_CLI_I64, &o.width, "N", "base width (0 = the model's default)"},
        {"imagenet-stem", QS_CLI_FLAG, &imagenet_stem, NULL, "resnet: 7x7/2 stem + max-pool for small inputs too"},
        {"dropout", QS_CLI_FLOAT, &o.dropout, "P", "classifier dropout"},
        {"layers", QS_CLI_I64, &o.layers, "N", "gpt, bert: transformer blocks (0 = default)"},
        {"heads", QS_CLI_I64, &o.heads, "N", "gpt, bert: attention heads (0 = default)"},
        {"json", QS_CLI_FLAG, &json, NULL, "print as JSON"},
        {"write-plan", QS_CLI_STR, &write_plan, "FILE", "with NAME: write a plan template listing its layers"},
        {"precision", QS_CLI_STR, &precision, "P", "with --write-plan: the template's precision (default fp32)"},
    };
    int rc = qs_cli_parse(argc, argv, first, opts, (int)(sizeof opts / sizeof opts[0]), "models",
                          "qsync models            list the built-in models\n"
                          "qsync models NAME [..]  print NAME's layers, output shapes, parameters and FLOPs,\n"
                          "                        and the layers a precision plan can set (docs/PLANS.md)");
    if (rc) return rc == 1 ? 0 : rc;
    qs_precision prec;
    if (!qs_precision_parse(precision, &prec)) {
        fprintf(stderr, "qsync models: --precision must be one of fp32, tf32, bf16, fp16, fp8, int8 (got '%s')\n",
                precision);
        return 2;
    }
    if (write_plan && !name) {
        fprintf(stderr, "qsync models: --write-plan needs a model name: qsync models NAME --write-plan FILE\n");
        return 2;
    }
    if (name && qs_models_is_transformer(name) && o.in_h == 28 && o.in_w == 28 && o.in_c == 1) {
        /* image defaults untouched: describe the model on byte sequences of 64 tokens */
        o.in_h = o.in_w = 1;
        o.in_c = 64;
        if (o.num_classes == 10 && strncmp(name, "gpt", 3) == 0) o.num_classes = 256;
    }
    qs_model_options d = qs_models_default_options(o.in_h, o.in_w, o.in_c, o.num_classes);
    o.cifar_stem = d.cifar_stem && !imagenet_stem;
    qs_backend *be = NULL;
    if (qs_backend_cpu_create(1, &be) != QS_OK) return qs_cmd_fail("models");
    if (!name) {
        rc = qs_models_list(&o, be, json);
        be->ops->destroy(be);
        return rc;
    }
    qs_model *m;
    if (qs_models_build(name, &o, &m) != QS_OK) {
        be->ops->destroy(be);
        return qs_cmd_fail("models");
    }
    rc = 0;
    if (write_plan) {
        /* a template: every layer listed at `prec`, valid for any build options of the model */
        qs_model_set_uniform_precision(m, prec);
        qs_plan p;
        qs_status st = qs_plan_from_model(m, &p);
        if (st == QS_OK) {
            p.config[0] = '\0';
            p.default_prec = prec;
            st = qs_plan_save(&p, write_plan);
        }
        qs_plan_free(&p);
        if (st != QS_OK) rc = qs_cmd_fail("models");
        else if (!json) printf("wrote a plan template for %s (%d layers at %s) to %s\n", name, qs_models_count_gemm(m),
                               precision, write_plan);
        qs_model_set_uniform_precision(m, QS_PREC_FP32);
    }
    if (rc == 0 && json) qs_models_model_json(m, be);
    else if (rc == 0 && !write_plan) {
        qs_models_print(m, stdout);
        qs_models_print_gemm(m, be);
    }
    qs_model_free(m);
    be->ops->destroy(be);
    return rc;
}
