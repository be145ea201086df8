#!/usr/bin/python3
"""tools/torch_gpt_train.py — train the PyTorch twin of a qsync "gpt"/"gpt-mini" run: the same
initial weights, the same token windows in the same order, the same optimizer and learning-rate
schedule, and report the validation loss (bits per byte for the byte-level fortunes data), so
that "the same model in PyTorch reaches the same loss within 2% with the same data order" can be
checked against qsync.

    # 1. the qsync run, with its metrics (warm-up > 0: the default for --steps >= 10)
    qsync train --model gpt-mini --data fortunes:128 --batch 16 --steps 2000 --optimizer adamw \\
        --lr 1e-3 --weight-decay 0.1 --beta2 0.95 --clip 1 --seed 1 --threads 8 \\
        --metrics qsync.jsonl --checkpoint-dir final/
    # 2. its initial weights: the same command stopped after step 1. With a warm-up the learning
    #    rate of step 0 is 0, so that checkpoint's model.safetensors holds exactly the initial
    #    weights (the seed alone determines them)
    qsync train <the same options> --stop-at 1 --checkpoint-dir init/
    # 3. the twin, with the same optimizer and schedule options (qsync train's names and defaults)
    /usr/bin/python3 tools/torch_gpt_train.py --init init/ --steps 2000 --optimizer adamw \\
        --lr 1e-3 --weight-decay 0.1 --beta2 0.95 --clip 1 --compare qsync.jsonl

--init reads the architecture and config from the checkpoint's model.safetensors (tools/torch_models.py
builds the twin and loads it strictly) and --data, --batch and --seed from its state.safetensors
(they can be given too, and must then agree). The data order is qsync's (tools/loader_order.py:
Philox permutation per (seed, epoch), global batch b = positions [b·B, (b+1)·B), sample i = token
window i); --train-subset and --eval-subset keep the first N windows as qsync's do. Data names:
fortunes[:T] (with --data-dir), tokens:PATH[:T[:V]] (llm.c token files), synthetic-text:V:T.
The loss is the mean cross-entropy over every position of the batch; evaluation runs over the
test split's windows in order (batch --batch) after the last step and every --eval-every epochs.
Learning rate per step as src/optim/schedule.c (constant, step:EVERY:GAMMA, cosine[:MIN_LR],
linear warm-up from 0, --warmup default min(50, steps/10)); AdamW = torch.optim.AdamW (decoupled
decay on every parameter, as qsync's), SGD = torch.optim.SGD (momentum 0.9, Nesterov unless
--no-nesterov); --clip: clip_grad_norm_ (qsync skips the step when the norm is not finite, as
here). Dropout > 0 draws other masks than qsync's Philox ones (same rate, different
trajectory); compare at dropout 0.

Output: JSON lines on stdout — {"type": "step", ...} every --log-every steps (the window's mean
loss, as qsync's metrics), {"type": "eval", "step", "loss" (nats per token), "bits_per_token",
"bits_per_byte" (fortunes: byte-level, the same)} — and with --compare QSYNC_METRICS (qsync
train --metrics) a {"type": "compare"} record: the relative difference of the final evaluation
losses (and the largest over the step records). Exit status 1 when the final evaluation losses
differ by more than --tolerance (default 0.02) relatively.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import loader_order  # noqa: E402
import safetensors_torch  # noqa: E402
import torch_models  # noqa: E402


def _f32(v):
    return torch_models._f32(v)


def lr_at(kind, base, step, warmup, total, step_size=0, gamma=1.0, min_lr=0.0):
    """qs_lr_at: the learning rate for `step` (updates applied so far), rounded to float32."""
    step = max(step, 0)
    if step < warmup:
        return _f32(base * step / warmup)
    t = step - max(warmup, 0)
    if kind == "constant":
        return _f32(base)
    if kind == "step":
        return _f32(base * math.pow(gamma, t // step_size)) if step_size > 0 else _f32(base)
    T = total - max(warmup, 0)
    if T <= 0 or t >= T:
        return _f32(min_lr)
    return _f32(min_lr + (base - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t / T)))


def parse_schedule(text):
    """constant | step:EVERY:GAMMA | cosine[:MIN_LR] → (kind, step_size, gamma, min_lr)."""
    parts = text.split(":")
    if parts[0] == "constant" and len(parts) == 1:
        return "constant", 0, 1.0, 0.0
    if parts[0] == "step" and len(parts) == 3:
        return "step", int(parts[1]), _f32(float(parts[2])), 0.0
    if parts[0] == "cosine" and len(parts) <= 2:
        return "cosine", 0, 1.0, _f32(float(parts[1])) if len(parts) == 2 else 0.0
    raise SystemExit("unknown schedule %r: constant, step:EVERY:GAMMA, cosine or cosine:MIN_LR" % text)


def windows(tokens, T, idx, device):
    """x, y (len(idx), T) int64 of token windows idx."""
    x = torch.stack([tokens[i * T:i * T + T] for i in idx]).to(device)
    y = torch.stack([tokens[i * T + 1:i * T + T + 1] for i in idx]).to(device)
    return x, y


def evaluate(model, tokens, T, n, batch, device):
    """Mean loss per token over test windows 0..n-1 (qsync's qs_evaluate: in order, batch by batch)."""
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for b0 in range(0, n, batch):
            x, y = windows(tokens, T, range(b0, min(b0 + batch, n)), device)
            logits = model(x)
            total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), y.reshape(-1),
                                           reduction="sum"))
            count += y.numel()
    model.train()
    return total / count


