#!/usr/bin/env bash
# The generated CUDA C++ of a fixed set of kernel configurations (row kernel with bf16 and FP8
# out, NVFP4, channels-first forward and backward, row backward), written to DIR with cubecl's
# variable numbers (also inside names such as `info_v12`) renamed in order of appearance (cubecl numbers some shared-memory arrays
# differently from run to run). For refactors: run it before and after, then `diff -r`; equal
# files mean the kernels did not change. No GPU needed.
#   scripts/cuda-sources.sh /tmp/before   # ...change...   scripts/cuda-sources.sh /tmp/after
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/cuda-sources.sh DIR}
mkdir -p "$out"
CUDARC_CUDA_VERSION=${CUDARC_CUDA_VERSION:-13000} cargo build --release -q --workspace --example cuda_source
bin=target/release/examples/cuda_source
i=0
while read -r args; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    $bin $args 2>/dev/null | python3 -c '
import re, sys
names = {}
def rename(m):
    return names.setdefault(m.group(0), "V%d" % len(names))
src = re.sub(r"(?:(?<=_)|(?<![A-Za-z0-9]))v\d+", rename, sys.stdin.read())
sys.stdout.write(re.sub(r"_[0-9a-f]{8}\(", "_HASH(", src))' > "$out/$i.cu"
    echo "$i: $args"
done <<'LIST'
v4.l8.r16.u1.c5.plane.greg.m-.fast 160
v8.l4.r32.u1.c3.plane.greg.m-.fast 96
v8.l6.r20.u1.c2.plane.greg.m-.fast 96
v8.l16.r8.u2.c3.plane.greg.m1056.fast.pf 384
v8.l32.r1.u1.c4.plane.gglob.m-.fast 1024
v8.l16.r8.u1.c3.plane.gsh.m1056.fast.pf 320
v8.l64.r2.u1.c1.shared.gglob.m792.pf 384
v8.l128.r1.u1.c1.shared.greg.m2112.fast 1024
v8.l16.r8.u2.c3.plane.greg.m396.fast.pf.tk2 384
v8.l12.r8.u1.c1.shared.greg.m-.fast 96
v8.l6.r20.u1.c2.plane.greg.m-.fast 96 fp8
v8.l8.r16.u1.c3.plane.gsh.m1056.fast.pf.f32 160 fp8
v8.l16.r8.u1.c3.plane.greg.m-.fast 384 fp8
nvfp4 v8.l32.r4.b2.plane.m-.fast 1024
nvfp4 v8.l6.r20.b1.plane.m-.fast 96
nvfp4 v8.l8.r16.b5.plane.m528.fast 640
channels p4.g32.k12.v4
channels p4.g32.k12.v4 backward
channels p32.g8.k12.v8.pf
backward l16.r16.k1.pf
backward l32.r4.k3.pf.v4
LIST
