#!/usr/bin/env bash
# scripts/gpu-suite.sh — bundle the CUDA build for the GPU machine (run HERE) and run the GPU
# test suite from that bundle (run THERE, from the repository root).
#
#   scripts/gpu-suite.sh bundle [build-dir] [out-dir]  # defaults: build/  gpu-bundle/
#   scripts/gpu-suite.sh run [bundle-dir]              # default: gpu-bundle/
#   scripts/gpu-suite.sh train [bundle] [steps] [models] [precisions]  # short GPU trainings
#   scripts/gpu-suite.sh mps [bundle] [shares]        # the op suites under MPS SM shares (default "50 40")
#   scripts/gpu-suite.sh unpack [bundle]               # unpack <bundle>.tar.xz (run/train/mps do it themselves)
#
# The GPU machine (Ubuntu 24.04 + CUDA 13, no package registry) lacks the Debian libraries
# qsync links (cJSON, oneDNN, GLPK, cmocka, ...). `bundle` copies the binaries — qsync, the
# GPU test suites (GPU_SUITES: tests/test_backend_ops, tests/test_cuda_attention,
# tests/test_cuda_dist, tests/test_cuda_graphs) and the
# CUDA benchmarks (bench/cuda/*) and the kernel tracer libqs_kernel_trace.so that were built —
# to <out>/bin and the shared libraries they need, minus the ones that machine has itself, to
# <out>/lib. `run` puts <bundle>/lib on
# LD_LIBRARY_PATH (the machine's own CUDA, cuBLASLt, cuDNN, NCCL and Open MPI are found as
# usual), lists the GPUs and runs every suite with QS_REQUIRE_GPU=1 (a missing GPU fails
# instead of skipping), all of them even when one fails. With $OUT set (the device tool sets
# it) the per-case results of test_backend_ops (every op on the CUDA and the CPU backend against
# the CPU reference; each record names its backend) go to $OUT/gpu-tests.json and its log to
# $OUT/gpu-tests.log, those of test_<x> to $OUT/gpu-tests-<x>.json / .log (e.g.
# gpu-tests-cuda_attention.json), and every suite's exit status to
# $OUT/gpu-tests-status.json. Exits non-zero when any suite fails.
#
# bundle also packs <out> into <out>.tar.xz (about a fifth of its size: the device tool carries
# at most 64 MiB, which the unpacked bundle exceeds); run, train and mps unpack <bundle>.tar.xz
# over <bundle> when the archive is there. Typical use (both are git-ignored, so name the
# archive in the device call's `carry`):
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j
#   scripts/gpu-suite.sh bundle
#   device: command "scripts/gpu-suite.sh run", carry ["gpu-bundle.tar.xz"]
set -euo pipefail

# Libraries every Ubuntu 24.04 + CUDA 13 GPU image provides itself; they, and everything only
# they need, are never copied (glob patterns on the soname):
SYSTEM_LIBS=(
    # the C runtime, the dynamic loader and the compiler runtimes (newer there than here)
    'linux-vdso.so.*' 'ld-linux-x86-64.so.*' 'libc.so.*' 'libm.so.*' 'libpthread.so.*' 'libdl.so.*' 'librt.so.*'
    'libresolv.so.*' 'libstdc++.so.*' 'libgcc_s.so.*'
    'libgomp.so.*'   # GCC's OpenMP runtime: installed with the image's gcc (the recipe seen working did not carry it)
    'libz.so.*'      # zlib1g is part of every Ubuntu base image
    # the machine's CUDA stack: it must match its driver, so ours never travels
    'libcuda.so.*' 'libcudart.so.*' 'libcublas.so.*' 'libcublasLt.so.*' 'libcudnn*.so.*' 'libnccl.so.*'
    'libnvrtc*.so.*' 'libnvJitLink.so.*' 'libcufft*.so.*' 'libcurand.so.*' 'libcusparse*.so.*' 'libnvidia-*.so.*'
    # its Open MPI (4.1.6, same ABI as Debian's 4.1) and that MPI's own dependencies
    'libmpi.so.*' 'libmpi_*.so.*' 'libopen-rte.so.*' 'libopen-pal.so.*' 'libpmix.so.*' 'libhwloc.so.*'
    'libevent*.so.*'
)

