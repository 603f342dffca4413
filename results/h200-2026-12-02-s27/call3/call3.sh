set -u
mkdir -p gpu/out; cp call3.sh gpu/out/
A="1024 99840 bf16 v8.l32.r4.u1.c4.plane.greg.m792.fast.pf.tk1 v8.l32.r4.u1.c4.plane.gsh.m924.fast.pf.tk1 v8.l32.r4.u1.c4.plane.gsh.m792.fast.pf.tk1 v8.l32.r4.u1.c4.plane.gglob.m924.fast.pf.tk1 v8.l32.r4.u1.c4.plane.greg.m528.fast.pf.tk1"
A="$A; 1024 399360 bf16 v8.l32.r4.u1.c4.plane.greg.m792.fast.pf.tk1 v8.l32.r4.u1.c4.plane.gsh.m924.fast.pf.tk1 v8.l32.r4.u1.c4.plane.gglob.m924.fast.pf.tk1"
A="$A; 1024 99840 fp8 v8.l32.r4.u1.c4.plane.greg.m1056.fast.pf.tk2 v8.l32.r4.u1.c4.plane.gsh.m924.fast.pf.tk2 v8.l32.r4.u1.c4.plane.gsh.m924.fast.pf.tk1 v8.l32.r4.u1.c4.plane.gglob.m924.fast.pf.tk1"
A="$A; 64 24960 bf16 v8.l8.r16.u1.c1.plane.greg.m792.fast.pf v8.l8.r8.u4.c1.plane.greg.m-.fast v8.l8.r8.u2.c1.plane.greg.m-.fast v8.l8.r16.u2.c1.plane.greg.m-.fast v8.l8.r16.u1.c1.plane.greg.m-.fast v8.l8.r8.u1.c1.plane.greg.m-.fast v8.l8.r8.u1.c1.plane.gglob.m-.fast"
A="$A; 512 99840 bf16 v8.l32.r4.u1.c2.plane.greg.m792.fast.pf v8.l32.r4.u1.c2.plane.gsh.m1056.fast.pf v8.l32.r4.u1.c2.plane.gsh.m1056.fast.pf.tk1 v8.l32.r4.u1.c2.plane.gglob.m1056.fast.pf"
A="$A; 96 24960 bf16 v8.l6.r20.u1.c2.plane.greg.m792.fast.pf v8.l6.r20.u1.c2.plane.greg.m924.fast.pf v8.l6.r20.u1.c2.plane.gsh.m924.fast.pf v8.l4.r32.u1.c3.plane.gsh.m1056.fast.pf"
A="$A; 160 24960 bf16 v4.l8.r16.u1.c5.plane.greg.m792.fast.pf v4.l8.r16.u1.c5.plane.gsh.m924.fast.pf v8.l8.r16.u1.c3.plane.gsh.m924.fast.pf"
RMSNORM_AB="$A" AB_TIMEOUT=400 bash scripts/gpu-session.sh ab
RMSNORM_BENCH_C=64,256,1024 RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=90 bash scripts/gpu-session.sh quant
tar czf $OUT/results.tgz -C gpu out
cut -c1-175 gpu/out/ab.log
grep -o "C=.*T=.*fp8 *[0-9.]* us\|read-heavy.*" gpu/out/quant.log | cut -c1-150
