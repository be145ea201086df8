#!/usr/bin/env bash
# Accuracy per precision with paired seeds: `cnn` on Fashion-MNIST for EPOCHS epochs (default
# 10), seeds 1..SEEDS (default 3), each seed trained in fp32, int8 and bf16 (every Linear/Conv2d
# at that precision; the rest of the defaults of `qsync train`). Prints per precision the test
# accuracy per seed, mean, spread and standard deviation, test losses, training losses at fixed
# steps, and the paired differences against fp32. Takes about 25 minutes on 2 cores.
# Usage: bench/accuracy_precisions.sh [BUILD_DIR] [EPOCHS] [SEEDS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
EPOCHS=${2:-10}
SEEDS=${3:-3}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
for s in $(seq 1 "$SEEDS"); do
  for p in fp32 int8 bf16; do
    echo "seed $s $p ..." >&2
    "$BUILD"/qsync train --model cnn --epochs "$EPOCHS" --seed "$s" --precision "$p" --metrics "$DIR/m_${p}_$s.jsonl" \
      --json --quiet --no-progress > "$DIR/r_${p}_$s.json"
  done
done
/usr/bin/python3 - "$DIR" "$SEEDS" <<'PY'
import json, statistics, sys
d, seeds = sys.argv[1], range(1, int(sys.argv[2]) + 1)
res = {}
for p in ["fp32", "bf16", "int8"]:
    for s in seeds:
        o = json.load(open(f"{d}/r_{p}_{s}.json"))
        steps = {r["step"]: r["loss"] for r in map(json.loads, open(f"{d}/m_{p}_{s}.jsonl")) if r.get("type") == "step"}
        res[p, s] = (o["test_accuracy"] * 100, o["test_loss"], steps)
last = max(res["fp32", 1][2])
fixed = [st for st in (500, 1000, 2000, 3000, 4000) if st < last] + [last]
for p in ["fp32", "bf16", "int8"]:
    acc = [res[p, s][0] for s in seeds]
    sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
    print(f"{p}: test accuracy {[round(a, 2) for a in acc]} mean {statistics.mean(acc):.2f} "
          f"spread {max(acc) - min(acc):.2f} sd {sd:.2f}; test loss {[round(res[p, s][1], 4) for s in seeds]}")
    for st in fixed:
        print(f"   training loss at step {st}: {[round(res[p, s][2].get(st, float('nan')), 4) for s in seeds]}")
for p in ["bf16", "int8"]:
    diff = [res[p, s][0] - res["fp32", s][0] for s in seeds]
    print(f"{p} - fp32 (paired by seed): {[round(x, 2) for x in diff]} mean {statistics.mean(diff):+.2f}")
PY
