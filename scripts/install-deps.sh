#!/usr/bin/env bash
# Install what qsync needs to build, test and run on Debian 12 (run as root or with sudo).
# Open MPI (libopenmpi-dev, openmpi-bin) runs data-parallel jobs under mpirun and their tests.
# python3-torch serves the PyTorch cross-checks (tests/test_torch_interop.c) and the baseline
# benchmarks; OpenBLAS is its recommended BLAS (without it PyTorch falls back to the reference
# BLAS and its Linear layers run ~10x slower, which would flatter our benchmark ratios).
# GLPK (libglpk-dev) solves the exact precision-allocation ILP (src/plan/alloc_ilp.c).
# gnuplot (gnuplot-nox) draws `qsync run --plot`'s loss-against-time figure.
# fortunes and fortunes-min hold the English text of the `fortunes` and `fortune-topics` data
# (/usr/share/games/fortunes; docs/DATA.md) that the transformer models train on.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS=(build-essential cmake pkg-config
      libdnnl-dev libcjson-dev zlib1g-dev libcmocka-dev libopenmpi-dev openmpi-bin libglpk-dev gnuplot-nox
      dataset-fashion-mnist fortunes fortunes-min
      python3 python3-torch libopenblas0-pthread)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
