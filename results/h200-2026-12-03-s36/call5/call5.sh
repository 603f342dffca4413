set -u
mkdir -p gpu/out; cp call5.sh gpu/out/
export RMSNORM_AB="128 399360 nvfp4 selected v8.l4.r32.b2.plane.m-.fast.raw; 64 399360 nvfp4 selected v8.l2.r64.b2.plane.m-.fast.raw; 96 399360 nvfp4 selected v8.l3.r40.b2.plane.m-.fast.raw; 192 399360 nvfp4 selected v8.l3.r40.b4.plane.m-.fast.raw v8.l6.r20.b2.plane.m-.fast.raw; 320 399360 nvfp4 selected v8.l5.r24.b4.plane.m-.fast.raw; 1024 399360 nvfp4 selected v8.l16.r8.b4.plane.m-.fast.raw; 160 399360 nvfp4 selected v8.l5.r24.b2.plane.m-.fast.raw; 256 99840 nvfp4 selected v8.l8.r16.b2.plane.m-.fast.raw; 128 99840 nvfp4 selected v8.l4.r32.b2.plane.m-.fast.raw"
s=$(date +%s); AB_TIMEOUT=150 bash scripts/gpu-session.sh ab; echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^ab" gpu/out/ab.log | sed -E 's/ code and scale bytes differ from the first knobs.//' | cut -c1-120
