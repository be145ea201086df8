#!/usr/bin/env bash
# A hybrid pair on one GPU from green-context SM partitions (docs/CLUSTERS.md), run on the GPU
# machine from a bundle (scripts/gpu-suite.sh bundle). Every run is under MPS, so that two ranks
# run side by side, each on its own SMs.
#   bench/gpu_green_pair.sh gain [BUNDLE]  one process per SM count in COUNTS and precision in
#       PRECS (local batch BATCH/2, no co-runner): the step time of a worker on that many SMs and
#       the whole-step low-precision gain g = T_base / T_low.
#   bench/gpu_green_pair.sh pair [BUNDLE]  the ideal pair (both ranks on FAST SMs at BASE, with
#       qsync train), then `qsync run` on the pair FAST (rank 0) / SLOW (rank 1) with that ideal
#       iteration as --ideal-ms: arms qsync, base, low, dynamic; its report is the gap closed.
# JSON documents go to OUT_DIR (default: $OUT, else gpu_green_out); a summary to stdout.
# Real data on the GPU machine (which has no dataset packages): copy Fashion-MNIST into the
# git-ignored gpu-data/ here (mkdir -p gpu-data && cp -r /usr/share/datasets/fashion-mnist
# gpu-data/), carry "gpu-data" beside the bundle and put "--data fashion-mnist --data-dir
# gpu-data/fashion-mnist" in MODEL_ARGS.
# env: COUNTS="64 56 48" FAST=56 SLOW=48 BASE=bf16 LOW=fp8 PRECS="bf16 fp8" STEPS=20 RUN_STEPS=150 SEEDS=1
#      IDEAL_MS (pair: the ideal iteration measured before, instead of measuring it again)
#      BATCH=8192 MODEL_ARGS="--model mlp --width 24576 --data synthetic --optimizer adamw --lr 1e-4
#      --fp8-scaling delayed"
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?usage: bench/gpu_green_pair.sh gain|pair [BUNDLE]}
BUNDLE=${2:-gpu-bundle}
COUNTS=${COUNTS:-64 56 48}
FAST=${FAST:-56}
SLOW=${SLOW:-48}
BASE=${BASE:-bf16}
LOW=${LOW:-fp8}
PRECS=${PRECS:-$BASE $LOW}
STEPS=${STEPS:-20}
RUN_STEPS=${RUN_STEPS:-150}
SEEDS=${SEEDS:-1}
BATCH=${BATCH:-8192}
MODEL_ARGS=${MODEL_ARGS:---model mlp --width 24576 --data synthetic --optimizer adamw --lr 1e-4 --fp8-scaling delayed}
OUT_DIR=${OUT_DIR:-${OUT:-gpu_green_out}}
mkdir -p "$OUT_DIR"
# shellcheck source=bench/gpu_bundle_env.sh
. bench/gpu_bundle_env.sh
gpu_bundle_env "$BUNDLE"
gpu_mps_session
# shellcheck disable=SC2206 # word splitting on purpose
TRAIN=(train $MODEL_ARGS --eval-subset 64 --no-progress --quiet --json --seed 1)

# median FILE: the run's iteration, the slowest rank's median step (one process: its own)
median() {
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); w=d.get("workers") or []
print(max(x["median_step_ms"] for x in w) if w else d["median_step_ms"])' "$1"
}

# cluster FILE N0 N1 [P]: two workers on cuda:0, partitions of N0 and N1 SMs, both at precision P
# when given (qsync train), none when not (qsync run chooses them)
cluster() {
    local prec=${4:+, \"precision\": \"$4\"}
    cat >"$1" <<JSON
{"format": "qsync-cluster", "version": 1, "workers": [
  {"device": "cuda:0", "type": "gpu-$2sm"$prec, "emulation": {"sm_count": $2}},
  {"device": "cuda:0", "type": "gpu-$3sm"$prec, "emulation": {"sm_count": $3}}]}
JSON
}

case "$MODE" in
gain)
    for n in $COUNTS; do
        line="$n SMs:"
        for p in $PRECS; do
            f="$OUT_DIR/alone-${n}sm-$p.json"
            QS_CUDA_SM_PARTITION=0:$n "$Q" "${TRAIN[@]}" --steps "$STEPS" --batch $((BATCH / 2)) --device cuda:0 \
                --precision "$p" >"$f"
            line="$line  $p $(median "$f") ms"
        done
        b=$(median "$OUT_DIR/alone-${n}sm-$BASE.json"); l=$(median "$OUT_DIR/alone-${n}sm-$LOW.json")
        echo "$line  g = $(python3 -c "print(round($b / $l, 3))")"
    done
    ;;
pair)
    if [[ -n ${IDEAL_MS:-} ]]; then
        ideal=$IDEAL_MS
        echo "ideal pair ($FAST + $FAST SMs, $BASE): iteration $ideal ms (IDEAL_MS, measured before)"
    else
        cluster "$OUT_DIR/ideal.json" "$FAST" "$FAST" "$BASE"
        mpirun -np 2 -x LD_LIBRARY_PATH "$Q" "${TRAIN[@]}" --steps "$STEPS" --batch "$BATCH" \
            --cluster "$OUT_DIR/ideal.json" >"$OUT_DIR/ideal-pair.json"
        ideal=$(median "$OUT_DIR/ideal-pair.json")
        echo "ideal pair ($FAST + $FAST SMs, $BASE): iteration $ideal ms"
    fi
    cluster "$OUT_DIR/pair.json" "$FAST" "$SLOW"
    # shellcheck disable=SC2086 # word splitting on purpose
    mpirun -np 2 -x LD_LIBRARY_PATH "$Q" run --no-launch --cluster "$OUT_DIR/pair.json" $MODEL_ARGS --batch "$BATCH" \
        --steps "$RUN_STEPS" --seeds "$SEEDS" --base-precision "$BASE" --low-precision "$LOW" --precisions "$BASE,$LOW" \
        --arms qsync,base,low,dynamic --ideal-ms "$ideal" --profile-reps 10 --indicator-batches 2 \
        --eval-subset 2000 --out "$OUT_DIR/run" --json >"$OUT_DIR/run-report.json"
    python3 - "$OUT_DIR/run-report.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(json.dumps({k: d[k] for k in d if k in ("plan", "comparison", "qsync_workers", "ideal_ms_given")}, indent=1)[:6000])
for name, a in d["arms"].items():
    print(name, {k: a.get(k) for k in ("synchronized_ms", "predicted_synchronized_ms", "prediction_error",
                                       "mean_test_accuracy")})
PY
    ;;
*) echo "bench/gpu_green_pair.sh: unknown mode $MODE (gain or pair)" >&2; exit 2 ;;
esac
