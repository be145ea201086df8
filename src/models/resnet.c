/* src/models/resnet.c — ResNet-18/34 (BasicBlock) and ResNet-50 (Bottleneck v1.5) with
 * torchvision's names (docs/MODELS.md "resnet"). */
#include "models/arch.h"

#include <string.h>

typedef struct resnet_variant {
    const char *name;
    bool bottleneck;           /* Bottleneck (expansion 4) instead of BasicBlock */
    int blocks[4];
} resnet_variant;

static const resnet_variant variants[] = {
    {"resnet18", false, {2, 2, 2, 2}},
    {"resnet34", false, {3, 4, 6, 3}},
    {"resnet50", true, {3, 4, 6, 3}},
};

/* The block's tail: identity (or downsample.0 1×1 conv + downsample.1 BN when the shape
 * changes) added to the residual branch y, then ReLU `relu`. Returns the block output. */
static int residual(qs_mbuild *b, const char *p, int x, int y, int64_t cin, int64_t cout,
                    int64_t stride, const char *relu) {
    int idt = x;
    if (stride != 1 || cin != cout) {
        idt = qs_mb_conv(b, x, cout, 1, stride, 0, false, "%s.downsample.0", p);
        idt = qs_mb_bn(b, idt, "%s.downsample.1", p);
    }
    int s = qs_mb_add(b, y, idt, "%s.add", p);
    return qs_mb_relu(b, s, "%s.%s", p, relu);
}

/* BasicBlock at path p: conv1 3×3/stride → bn1 → relu1 → conv2 3×3 → bn2 → (+) → relu2. */
static int basic_block(qs_mbuild *b, const char *p, int x, int64_t cin, int64_t planes,
                       int64_t stride) {
    int y = qs_mb_conv(b, x, planes, 3, stride, 1, false, "%s.conv1", p);
    y = qs_mb_bn(b, y, "%s.bn1", p);
    y = qs_mb_relu(b, y, "%s.relu1", p);
    y = qs_mb_conv(b, y, planes, 3, 1, 1, false, "%s.conv2", p);
    y = qs_mb_bn(b, y, "%s.bn2", p);
    return residual(b, p, x, y, cin, planes, stride, "relu2");
}

/* Bottleneck at path p: conv1 1×1 → bn1 → relu1 → conv2 3×3/stride → bn2 → relu2 →
 * conv3 1×1 (4·planes) → bn3 → (+) → relu3. */
static int bottleneck(qs_mbuild *b, const char *p, int x, int64_t cin, int64_t planes,
                      int64_t stride) {
    int y = qs_mb_conv(b, x, planes, 1, 1, 0, false, "%s.conv1", p);
    y = qs_mb_bn(b, y, "%s.bn1", p);
    y = qs_mb_relu(b, y, "%s.relu1", p);
    y = qs_mb_conv(b, y, planes, 3, stride, 1, false, "%s.conv2", p);
    y = qs_mb_bn(b, y, "%s.bn2", p);
    y = qs_mb_relu(b, y, "%s.relu2", p);
    y = qs_mb_conv(b, y, planes * 4, 1, 1, 0, false, "%s.conv3", p);
    y = qs_mb_bn(b, y, "%s.bn3", p);
    return residual(b, p, x, y, cin, planes * 4, stride, "relu3");
}

/* Stem (conv1, bn1, relu, [maxpool]) → layer1..4 (planes w, 2w, 4w, 8w; the first block of
 * layers 2–4 has stride 2) → avgpool (global) → flatten → fc. */
int qs_arch_resnet(qs_mbuild *b, const char *name, const qs_model_options *o, int x) {
    const resnet_variant *v = &variants[0];
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        if (strcmp(variants[i].name, name) == 0) v = &variants[i];
    int64_t w = o->width;
    if (o->cifar_stem) {
        x = qs_mb_conv(b, x, w, 3, 1, 1, false, "conv1");
    } else {
        x = qs_mb_conv(b, x, w, 7, 2, 3, false, "conv1");
    }
    x = qs_mb_bn(b, x, "bn1");
    x = qs_mb_relu(b, x, "relu");
    if (!o->cifar_stem) x = qs_mb_maxpool(b, x, 3, 2, 1, "maxpool");
    int64_t cin = w;
    for (int layer = 0; layer < 4; layer++) {
        int64_t planes = w << layer;
        for (int blk = 0; blk < v->blocks[layer]; blk++) {
            char path[32];
            snprintf(path, sizeof path, "layer%d.%d", layer + 1, blk);
            int64_t stride = (layer > 0 && blk == 0) ? 2 : 1;
            x = v->bottleneck ? bottleneck(b, path, x, cin, planes, stride)
                              : basic_block(b, path, x, cin, planes, stride);
            cin = v->bottleneck ? planes * 4 : planes;
        }
    }
    x = qs_mb_gap(b, x, "avgpool");
    x = qs_mb_flatten(b, x, "flatten");
    return qs_mb_linear(b, x, o->num_classes, "fc");
}
