#!/usr/bin/python3
"""tools/gen_fixtures.py — PyTorch reference fixtures for tests/test_layers_torch.c.

Run with Debian's torch:  /usr/bin/python3 tools/gen_fixtures.py [outdir]   (default tests/fixtures)
Output is deterministic (fixed seeds); each case writes tests/fixtures/layer_<case>.bin.

File format "QSFX" version 1 (all integers little-endian; mirrored in tests/support/fixture.h):
  offset 0   char[4]  magic "QSFX"
         4   u32      version (= 1)
         8   u32      count: number of tensors that follow
  then `count` records, back to back:
             u16      name length L (1..65535)
             u8[L]    name, UTF-8, not NUL-terminated, unique within the file
             u8       dtype: 0 = f32, 1 = i32, 2 = i64
             u8       ndim (0..8; 0 is a scalar with one element)
             i64[ndim] shape (each >= 0)
             raw      numel * sizeof(dtype) bytes of row-major little-endian data
  The file ends exactly after the last record (trailing bytes are an error).

Names used by every layer case: "x" input (NHWC, or (N,1,1,F) for flat inputs), "labels" (i32),
parameters and buffers under their PyTorch state_dict names before the step ("conv.weight",
"bn.running_mean", ...), "out" = the output of the layer under test (NHWC if 4-d), "loss" (mean
cross-entropy, scalar), "losses" (per sample), "grad.x" = d loss/d x (NHWC), "grad.<param>",
"after.<buffer>" = BN buffers after the training step. The whole-model case ("layer_tiny_model")
holds "x.<s>"/"labels.<s>" per step, initial parameters/buffers, "losses" (per step), "grad0.<p>"
(gradients of step 0), "final.<p>"/"final.<buffer>", and "amplification" (see below).

Every reference is computed in float64 from the float32 values stored in the file, then rounded
to float32 once, so the only error a test sees is that of the implementation under test.
The network for a case is: layer under test -> (Flatten if 4-d) -> fixed Linear "fc" to `classes`
(unless the layer output already is the logits) -> CrossEntropyLoss(mean).
"""
import copy
import os
import struct
import sys

import torch
from torch import nn
import torch.nn.functional as F

DT_F32, DT_I32, DT_I64 = 0, 1, 2
CLASSES = 5


class Writer:
    def __init__(self):
        self.items = []

    def add(self, name, t, dtype=DT_F32):
        assert name not in [n for n, _, _ in self.items], name
        t = torch.as_tensor(t).detach().cpu()
        t = t.to({DT_F32: torch.float32, DT_I32: torch.int32, DT_I64: torch.int64}[dtype]).contiguous()
        self.items.append((name, dtype, t))

    def nhwc(self, name, t):
        """Store a 4-d NCHW tensor as NHWC; other ranks unchanged."""
        self.add(name, t.permute(0, 2, 3, 1) if t.dim() == 4 else t)

    def save(self, path):
        out = bytearray(b"QSFX" + struct.pack("<II", 1, len(self.items)))
        for name, dtype, t in self.items:
            nb = name.encode()
            out += struct.pack("<H", len(nb)) + nb + struct.pack("<BB", dtype, t.dim())
            out += struct.pack("<%dq" % t.dim(), *t.shape)
            out += t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        with open(path, "wb") as f:
            f.write(out)
        return len(out)


class Head(nn.Module):
    """layer under test → [flatten] → [fc] ; forward returns (layer output, logits)."""

    def __init__(self, layer, layer_name, fc_in=None, residual=False):
        super().__init__()
        self.layer_name = layer_name
        if layer is not None:
            self.add_module(layer_name, layer)
        self.residual = residual
        self.has_fc = fc_in is not None
        if self.has_fc:
            self.fc = nn.Linear(fc_in, CLASSES)

    def forward(self, x):
        out = getattr(self, self.layer_name)(x) if self.layer_name else x
        if self.residual:
            out = out + x
        h = out.flatten(1)
        return out, (self.fc(h) if self.has_fc else h)


