set -u
mkdir -p gpu/out; cp call5.sh gpu/out/
(cd gpu && xz -dkf bench.xz && chmod +x bench)
export RMSNORM_AB="96 24960 bf16 v8.l6.r20.u1.c2.plane.greg.m-.fast v8.l4.r32.u1.c3.plane.greg.m-.fast v8.l4.r16.u1.c3.plane.greg.m-.fast v4.l8.r16.u1.c3.plane.greg.m-.fast v4.l8.r32.u1.c3.plane.greg.m-.fast v4.l6.r20.u1.c4.plane.greg.m-.fast v8.l3.r40.u1.c4.plane.greg.m-.fast; 1024 399360 bf16 v8.l32.r1.u1.c4.plane.gglob.m-.fast v8.l32.r2.u1.c4.plane.gglob.m-.fast"
s=$(date +%s); (cd gpu && timeout 100 ./bench ab > out/ab.log 2>&1); echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^ab" gpu/out/ab.log | sed -E 's/, [0-9]+ output bytes differ.*vs f64: /; /' | cut -c1-150
s=$(date +%s); FALLBACK_TIMEOUT=150 bash scripts/gpu-session.sh fallback; echo "fallback $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
tail -22 gpu/out/fallback.log | cut -c1-160
