#!/usr/bin/env bash
# bench/gpu_step_compare.sh — the training-step time of a bundle's qsync against an earlier qsync
# binary and against PyTorch eager AMP channels-last, in one call on the GPU machine (run from
# the repository root, with a bundle from scripts/gpu-suite.sh bundle):
#
#   bench/gpu_step_compare.sh BUNDLE [BEFORE]
#   e.g. bench/gpu_step_compare.sh gpu-bundle build-before/qsync.xz
#
# BEFORE: an earlier qsync (a binary, or an .xz of one, e.g. `xz -c gpu-bundle/bin/qsync` of an
# older bundle; it runs with this bundle's libraries); without it only the bundle's qsync and
# PyTorch run. For each model, REPS rounds alternate before and after (`qsync train --device
# DEVICE --model M --data synthetic:32x32x3 --batch B --steps S --precision P --json`, the median
# step), then PyTorch runs once (`tools/torch_train_bench.py ... --windows 3`, 256000 /
# median images/s; only for bf16, with --bf16, and fp32). Prints one line per run and a summary;
# writes every run and the medians and ratios to $OUT/step-compare.json (or ./step-compare.json).
# Environment: QS_COMPARE_MODELS ("resnet50 resnet18"), QS_COMPARE_PRECISION (bf16),
# QS_COMPARE_REPS (2), QS_COMPARE_STEPS (30), QS_COMPARE_BATCH (256), QS_COMPARE_DEVICE (cuda;
# cpu for a smoke test of the script), QS_COMPARE_TORCH (1; 0 skips PyTorch). Token models (gpt*,
# bert*) train on QS_COMPARE_TEXT (synthetic-text:50304:1024) at QS_COMPARE_TEXT_BATCH (8), and
# PyTorch is not run for them here.
set -euo pipefail
[[ $# -ge 1 ]] || { sed -n '2,18p' "$0" >&2; exit 2; }
bundle=$1 before=${2:-}
models=${QS_COMPARE_MODELS:-resnet50 resnet18}
prec=${QS_COMPARE_PRECISION:-bf16} reps=${QS_COMPARE_REPS:-2} steps=${QS_COMPARE_STEPS:-30}
batch=${QS_COMPARE_BATCH:-256} device=${QS_COMPARE_DEVICE:-cuda} torch=${QS_COMPARE_TORCH:-1}
out=${OUT:-.}
mkdir -p "$out"
# shellcheck source=bench/gpu_bundle_env.sh
source bench/gpu_bundle_env.sh
gpu_bundle_env "$bundle"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
runs=$tmp/runs.jsonl
: >"$runs"

if [[ -n $before ]]; then
    [[ -e $before ]] || { echo "gpu_step_compare: $before does not exist" >&2; exit 1; }
    if [[ $before == *.xz ]]; then
        xz -dc "$before" >"$tmp/qsync-before"
        chmod +x "$tmp/qsync-before"
        before=$tmp/qsync-before
    fi
fi

# qsync_run SIDE BINARY MODEL ROUND: one training run; appends its line to $runs.
qsync_run() {
    local side=$1 bin=$2 model=$3 round=$4 log=$tmp/$1-$3-$4 data=synthetic:32x32x3 b=$batch
    if [[ $model == gpt* || $model == bert* ]]; then
        data=${QS_COMPARE_TEXT:-synthetic-text:50304:1024} b=${QS_COMPARE_TEXT_BATCH:-8}
    fi
    "$bin" train --device "$device" --model "$model" --data "$data" --batch "$b" --steps "$steps" \
        --precision "$prec" --json --no-progress --quiet >"$log.json" 2>"$log.err" ||
        { echo "gpu_step_compare: $side $model round $round failed:" >&2; tail -20 "$log.err" >&2; exit 1; }
    python3 - "$log.json" "$side" "$model" "$round" >>"$runs" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
w = d["workers"][0]
print(json.dumps({"side": sys.argv[2], "model": sys.argv[3], "round": int(sys.argv[4]),
                  "step_ms": w["median_step_ms"], "memory_bytes": w.get("memory_bytes"),
                  "final_train_loss": d.get("final_train_loss")}))
PY
    tail -1 "$runs"
}

# torch_run MODEL: PyTorch eager (AMP BF16 for bf16) channels-last; appends its line to $runs.
torch_run() {
    local model=$1 amp=()
    case $prec in
    bf16) amp=(--bf16) ;;
    fp32) ;;
    *) return 0 ;;
    esac
    python3 tools/torch_train_bench.py --model "$model" --in 32x32x3 --batch "$batch" --steps 20 --windows 3 \
        --device "$device" --channels-last "${amp[@]}" >"$tmp/torch-$model.json" 2>"$tmp/torch-$model.err" ||
        { echo "gpu_step_compare: PyTorch $model failed:" >&2; tail -20 "$tmp/torch-$model.err" >&2; exit 1; }
    python3 - "$tmp/torch-$model.json" "$model" "$batch" >>"$runs" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(json.dumps({"side": "pytorch", "model": sys.argv[2], "round": 1,
                  "step_ms": 1000.0 * int(sys.argv[3]) / d["median_images_per_s"],
                  "windows_images_per_s": d["images_per_s"]}))
PY
    tail -1 "$runs"
}

for model in $models; do
    for round in $(seq 1 "$reps"); do
        [[ -z $before ]] || qsync_run before "$before" "$model" "$round"
        qsync_run after "$Q" "$model" "$round"
    done
    [[ $torch == 0 || $model == gpt* || $model == bert* ]] || torch_run "$model"
done

python3 - "$runs" "$out/step-compare.json" "$prec" "$device" <<'PY'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
summary = {}
for m in dict.fromkeys(r["model"] for r in rows):
    med = {s: statistics.median(r["step_ms"] for r in rows if r["model"] == m and r["side"] == s)
           for s in ("before", "after", "pytorch") if any(r["model"] == m and r["side"] == s for r in rows)}
    s = {"median_step_ms": med}
    if "before" in med: s["after_over_before"] = med["after"] / med["before"]
    if "pytorch" in med: s["after_over_pytorch"] = med["after"] / med["pytorch"]
    summary[m] = s
    print(f"{m}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in med.items()) +
          "".join(f", {k} {v:.3f}" for k, v in s.items() if k != "median_step_ms"))
tmp = sys.argv[2] + ".tmp"
with open(tmp, "w") as f:
    json.dump({"precision": sys.argv[3], "device": sys.argv[4], "runs": rows, "summary": summary}, f, indent=1)
    f.flush()
    os.fsync(f.fileno())
os.replace(tmp, sys.argv[2])
PY
