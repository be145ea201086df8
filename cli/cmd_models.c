/* cli/cmd_models.c — `qsync models [NAME]`: list models or print one's layer table. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "models/models.h"
#include "options.h"

int qs_cmd_models(int argc, char **argv) {
    qs_model_options o = qs_models_default_options(28, 28, 1, 10);
    bool imagenet_stem = false;
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
    };
    int rc = qs_cli_parse(argc, argv, first, opts, (int)(sizeof opts / sizeof opts[0]), "models",
                          "qsync models            list the built-in models\n"
                          "qsync models NAME [..]  print NAME's layers, output shapes, parameters and FLOPs");
    if (rc) return rc == 1 ? 0 : rc;
    qs_model_options d = qs_models_default_options(o.in_h, o.in_w, o.in_c, o.num_classes);
    o.cifar_stem = d.cifar_stem && !imagenet_stem;
    if (!name) {
        for (const char *const *n = qs_models_names(); *n; n++) printf("%-10s %s\n", *n, qs_models_describe(*n));
        return 0;
    }
    qs_model *m;
    if (qs_models_build(name, &o, &m) != QS_OK) return qs_cmd_fail("models");
    qs_models_print(m, stdout);
    qs_model_free(m);
    return 0;
}
