#!/usr/bin/env bash
# Emulated hybrid pair (docs/CLUSTERS.md): 2 ranks of one compute thread each on this CPU,
# rank 1 slowed by SLOWDOWN (cgroup quota where writable, else duty cycle), cnn on
# Fashion-MNIST, global batch 128. For each slowdown, side by side and in ROUNDS interleaved
# rounds: all-FP32 synchronous, uniform INT8 on the slow worker, dynamic batching (FP32), and
# the unslowed pair as the ideal. Per run: the job's median iteration time (rank 0's median
# step over the steps after warm-up and the slow rank's calibration window), the throughput it
# implies, the slow rank's measured slowdown and the final batch split. One JSON line per run
# in OUT, then a markdown table of the medians over rounds.
# Usage: bench/hybrid_emulated.sh [BUILD_DIR] [ROUNDS] [OUT]
#        env SLOWDOWNS="1.18 1.24" STEPS=120 REBALANCE_EVERY=10 (dynamic batching's window)
# Needs an otherwise idle machine with ≥ 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-3}
OUT=${3:-hybrid_emulated.jsonl}
SLOWDOWNS=${SLOWDOWNS:-1.18 1.24}
STEPS=${STEPS:-120}
REBALANCE_EVERY=${REBALANCE_EVERY:-10}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
: > "$OUT"
ARGS=(train --model cnn --batch 128 --steps "$STEPS" --train-subset 12800 --eval-subset 256 --no-progress --quiet
      --json --allow-emulated)

# cluster FILE SLOWDOWN SLOW_PRECISION: 2 one-thread CPU workers, the second slowed
cluster() {
    local prec=""
    [ "$3" != fp32 ] && prec="\"precision\": \"$3\", "
    cat > "$1" <<JSON
{"format": "qsync-cluster", "version": 1, "workers": [
  {"device": "cpu", "type": "cpu-fast", "threads": 1},
  {"device": "cpu", "type": "cpu-slow", "threads": 1, ${prec}"emulation": {"slowdown": $2}}]}
JSON
}

# run NAME SLOWDOWN ROUND [extra qsync args...]: one job, one JSON line
run() {
    local name=$1 s=$2 round=$3
    shift 3
    mpirun -np 2 --oversubscribe "$BUILD/qsync" "${ARGS[@]}" "$@" > "$TMP/out.json" 2> "$TMP/err.txt" || {
        cat "$TMP/err.txt" >&2
        exit 1
    }
    python3 - "$name" "$s" "$round" "$TMP/out.json" >> "$OUT" <<'PY'
import json, sys
name, s, rnd, path = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
r = json.load(open(path))
w = r["workers"]
ms = w[0]["median_step_ms"]
print(json.dumps({"config": name, "slowdown": s, "round": rnd, "median_step_ms": ms,
                  "images_per_s": 128e3 / ms, "slow_measured": w[1]["emulated_slowdown_measured"],
                  "slow_basis": w[1].get("emulated_slowdown_basis", "-"), "method": w[1]["emulation_method"],
                  "batch_split": r.get("batch_split", "64,64"), "steps": r["steps"]}))
PY
    tail -n 1 "$OUT" >&2
}

for round in $(seq 1 "$ROUNDS"); do
    run "unslowed, both FP32" 1 "$round" --threads 1
    for s in $SLOWDOWNS; do
        cluster "$TMP/fp32.json" "$s" fp32
        cluster "$TMP/int8.json" "$s" int8
        run "all-FP32 synchronous" "$s" "$round" --cluster "$TMP/fp32.json"
        run "INT8 on the slow worker" "$s" "$round" --cluster "$TMP/int8.json"
        run "dynamic batching (FP32)" "$s" "$round" --cluster "$TMP/fp32.json" --batch-split dynamic --rebalance-every "$REBALANCE_EVERY"
    done
done

python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = []
for r in rows:
    k = (r["slowdown"], r["config"])
    if k not in keys: keys.append(k)
print("| slow worker | configuration | median iteration (ms) | throughput (img/s) | slow rank measured | final split |")
print("|---|---|---|---|---|---|")
for s, c in keys:
    g = [r for r in rows if r["slowdown"] == s and r["config"] == c]
    ms = statistics.median(r["median_step_ms"] for r in g)
    meas = statistics.median(r["slow_measured"] for r in g)
    runs = ", ".join("%.1f" % r["median_step_ms"] for r in g)
    print("| %s | %s | %.1f (%s) | %.0f | %s | %s |" % ("%.2fx" % s if s > 1 else "-", c, ms, runs, 128e3 / ms,
          "%.3fx (%s, %s)" % (meas, g[0]["method"], g[0]["slow_basis"]) if s > 1 else "-",
          "/".join(r["batch_split"] for r in g) if "dynamic" in c else g[0]["batch_split"]))
PY
