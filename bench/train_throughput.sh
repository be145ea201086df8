#!/usr/bin/env bash
# FP32 training throughput of qsync against PyTorch (Debian's python3-torch), side by side in
# one run: for each model, ROUNDS alternating runs of `qsync train` and of
# tools/torch_train_bench.py (PyTorch at its default thread count and at the same thread count
# as qsync), batch 128. Prints one JSON line per run and a summary with medians and ratios.
# Usage: bench/train_throughput.sh [BUILD_DIR] [ROUNDS] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-5}
STEPS=${3:-40}
THREADS=$(nproc)
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
run_models=("cnn:0" "resnet18:16")
for r in $(seq 1 "$ROUNDS"); do
  for mw in "${run_models[@]}"; do
    m=${mw%%:*}; w=${mw##*:}
    q=$("$BUILD"/qsync train --model "$m" --width "$w" --batch 128 --steps "$STEPS" --train-subset 12800 \
          --eval-subset 256 --threads "$THREADS" --json --quiet)
    echo "{\"framework\": \"qsync\", \"model\": \"$m\", \"round\": $r, \"threads\": $THREADS, \"images_per_s\": $(echo "$q" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["images_per_s"])')}" | tee -a "$OUT"
    /usr/bin/python3 tools/torch_train_bench.py --model "$m" --width "$w" --batch 128 --steps 10 --windows 3 \
      | /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); d['round']=$r; d['variant']='torch-default-threads'; print(json.dumps(d))" | tee -a "$OUT"
    /usr/bin/python3 tools/torch_train_bench.py --model "$m" --width "$w" --batch 128 --steps 10 --windows 3 --threads "$THREADS" \
      | /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); d['round']=$r; d['variant']='torch-same-threads'; print(json.dumps(d))" | tee -a "$OUT"
  done
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for m in sorted({r["model"] for r in rows}):
    q = statistics.median(r["images_per_s"] for r in rows if r["model"] == m and r["framework"] == "qsync")
    td = statistics.median(r["median_images_per_s"] for r in rows if r["model"] == m and r.get("variant") == "torch-default-threads")
    ts = statistics.median(r["median_images_per_s"] for r in rows if r["model"] == m and r.get("variant") == "torch-same-threads")
    print(json.dumps({"summary": m, "qsync_images_per_s": round(q, 1), "torch_default_threads_images_per_s": round(td, 1),
                      "torch_same_threads_images_per_s": round(ts, 1), "ratio_vs_torch_default": round(q / td, 2),
                      "ratio_vs_torch_same_threads": round(q / ts, 2)}))
PY
