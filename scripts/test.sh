#!/usr/bin/env bash
# Build qsync twice — optimised, and with AddressSanitizer + UndefinedBehaviorSanitizer — and
# run the whole ctest suite in both. Build trees: build/ and build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$JOBS"
ctest --test-dir build --output-on-failure
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQS_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure
