#!/usr/bin/env python3
"""Predicted against measured iteration time and memory (the replayer, docs/PROFILE.md).

Profiles of MODEL at the local batch: one process alone (for the 1-rank plans) and, for every
2-rank configuration, 2 ranks profiling at once under `mpirun -np 2 qsync profile --cluster C`
(each under its worker's emulation, sharing the machine as in training; the profiles hold the
all-reduce between them); then for every plan: `qsync simulate` and ROUNDS training runs
(`qsync train --json`; the measured iteration is rank 0's median step after warm-up), with
1 rank and, for the 2-rank set, an emulated slow worker where the configuration says so.
Plans: uniform fp32/bf16/int8, seeded random per-layer mixes, QSync-like ones (the large
layers quantized, the classifier kept). Prints one JSON line per plan and a markdown table
with the error of the median of the rounds, the mean absolute error and the worst case.

2-rank plans: uniform and random mixes on both ranks, without overlap, a slow worker emulated by
a CPU quota (FP32 on it, or quantized by a plan section per device type); with --capped RATE
also over a tc-capped link between network namespaces (scripts/capped-link.sh, needs root).
The measured 2-rank iteration is the larger of the ranks' median steps.

usage: bench/predict_validate.py [--build build] [--model cnn] [--width 0] [--batch 64]
       [--rounds 3] [--random 6] [--steps 60] [--capped 1gbit] [--capped-steps 20]
       [--only REGEX] [--out predict.jsonl]
Needs an otherwise idle machine with >= 2 cores.
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if p.returncode != 0:
        sys.exit("failed: %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    return p.stdout


def layers(qsync, model, width):
    """The precision-selectable layers, from `qsync models M --write-plan`."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        run([qsync, "models", model, "--width", str(width), "--write-plan", path])
        return list(json.load(open(path))["precisions"].keys())


def write_plan(path, model, default, precisions, sections=None):
    doc = {"format": "qsync-plan", "version": 2 if sections else 1, "model": model, "default": default,
           "precisions": precisions}
    if sections:
        doc["device_types"] = sections
    json.dump(doc, open(path, "w"))


