#!/usr/bin/env bash
# Runs on a CUDA machine from the binaries packed by gpu-pack.sh: the whole test suite on
# CUDA (including the large, ignored cases) and the demo. Writes logs under ${OUT:-gpu/out}.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu/out}
mkdir -p "$out"
for f in gpu/*.xz; do xz -dkf "$f"; done
chmod +x gpu/tests gpu/demo
export CUDA_PATH=${CUDA_PATH:-${CUDA_HOME:-/usr/local/cuda}}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
RMSNORM_TEST_DEVICE=cuda ./gpu/tests --include-ignored --test-threads=1 2>&1 | tee "$out/tests_cuda.log"
./gpu/demo --device cuda 2>&1 | tee "$out/demo_cuda.log"
