#!/usr/bin/env bash
# Hybrid pair on one GPU through MPS (docs/CLUSTERS.md), run on the GPU machine from a bundle
# (scripts/gpu-suite.sh bundle): for each SM share S of rank 1 —
#   alone:  1 rank under CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=S at the local batch BATCH/2, every
#           precision in PRECS: the weaker device by itself (its whole-step low-precision gain g);
#   pair:   2 ranks sharing the GPU, global batch BATCH (rank 0 unlimited at BASE, rank 1 at
#           share S), rank 1 at every precision in PRECS: the synchronized iteration, per-rank
#           step and wait.
# Plus, once: rank 0's configuration alone (the fast device by itself). One JSON document per
# run in OUT_DIR (default: $OUT, else gpu_hybrid_out) named <kind>-s<share>-<precision>.json (`qsync train --json`), and a
# summary table on stdout. The slowdowns an SM share gives are measured here, never assumed.
# Usage: bench/gpu_hybrid.sh [BUNDLE]   env SHARES="100 50 25" PRECS="bf16 fp8" BASE=bf16 STEPS=30
#        BATCH=16 MODEL_ARGS="--model gpt --data synthetic-text:50304:1024 --optimizer adamw --lr 3e-4"
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=${1:-gpu-bundle}
SHARES=${SHARES:-100 50 25}
PRECS=${PRECS:-bf16 fp8}
BASE=${BASE:-bf16}
STEPS=${STEPS:-30}
BATCH=${BATCH:-16}
MODEL_ARGS=${MODEL_ARGS:---model gpt --data synthetic-text:50304:1024 --optimizer adamw --lr 3e-4}
OUT_DIR=${OUT_DIR:-${OUT:-gpu_hybrid_out}}
mkdir -p "$OUT_DIR"
# shellcheck source=bench/gpu_bundle_env.sh
. bench/gpu_bundle_env.sh
gpu_bundle_env "$BUNDLE"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# shellcheck disable=SC2206 # word splitting on purpose
ARGS=(train $MODEL_ARGS --steps "$STEPS" --eval-subset 64 --no-progress --quiet --json --seed 1)

# cluster FILE SHARE PRECISION: rank 0 unlimited at BASE, rank 1 at SHARE % of the SMs
cluster() {
    cat >"$1" <<JSON
{"format": "qsync-cluster", "version": 1, "workers": [
  {"device": "cuda:0", "type": "h200", "precision": "$BASE"},
  {"device": "cuda:0", "type": "h200-sm$2", "precision": "$3", "emulation": {"sm_percent": $2}}]}
JSON
}

# summary FILE KIND SHARE PRECISION: one line of the table
summary() {
    python3 - "$@" <<'PY'
import json, sys
path, kind, share, prec = sys.argv[1:5]
d = json.load(open(path))
w = d.get("workers") or []
per = "  ".join("r%d %.1f ms (wait %.1f)" % (x["rank"], x["median_step_ms"], x["comm_wait_ms"]) for x in w)
print("%-5s share %3s%%  %-5s  loss %.4f  median step %s" % (kind, share, prec, d["final_train_loss"],
      per if per else "%.1f ms" % d.get("median_step_ms", float("nan"))))
PY
}

gpu_mps_session
"$Q" "${ARGS[@]}" --batch $((BATCH / 2)) --device cuda:0 --precision "$BASE" >"$OUT_DIR/alone-s100-$BASE.json"
summary "$OUT_DIR/alone-s100-$BASE.json" alone 100 "$BASE"
for s in $SHARES; do
    for p in $PRECS; do
        CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$s "$Q" "${ARGS[@]}" --batch $((BATCH / 2)) --device cuda:0 --precision "$p" \
            >"$OUT_DIR/alone-s$s-$p.json"
        summary "$OUT_DIR/alone-s$s-$p.json" alone "$s" "$p"
        cluster "$TMP/c.json" "$s" "$p"
        mpirun -np 2 -x LD_LIBRARY_PATH "$Q" "${ARGS[@]}" --batch "$BATCH" --cluster "$TMP/c.json" >"$OUT_DIR/pair-s$s-$p.json"
        summary "$OUT_DIR/pair-s$s-$p.json" pair "$s" "$p"
    done
done