def cluster(path, slowdown):
    slow = {"device": "cpu", "type": "cpu-slow", "threads": 1}
    if slowdown > 1:
        slow["emulation"] = {"slowdown": slowdown}
    json.dump({"format": "qsync-cluster", "version": 1,
               "workers": [{"device": "cpu", "type": "cpu-fast", "threads": 1}, slow]}, open(path, "w"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--width", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--random", type=int, default=6)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--capped", help="also over a link capped at this tc rate (e.g. 1gbit; needs root)")
    ap.add_argument("--capped-steps", type=int, default=20)
    ap.add_argument("--only", help="run only the plans whose label matches this regular expression (re-measuring)")
    ap.add_argument("--out", default="predict.jsonl")
    a = ap.parse_args()
    qsync = os.path.join(a.build, "qsync")
    link = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "capped-link.sh")
    tmp = tempfile.mkdtemp(prefix="qsync-validate-")
    prof1 = os.path.join(tmp, "profile1.json")
    common = ["--model", a.model, "--width", str(a.width)]
    pargs = ["profile", *common, "--batch", str(a.batch), "--threads", "1", "--reps", "20", "--quiet"]
    run([qsync, *pargs, "--out", prof1])
    names = layers(qsync, a.model, a.width)
    rng = random.Random(1)
    # (label, ranks, plan path or None, precision or None, slowdown or None, link, extra train args)
    plans = []
    for p in ("fp32", "bf16", "int8"):
        plans.append(("uniform " + p, 1, None, p, None, None, []))
    mixes = []
    for k in range(a.random):
        path = os.path.join(tmp, "random%d.json" % k)
        write_plan(path, a.model, "fp32", {n: rng.choice(["fp32", "bf16", "int8"]) for n in names})
        mixes.append(path)
        plans.append(("random mix %d" % (k + 1), 1, path, None, None, None, []))
    big = names[:-1]  # QSync-like: every layer but the classifier
    for p in ("int8", "bf16"):
        path = os.path.join(tmp, "qsync-%s.json" % p)
        write_plan(path, a.model, "fp32", {n: p for n in big})
        plans.append(("all but the classifier " + p, 1, path, None, None, None, []))
    sections = {}
    for p in ("int8", "bf16"):  # fast worker fp32, slow one all but the classifier at p
        sections[p] = os.path.join(tmp, "sections-%s.json" % p)
        write_plan(sections[p], a.model, "fp32", {}, {"cpu-fast": {"default": "fp32"},
                                                      "cpu-slow": {"precisions": {n: p for n in big}}})
    slow_int8 = os.path.join(tmp, "slow-int8.json")
    write_plan(slow_int8, a.model, "fp32", {}, {"cpu-fast": {"default": "fp32"}, "cpu-slow": {"default": "int8"}})
    plans += [("2 ranks, fp32", 2, None, "fp32", 1, "shm", []),
              ("2 ranks, int8", 2, None, "int8", 1, "shm", []),
              ("2 ranks, bf16", 2, None, "bf16", 1, "shm", []),
              ("2 ranks, random mix 1", 2, mixes[0], None, 1, "shm", []),
              ("2 ranks, random mix 2", 2, mixes[1 % len(mixes)], None, 1, "shm", []),
              ("2 ranks, fp32, no overlap", 2, None, "fp32", 1, "shm", ["--no-overlap"]),
              ("2 ranks, slow 1.24x, fp32", 2, None, "fp32", 1.24, "shm", []),
              ("2 ranks, slow 1.24x, slow int8", 2, slow_int8, None, 1.24, "shm", []),
              ("2 ranks, slow 1.18x, slow all but the classifier int8", 2, sections["int8"], None, 1.18, "shm", []),
              ("2 ranks, slow 1.5x, fp32", 2, None, "fp32", 1.5, "shm", []),
              ("2 ranks, slow 1.5x, slow all but the classifier bf16", 2, sections["bf16"], None, 1.5, "shm", [])]
    if a.capped:
        plans += [("capped %s, fp32" % a.capped, 2, None, "fp32", 1, "capped", []),
                  ("capped %s, fp32, no overlap" % a.capped, 2, None, "fp32", 1, "capped", ["--no-overlap"]),
                  ("capped %s, int8" % a.capped, 2, None, "int8", 1, "capped", []),
                  ("capped %s, random mix 1" % a.capped, 2, mixes[0], None, 1, "capped", [])]
        subprocess.run([link, "down"], env=ENV, capture_output=True)
        run([link, "up", a.capped])
    if a.only:
        plans = [p for p in plans if re.search(a.only, p[0])]
    profiles = {}  # (link, slowdown) -> the %t pattern of the profiles taken as that cluster runs
    out = open(a.out, "w")
    rows = []
    try:
        for label, ranks, plan, prec, slowdown, where, targs in plans:
            sim = [qsync, "simulate", "--profile", prof1, "--json", *targs]
            train = ["train", *common, "--threads", "1", "--no-progress", "--quiet", "--json", "--eval-subset", "64",
                     "--steps", str(a.capped_steps if where == "capped" else a.steps), *targs]
            extra = (["--plan", plan] if plan else []) + (["--precision", prec] if prec else [])
            launcher, batch = [qsync], a.batch
            if ranks == 2:
                cpath = os.path.join(tmp, "cluster-%g.json" % slowdown)
                cluster(cpath, slowdown)
                extra += ["--cluster", cpath]
                launcher = [link, "run"] if where == "capped" else ["mpirun", "-np", "2", "--oversubscribe", qsync]
                if (where, slowdown) not in profiles:  # both ranks at once, each under its worker's emulation
                    pat = os.path.join(tmp, "profile-%s-%g-%%t.json" % (where, slowdown))
                    run(launcher + pargs + ["--cluster", cpath, "--out", pat])
                    profiles[(where, slowdown)] = pat
                pat = profiles[(where, slowdown)]
                sim[3] = ",".join("%s=%s" % (t, pat.replace("%t", t)) for t in ("cpu-fast", "cpu-slow"))
                batch = 2 * a.batch
            pred = json.loads(run(sim + extra))
            measured, mem = [], []
            for _ in range(a.rounds):
                r = json.loads(run(launcher + train + ["--batch", str(batch)] + extra))
                measured.append(max(w["median_step_ms"] for w in r["workers"]))
                mem.append(r["workers"][-1]["memory_bytes"])
            m = statistics.median(measured)
            row = {"plan": label, "ranks": ranks, "link": where or "none", "predicted_ms": pred["iteration_ms"],
                   "predicted_mean_ms": pred["iteration_mean_ms"], "measured_ms": m, "rounds_ms": measured,
                   "error": pred["iteration_ms"] / m - 1, "comm": pred["comm"],
                   "predicted_memory": pred["workers"][-1]["memory_bytes"], "measured_memory": mem[0]}
            row["memory_error"] = row["predicted_memory"] / row["measured_memory"] - 1
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps(row), file=sys.stderr)
    finally:
        if a.capped:
            subprocess.run([link, "down"], env=ENV, capture_output=True)
    print("| plan | ranks | predicted ms | measured ms (rounds) | error | memory error |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %.2f | %.2f (%s) | %+.1f%% | %+.2f%% |" % (
            r["plan"], r["ranks"], r["predicted_ms"], r["measured_ms"], ", ".join("%.1f" % x for x in r["rounds_ms"]),
            100 * r["error"], 100 * r["memory_error"]))
    for ranks in (1, 2):
        sel = [r for r in rows if r["ranks"] == ranks]
        if sel:
            worst = max(sel, key=lambda r: abs(r["error"]))
            print("%d rank(s): mean absolute error %.1f%% over %d plans, worst %+.1f%% (%s); memory: worst %+.2f%%" % (
                ranks, 100 * statistics.mean(abs(r["error"]) for r in sel), len(sel), 100 * worst["error"],
                worst["plan"], 100 * max((r["memory_error"] for r in sel), key=abs)))


if __name__ == "__main__":
    main()