def make_case(w, seed, shape_nchw, make_layer, layer_name, use_fc, train=True, randomize_bn=False,
              residual=False, x_scale=1.0, flat=False):
    """Build (seeded), run in float64, and record one layer case into writer w."""
    torch.manual_seed(seed)
    layer = make_layer() if make_layer else None
    out_features = fc_in(layer, shape_nchw) if use_fc else None
    net = Head(layer, layer_name, fc_in=out_features, residual=residual)
    if randomize_bn:
        bn = getattr(net, layer_name)
        with torch.no_grad():
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    x = (torch.randn(*shape_nchw) * x_scale).float()
    labels = torch.randint(0, CLASSES, (shape_nchw[0],))
    w.nhwc("x", x)
    w.add("labels", labels, DT_I32)
    for k, v in net.state_dict().items():
        w.add(k, v, DT_I64 if v.dtype == torch.int64 else DT_F32)

    net = net.double()
    net.train(train)
    xd = (x.flatten(1) if flat else x).double().requires_grad_(train)
    out, logits = net(xd)
    losses = F.cross_entropy(logits, labels, reduction="none")
    loss = losses.mean()
    w.nhwc("out", out)
    w.add("loss", loss)
    w.add("losses", losses)
    if train:
        loss.backward()
        w.nhwc("grad.x", xd.grad.reshape(x.shape))
        for k, p in net.named_parameters():
            w.add("grad." + k, p.grad)
        for k, v in net.named_buffers():
            w.add("after." + k, v, DT_I64 if v.dtype == torch.int64 else DT_F32)


def fc_in(layer, shape_nchw):
    """Features after the layer; run on a copy in eval mode so that BN state is untouched."""
    with torch.no_grad():
        return copy.deepcopy(layer).eval()(torch.zeros(*shape_nchw)).flatten(1).shape[1]


def layer_cases():
    """(case name, seed, input NCHW, layer factory, layer name, uses fc, kwargs)."""
    C = []

    def conv_case(name, seed, shape, cout, k, s, p, bias=True):
        C.append((name, seed, shape, lambda: nn.Conv2d(shape[1], cout, k, stride=s, padding=p, bias=bias),
                  "conv", True, {}))

    C.append(("linear_bias", 1, (4, 12, 1, 1), lambda: nn.Linear(12, CLASSES), "fc", False, {"flat": True}))
    C.append(("linear_nobias", 2, (4, 12, 1, 1), lambda: nn.Linear(12, CLASSES, bias=False), "fc", False,
              {"flat": True}))
    conv_case("conv3x3_s1_p1", 10, (2, 3, 6, 6), 4, 3, 1, 1)
    conv_case("conv5x5_p2", 11, (2, 2, 7, 7), 3, 5, 1, 2)
    conv_case("conv3x3_s2_p1", 12, (2, 3, 8, 8), 4, 3, 2, 1)
    conv_case("conv1x1_s2_nobias", 13, (2, 4, 6, 6), 5, 1, 2, 0, bias=False)
    conv_case("conv1x1_s1_bias", 16, (2, 4, 5, 6), 5, 1, 1, 0)  # pointwise: runs as a Linear
    conv_case("conv3x3_nonsquare", 14, (2, 3, 9, 7), 4, 3, 1, 1)
    conv_case("conv3x3_s2_nonsquare", 15, (2, 3, 9, 7), 4, 3, 2, 1)
    C.append(("bn_train", 20, (4, 3, 5, 5), lambda: nn.BatchNorm2d(3), "bn", True, {"randomize_bn": True}))
    C.append(("bn_eval", 21, (4, 3, 5, 5), lambda: nn.BatchNorm2d(3), "bn", True,
              {"randomize_bn": True, "train": False}))
    C.append(("relu", 30, (2, 3, 5, 5), lambda: nn.ReLU(), "relu", True, {}))
    C.append(("maxpool2", 31, (2, 3, 6, 6), lambda: nn.MaxPool2d(2), "pool", True, {}))
    C.append(("maxpool3_s2_p1", 32, (2, 3, 7, 7), lambda: nn.MaxPool2d(3, stride=2, padding=1), "pool", True,
              {}))
    C.append(("avgpool2", 33, (2, 3, 6, 6), lambda: nn.AvgPool2d(2), "pool", True, {}))
    C.append(("avgpool3_s2_p1", 34, (2, 3, 7, 7), lambda: nn.AvgPool2d(3, stride=2, padding=1), "pool", True,
              {}))
    C.append(("gap", 35, (2, 3, 4, 5), lambda: nn.AdaptiveAvgPool2d(1), "gap", True, {}))
    C.append(("flatten", 36, (2, 5, 3, 4), lambda: nn.Flatten(), "flat", True, {}))
    C.append(("add", 37, (2, 3, 5, 5), lambda: nn.Conv2d(3, 3, 3, padding=1), "conv", True,
              {"residual": True}))
    C.append(("dropout_eval", 38, (2, 3, 4, 4), lambda: nn.Dropout(0.3), "drop", True, {"train": False}))
    C.append(("xent", 40, (6, CLASSES, 1, 1), None, "", False, {"flat": True}))
    C.append(("xent_large", 41, (6, CLASSES, 1, 1), None, "", False, {"flat": True, "x_scale": 40.0}))
    return C


