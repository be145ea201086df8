/* src/models/models.h — defines: the built-in model zoo (mlp, cnn, resnet18/34/50, vgg11/16),
 * its build options, the config string that records them, and a per-layer summary printer.
 *
 * Every model is a qs_model DAG (src/graph/graph.h) whose parameter and buffer names, shapes,
 * order and layouts are exactly those of the PyTorch twins in tools/torch_models.py (torchvision
 * names for ResNet/VGG), and whose node names are those twins' module paths. The architectures
 * are specified in docs/MODELS.md. */
#ifndef QSYNC_MODELS_MODELS_H
#define QSYNC_MODELS_MODELS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "qsync/status.h"
#include "graph/graph.h"

typedef struct qs_model_options {
    int64_t in_h, in_w, in_c;   /* per-sample input, e.g. 28,28,1 */
    int64_t num_classes;
    int64_t width;              /* 0 = the architecture's default (resnet 64, vgg 64, cnn 32, mlp hidden 1024) */
    bool cifar_stem;            /* resnet: 3×3 stride-1 conv, no max-pool (default true for inputs ≤ 64 px) */
    float dropout;              /* mlp/cnn/vgg classifier dropout probability, default 0; transformers:
                                 * embedding, attention and residual dropout */
    int64_t layers, heads;      /* transformers: blocks and attention heads (0 = the model's default);
                                 * must be 0 for the other models */
} qs_model_options;

/* Inputs with both sides at most this many pixels are "small": ResNet defaults to the CIFAR
 * stem and VGG uses the global-average-pool classifier. */
#define QS_MODELS_SMALL_INPUT 64

/* Options for an in_h×in_w×in_c input and num_classes with every other field at its default:
 * width 0, cifar_stem = (in_h ≤ 64 && in_w ≤ 64), dropout 0. */
qs_model_options qs_models_default_options(int64_t in_h, int64_t in_w, int64_t in_c,
                                           int64_t num_classes);

/* Build `name` ("mlp", "cnn", "resnet18", "resnet34", "resnet50", "vgg11", "vgg16") with `opt`,
 * finalized, with m->config recording the resolved options. QS_ERR_NOT_FOUND (listing the valid
 * names) for an unknown name; QS_ERR_INVALID_ARG naming the option for bad options; an input too
 * small for the architecture fails with a message naming the model, input and node whose output
 * would be empty. On failure *out is NULL. */
qs_status qs_models_build(const char *name, const qs_model_options *opt, qs_model **out);

/* Whether `name` is a transformer: it takes token sequences (in_h = in_w = 1, in_c = T ids),
 * and its config records layers and heads. */
bool qs_models_is_transformer(const char *name);

/* NULL-terminated list of the model names, in a stable order. */
const char *const *qs_models_names(void);
/* One-line description of `name`, or NULL if there is no such model. */
const char *qs_models_describe(const char *name);

/* Print a table of nodes (index, name, kind, inputs, per-sample output shape in PyTorch (C,H,W)
 * order, parameters, forward MFLOPs per sample) and totals (trainable parameters, buffer
 * elements, forward/backward GFLOPs per sample) to f. */
void qs_models_print(const qs_model *m, FILE *f);

/* Parse "key=value" items separated by spaces or commas into *opt; keys not present keep their
 * value. Keys: in_h in_w in_c classes width cifar_stem (0/1) dropout. QS_ERR_NOT_FOUND for an
 * unknown key, QS_ERR_FORMAT for a malformed item or value. *opt is unchanged on failure. */
qs_status qs_models_parse_config(const char *config, qs_model_options *opt);

/* Write the config string of `name` built with `opt` (defaults resolved), as stored in
 * qs_model.config: "in_h=28 in_w=28 in_c=1 classes=10 width=16 cifar_stem=1" for ResNets,
 * "... width=64 dropout=0.5" for the others. QS_ERR_INVALID_ARG if it does not fit in cap. */
qs_status qs_models_format_config(const char *name, const qs_model_options *opt, char *buf,
                                  size_t cap);

/* Rebuild a model from the arch and config strings of a qs_model or checkpoint. in_h, in_w, in_c
 * and classes must be present; other keys default as in qs_models_default_options. */
qs_status qs_models_build_config(const char *name, const char *config, qs_model **out);

#endif
