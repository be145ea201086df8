/* src/models/transformer.c — the transformer models (docs/MODELS.md "gpt", "bert"): a GPT-2
 * decoder with nanoGPT/llm.c parameter names (nn.Linear layouts; Hugging Face's Conv1D weights
 * are their transposes) and a BERT encoder classifier with Hugging Face names. Inputs are token
 * sequences: in_h = in_w = 1, in_c = T ids per sample; classes = the vocabulary (gpt) or the
 * labels (bert). Every matmul is its own node so plans can set each one's precision. */
#include "models/arch.h"

#include <math.h>
#include <stdio.h>

/* Multi-head self-attention of (N, T, C) projections q, k, v already split into heads by the
 * caller's SplitHeads nodes: softmax(q·kᵀ/√D [+ mask]) · v, merged back to (N, T, C). */
static int attention_core(qs_mbuild *b, int q, int k, int v, bool causal, int ids, float dropout,
                          const char *prefix) {
    const float alpha = 1.0f / sqrtf((float)qs_mb_dim(b, q, 3));
    int s = qs_mb_matmul(b, q, k, true, alpha, "%s.scores", prefix);
    int p = qs_mb_softmax(b, s, causal, ids, 0.0f, "%s.softmax", prefix);
    p = qs_mb_dropout(b, p, dropout, "%s.attn_dropout", prefix);
    int c = qs_mb_matmul(b, p, v, false, 1.0f, "%s.context", prefix);
    return qs_mb_merge_heads(b, c, "%s.merge", prefix);
}

/* Sequence models take (1, 1, T) inputs: fail clearly for images. */
static bool check_sequence_input(qs_mbuild *b, const char *name, const qs_model_options *o) {
    if (b->st != QS_OK) return false;
    if (o->in_h == 1 && o->in_w == 1) return true;
    b->st = QS_FAIL(QS_ERR_INVALID_ARG,
                    "model %s takes token sequences (data with h = w = 1, c = sequence length), not %lldx%lldx%lld "
                    "inputs; use text data such as --data fortunes",
                    name, (long long)o->in_h, (long long)o->in_w, (long long)o->in_c);
    return false;
}

/* GPT-2: wte + wpe → [ln_1 → attn → +, ln_2 → mlp → +] × layers → ln_f → lm_head (tied to wte). */
int qs_arch_gpt(qs_mbuild *b, const char *name, const qs_model_options *o, int x) {
    if (!check_sequence_input(b, name, o)) return -1;
    const int64_t T = o->in_c, V = o->num_classes, C = o->width, H = o->heads;
    const float p = o->dropout;
    b->m->label_len = T; /* one next-token label per position */
    int wte = qs_mb_embedding(b, x, V, C, "transformer.wte");
    int h = qs_mb_pos_embedding(b, wte, T, "transformer.wpe");
    h = qs_mb_dropout(b, h, p, "transformer.drop");
    for (int64_t l = 0; l < o->layers; l++) {
        char at[64];
        snprintf(at, sizeof at, "transformer.h.%lld.attn", (long long)l);
        int a = qs_mb_layernorm(b, h, 1e-5f, "transformer.h.%lld.ln_1", (long long)l);
        int qkv = qs_mb_linear(b, a, 3 * C, "%s.c_attn", at);
        int q = qs_mb_split_heads(b, qkv, H, 0, 3, "%s.q", at);
        int k = qs_mb_split_heads(b, qkv, H, 1, 3, "%s.k", at);
        int v = qs_mb_split_heads(b, qkv, H, 2, 3, "%s.v", at);
        a = attention_core(b, q, k, v, true, -1, p, at);
        a = qs_mb_linear(b, a, C, "%s.c_proj", at);
        a = qs_mb_dropout(b, a, p, "%s.resid_dropout", at);
        h = qs_mb_add(b, h, a, "transformer.h.%lld.residual_1", (long long)l);
        int f = qs_mb_layernorm(b, h, 1e-5f, "transformer.h.%lld.ln_2", (long long)l);
        f = qs_mb_linear(b, f, 4 * C, "transformer.h.%lld.mlp.c_fc", (long long)l);
        f = qs_mb_gelu(b, f, "transformer.h.%lld.mlp.gelu", (long long)l);
        f = qs_mb_linear(b, f, C, "transformer.h.%lld.mlp.c_proj", (long long)l);
        f = qs_mb_dropout(b, f, p, "transformer.h.%lld.mlp.dropout", (long long)l);
        h = qs_mb_add(b, h, f, "transformer.h.%lld.residual_2", (long long)l);
    }
    h = qs_mb_layernorm(b, h, 1e-5f, "transformer.ln_f");
    if (b->st != QS_OK) return -1;
    return qs_mb_linear_tied(b, h, V, b->m->nodes[wte].param[0], "lm_head");
}