def read_metrics(path):
    steps, evals = {}, {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if r.get("type") == "step":
                steps[int(r["step"])] = float(r["loss"])
            elif r.get("type") == "eval":
                evals[int(r["step"])] = float(r["loss"])
    return steps, evals


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True,
                    help="qsync checkpoint (dir or model.safetensors) with the initial weights")
    ap.add_argument("--data", help="qsync data name (default: the checkpoint's)")
    ap.add_argument("--data-dir")
    ap.add_argument("--batch", type=int, help="global batch (default: the checkpoint's)")
    ap.add_argument("--seed", type=int, help="data-order seed (default: the checkpoint's)")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--optimizer", default="sgd", choices=("sgd", "adamw"))
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--no-nesterov", action="store_true")
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--clip", type=float, default=0.0)
    ap.add_argument("--schedule", default="cosine")
    ap.add_argument("--warmup", type=int, default=-1)
    ap.add_argument("--train-subset", type=int, default=0)
    ap.add_argument("--eval-subset", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=0, help="evaluate every N epochs (default: at the end)")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--compare", help="qsync train --metrics file of the run to compare with")
    ap.add_argument("--tolerance", type=float, default=0.02)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)

    model, meta = torch_models.load_checkpoint(a.init)
    if not meta["arch"].startswith("gpt"):
        raise SystemExit("%s holds a %s model; this script trains gpt/gpt-mini" % (a.init, meta["arch"]))
    cfg = torch_models.parse_config(meta["config"])
    ck_dir = a.init if os.path.isdir(a.init) else os.path.dirname(a.init)
    state_path = os.path.join(ck_dir, "state.safetensors")
    smeta = safetensors_torch.load_metadata(state_path) if os.path.exists(state_path) else {}
    for key, name in (("data", "data"), ("batch", "global_batch"), ("seed", "seed")):
        have = smeta.get(name)
        if getattr(a, key) is None:
            if have is None:
                raise SystemExit("--%s is needed: %s has no state.safetensors to read it from" % (key, ck_dir))
            setattr(a, key, have if key == "data" else int(have))
        elif have is not None and str(getattr(a, key)) != have:
            raise SystemExit("--%s %s differs from the checkpoint's %s" % (key, getattr(a, key), have))

    train_tok, T, V = loader_order.token_stream(a.data, a.data_dir, True)
    test_tok, _, _ = loader_order.token_stream(a.data, a.data_dir, False)
    if T != cfg["in_c"] or V != cfg["classes"]:
        raise SystemExit("data %s gives T %d, vocabulary %d; the model takes T %d, vocabulary %d"
                         % (a.data, T, V, cfg["in_c"], cfg["classes"]))
    n_train, n_test = (len(train_tok) - 1) // T, (len(test_tok) - 1) // T
    if a.train_subset:
        n_train = min(n_train, a.train_subset)
    if a.eval_subset:
        n_test = min(n_test, a.eval_subset)
    train_tok = torch.tensor(train_tok, dtype=torch.int64)
    test_tok = torch.tensor(test_tok, dtype=torch.int64)

    order = loader_order.Loader(n_train, a.batch, a.seed)
    spe = order.steps
    total = a.steps if a.steps > 0 else a.epochs * spe
    warmup = a.warmup if a.warmup >= 0 else min(total // 10, 50)
    kind, step_size, gamma, min_lr = parse_schedule(a.schedule)
    base = _f32(a.lr)
    init_step = int(smeta.get("step", 0))
    if init_step > 1 or (init_step == 1 and lr_at(kind, base, 0, warmup, total, step_size, gamma, min_lr) != 0.0):
        raise SystemExit("%s holds the weights after %d step(s) with a non-zero learning rate, not the initial ones: "
                         "make it with --stop-at 1 and a warm-up (--warmup > 0)" % (a.init, init_step))

    device = torch.device(a.device)
    model.to(device).train()
    if cfg["dropout"] > 0:
        print("warning: dropout %g draws torch's masks, not qsync's: the trajectories differ" % cfg["dropout"],
              file=sys.stderr)
    params = list(model.parameters())
    if a.optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=base, betas=(a.beta1, a.beta2), eps=_f32(a.eps),
                                weight_decay=_f32(a.weight_decay))
    else:
        opt = torch.optim.SGD(params, lr=base, momentum=_f32(a.momentum), nesterov=not a.no_nesterov,
                              weight_decay=_f32(a.weight_decay))
    print(json.dumps({"type": "config", "arch": meta["arch"], "config": meta["config"], "data": a.data,
                      "train_windows": n_train, "test_windows": n_test, "batch": a.batch, "seed": a.seed,
                      "steps": total, "steps_per_epoch": spe, "optimizer": a.optimizer, "lr": base,
                      "schedule": a.schedule, "warmup": warmup, "weight_decay": a.weight_decay, "clip": a.clip}),
          flush=True)

    byte_level = a.data.startswith("fortunes")
    ours_steps, ours_evals = {}, {}

    def run_eval(step):
        loss = evaluate(model, test_tok, T, n_test, a.batch, device)
        ours_evals[step] = loss
        rec = {"type": "eval", "step": step, "epoch": (step - 1) // spe + 1, "loss": loss,
               "bits_per_token": loss / math.log(2), "samples": n_test}
        if byte_level:
            rec["bits_per_byte"] = rec["bits_per_token"]
        print(json.dumps(rec), flush=True)

    window, t0 = [], time.time()
    for step in range(total):
        lr = lr_at(kind, base, step, warmup, total, step_size, gamma, min_lr)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = windows(train_tok, T, order.next(), device)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, _f32(a.clip))
            if not torch.isfinite(norm):
                opt.zero_grad(set_to_none=True)  # qsync skips the update
                continue
        opt.step()
        window.append(float(loss))
        done = step + 1
        if not math.isfinite(window[-1]):
            raise SystemExit("training diverged at step %d: loss %g" % (done, window[-1]))
        if done % a.log_every == 0 or done % spe == 0 or done == total:
            ours_steps[done] = sum(window) / len(window)
            print(json.dumps({"type": "step", "step": done, "epoch": (done - 1) // spe, "loss": ours_steps[done],
                              "lr": lr, "train_s": time.time() - t0}), flush=True)
            window = []
        if done % spe == 0 or done == total:
            epoch = (done - 1) // spe + 1
            if done == total or (a.eval_every > 0 and epoch % a.eval_every == 0):
                run_eval(done)

    if not a.compare:
        return 0
    q_steps, q_evals = read_metrics(a.compare)
    common = sorted(set(q_evals) & set(ours_evals))
    if not common:
        raise SystemExit("%s has no evaluation at the steps evaluated here (%s)" % (a.compare, sorted(ours_evals)))
    last = common[-1]
    rel = abs(ours_evals[last] - q_evals[last]) / abs(q_evals[last])
    step_rel = [abs(ours_steps[s] - q_steps[s]) / abs(q_steps[s]) for s in sorted(set(q_steps) & set(ours_steps))]
    rec = {"type": "compare", "step": last, "eval_loss_qsync": q_evals[last], "eval_loss_torch": ours_evals[last],
           "rel_diff": rel, "tolerance": a.tolerance, "within": rel <= a.tolerance,
           "step_records": len(step_rel), "max_step_loss_rel_diff": max(step_rel) if step_rel else None}
    if byte_level:
        rec["bits_per_byte_qsync"] = q_evals[last] / math.log(2)
        rec["bits_per_byte_torch"] = ours_evals[last] / math.log(2)
    print(json.dumps(rec), flush=True)
    return 0 if rec["within"] else 1


if __name__ == "__main__":
    sys.exit(main())