# The GPU test suites (tests/<name>), run in this order; without a GPU the test_cuda_* suites exit
# 77 (skipped) and test_backend_ops runs its CPU-backend rows alone (QS_REQUIRE_GPU=1 makes the
# missing GPU a failure in every suite). The ops suites compare CUDA ops with the CPU backend;
# test_cuda_dist runs the bundled qsync (QS_BIN) on several ranks sharing the GPU under the
# machine's mpirun.
GPU_SUITES=(test_backend_ops test_cuda_attention test_cuda_dist test_cuda_graphs test_memory_plan)

die() {
    echo "gpu-suite: $*" >&2
    exit 1
}

# Whether a soname is one of SYSTEM_LIBS.
is_system_lib() {
    local name=$1 pat
    for pat in "${SYSTEM_LIBS[@]}"; do
        # shellcheck disable=SC2053 # glob match on purpose
        [[ $name == $pat ]] && return 0
    done
    return 1
}

# The DT_NEEDED sonames of an ELF file, one per line.
needed_of() {
    readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
}

# Whether an executable was built with the CUDA backend (links a CUDA library or holds kernels).
has_cuda() {
    needed_of "$1" | grep -Eq '^lib(cudart|cublasLt|cublas|cudnn|nccl)\.so' && return 0
    grep -aq '__cudaRegisterFatBinary' "$1"
}

# bundle [build-dir] [out-dir]: copy the binaries and the non-system library closure.
bundle() {
    local build=${1:-build} out=${2:-gpu-bundle}
    command -v readelf >/dev/null || die "readelf (binutils) is needed to read library dependencies"
    command -v ldd >/dev/null || die "ldd is needed to resolve library paths"
    [[ -d $build ]] || die "no build directory '$build' (build first: cmake -S . -B $build && cmake --build $build -j)"

    local bins=() b suite
    [[ -x $build/qsync ]] || die "$build/qsync is missing: build the CLI first"
    bins+=("$build/qsync")
    for suite in "${GPU_SUITES[@]}"; do
        [[ -x $build/tests/$suite ]] || die "$build/tests/$suite is missing: build the tests first"
        bins+=("$build/tests/$suite")
    done
    has_cuda "$build/tests/test_backend_ops" ||
        die "$build was configured without the CUDA backend (no nvcc/cuDNN at configure time, or QS_CUDA=OFF): on the GPU the suite could only fail"
    # the CUDA benchmarks: one per bench/cuda source, where it was built
    local src
    for src in bench/cuda/*.cu bench/cuda/*.c; do
        [[ -e $src ]] || continue
        b=$build/$(basename "${src%.*}")
        [[ -x $b ]] && bins+=("$b")
    done
    # the CUPTI kernel tracer (bench/cuda/kernel_trace.c), loaded through CUDA_INJECTION64_PATH
    [[ -e $build/libqs_kernel_trace.so ]] && bins+=("$build/libqs_kernel_trace.so")

    rm -rf "$out"
    mkdir -p "$out/bin" "$out/lib"
    # strip while copying (the copies only; CUDA fat binaries are not debug info and stay)
    for b in "${bins[@]}"; do
        cp "$b" "$out/bin/"
        if command -v strip >/dev/null; then strip --strip-debug "$out/bin/$(basename "$b")" 2>/dev/null || true; fi
    done

    # Walk DT_NEEDED from every binary; resolve each soname with ldd's map of that binary;
    # copy it unless it is a system library, and then walk its own dependencies.
    declare -A path_of=() seen=()
    local line name path queue=() skipped=()
    for b in "${bins[@]}"; do
        while IFS= read -r line; do
            if [[ $line =~ ^[[:space:]]*([^[:space:]]+)[[:space:]]=\>[[:space:]](/[^[:space:]]+) ]]; then
                path_of[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
            elif [[ $line =~ ^[[:space:]]*([^[:space:]]+)[[:space:]]=\>[[:space:]]not[[:space:]]found ]]; then
                is_system_lib "${BASH_REMATCH[1]}" || die "$b needs ${BASH_REMATCH[1]}, which ldd cannot find here"
            fi
        done < <(ldd "$b")
        while IFS= read -r name; do queue+=("$name"); done < <(needed_of "$b")
    done
    while ((${#queue[@]})); do
        name=${queue[0]}
        queue=("${queue[@]:1}")
        [[ -n ${seen[$name]:-} ]] && continue
        seen[$name]=1
        if is_system_lib "$name"; then
            skipped+=("$name")
            continue
        fi
        path=${path_of[$name]:-}
        [[ -n $path && -e $path ]] || die "cannot resolve $name (needed by the bundled binaries)"
        cp -L "$path" "$out/lib/$name"
        while IFS= read -r line; do queue+=("$line"); done < <(needed_of "$path")
    done

    {
        echo "qsync GPU bundle"
        echo "built from: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (uncommitted changes)')"
        echo "build dir:  $build"
        echo "date:       $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "binaries:   $(cd "$out/bin" && printf '%s ' *)"
        echo "libraries:  $(cd "$out/lib" && printf '%s ' *)"
        echo "left to the GPU machine: $(printf '%s\n' "${skipped[@]}" | sort -u | tr '\n' ' ')"
    } >"$out/MANIFEST"
    cat "$out/MANIFEST"
    echo "bundle size: $(du -sh "$out" | cut -f1) in $out"
    # what travels: the device tool carries at most 64 MiB, more than the unpacked bundle
    tar -cJf "$out.tar.xz" -C "$(dirname "$out")" "$(basename "$out")"
    echo "archive: $out.tar.xz, $(du -sh "$out.tar.xz" | cut -f1) (carry this; run/train/mps unpack it)"
}

# unpack DIR: when DIR.tar.xz exists (the archive bundle writes, which is what travels), replace
# DIR by its contents — an older unpacked bundle left on the machine never runs.
unpack() {
    local dir=$1
    [[ -f $dir.tar.xz ]] || return 0
    rm -rf "$dir"
    tar -xJf "$dir.tar.xz" -C "$(dirname "$dir")"
}

# run [bundle-dir]: run every GPU test suite from a bundle; exit status 0 when all pass.
run() {
    local dir=${1:-gpu-bundle} suite
    unpack "$dir"
    for suite in "${GPU_SUITES[@]}"; do
        [[ -x $dir/bin/$suite ]] || die "no $dir/bin/$suite: make the bundle here first (scripts/gpu-suite.sh bundle) and carry it"
    done
    local lib
    lib=$(cd "$dir/lib" && pwd)
    export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    [[ -f $dir/MANIFEST ]] && sed -n '2,4p' "$dir/MANIFEST"
    echo "--- nvidia-smi -L"
    nvidia-smi -L || echo "(nvidia-smi failed or is missing)"
    local missing
    for suite in "${GPU_SUITES[@]}"; do
        missing=$(ldd "$dir/bin/$suite" | grep 'not found' || true)
        [[ -z $missing ]] || die "libraries missing on this machine for $suite (add them to the bundle or drop them from SYSTEM_LIBS):
$missing"
    done

    local out=${OUT:-} log rc all=0 name statuses=()
    [[ -n $out ]] && mkdir -p "$out"
    export QS_REQUIRE_GPU=1
    QS_BIN=$(cd "$dir/bin" && pwd)/qsync
    export QS_BIN
    for suite in "${GPU_SUITES[@]}"; do
        log=/dev/null
        unset QS_GPU_TESTS_JSON
        if [[ -n $out ]]; then
            # test_backend_ops (which replaced test_cuda_ops) keeps the historical file names
            name=gpu-tests
            [[ $suite == test_backend_ops ]] || name=gpu-tests-${suite#test_}
            export QS_GPU_TESTS_JSON=$out/$name.json
            log=$out/$name.log
        fi
        echo "--- $suite"
        set +e
        "$dir/bin/$suite" 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
        set -e
        echo "--- $suite exit code $rc"
        [[ $rc == 0 ]] || all=1
        statuses+=("$(printf '{"suite": "%s", "exit_code": %d, "passed": %s}' "$suite" "$rc" \
            "$([[ $rc == 0 ]] && echo true || echo false)")")
    done
    if [[ -n $out ]]; then
        local joined
        joined=$(IFS=,; echo "${statuses[*]}")
        printf '{"suites": [%s], "exit_code": %d, "passed": %s, "date": "%s"}\n' "$joined" "$all" \
            "$([[ $all == 0 ]] && echo true || echo false)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$out/gpu-tests-status.json"
    fi
    return "$all"
}

# train [bundle-dir] [steps] [models] [precisions]: short trainings on the GPU (`qsync train --device cuda`, synthetic
# data: the GPU image has no Fashion-MNIST) of cnn and narrow resnet18 at every GPU precision,
# each writing its --json result (final loss, accuracy, per-op profile) to $OUT/train-<model>-<p>.json
# (or the current directory) and one line per run; exits non-zero when any run fails.
train() {
    local dir=${1:-gpu-bundle} steps=${2:-100} models=${3:-cnn,resnet18} precs=${4:-fp32,tf32,bf16,fp16,fp8}
    unpack "$dir"
    local out=${OUT:-.} rc=0 model p args lib
    [[ -x $dir/bin/qsync ]] || die "no $dir/bin/qsync: make the bundle here first and carry it"
    lib=$(cd "$dir/lib" && pwd)
    export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    for model in ${models//,/ }; do
        args=(--model "$model" --data synthetic --batch 128 --steps "$steps" --lr 0.01 --eval-subset 1024 --seed 1
              --no-progress --quiet --json --profile-steps 10)
        [[ $model == resnet18 ]] && args+=(--width 16)
        for p in ${precs//,/ }; do
            if "$dir/bin/qsync" train --device cuda "${args[@]}" --precision "$p" >"$out/train-$model-$p.json" 2>"$out/train-$model-$p.err"; then
                python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%-9s %-5s loss %.4f  accuracy %.4f  %.0f images/s" % (sys.argv[2], sys.argv[3], d["final_train_loss"], d["test_accuracy"], d["images_per_s"]))' \
                    "$out/train-$model-$p.json" "$model" "$p"
            else
                rc=1
                echo "$model $p FAILED: $(tail -n 2 "$out/train-$model-$p.err")"
            fi
        done
    done
    return "$rc"
}

# mps [bundle-dir] [shares]: the op suites (every suite but test_cuda_dist and test_cuda_graphs) again inside MPS
# clients limited to each SM share (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), the daemon started by
# scripts/mps.sh (and stopped again if this started it). An emulated weaker GPU is only as good
# as the kernels' results under its share: on the H200 (2026-12-03) cuBLASLt GEMMs left outputs
# unwritten under 40% and 75% shares while 25%, 50% and 100% passed. Logs go to
# $OUT/gpu-mps-<share>-<suite>.log, a summary to $OUT/gpu-mps-status.json; exits non-zero when
# any suite fails under any share.
mps() {
    local dir=${1:-gpu-bundle} shares=${2:-50 40} out=${OUT:-.} share suite rc all=0 rows=() started=0 lib
    unpack "$dir"
    lib=$(cd "$dir/lib" && pwd)
    export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export QS_REQUIRE_GPU=1
    scripts/mps.sh status >/dev/null 2>&1 || { scripts/mps.sh start && started=1; }
    for share in $shares; do
        for suite in "${GPU_SUITES[@]}"; do
            [[ $suite == test_cuda_dist || $suite == test_cuda_graphs ]] && continue
            set +e
            CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$share "$dir/bin/$suite" >"$out/gpu-mps-$share-${suite#test_}.log" 2>&1
            rc=$?
            set -e
            echo "share $share%: $suite exit code $rc ($(grep -c 'FAIL ' "$out/gpu-mps-$share-${suite#test_}.log") failed cases)"
            [[ $rc == 0 ]] || all=1
            rows+=("$(printf '{"share": %d, "suite": "%s", "exit_code": %d}' "$share" "$suite" "$rc")")
        done
    done
    ((started)) && scripts/mps.sh stop >/dev/null
    printf '{"mps_shares": [%s], "exit_code": %d}\n' "$(IFS=,; echo "${rows[*]}")" "$all" >"$out/gpu-mps-status.json"
    return "$all"
}

cd "$(dirname "$0")/.."
case ${1:-} in
bundle) shift; bundle "$@" ;;
run) shift; run "$@" ;;
train) shift; train "$@" ;;
mps) shift; mps "$@" ;;
unpack) shift; unpack "${1:-gpu-bundle}" ;;
*)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
