set -u
mkdir -p gpu/out; cp call7.sh gpu/out/
export RMSNORM_AB="1024 99840 nvfp4 selected v8.l32.r2.b2.plane.m-.u2.fast.raw v8.l32.r2.b2.plane.m-.u2.fast v8.l32.r4.b2.plane.m-.u2.fast.raw; 384 99840 nvfp4 selected v8.l8.r8.b3.plane.m-.u2.fast.raw v8.l8.r16.b3.plane.m-.u2.fast.raw; 320 99840 nvfp4 selected v8.l10.r6.b2.plane.m-.u2.fast.raw; 512 24960 nvfp4 selected v8.l32.r2.b1.plane.m-.u2.fast.raw; 640 24960 nvfp4 selected v8.l8.r8.b5.plane.m-.u2.fast.raw"
s=$(date +%s); AB_TIMEOUT=150 bash scripts/gpu-session.sh ab; echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^ab" gpu/out/ab.log | sed -E 's/ code and scale bytes differ from the first knobs.//' | cut -c1-120