# ---------------------------------------------------------------- whole tiny model
class Tiny(nn.Module):
    """conv1 3x3 → bn1 → relu1 → pool1 maxpool 2 → conv2 3x3 → bn2 → add(bn2, pool1) → relu2 →
    conv3 3x3 stride 2 (no bias) → relu3 → gap → flatten → fc. Input 8x8x3."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.conv3 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.fc = nn.Linear(16, CLASSES)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        h = F.relu(self.bn2(self.conv2(h)) + h)
        h = F.relu(self.conv3(h))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


TINY_STEPS, TINY_BATCH = 5, 8
SGD_ARGS = dict(lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)


def train_tiny(state, xs, ys):
    net = Tiny().double()
    net.load_state_dict({k: v.double() if v.is_floating_point() else v for k, v in state.items()})
    net.train()
    opt = torch.optim.SGD(net.parameters(), **SGD_ARGS)
    losses, grad0 = [], None
    for s in range(TINY_STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(net(xs[s].double()), ys[s])
        loss.backward()
        if s == 0:
            grad0 = {k: p.grad.clone() for k, p in net.named_parameters()}
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses), grad0, net.state_dict()


def tiny_model_case(w):
    torch.manual_seed(100)
    net = Tiny()
    state = {k: v.clone() for k, v in net.state_dict().items()}
    xs = [torch.randn(TINY_BATCH, 3, 8, 8).float() for _ in range(TINY_STEPS)]
    ys = [torch.randint(0, CLASSES, (TINY_BATCH,)) for _ in range(TINY_STEPS)]
    for s in range(TINY_STEPS):
        w.nhwc("x.%d" % s, xs[s])
        w.add("labels.%d" % s, ys[s], DT_I32)
    for k, v in state.items():
        w.add(k, v, DT_I64 if v.dtype == torch.int64 else DT_F32)
    losses, grad0, final = train_tiny(state, xs, ys)
    w.add("losses", losses)
    for k, g in grad0.items():
        w.add("grad0." + k, g)
    for k, v in final.items():
        w.add("final." + k, v, DT_I64 if v.dtype == torch.int64 else DT_F32)
    # Amplification: how much a relative perturbation eps of every initial parameter grows by
    # the end of training, max over tensors of (max|Δ| / max|ref|) / eps (and the same for the
    # losses, relative to max |loss|), worst of 4 random perturbations. The test multiplies its
    # single-step FP32 budget by this and by the number of steps (each step injects rounding).
    eps, amp = 1e-7, 1.0
    g = torch.Generator().manual_seed(7)
    for _ in range(4):
        pert = {k: (v.double() * (1 + eps * (2 * torch.rand(v.shape, generator=g, dtype=torch.float64) - 1))
                    if v.is_floating_point() else v) for k, v in state.items()}
        pl, _, pf = train_tiny(pert, xs, ys)
        amp = max(amp, float((pl - losses).abs().max() / losses.abs().max()) / eps)
        for k, v in final.items():
            if v.is_floating_point():
                amp = max(amp, float((pf[k] - v).abs().max() / v.abs().max()) / eps)
    w.add("amplification", torch.tensor(amp))
    return amp


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests",
                                                                   "fixtures")
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    total = 0
    for name, seed, shape, layer, lname, use_fc, kw in layer_cases():
        w = Writer()
        make_case(w, seed, shape, layer, lname, use_fc, **kw)
        n = w.save(os.path.join(outdir, "layer_%s.bin" % name))
        total += n
        print("layer_%s.bin: %d tensors, %d bytes" % (name, len(w.items), n))
    w = Writer()
    amp = tiny_model_case(w)
    n = w.save(os.path.join(outdir, "layer_tiny_model.bin"))
    total += n
    print("layer_tiny_model.bin: %d tensors, %d bytes, amplification %.3g" % (len(w.items), n, amp))
    print("total %d bytes" % total)


if __name__ == "__main__":
    main()
