"""tools/torch_models.py — PyTorch twins of qsync's built-in models (src/models/).

build(name, in_h, in_w, in_c, classes, width=0, cifar_stem=None, dropout=0.0, layers=0, heads=0)
returns an nn.Module whose state_dict (names, shapes, dtypes, order, layouts) is exactly that of
the qsync model built with the same options, and whose leaf-module paths are the qsync node
names, so a qsync checkpoint loads with load_state_dict(strict=True) and per-node activations can
be compared by name (transformers: record_nodes(model) collects every node's output, the
functional ones — heads, scores, softmax, residual adds — included). Image models take NCHW
here; qsync feeds NHWC (x_torch = x_qsync.permute(0, 3, 1, 2)). The transformers ("gpt",
"gpt-mini", "bert", "bert-mini"; layers/heads 0 = the preset's) take token ids (N, T) with
T = in_c (int64; qsync feeds them as floats, which forward() also accepts). gpt returns
next-token logits (N, T, V), V = classes, its lm_head tied to transformer.wte (no lm_head.weight
entry, as in qsync); bert (byte vocabulary 256, no token-type embeddings, keys of id 0 masked)
returns (N, classes). The exact architectures are documented in docs/MODELS.md; keep both in
sync with src/models/.

build_from_config(arch, config) rebuilds a model from the "key=value ..." string qsync stores
in qs_model.config (and in checkpoint metadata); load_checkpoint(path) rebuilds the model of a
qsync checkpoint and loads its weights (tools/safetensors_torch.py).
"""
import math
import os
import struct
import sys

import torch
from torch import nn
import torch.nn.functional as F

NAMES = ("mlp", "cnn", "resnet18", "resnet34", "resnet50", "vgg11", "vgg16",
         "gpt", "gpt-mini", "bert", "bert-mini")
DEFAULT_WIDTH = {"mlp": 1024, "cnn": 32, "resnet18": 64, "resnet34": 64, "resnet50": 64,
                 "vgg11": 64, "vgg16": 64, "gpt": 768, "gpt-mini": 128, "bert": 768, "bert-mini": 256}
# transformers: (blocks, attention heads) when the options give 0 (src/models/registry.c)
DEFAULT_LAYERS_HEADS = {"gpt": (12, 12), "gpt-mini": (4, 4), "bert": (12, 12), "bert-mini": (4, 4)}
BERT_VOCAB, BERT_PAD_ID = 256, 0   # byte ids; keys whose id is 0 are masked
GPT_LN_EPS, BERT_LN_EPS = 1e-5, 1e-12
EMBED_INIT_STD = 0.02
SMALL_INPUT = 64          # inputs with both sides <= this are "small" (CIFAR stem, GAP classifier)
BN_EPS, BN_MOMENTUM = 1e-5, 0.1


def is_small(in_h, in_w):
    return in_h <= SMALL_INPUT and in_w <= SMALL_INPUT


class MLP(nn.Module):
    """flatten → fc1 → relu1 → [drop1] → fc2 → relu2 → [drop2] → fc3."""

    def __init__(self, in_features, hidden, classes, dropout):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(in_features, hidden)
        self.relu1 = nn.ReLU()
        if dropout > 0:
            self.drop1 = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, hidden)
        self.relu2 = nn.ReLU()
        if dropout > 0:
            self.drop2 = nn.Dropout(dropout)
        self.fc3 = nn.Linear(hidden, classes)

    def forward(self, x):
        for m in self.children():
            x = m(x)
        return x


