#!/usr/bin/env bash
# Builds the standalone CUDA benchmarks into an ignored folder to carry to the GPU machine.
# CMake also compiles them (targets bench_linear_lt, bench_lt_algos, ...) wherever nvcc exists, so CI checks they build.
# Usage: bench/cuda/build.sh [OUT_DIR]   (default: build-cuda, ignored by git)
# Needs nvcc (CUDA >= 12 with FP8 cuBLASLt; built and run with CUDA 13.0). Targets sm_90 (H100/H200).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-build-cuda}
NVCC=${NVCC:-nvcc}
mkdir -p "$OUT"
"$NVCC" -O3 -std=c++17 -arch=sm_90 -lineinfo -Xcompiler -Wall,-Wextra \
  -o "$OUT/bench_linear_lt" bench/cuda/bench_linear_lt.cu -lcublasLt -lcublas
echo "built $OUT/bench_linear_lt"
"$NVCC" -O3 -std=c++17 -arch=sm_90 -lineinfo -Xcompiler -Wall,-Wextra \
  -o "$OUT/bench_lt_algos" bench/cuda/bench_lt_algos.cu -lcublasLt -lcublas
echo "built $OUT/bench_lt_algos"
# cuDNN convolution probe: only where cudnn.h is found (cuDNN 9, graph/backend API)
CUDNN_H=$(find "$(dirname "$(command -v "$NVCC")")/../include" /usr/include /usr/include/x86_64-linux-gnu \
  -maxdepth 1 -name cudnn.h 2>/dev/null | head -1 || true)
if [ -n "$CUDNN_H" ]; then
  "$NVCC" -O3 -std=c++17 -arch=sm_90 -lineinfo -Xcompiler -Wall,-Wextra -Isrc \
    -o "$OUT/bench_conv_cudnn" bench/cuda/bench_conv_cudnn.cu src/cuda/cuda_conv_graph.c -lcudnn
  echo "built $OUT/bench_conv_cudnn"
else
  echo "cudnn.h not found: bench_conv_cudnn not built"
fi
