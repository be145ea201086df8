#!/usr/bin/python3
"""tools/gen_transformer_fixtures.py — PyTorch reference fixtures for tests/test_transformer_torch.c.

Run with Debian's torch:  /usr/bin/python3 tools/gen_transformer_fixtures.py [outdir]
(default tests/fixtures). Output is deterministic (fixed seeds). File format: "QSFX" version 1,
written by tools/gen_fixtures.py's Writer (documented there and in tests/support/fixture.h).
Every reference is computed in float64 from the float32 values stored in the file and rounded to
float32 once, so the only error a test sees is that of the implementation under test.

Files:
  transformer_gpt_tiny.bin   the twin of qsync's "gpt" (tools/torch_models.py) with vocabulary 11,
                             T 6, width 8, 2 heads, 2 layers, dropout 0, batch 3, trained 4 steps
                             with AdamW
  transformer_bert_tiny.bin  "bert": T 6, width 4, 2 heads, 2 layers, 3 classes, batch 3, some
                             keys padded (id 0), 4 AdamW steps
  transformer_layernorm.bin  LayerNorm "ln" alone (random weight and bias) over (3, 4, 6) rows
                             (mean 1.5, σ 2), fed by an Embedding "emb" whose table holds them
                             (ids 0..11, an exact copy); its output is the logits of 6 classes
                             at each of the 4 positions
  transformer_attn_causal.bin / transformer_attn_padmask.bin
                             attention alone: ids (3, 5) → Embedding "emb" (V 7, 3C = 24) →
                             "attn.q/k/v" (2 heads of 4) → "attn.scores" (·1/√4) → "attn.softmax"
                             (causal; or keys with id 0 masked, sample 2 all padding) →
                             "attn.context" → "attn.merge" (3, 5, 8) used as the logits of 8
                             classes at each position

Names in the whole-model files: "x.<s>" token ids (N, T) as f32 and "labels.<s>" (i32; (N, T)
next tokens for gpt, (N,) classes for bert) of step s; the initial parameters under their
state_dict names; "act.<node>" the output of every qsync node in step 0's forward outside blocks 1.. (qsync
node names and layouts, tools/torch_models.py record_nodes); "losses" (per step, mean over labels);
"grad0.<p>" the gradients of step 0; "final.<p>" the parameters after the last step;
"nullgrad.<p>" (i32 (R, 2), only where there are some): runs [start, start + length) of elements of
<p> whose gradient is zero in exact arithmetic at every step (|g| <= 1e-12 · the step's largest
gradient; e.g. the key biases, to which the softmax is invariant, and unused embedding rows): AdamW
normalises whatever rounding noise an FP32 implementation computes there into steps of up to lr,
so a test can only bound those elements, not compare them; "adamw.lr", "adamw.beta1",
"adamw.beta2", "adamw.eps", "adamw.weight_decay" (f32 scalars, all exact in float32; the
reference uses the same values); "amplification" (as in tools/gen_fixtures.py: the worst growth
of a relative perturbation of the initial parameters over the run, max over losses and final
tensors of (max|Δ| / max|ref|) / eps, 4 perturbations).
Layer files: "x" (f32 input; ids for the attention cases), "labels" (i32 (N, T)), parameters,
"out" (the tested layer's output), "losses" (N, T), "loss", "grad.<p>" (the LayerNorm's input
gradient is grad.emb.weight) and, for the attention cases, "act.<node>" of every node.
"""
import os
import re
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models as tm  # noqa: E402
from gen_fixtures import DT_I32, Writer  # noqa: E402

STEPS = 4
# float32-exact AdamW settings (the C side takes float lr/eps/weight decay and double betas)
ADAMW = dict(lr=2.0 ** -7, betas=(0.875, 0.96875), eps=2.0 ** -27, weight_decay=0.0625)
NULL_REL = 1e-12

GPT_CFG = dict(name="gpt", T=6, classes=11, width=8, layers=2, heads=2, batch=3, seed=300)
BERT_CFG = dict(name="bert", T=6, classes=3, width=4, layers=2, heads=2, batch=3, seed=400)
LATER_BLOCK = re.compile(r"\.(h|layer)\.[1-9][0-9]*\.")  # activations are kept for block 0 only


