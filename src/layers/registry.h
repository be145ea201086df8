/* src/layers/registry.h — defines: the layer implementation of every node kind. */
#ifndef QSYNC_LAYERS_REGISTRY_H
#define QSYNC_LAYERS_REGISTRY_H

#include "dag/dag.h"

/* The implementation of node kind `kind` (a valid qs_node_kind). */
const qs_layer_impl *qs_layer_impl_for(qs_node_kind kind);

#endif
