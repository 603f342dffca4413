#!/usr/bin/env bash
# Offline SASS of a kernel printed by `cuda_source` (no GPU needed): registers, spills and the
# instruction stream that NVRTC's ptxas would produce for sm_90.
#   cargo run --release -p rmsnorm-silu-kernels --example cuda_source -- <args> > /tmp/k.cu
#   scripts/sass.sh /tmp/k.cu        # prints ptxas -v; writes /tmp/k.sass
#   (SASS_ARCH=sm_90a for the wgmma kernels)
# The CUDA 13 compiler and tools come from PyPI into $SASS_VENV (default /tmp/cudatools).
set -euo pipefail
venv=${SASS_VENV:-/tmp/cudatools}
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q nvidia-cuda-nvcc nvidia-cuda-cccl nvidia-cuda-nvdisasm \
        nvidia-cuda-cuobjdump nvidia-cuda-runtime nvidia-cuda-nvrtc
fi
cu=$(echo "$venv"/lib/python3*/site-packages/nvidia/cu13)
export PATH=$cu/bin:$PATH
f=$1; b=${f%.cu}
# cubecl's source starts with 8 lines of typedefs that nvcc's headers already provide.
sed '1,8d' "$f" | sed '1i #include <cstdint>\n#include <cstddef>' > "$b.fix.cu"
nvcc -arch=${SASS_ARCH:-sm_90} -cubin -Xptxas -v -I"$cu/include" -diag-suppress 177,550 -o "$b.cubin" "$b.fix.cu" 2>&1 \
    | grep -E "error|registers|spill"
cuobjdump -sass "$b.cubin" > "$b.sass"
