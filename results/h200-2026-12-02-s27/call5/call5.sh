set -u
mkdir -p gpu/out; cp call5.sh gpu/out/
A="64 399360 bf16 v8.l8.r16.u2.c1.plane.greg.m792.fast.pf; 64 24960 bf16 v8.l8.r16.u1.c1.plane.greg.m792.fast.pf; 96 24960 bf16 v8.l6.r20.u1.c2.plane.greg.m792.fast.pf v8.l6.r20.u1.c2.plane.greg.m1188.fast.pf; 96 99840 bf16 v8.l4.r32.u1.c3.plane.gsh.m1056.fast.pf; 160 24960 bf16 v4.l8.r16.u1.c5.plane.greg.m792.fast.pf; 160 99840 bf16 v8.l8.r16.u1.c3.plane.greg.m792.fast.pf; 1024 99840 bf16 v8.l32.r4.u1.c4.plane.greg.m792.fast.pf.tk1 v8.l32.r4.u1.c4.plane.greg.m660.fast.pf.tk1; 64 399360 fp8 v8.l8.r16.u2.c1.plane.greg.m1056.fast.pf; 160 99840 fp8 v8.l8.r16.u1.c3.plane.gsh.m1056.fast.pf.f32; 96 24960 fp8 v8.l6.r20.u1.c2.plane.greg.m792.fast.pf.f32; 1024 99840 fp8 v8.l32.r4.u1.c4.plane.greg.m1056.fast.pf.tk2"
RMSNORM_AB="$A" AB_TIMEOUT=150 bash scripts/gpu-session.sh ab; mv gpu/out/ab.log gpu/out/ab-new-1.log
for i in 1 2; do (cd gpu && RMSNORM_AB="$A" timeout 150 ./bench-old ab) > gpu/out/ab-old-$i.log 2>&1; [ $i = 2 ] && (cd gpu && RMSNORM_AB="$A" timeout 150 ./bench ab) > gpu/out/ab-new-2.log 2>&1; done
tar czf $OUT/results.tgz -C gpu out
for f in gpu/out/ab-*.log; do echo "== $f"; grep -o "ab C=.*x[0-9.]*," $f | sed 's/.plane.*fast/../; s/ output bytes.*//'; done
