/* src/models/arch.h — defines: the architecture builders the registry (registry.c) dispatches
 * to. Each appends its layers to a started builder from the INPUT node `x`, with options
 * already validated and defaults resolved (o->width > 0), and returns the logits node (or -1
 * with b->st set). `name` selects the variant ("resnet34", "vgg16", ...). Internal. */
#ifndef QSYNC_MODELS_ARCH_H
#define QSYNC_MODELS_ARCH_H

#include "models/builder.h"

int qs_arch_mlp(qs_mbuild *b, const char *name, const qs_model_options *o, int x);
int qs_arch_cnn(qs_mbuild *b, const char *name, const qs_model_options *o, int x);
int qs_arch_resnet(qs_mbuild *b, const char *name, const qs_model_options *o, int x);
int qs_arch_vgg(qs_mbuild *b, const char *name, const qs_model_options *o, int x);
int qs_arch_gpt(qs_mbuild *b, const char *name, const qs_model_options *o, int x);
int qs_arch_bert(qs_mbuild *b, const char *name, const qs_model_options *o, int x);

#endif
