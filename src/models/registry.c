/* src/models/registry.c — the table of built-in models: names, descriptions, defaults, and
 * qs_models_build dispatching to the architecture builders. */
#include "models/arch.h"
#include "models/options.h"

#include <string.h>

typedef struct model_entry {
    const char *name;
    const char *description;
    qs_model_defaults defaults;
    int (*build)(qs_mbuild *b, const char *name, const qs_model_options *o, int x);
} model_entry;

static const model_entry entries[] = {
    {"mlp", "MLP: flatten, fc1 Linear(in,w)+ReLU, fc2 Linear(w,w)+ReLU, fc3 Linear(w,classes); "
            "w = width (default 1024)", {1024, 0, 0, true}, qs_arch_mlp},
    {"cnn", "2-conv CNN: conv 5x5 w + ReLU + maxpool 2, conv 5x5 2w + ReLU + maxpool 2, "
            "fc1 1024 + ReLU, fc2; w = width (default 32)", {32, 0, 0, true}, qs_arch_cnn},
    {"resnet18", "ResNet-18 (BasicBlock 2-2-2-2), torchvision names; base width 64; "
                 "CIFAR stem for inputs <= 64 px", {64, 0, 0, false}, qs_arch_resnet},
    {"resnet34", "ResNet-34 (BasicBlock 3-4-6-3), torchvision names; base width 64; "
                 "CIFAR stem for inputs <= 64 px", {64, 0, 0, false}, qs_arch_resnet},
    {"resnet50", "ResNet-50 (Bottleneck v1.5 3-4-6-3, expansion 4), torchvision names; "
                 "base width 64; CIFAR stem for inputs <= 64 px", {64, 0, 0, false}, qs_arch_resnet},
    {"vgg11", "VGG-11 with BatchNorm (torchvision vgg11_bn names); base width 64; global "
              "average pool + one Linear for inputs <= 64 px", {64, 0, 0, true}, qs_arch_vgg},
    {"vgg16", "VGG-16 with BatchNorm (torchvision vgg16_bn names); base width 64; global "
              "average pool + one Linear for inputs <= 64 px", {64, 0, 0, true}, qs_arch_vgg},
    {"gpt", "GPT-2 decoder (pre-LN blocks, causal attention, tied output embedding), nanoGPT/llm.c "
            "names; default 12 layers, width 768, 12 heads: GPT-2 124M at vocabulary 50257 and T 1024",
     {768, 12, 12, true}, qs_arch_gpt},
    {"gpt-mini", "the gpt architecture with 4 layers, width 128, 4 heads (CPU-sized)", {128, 4, 4, true},
     qs_arch_gpt},
    {"bert", "BERT encoder (post-LN blocks, padding mask on byte 0) with pooler and classifier, "
             "Hugging Face names; default 12 layers, width 768, 12 heads", {768, 12, 12, true}, qs_arch_bert},
    {"bert-mini", "the bert architecture with 4 layers, width 256, 4 heads (CPU-sized)", {256, 4, 4, true},
     qs_arch_bert},
};
#define N_ENTRIES (sizeof entries / sizeof entries[0])

static const char *const names[] = {"mlp", "cnn", "resnet18", "resnet34", "resnet50", "vgg11",
                                    "vgg16", "gpt", "gpt-mini", "bert", "bert-mini", NULL};
_Static_assert(sizeof names / sizeof names[0] == N_ENTRIES + 1, "names[] must list entries[]");

/* The entry named `name`, or NULL. */
static const model_entry *find(const char *name) {
    for (size_t i = 0; name && i < N_ENTRIES; i++)
        if (strcmp(entries[i].name, name) == 0) return &entries[i];
    return NULL;
}

const char *const *qs_models_names(void) { return names; }

const char *qs_models_describe(const char *name) {
    const model_entry *e = find(name);
    return e ? e->description : NULL;
}

qs_status qs_models_build(const char *name, const qs_model_options *opt, qs_model **out) {
    if (!out) return QS_FAIL(QS_ERR_INVALID_ARG, "qs_models_build: out is NULL");
    *out = NULL;
    if (!name || !opt)
        return QS_FAIL(QS_ERR_INVALID_ARG, "qs_models_build: %s is NULL", name ? "opt" : "name");
    const model_entry *e = find(name);
    if (!e) {
        char list[192] = "";
        for (size_t i = 0; i < N_ENTRIES; i++) {
            if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
            strncat(list, entries[i].name, sizeof list - strlen(list) - 1);
        }
        return QS_FAIL(QS_ERR_NOT_FOUND, "unknown model '%s'; valid models: %s", name, list);
    }
    qs_model_options o;
    QS_TRY(qs_models_resolve_options(name, opt, &e->defaults, &o));
    qs_mbuild b;
    int x = qs_mb_begin(&b, name, &o);
    if (b.st == QS_OK) {
        qs_status st = qs_models_format_config(name, &o, b.m->config, sizeof b.m->config);
        if (st != QS_OK) b.st = st;
    }
    int logits = e->build(&b, name, &o, x);
    QS_TRY(qs_mb_finish(&b, logits));
    *out = b.m;
    return QS_OK;
}
