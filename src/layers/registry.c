/* src/layers/registry.c — node kind → layer implementation. */
#include "layers/layer_util.h"

extern const qs_layer_impl qs_layer_input_impl, qs_layer_linear, qs_layer_conv2d, qs_layer_batchnorm2d,
    qs_layer_relu, qs_layer_maxpool2d, qs_layer_avgpool2d, qs_layer_flatten, qs_layer_dropout, qs_layer_add,
    qs_layer_cast, qs_layer_softmax_xent, qs_layer_embedding, qs_layer_pos_embedding, qs_layer_layernorm,
    qs_layer_gelu, qs_layer_tanh, qs_layer_split_heads, qs_layer_merge_heads, qs_layer_matmul, qs_layer_softmax,
    qs_layer_select_token, qs_layer_silu;

const qs_layer_impl *qs_layer_impl_for(qs_node_kind kind) {
    static const qs_layer_impl *const table[QS_NODE_KIND_COUNT] = {
        [QS_NODE_INPUT] = &qs_layer_input_impl,         [QS_NODE_LINEAR] = &qs_layer_linear,
        [QS_NODE_CONV2D] = &qs_layer_conv2d,       [QS_NODE_BATCHNORM2D] = &qs_layer_batchnorm2d,
        [QS_NODE_RELU] = &qs_layer_relu,           [QS_NODE_MAXPOOL2D] = &qs_layer_maxpool2d,
        [QS_NODE_AVGPOOL2D] = &qs_layer_avgpool2d, [QS_NODE_FLATTEN] = &qs_layer_flatten,
        [QS_NODE_DROPOUT] = &qs_layer_dropout,     [QS_NODE_ADD] = &qs_layer_add,
        [QS_NODE_CAST] = &qs_layer_cast,           [QS_NODE_SOFTMAX_XENT] = &qs_layer_softmax_xent,
        [QS_NODE_EMBEDDING] = &qs_layer_embedding, [QS_NODE_POS_EMBEDDING] = &qs_layer_pos_embedding,
        [QS_NODE_LAYERNORM] = &qs_layer_layernorm, [QS_NODE_GELU] = &qs_layer_gelu,
        [QS_NODE_TANH] = &qs_layer_tanh,           [QS_NODE_SPLIT_HEADS] = &qs_layer_split_heads,
        [QS_NODE_MERGE_HEADS] = &qs_layer_merge_heads, [QS_NODE_MATMUL] = &qs_layer_matmul,
        [QS_NODE_SOFTMAX] = &qs_layer_softmax,     [QS_NODE_SELECT_TOKEN] = &qs_layer_select_token,
        [QS_NODE_SILU] = &qs_layer_silu,
    };
    return (unsigned)kind < QS_NODE_KIND_COUNT ? table[kind] : &qs_layer_input_impl;
}
