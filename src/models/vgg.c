/* src/models/vgg.c — VGG-11/16 with BatchNorm, torchvision vgg*_bn naming (docs/MODELS.md
 * "vgg"). */
#include "models/arch.h"

#include <string.h>

#define POOL 0 /* max-pool in a config list; other entries are conv widths in units of width */
#define END (-1)

static const int vgg11_cfg[] = {1, POOL, 2, POOL, 4, 4, POOL, 8, 8, POOL, 8, 8, POOL, END};
static const int vgg16_cfg[] = {1, 1, POOL, 2, 2, POOL, 4, 4, 4, POOL,
                                8, 8, 8, POOL, 8, 8, 8, POOL, END};

/* features.N: conv 3×3 pad 1 (with bias) + BN + ReLU per width entry, 2×2/2 max-pool per
 * POOL (padding 1 when a side is odd, so 28→14→7→4→2→1); N counts these modules as
 * torchvision does.
 * Small inputs (both sides ≤ 64): avgpool (global) → flatten → [dropout] → classifier
 * Linear(8w, classes). Larger: flatten of the s×s map → classifier.0 Linear(8w·s·s, 64w) →
 * .1 ReLU → .2 [Dropout] → .3 Linear(64w, 64w) → .4 ReLU → .5 [Dropout] → .6 Linear(classes). */
int qs_arch_vgg(qs_mbuild *b, const char *name, const qs_model_options *o, int x) {
    const int *cfg = strcmp(name, "vgg16") == 0 ? vgg16_cfg : vgg11_cfg;
    int k = 0;
    for (; *cfg != END; cfg++) {
        if (*cfg == POOL) {
            bool odd = (qs_mb_dim(b, x, 1) % 2) || (qs_mb_dim(b, x, 2) % 2);
            x = qs_mb_maxpool(b, x, 2, 2, odd ? 1 : 0, "features.%d", k++);
            continue;
        }
        x = qs_mb_conv(b, x, *cfg * o->width, 3, 1, 1, true, "features.%d", k++);
        x = qs_mb_bn(b, x, "features.%d", k++);
        x = qs_mb_relu(b, x, "features.%d", k++);
    }
    if (o->in_h <= QS_MODELS_SMALL_INPUT && o->in_w <= QS_MODELS_SMALL_INPUT) {
        x = qs_mb_gap(b, x, "avgpool");
        x = qs_mb_flatten(b, x, "flatten");
        x = qs_mb_dropout(b, x, o->dropout, "dropout");
        return qs_mb_linear(b, x, o->num_classes, "classifier");
    }
    int64_t hidden = 64 * o->width;
    x = qs_mb_flatten(b, x, "flatten");
    for (int i = 0; i < 2; i++) {
        x = qs_mb_linear(b, x, hidden, "classifier.%d", 3 * i);
        x = qs_mb_relu(b, x, "classifier.%d", 3 * i + 1);
        x = qs_mb_dropout(b, x, o->dropout, "classifier.%d", 3 * i + 2);
    }
    return qs_mb_linear(b, x, o->num_classes, "classifier.6");
}
