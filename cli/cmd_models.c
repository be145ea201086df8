/* cli/cmd_models.c — `qsync models [NAME]`: list models or print one's layer table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include "commands.h"
#include "models/models.h"
#include "options.h"

/* Print cJSON o on stdout and free it. */
static void qs_models_emit(cJSON *o) {
    char *s = cJSON_Print(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
}

/* The model list as JSON: [{"name", "description"}]. */
static void qs_models_list_json(void) {
    cJSON *a = cJSON_CreateArray();
    for (const char *const *n = qs_models_names(); *n; n++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", *n);
        cJSON_AddStringToObject(e, "description", qs_models_describe(*n));
        cJSON_AddItemToArray(a, e);
    }
    qs_models_emit(a);
}

/* One model as JSON: arch, config and every node with its kind, inputs, per-sample output shape
 * (channels-last, without the batch), parameter count and per-sample FLOPs. */
static void qs_models_model_json(const qs_model *m) {
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
        cJSON_AddItemToArray(nodes, e);
        params += (double)n->param_count;
        fwd += n->flops_fwd;
        bwd += n->flops_bwd_data + n->flops_bwd_weights;
    }
    cJSON_AddNumberToObject(o, "params", params);
    cJSON_AddNumberToObject(o, "flops_fwd_per_sample", fwd);
    cJSON_AddNumberToObject(o, "flops_bwd_per_sample", bwd);
    qs_models_emit(o);
}

int qs_cmd_models(int argc, char **argv) {
    qs_model_options o = qs_models_default_options(28, 28, 1, 10);
    bool imagenet_stem = false, json = false;
    const char *name = NULL;
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
        {"json", QS_CLI_FLAG, &json, NULL, "print as JSON"},
    };
    int rc = qs_cli_parse(argc, argv, first, opts, (int)(sizeof opts / sizeof opts[0]), "models",
                          "qsync models            list the built-in models\n"
                          "qsync models NAME [..]  print NAME's layers, output shapes, parameters and FLOPs");
    if (rc) return rc == 1 ? 0 : rc;
    qs_model_options d = qs_models_default_options(o.in_h, o.in_w, o.in_c, o.num_classes);
    o.cifar_stem = d.cifar_stem && !imagenet_stem;
    if (!name && json) {
        qs_models_list_json();
        return 0;
    }
    if (!name) {
        for (const char *const *n = qs_models_names(); *n; n++) printf("%-10s %s\n", *n, qs_models_describe(*n));
        return 0;
    }
    qs_model *m;
    if (qs_models_build(name, &o, &m) != QS_OK) return qs_cmd_fail("models");
    if (json) qs_models_model_json(m);
    else qs_models_print(m, stdout);
    qs_model_free(m);
    return 0;
}