def build(cfg):
    return tm.build(cfg["name"], 1, 1, cfg["T"], cfg["classes"], width=cfg["width"], layers=cfg["layers"],
                    heads=cfg["heads"], dropout=0.0)


def loss_of(cfg, logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1).long())


def train(cfg, state, xs, ys):
    """float64 training from `state`: per-step losses, step-0 gradients, every step's gradients,
    the final state."""
    net = build(cfg).double()
    net.load_state_dict({k: v.double() for k, v in state.items()}, strict=True)
    net.train()
    opt = torch.optim.AdamW(net.parameters(), **ADAMW)
    losses, grads = [], []
    for s in range(STEPS):
        opt.zero_grad()
        loss = loss_of(cfg, net(xs[s]), ys[s])
        loss.backward()
        grads.append({k: p.grad.clone() for k, p in net.named_parameters()})
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses), grads, {k: v.clone() for k, v in net.state_dict().items()}


def null_runs(grads, name):
    """Runs [start, length] of elements of parameter `name` whose gradient is ~0 at every step."""
    null = None
    for g in grads:
        top = max(float(t.abs().max()) for t in g.values())
        z = (g[name].abs() <= NULL_REL * top).flatten()
        null = z if null is None else null & z
    runs, i, n = [], 0, null.numel()
    while i < n:
        if null[i]:
            j = i
            while j < n and null[j]:
                j += 1
            runs.append((i, j - i))
            i = j
        else:
            i += 1
    return runs


def amplification(cfg, state, xs, ys, losses, final):
    eps, amp = 1e-7, 1.0
    g = torch.Generator().manual_seed(7)
    for _ in range(4):
        pert = {k: v.double() * (1 + eps * (2 * torch.rand(v.shape, generator=g, dtype=torch.float64) - 1))
                for k, v in state.items()}
        pl, _, pf = train(cfg, pert, xs, ys)
        amp = max(amp, float((pl - losses).abs().max() / losses.abs().max()) / eps)
        for k, v in final.items():
            amp = max(amp, float((pf[k] - v).abs().max() / v.abs().max()) / eps)
    return amp


def batches(cfg):
    """(xs, ys): token ids (N, T) int64 and labels per step."""
    N, T = cfg["batch"], cfg["T"]
    xs, ys = [], []
    for s in range(STEPS):
        if cfg["name"] == "gpt":
            stream = torch.randint(0, cfg["classes"], (N, T + 1))
            xs.append(stream[:, :T].clone())
            ys.append(stream[:, 1:].clone())
        else:
            ids = torch.randint(1, 256, (N, T))
            ids[0, T - 2:] = 0          # sample 0: last two keys padded
            ids[1, T - 3 - s % 2:] = 0  # sample 1: three or four padded
            xs.append(ids)
            ys.append(torch.randint(0, cfg["classes"], (N,)))
    return xs, ys


def model_case(w, cfg):
    torch.manual_seed(cfg["seed"])
    net = build(cfg)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    xs, ys = batches(cfg)
    for s in range(STEPS):
        w.add("x.%d" % s, xs[s].float())
        w.add("labels.%d" % s, ys[s], DT_I32)
    for k, v in state.items():
        w.add(k, v)
    # step 0's forward, every node
    ref = build(cfg).double()
    ref.load_state_dict({k: v.double() for k, v in state.items()}, strict=True)
    with torch.no_grad(), tm.record_nodes(ref) as acts:
        ref(xs[0])
    for k, v in acts.items():
        if not LATER_BLOCK.search(k):
            w.add("act." + k, v)
    losses, grads, final = train(cfg, state, xs, ys)
    w.add("losses", losses)
    for k, gr in grads[0].items():
        w.add("grad0." + k, gr)
    for k, v in final.items():
        w.add("final." + k, v)
    for k in grads[0]:
        runs = null_runs(grads, k)
        if runs:
            w.add("nullgrad." + k, torch.tensor(runs, dtype=torch.int32), DT_I32)
    for k in ("lr", "eps", "weight_decay"):
        w.add("adamw." + k, torch.tensor(ADAMW[k]))
    w.add("adamw.beta1", torch.tensor(ADAMW["betas"][0]))
    w.add("adamw.beta2", torch.tensor(ADAMW["betas"][1]))
    amp = amplification(cfg, state, xs, ys, losses, final)
    w.add("amplification", torch.tensor(amp))
    return amp


