/* src/models/options.h — defines: validation and default resolution of qs_model_options.
 * Internal to src/models/ (the config string functions are public, in models.h). */
#ifndef QSYNC_MODELS_OPTIONS_H
#define QSYNC_MODELS_OPTIONS_H

#include "models/models.h"

#define QS_MODELS_MAX_DIM 65536     /* bound on in_h, in_w, in_c, classes and width */

/* Check `in` for model `name` (a known name) and write it to *out with width resolved to
 * `default_width` when 0. QS_ERR_INVALID_ARG naming the offending option. `has_dropout` says
 * whether the architecture has a dropout option (ResNets do not). */
qs_status qs_models_resolve_options(const char *name, const qs_model_options *in,
                                    int64_t default_width, bool has_dropout,
                                    qs_model_options *out);

#endif
