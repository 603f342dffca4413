set -u
mkdir -p gpu/out; cp call3.sh gpu/out/
export AB_TIMEOUT=330 RMSNORM_AB="1024 99840 bf16 v8.l32.r4.u1.c4.plane.greg.m-.fast.pf.tk1 v8.l32.r1.u1.c4.plane.greg.m-.fast v8.l32.r1.u1.c4.plane.gglob.m-.fast v8.l32.r2.u1.c4.plane.greg.m-.fast v8.l32.r1.u1.c4.plane.gsh.m-.fast; 1024 399360 bf16 v8.l32.r4.u1.c4.plane.greg.m-.fast.pf.tk1 v8.l32.r1.u1.c4.plane.greg.m-.fast v8.l32.r1.u1.c4.plane.gglob.m-.fast v8.l32.r2.u1.c4.plane.greg.m-.fast v8.l32.r1.u1.c4.plane.gsh.m-.fast; 512 99840 bf16 v8.l32.r4.u1.c2.plane.greg.m-.fast.pf v8.l32.r1.u1.c2.plane.greg.m-.fast v8.l32.r1.u1.c2.plane.gglob.m-.fast v8.l16.r2.u1.c4.plane.greg.m-.fast; 1024 99840 fp8 v8.l32.r4.u1.c4.plane.greg.m-.fast.pf.tk2 v8.l32.r1.u1.c4.plane.greg.m-.fast v8.l32.r1.u1.c4.plane.gglob.m-.fast"
s=$(date +%s); bash scripts/gpu-session.sh ab; echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
cut -c1-200 gpu/out/ab.log
