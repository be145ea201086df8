#!/usr/bin/env bash
# Whole training-step throughput per precision: `qsync bench step` (fp32, bf16, int8 on the
# same synthetic batch, interleaved) against PyTorch (Debian's python3-torch) in FP32 and with
# BF16 autocast, alternating in one run, ROUNDS rounds, for `cnn` and `resnet18` width 16,
# batch 128; qsync on all cores, PyTorch at its default thread count and at qsync's. Prints one
# JSON line per run and a summary per model with medians, the whole-step gain
# g = qsync int8 / qsync fp32, and the best qsync step over the best PyTorch BF16 one.
# Usage: bench/step_precisions.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-3}
THREADS=$(nproc)
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  for mw in cnn:0 resnet18:16; do
    m=${mw%%:*}; w=${mw##*:}
    "$BUILD"/qsync bench step --model "$m" --width "$w" --batch 128 --threads "$THREADS" --reps 15 --warmup 3 \
        --precisions fp32,bf16,int8 --json \
      | /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); [print(json.dumps({'framework':'qsync','model':'$m','round':$r,'precision':x['precision'],'support':x['support'],'images_per_s':x['images_per_s']})) for x in d['results']]" \
      | tee -a "$OUT"
    for th in 0 "$THREADS"; do  # PyTorch's default thread count, and qsync's
      for bf in "" "--bf16"; do
        /usr/bin/python3 tools/torch_train_bench.py --model "$m" --width "$w" --batch 128 --steps 10 --windows 3 \
            --threads "$th" $bf \
          | /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'framework':'pytorch-%dt' % d['threads'],'model':'$m','round':$r,'precision':'bf16-autocast' if d['bf16'] else 'fp32','images_per_s':d['median_images_per_s']}))" \
          | tee -a "$OUT"
      done
    done
  done
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for m in sorted({r["model"] for r in rows}):
    med = {}
    for r in rows:
        if r["model"] == m:
            med.setdefault((r["framework"], r["precision"]), []).append(r["images_per_s"])
    med = {k: statistics.median(v) for k, v in med.items()}
    q = {p: v for (f, p), v in med.items() if f == "qsync"}
    best = max(q, key=q.get)
    torch_bf16 = max(v for (f, p), v in med.items() if f.startswith("pytorch") and p == "bf16-autocast")
    print(json.dumps({"summary": m, "images_per_s": {f"{f} {p}": round(v, 1) for (f, p), v in sorted(med.items())},
                      "g_int8_over_fp32": round(q["int8"] / q["fp32"], 2), "best_qsync": best,
                      "best_qsync_over_best_torch_bf16": round(q[best] / torch_bf16, 2)}))
PY
