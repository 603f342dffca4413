set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp commands.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
pack(){ tar czf $OUT/results.tgz -C gpu out; }
xz -dkf gpu/bench.xz; xz -dkf gpu/tests.xz; chmod +x gpu/bench gpu/tests
# 1. The tensor-core sums on CUDA against the host (rescued rows included), and the knob parse.
s=$(date +%s); TESTS_FILTER="nvfp4::nvfp4_tensor_core nvfp4::nvfp4_knobs_parse" TESTS_TIMEOUT=150 bash scripts/gpu-steps.sh tests >/dev/null; echo "tests $(( $(date +%s)-s )) s"; grep -E "^test |test result|panicked|differ" gpu/out/tests.log | head -20; pack
# 2. NVFP4 .raw.mma against the entries (same run, alternating).
M=plane.m-.fast
export RMSNORM_AB="640 399360 nvfp4 selected v8.l8.r32.b5.$M.raw.mma; 1024 399360 nvfp4 selected v8.l32.r4.b2.$M.raw.mma; 512 399360 nvfp4 selected v8.l16.r8.b2.$M.raw.mma; 640 99840 nvfp4 selected v8.l8.r32.b5.$M.raw.mma; 320 399360 nvfp4 selected v8.l4.r64.b5.$M.gs v8.l4.r64.b5.$M.raw.mma v8.l4.r64.b5.$M.raw.gs.mma; 384 399360 nvfp4 selected v8.l8.r16.b3.$M.raw.mma; 256 399360 nvfp4 selected v8.l8.r16.b2.$M.raw.mma; 128 399360 nvfp4 selected v8.l4.r32.b2.$M.raw.mma; 1024 99840 nvfp4 selected v8.l32.r4.b2.$M.raw.mma; 512 99840 nvfp4 selected v8.l16.r8.b2.$M.raw.mma; 384 99840 nvfp4 selected v8.l8.r16.b3.$M.raw.mma; 256 99840 nvfp4 selected v8.l16.r8.b1.$M.raw.mma; 640 24960 nvfp4 selected v8.l8.r32.b5.$M.raw.mma v8.l8.r16.b5.$M.raw.mma; 1024 24960 nvfp4 selected v8.l32.r4.b2.$M.raw.mma; 512 24960 nvfp4 selected v8.l32.r4.b1.$M.raw.mma; 384 24960 nvfp4 selected v8.l8.r16.b3.$M.raw.mma; 128 99840 nvfp4 selected v8.l8.r16.b1.$M.raw.mma; 64 399360 nvfp4 selected v8.l4.r32.b1.$M.raw.mma"
[ $(left) -gt 100 ] && { s=$(date +%s); RMSNORM_AB_ALTERNATE=1 AB_TIMEOUT=$(( $(left) - 20 )) bash scripts/gpu-steps.sh ab >/dev/null; echo "ab $(( $(date +%s)-s )) s"; grep -E "^ab |error|panic" gpu/out/ab.log | cut -c1-170; pack; }
echo "left $(left) s"
