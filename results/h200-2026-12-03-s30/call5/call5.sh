set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp call5.sh gpu/out/; rm -f gpu/env.tgz gpu/default.db*
export RMSNORM_AB="96 399360 bf16 v8.l4.r32.u1.c3.plane.gsh.m792.fast.pf v8.l4.r32.u1.c3.plane.gsh.m792.fast.pf.tk1 v8.l4.r16.u1.c3.plane.greg.m-.fast; 96 24960 bf16 v8.l6.r20.u1.c2.plane.greg.m792.fast.pf v8.l4.r16.u1.c3.plane.greg.m-.fast; 160 99840 bf16 v8.l8.r16.u1.c3.plane.greg.m792.fast.pf v8.l8.r16.u1.c3.plane.greg.m792.fast.pf.tk1 v8.l8.r16.u1.c3.plane.greg.m-.fast"
s=$(date +%s); AB_TIMEOUT=150 bash scripts/gpu-session.sh ab; echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -vE "^\s*$" gpu/out/ab.log | tail -20
