"""tools/torch_models.py — PyTorch twins of qsync's built-in models (src/models/).

build(name, in_h, in_w, in_c, classes, width=0, cifar_stem=None, dropout=0.0) returns an
nn.Module whose state_dict (names, shapes, dtypes, order, layouts) is exactly that of the qsync
model built with the same options, and whose leaf-module paths are the qsync node names, so a
qsync checkpoint loads with load_state_dict(strict=True) and per-node activations can be
compared by name. Inputs are NCHW here; qsync feeds NHWC (x_torch = x_qsync.permute(0, 3, 1, 2)).
The exact architectures are documented in docs/MODELS.md; keep both in sync with src/models/.

build_from_config(arch, config) rebuilds a model from the "key=value ..." string qsync stores
in qs_model.config (and in checkpoint metadata); load_checkpoint(path) rebuilds the model of a
qsync checkpoint and loads its weights (tools/safetensors_torch.py).
"""
import os
import struct
import sys

from torch import nn

NAMES = ("mlp", "cnn", "resnet18", "resnet34", "resnet50", "vgg11", "vgg16")
DEFAULT_WIDTH = {"mlp": 1024, "cnn": 32, "resnet18": 64, "resnet34": 64, "resnet50": 64,
                 "vgg11": 64, "vgg16": 64}
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


def build(name, in_h, in_w, in_c, classes, width=0, cifar_stem=None, dropout=0.0):
    """The PyTorch twin of qs_models_build(name, opt): width 0 = the default, cifar_stem None =
    True for inputs of at most 64×64."""
    if name not in NAMES:
        raise ValueError("unknown model %r; valid: %s" % (name, ", ".join(NAMES)))
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
    """Parse qsync's "in_h=28 in_w=28 in_c=1 classes=10 width=16 cifar_stem=1 dropout=0" into
    build() keyword arguments."""
    kv = dict(item.split("=", 1) for item in config.replace(",", " ").split())
    return dict(in_h=int(kv["in_h"]), in_w=int(kv["in_w"]), in_c=int(kv["in_c"]),
                classes=int(kv["classes"]), width=int(kv.get("width", 0)),
                cifar_stem=bool(int(kv["cifar_stem"])) if "cifar_stem" in kv else None,
                dropout=float(kv.get("dropout", 0.0)))


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


def config_string(name, in_h, in_w, in_c, classes, width=0, cifar_stem=None, dropout=0.0):
    """The config string qsync writes in qs_model.config for these options (defaults resolved):
    ResNets record cifar_stem, the others dropout."""
    width = width or DEFAULT_WIDTH[name]
    if cifar_stem is None:
        cifar_stem = is_small(in_h, in_w)
    head = "in_h=%d in_w=%d in_c=%d classes=%d width=%d" % (in_h, in_w, in_c, classes, width)
    if name.startswith("resnet"):
        return head + " cifar_stem=%d" % int(cifar_stem)
    return head + " dropout=" + _format_float(dropout)


if __name__ == "__main__":
    if len(sys.argv) < 6:
        sys.exit("usage: torch_models.py NAME IN_H IN_W IN_C CLASSES [WIDTH]")
    args = [sys.argv[1]] + [int(a) for a in sys.argv[2:7]]
    model = build(*args)
    print(model)
    print("parameters:", sum(p.numel() for p in model.parameters()))
