#!/usr/bin/env bash
# Build qsync twice — optimised, and with AddressSanitizer + UndefinedBehaviorSanitizer — and
# run the whole ctest suite in both; check the folders' layering (tools/layering.py); in the
# optimised build, rerun the CPU-ISA-dependent suites with oneDNN capped at AVX2 (below). Build
# trees: build/ and build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$JOBS"
# No include or call from a folder to one on its own level or above (docs/ARCHITECTURE.md).
python3 tools/layering.py --build build --quiet
ctest --test-dir build --output-on-failure
# The CPU backend runs int8 and bf16 natively or only emulates them depending on the ISA oneDNN
# uses (VNNI / AMX for int8, AVX-512 for bf16; docs/PRECISION.md), and its FP32 kernels round
# differently per ISA. Rerun the suites whose behaviour depends on that with oneDNN capped at
# AVX2 (both emulated, AVX2 kernels), so that both cases are tested whatever CPU this runs on —
# unless this CPU emulates both already, when the run above was that case.
ISA_TESTS='^(test_linear_prec|test_conv_prec|test_cpu_ops|test_cpu_transformer_ops|test_backend_ops|test_graph|'
ISA_TESTS+='test_precision_graph|test_memory_plan|test_loss_scale|test_calibrate|test_plan|test_plan_cmd|test_predict|'
ISA_TESTS+='test_sensitivity|test_run|test_cli|test_dist)$'
CPU_PRECISIONS=$(build/qsync models cnn)
if grep -Eq 'precisions on the cpu backend:.*(bf16|int8) native' <<<"$CPU_PRECISIONS"; then
  ONEDNN_MAX_CPU_ISA=AVX2 ctest --test-dir build --output-on-failure -R "$ISA_TESTS"
else
  echo "test.sh: this CPU already emulates bf16 and int8: no rerun capped at AVX2"
fi
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQS_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure
