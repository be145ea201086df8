# shellcheck shell=bash
# bench/gpu_bundle_env.sh — sourced by the GPU benchmarks that run a bundle's qsync on the GPU
# machine (bench/gpu_hybrid.sh, bench/gpu_green_pair.sh), from the repository root:
#   gpu_bundle_env BUNDLE   unpack BUNDLE.tar.xz (scripts/gpu-suite.sh bundle), put its libraries
#                           on LD_LIBRARY_PATH, allow mpirun as root, keep NCCL's NVLink
#                           multicast off, set Q to the bundle's qsync
#   gpu_mps_session         start the MPS control daemon now and stop it when the script exits
#                           (ranks of one GPU run side by side only under MPS); an EXIT trap
#                           set earlier keeps running before it
gpu_bundle_env() {
    scripts/gpu-suite.sh unpack "$1"
    local lib
    lib=$(cd "$1/lib" && pwd)
    export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
    Q=$(cd "$1/bin" && pwd)/qsync # read by the sourcing script
    export Q
}

gpu_mps_session() {
    local before
    before=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")
    # shellcheck disable=SC2064 # expanded now on purpose: the earlier trap's command
    trap "${before:+$before; }scripts/mps.sh stop >/dev/null 2>&1 || true" EXIT
    scripts/mps.sh start
}
