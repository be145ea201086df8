/* src/models/mlp.c — the 3-layer perceptron (docs/MODELS.md "mlp"). */
#include "models/arch.h"

/* flatten → fc1(w) → relu1 → [drop1] → fc2(w) → relu2 → [drop2] → fc3(classes). */
int qs_arch_mlp(qs_mbuild *b, const char *name, const qs_model_options *o, int x) {
    x = qs_mb_flatten(b, x, "flatten");
    for (int i = 1; i <= 2; i++) {
        x = qs_mb_linear(b, x, o->width, "fc%d", i);
        x = qs_mb_relu(b, x, "relu%d", i);
        x = qs_mb_dropout(b, x, o->dropout, "drop%d", i);
    }
    return qs_mb_linear(b, x, o->num_classes, "fc3");
}
