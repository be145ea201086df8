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

usage: bench/predict_validate.py [--build build] [--model cnn] [--width 0] [--batch 64]
       [--rounds 3] [--random 6] [--steps 60] [--out predict.jsonl]
Needs an otherwise idle machine with >= 2 cores.
"""
import argparse
import json
import os
import random
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


def cluster(path, slowdown, slow_precision=None):
    slow = {"device": "cpu", "type": "cpu-slow", "threads": 1}
    if slowdown > 1:
        slow["emulation"] = {"slowdown": slowdown}
    if slow_precision:
        slow["precision"] = slow_precision
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
    ap.add_argument("--out", default="predict.jsonl")
    a = ap.parse_args()
    qsync = os.path.join(a.build, "qsync")
    tmp = tempfile.mkdtemp(prefix="qsync-validate-")
    prof1 = os.path.join(tmp, "profile1.json")
    common = ["--model", a.model, "--width", str(a.width)]
    pargs = ["profile", *common, "--batch", str(a.batch), "--threads", "1", "--reps", "20", "--quiet"]
    run([qsync, *pargs, "--out", prof1])
    names = layers(qsync, a.model, a.width)
    rng = random.Random(1)
    plans = []  # (label, plan path or None, precision, cluster spec or None)
    for p in ("fp32", "bf16", "int8"):
        plans.append(("uniform " + p, None, p, None))
    for k in range(a.random):
        path = os.path.join(tmp, "random%d.json" % k)
        write_plan(path, a.model, "fp32", {n: rng.choice(["fp32", "bf16", "int8"]) for n in names})
        plans.append(("random mix %d" % (k + 1), path, None, None))
    big = names[:-1]  # QSync-like: every layer but the classifier
    for p in ("int8", "bf16"):
        path = os.path.join(tmp, "qsync-%s.json" % p)
        write_plan(path, a.model, "fp32", {n: p for n in big})
        plans.append(("all but the classifier " + p, path, None, None))
    sec = os.path.join(tmp, "sections.json")
    write_plan(sec, a.model, "fp32", {}, {"cpu-fast": {"default": "fp32"},
                                          "cpu-slow": {"precisions": {n: "int8" for n in big}}})
    for label, s, sp, plan in (("2 ranks, fp32", 1, None, None), ("2 ranks, slow 1.24x, fp32", 1.24, None, None),
                               ("2 ranks, slow 1.24x, slow int8", 1.24, "int8", None),
                               ("2 ranks, slow 1.18x, plan per type", 1.18, None, sec),
                               ("2 ranks, slow 1.5x, fp32", 1.5, None, None)):
        plans.append((label, plan, None, (s, sp)))
    out = open(a.out, "w")
    rows = []
    for label, plan, prec, cl in plans:
        sim = [qsync, "simulate", "--profile", prof1, "--json"]
        train = ["train", *common, "--steps", str(a.steps), "--threads", "1", "--no-progress", "--quiet", "--json",
                 "--eval-subset", "64"]
        extra = []
        if plan:
            extra += ["--plan", plan]
        if prec:
            extra += ["--precision", prec]
        if cl:
            cpath = os.path.join(tmp, "cluster.json")
            cluster(cpath, cl[0], cl[1])
            extra += ["--cluster", cpath]
            # profiled as the job runs: 2 ranks at once, each under its worker's emulation
            pat = os.path.join(tmp, "profile-%t.json")
            run(["mpirun", "-np", "2", "--oversubscribe", qsync, *pargs, "--cluster", cpath, "--out", pat])
            sim[3] = ",".join("%s=%s" % (t, pat.replace("%t", t)) for t in ("cpu-fast", "cpu-slow"))
            launcher = ["mpirun", "-np", "2", "--oversubscribe", qsync]
            batch = 2 * a.batch
        else:
            launcher = [qsync]
            batch = a.batch
        pred = json.loads(run(sim + extra))
        measured, mem = [], []
        for _ in range(a.rounds):
            r = json.loads(run(launcher + train + ["--batch", str(batch)] + extra))
            measured.append(r["workers"][0]["median_step_ms"])
            mem.append(r["workers"][-1]["memory_bytes"])
        m = statistics.median(measured)
        row = {"plan": label, "ranks": 2 if cl else 1, "predicted_ms": pred["iteration_ms"], "measured_ms": m,
               "rounds_ms": measured, "error": pred["iteration_ms"] / m - 1,
               "predicted_memory": pred["workers"][-1]["memory_bytes"], "measured_memory": mem[0]}
        row["memory_error"] = row["predicted_memory"] / row["measured_memory"] - 1
        rows.append(row)
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(json.dumps(row), file=sys.stderr)
    print("| plan | ranks | predicted ms | measured ms (rounds) | error | memory error |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %.2f | %.2f (%s) | %+.1f%% | %+.2f%% |" % (
            r["plan"], r["ranks"], r["predicted_ms"], r["measured_ms"], ", ".join("%.1f" % x for x in r["rounds_ms"]),
            100 * r["error"], 100 * r["memory_error"]))
    for ranks in (1, 2):
        e = [abs(r["error"]) for r in rows if r["ranks"] == ranks]
        if e:
            worst = max((r for r in rows if r["ranks"] == ranks), key=lambda r: abs(r["error"]))
            print("%d rank(s): mean absolute error %.1f%% over %d plans, worst %+.1f%% (%s)" % (
                ranks, 100 * statistics.mean(e), len(e), 100 * worst["error"], worst["plan"]))


if __name__ == "__main__":
    main()
