set -u
mkdir -p gpu/out; cp call1.sh gpu/out/
(cd gpu && xz -dkf bench.xz && chmod +x bench)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv > gpu/out/clocks.txt 2>&1
s=$(date +%s); CEILING_TIMEOUT=240 bash scripts/gpu-session.sh ceiling; echo "ceiling $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^C=" gpu/out/ceiling.log | sed -E 's/ +/ /g' | cut -c1-230
export RMSNORM_AB="384 1560 bf16 selected v8.l16.r16.u1.c3.plane.greg.m-.fast v8.l32.r4.u1.c3.plane.greg.m-.fast v8.l64.r2.u1.c1.shared.gglob.m- v8.l16.r8.u1.c3.plane.greg.m-.fast v8.l32.r8.u1.c3.plane.greg.m-.fast"
s=$(date +%s); (cd gpu && timeout 100 ./bench ab > out/ab.log 2>&1); echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^ab" gpu/out/ab.log | sed -E 's/, [0-9]+ output bytes differ.*vs f64: /; /' | cut -c1-150
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 NCU_C=1024 NCU_SKIP=60 NCU_TIMEOUT=150 bash scripts/gpu-session.sh ncu; echo "ncu $(( $(date +%s)-s )) s"
cp gpu/out/ncu.log gpu/out/ncu-1024.log
tar czf $OUT/results.tgz -C gpu out
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 NCU_C=384 NCU_SKIP=60 NCU_TIMEOUT=120 bash scripts/gpu-session.sh ncu; echo "ncu $(( $(date +%s)-s )) s"
cp gpu/out/ncu.log gpu/out/ncu-384.log
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv >> gpu/out/clocks.txt 2>&1
tar czf $OUT/results.tgz -C gpu out
