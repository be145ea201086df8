/* src/models/options.h — defines: validation and default resolution of qs_model_options.
 * Internal to src/models/ (the config string functions are public, in models.h). */
#ifndef QSYNC_MODELS_OPTIONS_H
#define QSYNC_MODELS_OPTIONS_H

#include "models/models.h"

#define QS_MODELS_MAX_DIM 65536     /* bound on in_h, in_w, in_c, classes and width */

/* An architecture's defaults: width, and for transformers (layers > 0) blocks and heads;
 * whether it has a dropout option (ResNets do not). */
typedef struct qs_model_defaults {
    int64_t width, layers, heads;
    bool has_dropout;
} qs_model_defaults;

/* Check `in` for model `name` (a known name) and write it to *out with width, layers and heads
 * resolved to the defaults when 0. QS_ERR_INVALID_ARG naming the offending option (heads must
 * divide width; layers/heads only for transformers). */
qs_status qs_models_resolve_options(const char *name, const qs_model_options *in, const qs_model_defaults *d,
                                    qs_model_options *out);

#endif
