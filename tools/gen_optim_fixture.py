#!/usr/bin/env python3
"""Generate tests/fixtures/optim_ref.json: PyTorch reference values for tests/test_optim.c.

Run with a Python that has torch (Debian: /usr/bin/python3 tools/gen_optim_fixture.py).
Three FP32 parameters get 5 steps of fixed random gradients under each optimizer case
(torch.optim.SGD / AdamW, optional torch.nn.utils.clip_grad_norm_, a different lr each
step); the file holds the initial values, the gradients, the parameters after every step,
the gradient norms before clipping and the final optimizer state, plus StepLR and
CosineAnnealingLR values. Floats are written with repr(), so FP32 values are exact.
"""
import json
import os

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "optim_ref.json")
STEPS = 5
SHAPES = {"fc.weight": [4, 3], "fc.bias": [4], "conv.weight": [2, 1, 3, 3]}

torch.manual_seed(1234)
init = {k: torch.randn(s, dtype=torch.float32) for k, s in SHAPES.items()}
grads = [{k: torch.randn(s, dtype=torch.float32) for k, s in SHAPES.items()} for _ in range(STEPS)]

SGD_LR = [0.1, 0.05, 0.1, 0.02, 0.08]
ADAM_LR = [1e-2, 5e-3, 1e-2, 2e-3, 8e-3]
CASES = [
    dict(name="sgd_plain_wd", kind="sgd", lr=SGD_LR, momentum=0.0, dampening=0.0, weight_decay=0.1,
         nesterov=False, clip_norm=0.0),
    dict(name="sgd_momentum", kind="sgd", lr=SGD_LR, momentum=0.9, dampening=0.0, weight_decay=0.0,
         nesterov=False, clip_norm=0.0),
    dict(name="sgd_nesterov_wd", kind="sgd", lr=SGD_LR, momentum=0.9, dampening=0.0, weight_decay=0.01,
         nesterov=True, clip_norm=0.0),
    dict(name="sgd_dampening_wd", kind="sgd", lr=SGD_LR, momentum=0.8, dampening=0.5, weight_decay=0.001,
         nesterov=False, clip_norm=0.0),
    dict(name="sgd_clip_inactive", kind="sgd", lr=SGD_LR, momentum=0.9, dampening=0.0, weight_decay=0.0,
         nesterov=False, clip_norm=100.0),
    dict(name="adamw", kind="adamw", lr=ADAM_LR, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01,
         clip_norm=0.0),
    dict(name="adamw_clip", kind="adamw", lr=ADAM_LR, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.1,
         clip_norm=0.5),
]


def flat(t):
    return [float(x) for x in t.reshape(-1).tolist()]


def run(case):
    params = {k: v.clone().requires_grad_(True) for k, v in init.items()}
    plist = list(params.values())
    if case["kind"] == "sgd":
        opt = torch.optim.SGD(plist, lr=case["lr"][0], momentum=case["momentum"], dampening=case["dampening"],
                              weight_decay=case["weight_decay"], nesterov=case["nesterov"])
    else:
        opt = torch.optim.AdamW(plist, lr=case["lr"][0], betas=(case["beta1"], case["beta2"]), eps=case["eps"],
                                weight_decay=case["weight_decay"])
    after, norms = [], []
    for step in range(STEPS):
        for k, p in params.items():
            p.grad = grads[step][k].clone()
        if case["clip_norm"] > 0:
            norm = torch.nn.utils.clip_grad_norm_(plist, case["clip_norm"])
        else:
            norm = torch.norm(torch.stack([torch.norm(p.grad) for p in plist]))
        norms.append(float(norm))
        for g in opt.param_groups:
            g["lr"] = case["lr"][step]
        opt.step()
        after.append({k: flat(p.detach()) for k, p in params.items()})
    state = {}
    for k, p in params.items():
        for sk, sv in opt.state[p].items():
            if sk != "step" and sv is not None:
                state[f"{k}.{sk}"] = flat(sv)
    return dict(case, after=after, grad_norms=norms, state=state)


def schedules():
    out = []
    p = [torch.zeros(1, requires_grad=True)]
    for spec, make in (("step:3:0.5", lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
                       ("cosine:0.01", lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=8,
                                                                                            eta_min=0.01))):
        opt = torch.optim.SGD(p, lr=0.1)
        sched = make(opt)
        values = []
        for _ in range(9):
            values.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        out.append(dict(spec=spec, base_lr=0.1, total_steps=8, values=values))
    return out


doc = dict(
    generator="tools/gen_optim_fixture.py",
    torch_version=torch.__version__,
    steps=STEPS,
    params=[dict(name=k, shape=s, init=flat(init[k])) for k, s in SHAPES.items()],
    grads=[{k: flat(g[k]) for k in SHAPES} for g in grads],
    cases=[run(c) for c in CASES],
    schedules=schedules(),
)
with open(OUT, "w") as f:
    json.dump(doc, f, separators=(",", ":"))
    f.write("\n")
print("wrote", os.path.normpath(OUT), os.path.getsize(OUT), "bytes")
