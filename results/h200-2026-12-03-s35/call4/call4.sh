set -u
mkdir -p gpu/out; cp call4.sh gpu/out/
(cd gpu && xz -dkf bench.xz && chmod +x bench)
export RMSNORM_AB="1024 99840 bf16 selected v8.l32.r4.u1.c4.plane.greg.m-.fast v8.l32.r2.u1.c4.plane.greg.m-.fast v8.l32.r4.u1.c4.plane.gglob.m-.fast; 1024 399360 bf16 selected v8.l32.r4.u1.c4.plane.greg.m-.fast v8.l32.r2.u1.c4.plane.greg.m-.fast; 96 24960 bf16 selected v8.l4.r64.u1.c3.plane.greg.m-.fast v8.l4.r16.u1.c3.plane.greg.m-.fast v8.l4.r32.u2.c3.plane.greg.m-.fast v4.l8.r16.u1.c3.plane.greg.m-.fast v8.l2.r64.u1.c6.plane.greg.m-.fast v4.l8.r32.u1.c3.plane.greg.m-.fast"
s=$(date +%s); (cd gpu && timeout 150 ./bench ab > out/ab.log 2>&1); echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^ab" gpu/out/ab.log | sed -E 's/, [0-9]+ output bytes differ.*vs f64: /; /' | cut -c1-110
