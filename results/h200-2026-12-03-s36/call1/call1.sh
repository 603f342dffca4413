set -u
mkdir -p gpu/out; cp call1.sh gpu/out/
export RMSNORM_AB="640 24960 nvfp4 selected v8.l8.r16.b5.plane.m528.fast.raw v8.l8.r16.b5.plane.m528.fast.pf.raw v8.l8.r16.b5.plane.m-.fast.raw v8.l16.r8.b3.plane.m-.fast.raw v8.l10.r12.b4.plane.m-.fast.raw; 640 99840 nvfp4 selected v8.l16.r8.b3.plane.m-.fast.raw v8.l16.r8.b3.plane.m528.fast.pf.raw v8.l8.r16.b5.plane.m-.fast.raw v8.l10.r12.b4.plane.m-.fast.raw; 640 399360 nvfp4 selected v8.l8.r32.b5.plane.m-.fast.raw v8.l16.r8.b3.plane.m-.fast.raw v8.l10.r12.b4.plane.m-.fast.raw; 384 24960 nvfp4 selected v8.l8.r16.b3.plane.m-.fast.raw v8.l12.r8.b2.plane.m-.fast.raw; 384 99840 nvfp4 selected v8.l8.r16.b3.plane.m-.fast.raw v8.l8.r16.b3.plane.m528.fast.pf.raw v8.l6.r20.b4.plane.m-.fast.raw v8.l12.r8.b2.plane.m-.fast.raw; 384 399360 nvfp4 selected v8.l8.r16.b3.plane.m-.fast.raw v8.l6.r20.b4.plane.m-.fast.raw; 1024 99840 nvfp4 selected v8.l32.r4.b2.plane.m-.fast.raw v8.l16.r8.b4.plane.m-.fast.raw; 512 99840 nvfp4 selected v8.l16.r8.b2.plane.m-.fast.raw; 320 99840 nvfp4 selected v8.l10.r12.b2.plane.m-.fast.raw v8.l5.r24.b4.plane.m-.fast.raw; 192 99840 nvfp4 selected v8.l6.r20.b2.plane.m-.fast.raw v8.l3.r40.b4.plane.m-.fast.raw; 256 99840 nvfp4 selected v8.l8.r16.b2.plane.m-.fast.raw; 160 399360 nvfp4 selected v8.l5.r24.b2.plane.m-.fast.raw"
s=$(date +%s); AB_TIMEOUT=240 bash scripts/gpu-session.sh ab; echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^ab" gpu/out/ab.log | cut -c1-120
s=$(date +%s); bash scripts/gpu-session.sh bench; echo "bench $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
s=$(date +%s); timeout 150 python3 benches/torch_compare.py --out gpu/out > gpu/out/torch.log 2>&1; echo "torch $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
python3 benches/report.py gpu/out 2>&1 | tail -25
s=$(date +%s); TESTS_FILTER="nvfp4_raw" TESTS_TIMEOUT=120 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
tail -5 gpu/out/tests.log
tar czf $OUT/results.tgz -C gpu out
