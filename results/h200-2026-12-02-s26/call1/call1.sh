set -u
# bf16 then fp8: the table's knobs (persistent grid-stride) against the same knobs with the ticketed walk (.tk)
A="1024 399360 bf16 v8.l32.r4.u1.c4.plane.greg.m1056.pf v8.l32.r4.u1.c4.plane.greg.m1056.pf.tk v8.l32.r4.u1.c4.plane.greg.m792.pf.tk v8.l32.r4.u1.c4.plane.greg.m528.pf.tk v8.l32.r4.u1.c4.plane.greg.m1056.fast.pf.tk"
A="$A; 1024 99840 bf16 v8.l32.r4.u1.c4.plane.greg.m1056.pf v8.l32.r4.u1.c4.plane.greg.m1056.pf.tk v8.l32.r4.u1.c4.plane.greg.m792.pf.tk"
A="$A; 512 399360 bf16 v8.l32.r4.u1.c2.plane.greg.m792.fast.pf v8.l32.r4.u1.c2.plane.greg.m792.fast.pf.tk v8.l32.r4.u1.c2.plane.greg.m1056.fast.pf.tk v8.l32.r4.u1.c2.plane.greg.m528.fast.pf.tk"
A="$A; 512 99840 bf16 v8.l32.r4.u1.c2.plane.greg.m792.fast.pf v8.l32.r4.u1.c2.plane.greg.m792.fast.pf.tk v8.l32.r4.u1.c2.plane.greg.m1056.fast.pf.tk"
A="$A; 160 24960 bf16 v4.l8.r16.u1.c5.plane.greg.m792.fast.pf v4.l8.r16.u1.c5.plane.greg.m792.fast.pf.tk v4.l8.r16.u1.c5.plane.greg.m1056.fast.pf.tk"
A="$A; 160 99840 bf16 v8.l8.r16.u1.c3.plane.greg.m792.fast.pf v8.l8.r16.u1.c3.plane.greg.m792.fast.pf.tk v8.l8.r16.u1.c3.plane.greg.m1056.fast.pf.tk"
A="$A; 640 399360 bf16 v8.l32.r4.u1.c3.plane.greg.m792.fast.pf v8.l32.r4.u1.c3.plane.greg.m792.fast.pf.tk"
A="$A; 256 399360 bf16 v8.l32.r8.u1.c1.plane.greg.m792.fast.pf v8.l32.r8.u1.c1.plane.greg.m792.fast.pf.tk"
B="1024 399360 fp8 v8.l64.r2.u1.c2.shared.greg.m1056.fast.pf.f32 v8.l64.r2.u1.c2.shared.greg.m1056.fast.pf.f32.tk v8.l64.r2.u1.c2.shared.greg.m792.fast.pf.f32.tk"
B="$B; 1024 99840 fp8 v8.l64.r2.u1.c2.shared.greg.m1056.fast.pf.f32 v8.l64.r2.u1.c2.shared.greg.m1056.fast.pf.f32.tk"
B="$B; 512 399360 fp8 v8.l32.r4.u1.c2.plane.greg.m1056.fast.pf v8.l32.r4.u1.c2.plane.greg.m1056.fast.pf.tk"
B="$B; 512 99840 fp8 v8.l32.r4.u1.c2.plane.greg.m1056.fast.pf v8.l32.r4.u1.c2.plane.greg.m1056.fast.pf.tk"
B="$B; 640 399360 fp8 v4.l32.r4.u1.c5.plane.gsh.m1056.fast.pf.f32 v4.l32.r4.u1.c5.plane.gsh.m1056.fast.pf.f32.tk"
B="$B; 320 399360 fp8 v4.l16.r8.u1.c5.plane.gsh.m1056.fast.pf.f32 v4.l16.r8.u1.c5.plane.gsh.m1056.fast.pf.f32.tk"
B="$B; 256 99840 fp8 v8.l16.r8.u1.c2.plane.greg.m1056.fast.pf.f32 v8.l16.r8.u1.c2.plane.greg.m1056.fast.pf.f32.tk"
B="$B; 160 99840 fp8 v8.l8.r16.u1.c3.plane.gsh.m1056.fast.pf.f32 v8.l8.r16.u1.c3.plane.gsh.m1056.fast.pf.f32.tk"
B="$B; 128 399360 fp8 v8.l8.r16.u1.c2.plane.greg.m1056.fast.pf v8.l8.r16.u1.c2.plane.greg.m1056.fast.pf.tk"
mkdir -p gpu/out; cp call1.sh gpu/out/
RMSNORM_AB="$A" AB_TIMEOUT=260 bash scripts/gpu-session.sh ab; mv gpu/out/ab.log gpu/out/ab-bf16.log
RMSNORM_AB="$B" AB_TIMEOUT=230 bash scripts/gpu-session.sh ab; mv gpu/out/ab.log gpu/out/ab-fp8.log
ls $OUT; tail -40 gpu/out/ab-*.log
