#!/usr/bin/env python3
"""The QSync pipeline's acceptance experiments on an emulated hybrid CPU cluster (docs/RUN.md).

For each model: g = the measured whole-step INT8 gain of one worker (`qsync bench step`, one
thread, the local batch, fp32 against int8); for each fraction f, a 2-worker cluster whose second
worker is emulated s = 1 + f·(g − 1) times slower (f = 0.5: half of INT8's gain keeps it in step;
0.8: most of it), then `qsync run` with every arm. One JSON line per (model, f) with the report's
figures, then a markdown table: the gap closed by each arm, the share of the slow worker's layers
above INT8, the predicted against the measured synchronized iteration, and test accuracies.

Usage: bench/run_acceptance.py [--build build] [--models cnn,resnet18:16] [--fractions 0.5,0.8]
       [--steps 468] [--seeds 1] [--arms ...] [--extra "qsync run options"] [--out run_acceptance.jsonl]
Needs an otherwise idle machine with >= 2 cores (timings).
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(cmd):
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        sys.exit("failed: " + " ".join(cmd))
    return r.stdout


def int8_gain(qsync, model, width, batch):
    """Whole-step fp32 time / int8 time of one worker (one thread, local batch)."""
    out = run([qsync, "bench", "step", "--model", model, "--width", str(width), "--threads", "1", "--batch",
               str(batch), "--precisions", "fp32,int8", "--reps", "15", "--json"])
    res = {r["precision"]: r["median_ms"] for r in json.loads(out)["results"]}
    return res["fp32"] / res["int8"]


def write_cluster(path, s, g, f):
    doc = {"format": "qsync-cluster", "version": 1,
           "comment": "2 one-thread CPU workers, the second emulated %.3fx slower = 1 + %.2f (g - 1), g = %.3f" % (s, f, g),
           "workers": [{"device": "cpu", "type": "cpu-fast", "threads": 1},
                       {"device": "cpu", "type": "cpu-slow", "threads": 1, "emulation": {"slowdown": round(s, 3)}}]}
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--models", default="cnn,resnet18:16")
    ap.add_argument("--fractions", default="0.5,0.8")
    ap.add_argument("--batch", type=int, default=128, help="global batch (2 workers)")
    ap.add_argument("--steps", type=int, default=468)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--arms", default="qsync,fp32,int8,dynamic,ideal")
    ap.add_argument("--extra", default="", help="more qsync run options")
    ap.add_argument("--out", default="run_acceptance.jsonl")
    a = ap.parse_args()
    qsync = os.path.join(a.build, "qsync")
    tmp = tempfile.mkdtemp(prefix="qsync-accept-")
    rows = []
    with open(a.out, "w") as out:
        for spec in a.models.split(","):
            model, _, width = spec.partition(":")
            width = int(width or 0)
            g = int8_gain(qsync, model, width, a.batch // 2)
            for f in (float(x) for x in a.fractions.split(",")):
                s = 1 + f * (g - 1)
                cpath = os.path.join(tmp, "cluster-%s-%g.json" % (model, f))
                write_cluster(cpath, s, g, f)
                odir = os.path.join(tmp, "run-%s-%g" % (model, f))
                cmd = [qsync, "run", "--cluster", cpath, "--model", model, "--width", str(width), "--batch",
                       str(a.batch), "--steps", str(a.steps), "--seeds", str(a.seeds), "--arms", a.arms, "--quiet",
                       "--json", "--out", odir, *shlex.split(a.extra)]
                rep = json.loads(run(cmd))
                arms = rep["arms"]
                slow = next(iter(rep["plan"]["types"].values()))
                row = {"model": spec, "g": g, "f": f, "slowdown": s, "steps": a.steps, "seeds": a.seeds,
                       "gap_closure": rep["comparison"]["gap_closure"],
                       "share_above_int8": slow["share_above_low_precision"], "layers_at": slow["layers_at"],
                       "target_met": rep["plan"]["target_met"],
                       "sync_ms": {k: v["synchronized_ms"] for k, v in arms.items()},
                       "predicted_ms": {k: v["predicted_synchronized_ms"] for k, v in arms.items()},
                       "prediction_error": {k: v["prediction_error"] for k, v in arms.items()},
                       "workers": rep["qsync_workers"],
                       "accuracy": {k: v["mean_test_accuracy"] for k, v in arms.items()},
                       "accuracy_minus_fp32": rep["comparison"]["test_accuracy_minus_fp32"],
                       "loss_curve_distance_to_fp32": rep["comparison"]["loss_curve_distance_to_fp32"],
                       "command": " ".join(cmd)}
                rows.append(row)
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(json.dumps(row), file=sys.stderr)
    pct = lambda x: "-" if x is None else "%+.1f%%" % (100 * x)
    print("| model | g | f | slowdown | gap closed: qsync / int8 / dynamic | layers above int8 | "
          "qsync predicted / measured ms | fp32 predicted / measured ms | ideal predicted / measured ms | "
          "accuracy qsync / fp32 / int8 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        gc = r["gap_closure"]
        pm = lambda k: "%.1f / %.1f (%s)" % (r["predicted_ms"][k] or float("nan"), r["sync_ms"][k],
                                             pct(r["prediction_error"][k])) if k in r["sync_ms"] else "-"
        acc = r["accuracy"]
        print("| %s | %.3f | %.1f | %.3f | %s / %s / %s | %.0f%% | %s | %s | %s | %s |" % (
            r["model"], r["g"], r["f"], r["slowdown"], *("%.2f" % gc[k] if k in gc else "-" for k in
                                                         ("qsync", "int8", "dynamic")),
            100 * r["share_above_int8"], pm("qsync"), pm("fp32"), pm("ideal"),
            " / ".join("%.2f%%" % (100 * acc[k]) if k in acc else "-" for k in ("qsync", "fp32", "int8"))))


if __name__ == "__main__":
    main()
