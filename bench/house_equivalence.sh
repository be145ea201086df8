#!/usr/bin/env bash
# Compare two qsync binaries on the CPU: the checkpoints each writes for the same training
# options must be identical byte for byte, and their training throughput is measured
# alternately (A, B, A, B, ...) so that both see the same machine state; medians are printed.
#
#   bench/house_equivalence.sh OLD_QSYNC NEW_QSYNC [REPS] [OUT_DIR]
#
# REPS (default 5) timed runs of each binary per configuration; OUT_DIR (default a temporary
# directory) keeps the checkpoints and a JSON summary (summary.json). Exit status 1 when any
# pair of checkpoints differs. EQ_SYNTHETIC=1 trains on synthetic images and synthetic text
# instead of Fashion-MNIST and the fortunes corpus (for a machine without the Debian datasets);
# EQ_STEPS (default 30) sets the steps of every run, EQ_ONLY (an extended regex, default all)
# the configurations run.
set -euo pipefail
OLD=${1:?usage: $0 OLD_QSYNC NEW_QSYNC [REPS] [OUT_DIR]}
NEW=${2:?usage: $0 OLD_QSYNC NEW_QSYNC [REPS] [OUT_DIR]}
REPS=${3:-5}
OUT=${4:-$(mktemp -d)}
mkdir -p "$OUT"
COMMON=(--steps "${EQ_STEPS:-30}" --batch 32 --train-subset 2000 --eval-subset 200 --threads 2 --no-progress --json --seed 7 --allow-emulated)
# name | options
CONFIGS=(
  "cnn-fp32|--model cnn"
  "cnn-int8|--model cnn --precision int8"
  "cnn-bf16|--model cnn --precision bf16"
  "mlp-adamw-int8|--model mlp --width 256 --optimizer adamw --lr 0.001 --precision int8"
  "resnet18w16-fp32|--model resnet18 --width 16"
  "resnet18w16-int8|--model resnet18 --width 16 --precision int8"
  "resnet18w16-bf16|--model resnet18 --width 16 --precision bf16"
  "gpt-mini-fp32|--model gpt-mini --data fortunes --optimizer adamw --lr 0.001 --batch 8"
  "gpt-mini-bf16|--model gpt-mini --data fortunes --optimizer adamw --lr 0.001 --batch 8 --precision bf16"
)
if [ "${EQ_SYNTHETIC:-0}" = 1 ]; then
  COMMON+=(--data synthetic)
  for i in "${!CONFIGS[@]}"; do CONFIGS[$i]=${CONFIGS[$i]//--data fortunes/--data synthetic-text:256:64}; done
fi
status=0
echo "[" > "$OUT/summary.json"
first=1
for entry in "${CONFIGS[@]}"; do
  name=${entry%%|*}
  [[ $name =~ ${EQ_ONLY:-.} ]] || continue
  read -r -a opts <<< "${entry#*|}"
  declare -A ips=([old]="" [new]="")
  for ((r = 0; r < REPS; r++)); do
    for side in old new; do
      bin=$OLD; [ "$side" = new ] && bin=$NEW
      dir="$OUT/$name/$side"
      rm -rf "$dir"
      # later options win: the configuration may override --batch
      "$bin" train "${COMMON[@]}" "${opts[@]}" --checkpoint-dir "$dir" > "$OUT/$name.$side.json" 2> "$OUT/$name.$side.err"
      ips[$side]+="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["images_per_s"])' "$OUT/$name.$side.json") "
    done
  done
  same=true
  for f in model.safetensors state.safetensors; do
    cmp -s "$OUT/$name/old/$f" "$OUT/$name/new/$f" || same=false
  done
  $same || status=1
  python3 - "$name" "$same" "${ips[old]}" "${ips[new]}" "$first" >> "$OUT/summary.json" <<'PY'
import json, statistics, sys
name, same, old, new, first = sys.argv[1:6]
o = [float(x) for x in old.split()]; n = [float(x) for x in new.split()]
mo, mn = statistics.median(o), statistics.median(n)
rec = {"config": name, "checkpoints_identical": same == "true", "old_images_per_s": o,
       "new_images_per_s": n, "old_median": mo, "new_median": mn, "new_over_old": mn / mo}
print(("" if first == "1" else ",") + json.dumps(rec))
sys.stderr.write(f"{name:20s} identical={same:5s} old {mo:8.1f} img/s  new {mn:8.1f} img/s  new/old {mn/mo:.3f}\n")
PY
  first=0
done
echo "]" >> "$OUT/summary.json"
echo "summary: $OUT/summary.json"
exit $status