/* BERT (post-LN): embeddings → LayerNorm → [self-attention (padding mask on id 0) → + → LN,
 * intermediate GELU → output → + → LN] × layers → pooler (first position, dense, tanh) →
 * classifier. No token-type embeddings (one segment). */
int qs_arch_bert(qs_mbuild *b, const char *name, const qs_model_options *o, int x) {
    if (!check_sequence_input(b, name, o)) return -1;
    const int64_t T = o->in_c, V = 256, C = o->width, H = o->heads;
    const float p = o->dropout;
    int h = qs_mb_embedding(b, x, V, C, "bert.embeddings.word_embeddings");
    h = qs_mb_pos_embedding(b, h, T, "bert.embeddings.position_embeddings");
    h = qs_mb_layernorm(b, h, 1e-12f, "bert.embeddings.LayerNorm");
    h = qs_mb_dropout(b, h, p, "bert.embeddings.dropout");
    for (int64_t l = 0; l < o->layers; l++) {
        char L[48], at[64];
        snprintf(L, sizeof L, "bert.encoder.layer.%lld", (long long)l);
        snprintf(at, sizeof at, "%s.attention.self", L);
        int q = qs_mb_linear(b, h, C, "%s.query", at), k = qs_mb_linear(b, h, C, "%s.key", at),
            v = qs_mb_linear(b, h, C, "%s.value", at);
        q = qs_mb_split_heads(b, q, H, 0, 1, "%s.q", at);
        k = qs_mb_split_heads(b, k, H, 0, 1, "%s.k", at);
        v = qs_mb_split_heads(b, v, H, 0, 1, "%s.v", at);
        int a = attention_core(b, q, k, v, false, x, p, at);
        a = qs_mb_linear(b, a, C, "%s.attention.output.dense", L);
        a = qs_mb_dropout(b, a, p, "%s.attention.output.dropout", L);
        a = qs_mb_add(b, a, h, "%s.attention.output.residual", L);
        h = qs_mb_layernorm(b, a, 1e-12f, "%s.attention.output.LayerNorm", L);
        int f = qs_mb_linear(b, h, 4 * C, "%s.intermediate.dense", L);
        f = qs_mb_gelu(b, f, "%s.intermediate.gelu", L);
        f = qs_mb_linear(b, f, C, "%s.output.dense", L);
        f = qs_mb_dropout(b, f, p, "%s.output.dropout", L);
        f = qs_mb_add(b, f, h, "%s.output.residual", L);
        h = qs_mb_layernorm(b, f, 1e-12f, "%s.output.LayerNorm", L);
    }
    int c = qs_mb_select_token(b, h, "bert.pooler.first_token");
    c = qs_mb_linear(b, c, C, "bert.pooler.dense");
    c = qs_mb_tanh(b, c, "bert.pooler.activation");
    c = qs_mb_dropout(b, c, p, "dropout");
    return qs_mb_linear(b, c, o->num_classes, "classifier");
}
