set -u
mkdir -p gpu/out; cp call4.sh gpu/out/
A="320 6240 bf16 v8.l16.r8.u2.c3.plane.greg.m2112.fast; 384 6240 bf16 v8.l16.r16.u1.c3.plane.greg.m1056.fast; 1024 99840 bf16 v8.l32.r4.u1.c4.plane.greg.m792.fast.pf.tk1 v8.l32.r1.u1.c4.plane.greg.m-.fast v8.l32.r1.u1.c4.plane.gglob.m-.fast; 160 24960 bf16 v4.l8.r16.u1.c5.plane.greg.m792.fast.pf v4.l8.r16.u1.c5.plane.greg.m-.fast; 96 24960 fp8 v8.l6.r20.u1.c2.plane.greg.m792.fast.pf.f32 v8.l6.r20.u1.c2.plane.greg.m-.fast; 1024 1560 bf16 v8.l128.r1.u1.c1.shared.greg.m2112.fast"
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=100 BENCH_BIN=bench-old QUANT_TAG=-old bash scripts/gpu-session.sh quant; echo "quant-old $(( $(date +%s)-s )) s"
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=100 bash scripts/gpu-session.sh quant; echo "quant $(( $(date +%s)-s )) s"
for b in bench-old bench bench-old bench; do (cd gpu && RMSNORM_AB="$A" timeout 100 ./$b ab >> out/ab-$b.log 2>&1); done; echo "ab done $(( $(date +%s)-s )) s"
for b in bench-old bench; do (cd gpu && RMSNORM_BENCH_C=384 RMSNORM_CHANNELS_SWEEP=0 timeout 60 ./$b channels --out out/ch-$b > out/channels-$b.log 2>&1); done; echo "all $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -h "^ab" gpu/out/ab-*.log | cut -c1-140; grep -h "384, 1, 60" gpu/out/channels-*.log | head -8
