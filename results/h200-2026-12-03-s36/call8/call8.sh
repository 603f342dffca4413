set -u
mkdir -p gpu/out; cp call8.sh gpu/out/
export RMSNORM_AB_ALTERNATE=1
export RMSNORM_AB="160 24960 bf16 selected v4.l8.r16.u1.c5.plane.gsh.m-.fast v2.l16.r8.u1.c5.plane.greg.m-.fast; 96 24960 bf16 selected v4.l8.r16.u1.c3.plane.greg.m-.fast v2.l16.r8.u1.c3.plane.gsh.m-.fast"
s=$(date +%s); AB_TIMEOUT=100 bash scripts/gpu-session.sh ab; echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^(ab|alternate)" gpu/out/ab.log | sed -E 's/, [0-9]+ output bytes differ.*vs f64: /; /' | cut -c1-150
