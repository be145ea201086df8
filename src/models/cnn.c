/* src/models/cnn.c — the 2-conv CNN of BRIEF 6b (docs/MODELS.md "cnn"). */
#include "models/arch.h"

#define QS_CNN_HIDDEN 1024

/* conv1(w, 5×5, pad 2) → relu1 → pool1(2/2) → conv2(2w) → relu2 → pool2 → flatten →
 * fc1(1024) → relu3 → [drop] → fc2(classes). */
int qs_arch_cnn(qs_mbuild *b, const char *name, const qs_model_options *o, int x) {
    for (int i = 1; i <= 2; i++) {
        x = qs_mb_conv(b, x, o->width * i, 5, 1, 2, true, "conv%d", i);
        x = qs_mb_relu(b, x, "relu%d", i);
        x = qs_mb_maxpool(b, x, 2, 2, 0, "pool%d", i);
    }
    x = qs_mb_flatten(b, x, "flatten");
    x = qs_mb_linear(b, x, QS_CNN_HIDDEN, "fc1");
    x = qs_mb_relu(b, x, "relu3");
    x = qs_mb_dropout(b, x, o->dropout, "drop");
    return qs_mb_linear(b, x, o->num_classes, "fc2");
}
