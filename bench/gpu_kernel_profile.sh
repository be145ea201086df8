#!/usr/bin/env bash
# bench/gpu_kernel_profile.sh — GPU time per step, per kernel class and per kernel, of qsync's
# training step and of PyTorch's eager AMP channels-last step on the same GPU (run on the GPU
# machine from the repository root, with a bundle from scripts/gpu-suite.sh bundle).
#
#   bench/gpu_kernel_profile.sh BUNDLE MODEL PRECISION [N1 N2] [qsync options...]
#   e.g. bench/gpu_kernel_profile.sh gpu-bundle resnet50 bf16 20 50
#
# Each side runs twice under the CUPTI tracer (bench/cuda/kernel_trace.c: no synchronisation
# between kernels, CUDA graph replays included), N1 and N2 steps; bench/kernel_diff.py turns the
# two totals into per-step figures (set-up, warm-up and capture cancel). PyTorch runs only for
# precision bf16 (autocast BF16) and fp32. Input 32x32x3 (synthetic), batch 256 (QS_PROFILE_BATCH
# overrides; QS_PROFILE_TOP the number of kernels listed, 25). The traces and per-step JSON go to $OUT (or ./kernel-profile) as
# kernels-<side>-<model>-<precision>.json.
set -euo pipefail
[[ $# -ge 3 ]] || { sed -n '2,14p' "$0" >&2; exit 2; }
bundle=$1 model=$2 prec=$3
n1=${4:-20} n2=${5:-50}
shift $(($# < 5 ? $# : 5))
batch=${QS_PROFILE_BATCH:-256}
out=${OUT:-kernel-profile}
mkdir -p "$out"
# shellcheck source=bench/gpu_bundle_env.sh
source bench/gpu_bundle_env.sh
gpu_bundle_env "$bundle"
tracer=$(cd "$bundle/bin" && pwd)/libqs_kernel_trace.so
[[ -e $tracer ]] || { echo "gpu_kernel_profile: $tracer is missing (built only where CUPTI is found)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# traced SIDE N COMMAND...: run COMMAND under the tracer, its trace in $tmp/SIDE-N.json.
traced() {
    local side=$1 n=$2
    shift 2
    CUDA_INJECTION64_PATH=$tracer QS_KERNEL_TRACE_OUT=$tmp/$side-$n.json "$@" >"$tmp/$side-$n.log" 2>&1 ||
        { echo "gpu_kernel_profile: $side with $n steps failed:" >&2; tail -20 "$tmp/$side-$n.log" >&2; exit 1; }
}

for n in "$n1" "$n2"; do
    traced qsync "$n" "$Q" train --device cuda --model "$model" --data synthetic:32x32x3 --batch "$batch" \
        --steps "$n" --precision "$prec" --json --no-progress --quiet "$@"
done
python3 bench/kernel_diff.py "$tmp/qsync-$n1.json" "$n1" "$tmp/qsync-$n2.json" "$n2" \
    --top "${QS_PROFILE_TOP:-25}" --label "qsync $model $prec" --json "$out/kernels-qsync-$model-$prec.json"

case $prec in
bf16) amp=(--bf16) ;;
fp32) amp=() ;;
*) exit 0 ;;
esac
for n in "$n1" "$n2"; do
    # windows of n steps after PyTorch's own 3 warm-up steps
    traced torch "$n" python3 tools/torch_train_bench.py --model "$model" --in 32x32x3 --batch "$batch" \
        --steps "$n" --windows 1 --device cuda --channels-last "${amp[@]}"
done
python3 bench/kernel_diff.py "$tmp/torch-$n1.json" "$n1" "$tmp/torch-$n2.json" "$n2" \
    --top "${QS_PROFILE_TOP:-25}" --label "pytorch $model $prec" --json "$out/kernels-torch-$model-$prec.json"