class CNN(nn.Module):
    """conv1(5×5, pad 2) → relu1 → pool1(2) → conv2 → relu2 → pool2 → flatten → fc1(1024) →
    relu3 → [drop] → fc2."""

    def __init__(self, in_h, in_w, in_c, classes, width, dropout):
        super().__init__()
        self.conv1 = nn.Conv2d(in_c, width, 5, padding=2)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(width, 2 * width, 5, padding=2)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(2, 2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(2 * width * (in_h // 4) * (in_w // 4), 1024)
        self.relu3 = nn.ReLU()
        if dropout > 0:
            self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(1024, classes)

    def forward(self, x):
        for m in self.children():
            x = m(x)
        return x


def _bn(c):
    return nn.BatchNorm2d(c, eps=BN_EPS, momentum=BN_MOMENTUM)


def _downsample(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), _bn(cout))


class BasicBlock(nn.Module):
    """torchvision BasicBlock; its one reused ReLU is split into relu1 / relu2 (no state)."""
    expansion = 1

    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = _bn(planes)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = _bn(planes)
        self.downsample = _downsample(cin, planes, stride) if stride != 1 or cin != planes else None
        self.relu2 = nn.ReLU()

    def forward(self, x):
        y = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        idt = self.downsample(x) if self.downsample is not None else x
        return self.relu2(y + idt)


class Bottleneck(nn.Module):
    """torchvision Bottleneck (v1.5: stride on the 3×3), expansion 4; ReLUs relu1..relu3."""
    expansion = 4

    def __init__(self, cin, planes, stride):
        super().__init__()
        cout = planes * self.expansion
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = _bn(planes)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = _bn(planes)
        self.relu2 = nn.ReLU()
        self.conv3 = nn.Conv2d(planes, cout, 1, bias=False)
        self.bn3 = _bn(cout)
        self.downsample = _downsample(cin, cout, stride) if stride != 1 or cin != cout else None
        self.relu3 = nn.ReLU()

    def forward(self, x):
        y = self.relu1(self.bn1(self.conv1(x)))
        y = self.relu2(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        idt = self.downsample(x) if self.downsample is not None else x
        return self.relu3(y + idt)


RESNET_BLOCKS = {"resnet18": (BasicBlock, (2, 2, 2, 2)), "resnet34": (BasicBlock, (3, 4, 6, 3)),
                 "resnet50": (Bottleneck, (3, 4, 6, 3))}


class ResNet(nn.Module):
    """torchvision ResNet naming; CIFAR stem = conv1 3×3/1/1 and no maxpool."""

    def __init__(self, name, in_c, classes, width, cifar_stem):
        super().__init__()
        block, counts = RESNET_BLOCKS[name]
        if cifar_stem:
            self.conv1 = nn.Conv2d(in_c, width, 3, stride=1, padding=1, bias=False)
        else:
            self.conv1 = nn.Conv2d(in_c, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = _bn(width)
        self.relu = nn.ReLU()
        if not cifar_stem:
            self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = width
        for li, n in enumerate(counts):
            planes = width << li
            blocks = []
            for bi in range(n):
                stride = 2 if (li > 0 and bi == 0) else 1
                blocks.append(block(cin, planes, stride))
                cin = planes * block.expansion
            setattr(self, "layer%d" % (li + 1), nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        for m in self.children():
            x = m(x)
        return x


VGG_CFG = {"vgg11": (1, "M", 2, "M", 4, 4, "M", 8, 8, "M", 8, 8, "M"),
           "vgg16": (1, 1, "M", 2, 2, "M", 4, 4, 4, "M", 8, 8, 8, "M", 8, 8, 8, "M")}


def vgg_pool_pad(h, w):
    """2×2/2 max-pool padding: 1 when a side is odd (28→14→7→4→2→1), else 0."""
    return 1 if (h % 2 or w % 2) else 0


class VGG(nn.Module):
    """torchvision vgg*_bn features (conv 3×3 with bias, BN, ReLU; 'M' = max-pool 2/2, padded by
    1 on odd sides). Small inputs: avgpool(global) → flatten → [dropout] → classifier Linear(8w,
    classes). Large inputs: flatten of the s×s map → classifier.0 Linear(8w·s·s, 64w) → .1 ReLU
    → .2 Dropout → .3 Linear(64w, 64w) → .4 ReLU → .5 Dropout → .6 Linear(64w, classes)."""

    def __init__(self, name, in_h, in_w, in_c, classes, width, dropout):
        super().__init__()
        layers, c, h, w = [], in_c, in_h, in_w
        for v in VGG_CFG[name]:
            if v == "M":
                pad = vgg_pool_pad(h, w)
                layers.append(nn.MaxPool2d(2, 2, padding=pad))
                h, w = (h + 2 * pad - 2) // 2 + 1, (w + 2 * pad - 2) // 2 + 1
            else:
                layers += [nn.Conv2d(c, v * width, 3, padding=1), _bn(v * width), nn.ReLU()]
                c = v * width
        self.features = nn.Sequential(*layers)
        if is_small(in_h, in_w):
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.flatten = nn.Flatten()
            if dropout > 0:
                self.dropout = nn.Dropout(dropout)
            self.classifier = nn.Linear(c, classes)
        else:
            hidden = 64 * width
            self.flatten = nn.Flatten()
            self.classifier = nn.Sequential(
                nn.Linear(c * h * w, hidden), nn.ReLU(), nn.Dropout(dropout),
                nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
                nn.Linear(hidden, classes))

    def forward(self, x):
        for m in self.children():
            x = m(x)
        return x


# ---------------------------------------------------------------- transformers (src/models/transformer.c)
def _f32(v):
    """v rounded to float32 (qsync's constants are float literals)."""
    return struct.unpack("f", struct.pack("f", v))[0]


_TRACE = None  # dict qsync node name -> output while record_nodes() is active


def _rec(module, suffix, t):
    """Record t as the output of qsync node "<module path>.<suffix>" inside record_nodes()."""
    if _TRACE is not None and module is not None:
        base = getattr(module, "_qs_name", None)
        if base is not None:
            _TRACE[base + "." + suffix if base else suffix] = t
    return t


class record_nodes:
    """with record_nodes(model) as out: model(x) — out maps every qsync node name of a
    transformer twin to its output tensor (qsync's layout: (N, T, C), heads (N, H, T, D),
    scores (N, H, Tq, Tk), the pooler's first token (N, C)): leaf modules through forward hooks,
    the functional nodes (heads split/merge, scores, softmax, context, residual adds, position
    sums, first token) where they are computed."""

    def __init__(self, model):
        self.model, self.out, self.hooks = model, {}, []

    def __enter__(self):
        global _TRACE
        for name, m in self.model.named_modules():
            m._qs_name = name
            if name and not list(m.children()):
                self.hooks.append(m.register_forward_hook(
                    lambda mod, inp, outp, n=name: self.out.__setitem__(n, outp)))
        _TRACE = self.out
        return self.out

    def __exit__(self, *exc):
        global _TRACE
        _TRACE = None
        for h in self.hooks:
            h.remove()
        return False


def is_transformer(name):
    return name in DEFAULT_LAYERS_HEADS


def _token_ids(x):
    """Token ids as int64 (N, T); accepts qsync's float ids too."""
    return x if x.dtype == torch.int64 else x.round().long()


def _maybe_dropout(module, name, p):
    """Register nn.Dropout(p) as `name` only when p > 0 (qsync adds no Dropout node at p = 0)."""
    if p > 0:
        module.add_module(name, nn.Dropout(p))


def _drop(module, name, x):
    d = getattr(module, name, None)
    return d(x) if d is not None else x


class _Embedding(nn.Embedding):
    """nn.Embedding initialised N(0, 0.02²) like qsync (embedding.c)."""

    def reset_parameters(self):
        nn.init.normal_(self.weight, 0.0, EMBED_INIT_STD)


# Benchmarks only (tools/torch_train_bench.py --sdpa): run causal attention without padding
# through F.scaled_dot_product_attention (fused flash/memory-efficient kernels) instead of the
# node-by-node form below. Same function, other rounding; never set for fixtures or comparisons.
USE_SDPA = False


def _attention(module, q, k, v, causal, key_pad=None):
    """softmax(q·kᵀ·alpha [causal | key padding mask]) · v over (N, H, T, D), with alpha =
    1.0f/sqrtf(D) in float32 as qsync computes it and module's optional attn_dropout on the
    probabilities. key_pad (N, Tk): True = masked. A query whose keys are all masked gets all-zero
    probabilities (qsync's softmax), not NaN."""
    if USE_SDPA and key_pad is None and _TRACE is None and not hasattr(module, "attn_dropout"):
        return _merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    alpha = _f32(1.0 / _f32(math.sqrt(q.shape[-1])))
    for suffix, t in (("q", q), ("k", k), ("v", v)):
        _rec(module, suffix, t)
    s = _rec(module, "scores", torch.matmul(q, k.transpose(-1, -2)) * alpha)
    mask = None
    if causal:
        mask = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool, device=s.device).triu(1)
    if key_pad is not None:
        kp = key_pad[:, None, None, :]
        mask = kp if mask is None else (mask | kp)
    if mask is None:
        p = torch.softmax(s, -1)
    else:
        mask = mask.expand(s.shape)
        kept = ~mask.all(-1, keepdim=True)
        s = torch.where(kept, s.masked_fill(mask, float("-inf")), torch.zeros_like(s))
        p = torch.softmax(s, -1) * kept
    _rec(module, "softmax", p)
    c = _rec(module, "context", torch.matmul(_drop(module, "attn_dropout", p), v))
    return _rec(module, "merge", _merge_heads(c))


def _split_heads(x, heads):
    """(N, T, H·D) → (N, H, T, D)."""
    N, T, C = x.shape
    return x.view(N, T, heads, C // heads).transpose(1, 2)


def _merge_heads(x):
    """(N, H, T, D) → (N, T, H·D)."""
    N, H, T, D = x.shape
    return x.transpose(1, 2).reshape(N, T, H * D)


class GPTAttention(nn.Module):
    """transformer.h.i.attn: c_attn (C → 3C, columns q | k | v, head h = columns h·D..) →
    causal attention → c_proj → [resid_dropout]."""

    def __init__(self, width, heads, dropout):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        _maybe_dropout(self, "attn_dropout", dropout)
        self.c_proj = nn.Linear(width, width)
        _maybe_dropout(self, "resid_dropout", dropout)

    def forward(self, x):
        q, k, v = self.c_attn(x).split(x.shape[-1], dim=-1)
        a = _attention(self, _split_heads(q, self.heads), _split_heads(k, self.heads), _split_heads(v, self.heads),
                       True)
        return _drop(self, "resid_dropout", self.c_proj(a))


class GPTMLP(nn.Module):
    def __init__(self, width, dropout):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * width, width)
        _maybe_dropout(self, "dropout", dropout)

    def forward(self, x):
        return _drop(self, "dropout", self.c_proj(self.gelu(self.c_fc(x))))


class GPTBlock(nn.Module):
    """Pre-LN: h + attn(ln_1(h)), then + mlp(ln_2(·))."""

    def __init__(self, width, heads, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width, eps=_f32(GPT_LN_EPS))
        self.attn = GPTAttention(width, heads, dropout)
        self.ln_2 = nn.LayerNorm(width, eps=_f32(GPT_LN_EPS))
        self.mlp = GPTMLP(width, dropout)

    def forward(self, h):
        h = _rec(self, "residual_1", h + self.attn(self.ln_1(h)))
        return _rec(self, "residual_2", h + self.mlp(self.ln_2(h)))


class TiedLinear(nn.Module):
    """lm_head: x · Wᵀ with W the token embedding's weight; owns no parameter (the owner is kept
    out of the module tree, so the state_dict has no lm_head.weight)."""

    def __init__(self, owner):
        super().__init__()
        self._owner = (owner,)

    def forward(self, x):
        return F.linear(x, self._owner[0].weight)


class GPT(nn.Module):
    """GPT-2 with nanoGPT/llm.c names: transformer.wte (V, C), transformer.wpe (T, C) →
    [transformer.drop] → transformer.h.i → transformer.ln_f → lm_head tied to wte.
    forward(ids (N, T)) → logits (N, T, V)."""

    def __init__(self, T, vocab, width, layers, heads, dropout):
        super().__init__()
        self.transformer = nn.ModuleDict()
        self.transformer["wte"] = _Embedding(vocab, width)
        self.transformer["wpe"] = _Embedding(T, width)
        _maybe_dropout(self.transformer, "drop", dropout)
        self.transformer["h"] = nn.ModuleList(GPTBlock(width, heads, dropout) for _ in range(layers))
        self.transformer["ln_f"] = nn.LayerNorm(width, eps=_f32(GPT_LN_EPS))
        self.lm_head = TiedLinear(self.transformer["wte"])

    def forward(self, ids):
        ids = _token_ids(ids)
        t = self.transformer
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = _drop(t, "drop", _rec(t, "wpe", t["wte"](ids) + t["wpe"](pos)))
        for block in t["h"]:
            h = block(h)
        return self.lm_head(t["ln_f"](h))


class BertSelfAttention(nn.Module):
    def __init__(self, width, heads, dropout):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        _maybe_dropout(self, "attn_dropout", dropout)

    def forward(self, x, key_pad):
        q, k, v = (_split_heads(f(x), self.heads) for f in (self.query, self.key, self.value))
        return _attention(self, q, k, v, False, key_pad)


class BertResidualOutput(nn.Module):
    """dense → [dropout] → + residual → LayerNorm (attention.output and output)."""

    def __init__(self, width_in, width, dropout):
        super().__init__()
        self.dense = nn.Linear(width_in, width)
        _maybe_dropout(self, "dropout", dropout)
        self.LayerNorm = nn.LayerNorm(width, eps=_f32(BERT_LN_EPS))

    def forward(self, x, residual):
        return self.LayerNorm(_rec(self, "residual", _drop(self, "dropout", self.dense(x)) + residual))


class BertAttention(nn.Module):
    def __init__(self, width, heads, dropout):
        super().__init__()
        self.self = BertSelfAttention(width, heads, dropout)
        self.output = BertResidualOutput(width, width, dropout)

    def forward(self, h, key_pad):
        return self.output(self.self(h, key_pad), h)


class BertIntermediate(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.dense = nn.Linear(width, 4 * width)
        self.gelu = nn.GELU(approximate="tanh")

    def forward(self, x):
        return self.gelu(self.dense(x))


class BertLayer(nn.Module):
    """Post-LN block: LN(h + attn(h)), then LN(· + output(intermediate(·)))."""

    def __init__(self, width, heads, dropout):
        super().__init__()
        self.attention = BertAttention(width, heads, dropout)
        self.intermediate = BertIntermediate(width)
        self.output = BertResidualOutput(4 * width, width, dropout)

    def forward(self, h, key_pad):
        h = self.attention(h, key_pad)
        return self.output(self.intermediate(h), h)


class BertEmbeddings(nn.Module):
    def __init__(self, T, width, dropout):
        super().__init__()
        self.word_embeddings = _Embedding(BERT_VOCAB, width)
        self.position_embeddings = _Embedding(T, width)
        self.LayerNorm = nn.LayerNorm(width, eps=_f32(BERT_LN_EPS))
        _maybe_dropout(self, "dropout", dropout)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = _rec(self, "position_embeddings", self.word_embeddings(ids) + self.position_embeddings(pos))
        return _drop(self, "dropout", self.LayerNorm(h))


class BertPooler(nn.Module):
    """First position → dense → tanh."""

    def __init__(self, width):
        super().__init__()
        self.dense = nn.Linear(width, width)
        self.activation = nn.Tanh()

    def forward(self, h):
        return self.activation(self.dense(_rec(self, "first_token", h[:, 0])))


class BertCore(nn.Module):
    def __init__(self, T, width, layers, heads, dropout):
        super().__init__()
        self.embeddings = BertEmbeddings(T, width, dropout)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(BertLayer(width, heads, dropout) for _ in range(layers))
        self.pooler = BertPooler(width)

    def forward(self, ids):
        key_pad = ids == BERT_PAD_ID
        h = self.embeddings(ids)
        for layer in self.encoder.layer:
            h = layer(h, key_pad)
        return self.pooler(h)


class BERT(nn.Module):
    """Hugging Face BertForSequenceClassification names without token-type embeddings:
    bert.embeddings → bert.encoder.layer.i → bert.pooler → [dropout] → classifier.
    forward(ids (N, T)) → logits (N, classes)."""

    def __init__(self, T, classes, width, layers, heads, dropout):
        super().__init__()
        self.bert = BertCore(T, width, layers, heads, dropout)
        _maybe_dropout(self, "dropout", dropout)
        self.classifier = nn.Linear(width, classes)

    def forward(self, ids):
        return self.classifier(_drop(self, "dropout", self.bert(_token_ids(ids))))


def _resolve_transformer(name, width, layers, heads):
    """Defaults for 0 and the checks of qs_models_resolve_options."""
    width = width or DEFAULT_WIDTH[name]
    dl, dh = DEFAULT_LAYERS_HEADS[name]
    layers, heads = layers or dl, heads or dh
    if width % heads:
        raise ValueError("model %s: heads=%d must divide width=%d" % (name, heads, width))
    return width, layers, heads


def build(name, in_h, in_w, in_c, classes, width=0, cifar_stem=None, dropout=0.0, layers=0, heads=0):
    """The PyTorch twin of qs_models_build(name, opt): width 0 = the default, cifar_stem None =
    True for inputs of at most 64×64; layers/heads (transformers only) 0 = the preset's."""
    if name not in NAMES:
        raise ValueError("unknown model %r; valid: %s" % (name, ", ".join(NAMES)))
    if is_transformer(name):
        if in_h != 1 or in_w != 1:
            raise ValueError("model %s takes token sequences (in_h = in_w = 1, in_c = T), not %dx%dx%d"
                             % (name, in_h, in_w, in_c))
        width, layers, heads = _resolve_transformer(name, width, layers, heads)
        if name.startswith("gpt"):
            return GPT(in_c, classes, width, layers, heads, dropout)
        return BERT(in_c, classes, width, layers, heads, dropout)
    if layers or heads:
        raise ValueError("model %s has no layers/heads options" % name)
    width = width or DEFAULT_WIDTH[name]
    if cifar_stem is None:
        cifar_stem = is_small(in_h, in_w)
    if name == "mlp":
        return MLP(in_h * in_w * in_c, width, classes, dropout)
    if name == "cnn":
        return CNN(in_h, in_w, in_c, classes, width, dropout)
    if name.startswith("resnet"):
        return ResNet(name, in_c, classes, width, cifar_stem)
    return VGG(name, in_h, in_w, in_c, classes, width, dropout)


def parse_config(config):
    """Parse qsync's "in_h=28 in_w=28 in_c=1 classes=10 width=16 cifar_stem=1 dropout=0" (and the
    transformers' "... width=C layers=L heads=H dropout=p") into build() keyword arguments."""
    kv = dict(item.split("=", 1) for item in config.replace(",", " ").split())
    return dict(in_h=int(kv["in_h"]), in_w=int(kv["in_w"]), in_c=int(kv["in_c"]),
                classes=int(kv["classes"]), width=int(kv.get("width", 0)),
                cifar_stem=bool(int(kv["cifar_stem"])) if "cifar_stem" in kv else None,
                dropout=float(kv.get("dropout", 0.0)),
                layers=int(kv.get("layers", 0)), heads=int(kv.get("heads", 0)))


def build_from_config(arch, config):
    """build() from the arch and config strings of a qsync model or checkpoint."""
    return build(arch, **parse_config(config))


def load_checkpoint(path):
    """The model of a qsync checkpoint (a directory holding model.safetensors, or that file),
    rebuilt from its "arch" and "config" metadata, with every weight and buffer loaded
    (strict: names, shapes and dtypes must all match). Returns (model, metadata)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import safetensors_torch
    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    meta = safetensors_torch.load_metadata(path)
    if "arch" not in meta or "config" not in meta:
        raise ValueError("%s: metadata lacks arch/config; not a qsync model file" % path)
    model = build_from_config(meta["arch"], meta["config"])
    model.load_state_dict(safetensors_torch.load_file(path), strict=True)
    return model, meta


def _format_float(v):
    """Shortest %g text (6 to 9 digits) that reads back as the same float32, as qsync writes."""
    f32 = struct.unpack("f", struct.pack("f", v))[0]
    for prec in range(6, 10):
        text = "%.*g" % (prec, f32)
        if struct.unpack("f", struct.pack("f", float(text)))[0] == f32:
            return text
    return text


def config_string(name, in_h, in_w, in_c, classes, width=0, cifar_stem=None, dropout=0.0, layers=0, heads=0):
    """The config string qsync writes in qs_model.config for these options (defaults resolved):
    ResNets record cifar_stem, transformers layers, heads and dropout, the others dropout."""
    if is_transformer(name):
        width, layers, heads = _resolve_transformer(name, width, layers, heads)
        return ("in_h=%d in_w=%d in_c=%d classes=%d width=%d layers=%d heads=%d dropout=%s"
                % (in_h, in_w, in_c, classes, width, layers, heads, _format_float(dropout)))
    width = width or DEFAULT_WIDTH[name]
    if cifar_stem is None:
        cifar_stem = is_small(in_h, in_w)
    head = "in_h=%d in_w=%d in_c=%d classes=%d width=%d" % (in_h, in_w, in_c, classes, width)
    if name.startswith("resnet"):
        return head + " cifar_stem=%d" % int(cifar_stem)
    return head + " dropout=" + _format_float(dropout)


if __name__ == "__main__":
    if len(sys.argv) < 6:
        sys.exit("usage: torch_models.py NAME IN_H IN_W IN_C CLASSES [WIDTH [LAYERS HEADS]]")
    ints = [int(a) for a in sys.argv[2:]]
    model = build(sys.argv[1], *ints[:5], **dict(zip(("layers", "heads"), ints[5:7])))
    print(model)
    print("parameters:", sum(p.numel() for p in model.parameters()))
