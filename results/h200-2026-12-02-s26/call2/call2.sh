set -u
A="1024 399360 bf16 v8.l32.r4.u1.c4.plane.greg.m1056.pf v8.l32.r4.u1.c4.plane.greg.m1056.fast.pf v8.l32.r4.u1.c4.plane.greg.m1056.fast.pf.tk1 v8.l32.r4.u1.c4.plane.greg.m1056.fast.pf.tk2 v8.l32.r4.u1.c4.plane.greg.m1056.fast.pf.tk4 v8.l32.r4.u1.c4.plane.greg.m1056.pf.tk4"
A="$A; 1024 99840 bf16 v8.l32.r4.u1.c4.plane.greg.m1056.pf v8.l32.r4.u1.c4.plane.greg.m1056.fast.pf v8.l32.r4.u1.c4.plane.greg.m1056.fast.pf.tk1 v8.l32.r4.u1.c4.plane.greg.m1056.fast.pf.tk4"
A="$A; 1024 24960 bf16 v8.l64.r2.u1.c2.shared.greg.m1056.fast.pf v8.l64.r2.u1.c2.shared.greg.m1056.fast.pf.tk1 v8.l64.r2.u1.c2.shared.greg.m1056.fast.pf.tk4"
A="$A; 512 399360 bf16 v8.l32.r4.u1.c2.plane.greg.m792.fast.pf v8.l32.r4.u1.c2.plane.greg.m792.fast.pf.tk2 v8.l32.r4.u1.c2.plane.greg.m792.fast.pf.tk4 v8.l32.r4.u1.c2.plane.greg.m792.fast.pf.tk8"
A="$A; 512 99840 bf16 v8.l32.r4.u1.c2.plane.greg.m792.fast.pf v8.l32.r4.u1.c2.plane.greg.m792.fast.pf.tk4 v8.l32.r4.u1.c2.plane.greg.m792.fast.pf.tk8"
A="$A; 512 24960 bf16 v8.l32.r4.u1.c2.plane.greg.m1056.fast.pf v8.l32.r4.u1.c2.plane.greg.m1056.fast.pf.tk4"
A="$A; 640 399360 bf16 v8.l32.r4.u1.c3.plane.greg.m792.fast.pf v8.l32.r4.u1.c3.plane.greg.m792.fast.pf.tk4 v8.l32.r4.u1.c3.plane.greg.m792.fast.pf.tk8"
A="$A; 256 399360 bf16 v8.l32.r8.u1.c1.plane.greg.m792.fast.pf v8.l32.r8.u1.c1.plane.greg.m792.fast.pf.tk4 v8.l32.r8.u1.c1.plane.greg.m792.fast.pf.tk8"
A="$A; 160 99840 bf16 v8.l8.r16.u1.c3.plane.greg.m792.fast.pf v8.l8.r16.u1.c3.plane.greg.m792.fast.pf.tk4 v8.l8.r16.u1.c3.plane.greg.m792.fast.pf.tk8"
A="$A; 160 24960 bf16 v4.l8.r16.u1.c5.plane.greg.m792.fast.pf v4.l8.r16.u1.c5.plane.greg.m792.fast.pf.tk4"
A="$A; 384 399360 bf16 v8.l16.r8.u2.c3.plane.greg.m396.fast.pf v8.l16.r8.u2.c3.plane.greg.m396.fast.pf.tk4"
A="$A; 128 399360 bf16 v8.l16.r16.u1.c1.plane.greg.m792.fast.pf v8.l16.r16.u1.c1.plane.greg.m792.fast.pf.tk4"
B="1024 399360 fp8 v8.l64.r2.u1.c2.shared.greg.m1056.fast.pf.f32 v8.l64.r2.u1.c2.shared.greg.m1056.fast.pf.f32.tk4 v8.l64.r2.u1.c2.shared.greg.m1056.fast.pf.f32.tk8 v8.l32.r4.u1.c4.plane.greg.m1056.fast.pf.tk2"
B="$B; 1024 99840 fp8 v8.l64.r2.u1.c2.shared.greg.m1056.fast.pf.f32 v8.l64.r2.u1.c2.shared.greg.m1056.fast.pf.f32.tk4"
B="$B; 512 399360 fp8 v8.l32.r4.u1.c2.plane.greg.m1056.fast.pf v8.l32.r4.u1.c2.plane.greg.m1056.fast.pf.tk4 v8.l32.r4.u1.c2.plane.greg.m1056.fast.pf.tk8"
B="$B; 512 99840 fp8 v8.l32.r4.u1.c2.plane.greg.m1056.fast.pf v8.l32.r4.u1.c2.plane.greg.m1056.fast.pf.tk4"
B="$B; 640 399360 fp8 v4.l32.r4.u1.c5.plane.gsh.m1056.fast.pf.f32 v4.l32.r4.u1.c5.plane.gsh.m1056.fast.pf.f32.tk4"
B="$B; 320 399360 fp8 v4.l16.r8.u1.c5.plane.gsh.m1056.fast.pf.f32 v4.l16.r8.u1.c5.plane.gsh.m1056.fast.pf.f32.tk4"
B="$B; 256 99840 fp8 v8.l16.r8.u1.c2.plane.greg.m1056.fast.pf.f32 v8.l16.r8.u1.c2.plane.greg.m1056.fast.pf.f32.tk4"
B="$B; 128 399360 fp8 v8.l8.r16.u1.c2.plane.greg.m1056.fast.pf v8.l8.r16.u1.c2.plane.greg.m1056.fast.pf.tk4"
B="$B; 160 99840 fp8 v8.l8.r16.u1.c3.plane.gsh.m1056.fast.pf.f32 v8.l8.r16.u1.c3.plane.gsh.m1056.fast.pf.f32.tk4"
B="$B; 384 99840 fp8 v8.l16.r8.u1.c3.plane.greg.m792.fast.pf v8.l16.r8.u1.c3.plane.greg.m792.fast.pf.tk4"
mkdir -p gpu/out; cp call2.sh gpu/out/
RMSNORM_AB="$A" AB_TIMEOUT=260 bash scripts/gpu-session.sh ab; mv gpu/out/ab.log gpu/out/ab-bf16.log
RMSNORM_AB="$B" AB_TIMEOUT=230 bash scripts/gpu-session.sh ab; cp gpu/out/ab.log gpu/out/ab-fp8.log
cat gpu/out/ab-bf16.log gpu/out/ab-fp8.log | sed 's/ output bytes differ from the first knobs.//; s/ab C=//' 