# ---------------------------------------------------------------- single layers
def layernorm_case(w):
    """ids = 0..N·T-1 → "emb" (N·T, C) rows (the LayerNorm's input; an exact copy) → "ln"."""
    torch.manual_seed(500)
    N, T, C = 3, 4, 6
    ln = nn.LayerNorm(C, eps=tm._f32(tm.GPT_LN_EPS))
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.5, 0.5)
    x = (torch.randn(N * T, C) * 2 + 1.5).float()
    y = torch.randint(0, C, (N, T))
    w.add("x", torch.arange(N * T).reshape(N, T).float())
    w.add("labels", y, DT_I32)
    w.add("emb.weight", x)
    w.add("ln.weight", ln.weight)
    w.add("ln.bias", ln.bias)
    ln = ln.double()
    xd = x.double().requires_grad_(True)
    out = ln(xd.reshape(N, T, C))
    losses = F.cross_entropy(out.reshape(-1, C), y.reshape(-1), reduction="none")
    loss = losses.mean()
    loss.backward()
    w.add("out", out)
    w.add("losses", losses.reshape(N, T))
    w.add("loss", loss)
    w.add("grad.emb.weight", xd.grad)
    w.add("grad.ln.weight", ln.weight.grad)
    w.add("grad.ln.bias", ln.bias.grad)


class AttnOnly(nn.Module):
    """emb (V, 3C) → attention core (qsync nodes attn.q/k/v/scores/softmax/context/merge)."""

    def __init__(self, vocab, width, heads, causal, pad):
        super().__init__()
        self.emb = nn.Embedding(vocab, 3 * width)
        self.attn = nn.Module()
        self.heads, self.causal, self.pad = heads, causal, pad

    def forward(self, ids):
        q, k, v = self.emb(ids).split(self.emb.weight.shape[1] // 3, dim=-1)
        h = self.heads
        return tm._attention(self.attn, tm._split_heads(q, h), tm._split_heads(k, h), tm._split_heads(v, h),
                             self.causal, ids == 0 if self.pad else None)


def attention_case(w, causal, pad, seed):
    torch.manual_seed(seed)
    N, T, V, C, H = 3, 5, 7, 8, 2
    net = AttnOnly(V, C, H, causal, pad)
    with torch.no_grad():
        net.emb.weight.normal_(0, 1.0)
    ids = torch.randint(1, V, (N, T))
    if pad:
        ids[0, 3:] = 0
        ids[1, 1] = 0
        ids[2, :] = 0  # every key masked: all-zero probabilities
    y = torch.randint(0, C, (N, T))
    w.add("x", ids.float())
    w.add("labels", y, DT_I32)
    w.add("emb.weight", net.emb.weight)
    net = net.double()
    with tm.record_nodes(net) as acts:
        out = net(ids)
    losses = F.cross_entropy(out.reshape(-1, C), y.reshape(-1), reduction="none")
    loss = losses.mean()
    loss.backward()
    for k, v in acts.items():
        w.add("act." + k, v)
    w.add("out", out)
    w.add("losses", losses.reshape(N, T))
    w.add("loss", loss)
    w.add("grad.emb.weight", net.emb.weight.grad)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                                   "tests", "fixtures")
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    total = 0

    def save(w, name, extra=""):
        nonlocal total
        n = w.save(os.path.join(outdir, name))
        total += n
        print("%s: %d tensors, %d bytes%s" % (name, len(w.items), n, extra))

    for cfg, name in ((GPT_CFG, "transformer_gpt_tiny.bin"), (BERT_CFG, "transformer_bert_tiny.bin")):
        w = Writer()
        amp = model_case(w, cfg)
        save(w, name, ", amplification %.3g" % amp)
    w = Writer()
    layernorm_case(w)
    save(w, "transformer_layernorm.bin")
    for causal, pad, seed, name in ((True, False, 600, "transformer_attn_causal.bin"),
                                    (False, True, 601, "transformer_attn_padmask.bin")):
        w = Writer()
        attention_case(w, causal, pad, seed)
        save(w, name)
    print("total %d bytes" % total)


if __name__ == "__main__":
    main()
