set -u
A="64 399360 bf16 v8.l8.r16.u2.c1.plane.greg.m792.fast.pf v8.l8.r16.u2.c1.plane.greg.m792.fast.pf.tk2 v8.l8.r32.u2.c1.plane.greg.m396.fast.pf.tk1"
A="$A; 96 399360 bf16 v8.l4.r32.u1.c3.plane.gsh.m792.fast.pf v8.l4.r32.u2.c3.plane.gsh.m792.fast.pf.tk1 v8.l4.r32.u1.c3.plane.gsh.m792.fast.pf.tk4"
A="$A; 128 399360 bf16 v8.l16.r16.u1.c1.plane.greg.m792.fast.pf v8.l16.r16.u2.c1.plane.greg.m792.fast.pf.tk1 v8.l16.r16.u1.c1.plane.greg.m792.fast.pf.tk4"
A="$A; 160 399360 bf16 v8.l8.r16.u1.c3.plane.greg.m792.fast.pf v8.l8.r16.u2.c3.plane.greg.m792.fast.pf.tk1 v8.l8.r16.u1.c3.plane.greg.m792.fast.pf.tk4"
A="$A; 192 399360 bf16 v8.l8.r16.u1.c3.plane.gsh.m792.fast.pf.f32 v8.l8.r16.u2.c3.plane.gsh.m792.fast.pf.f32.tk1 v8.l8.r16.u1.c3.plane.gsh.m792.fast.pf.f32.tk4"
A="$A; 256 399360 bf16 v8.l32.r8.u1.c1.plane.greg.m792.fast.pf v8.l32.r8.u2.c1.plane.greg.m792.fast.pf.tk1 v8.l32.r16.u1.c1.plane.greg.m396.fast.pf.tk1"
A="$A; 320 399360 bf16 v8.l16.r8.u1.c3.plane.greg.m792.fast.pf v8.l16.r8.u2.c3.plane.greg.m792.fast.pf.tk1 v8.l16.r8.u2.c3.plane.greg.m396.fast.pf.tk2"
A="$A; 160 99840 bf16 v8.l8.r16.u1.c3.plane.greg.m792.fast.pf v8.l8.r16.u2.c3.plane.greg.m792.fast.pf.tk1"
B="64 399360 fp8 v8.l8.r16.u2.c1.plane.greg.m1056.fast.pf v8.l8.r16.u2.c1.plane.greg.m1056.fast.pf.tk2"
B="$B; 96 399360 fp8 v8.l4.r32.u1.c3.plane.greg.m792.fast.pf v8.l4.r32.u2.c3.plane.greg.m792.fast.pf.tk1"
B="$B; 128 399360 fp8 v8.l8.r16.u1.c2.plane.greg.m1056.fast.pf v8.l8.r16.u2.c2.plane.greg.m1056.fast.pf.tk1"
B="$B; 160 399360 fp8 v4.l8.r16.u1.c5.plane.gsh.m1056.fast.pf v4.l8.r16.u2.c5.plane.gsh.m1056.fast.pf.tk1"
B="$B; 192 399360 fp8 v8.l8.r16.u1.c3.plane.gsh.m792.fast.pf v8.l8.r16.u2.c3.plane.gsh.m792.fast.pf.tk1"
B="$B; 256 399360 fp8 v8.l16.r8.u1.c2.plane.greg.m1056.fast.pf v8.l16.r8.u2.c2.plane.greg.m1056.fast.pf.tk1 v8.l16.r16.u1.c2.plane.greg.m528.fast.pf.tk1"
B="$B; 320 399360 fp8 v4.l16.r8.u1.c5.plane.gsh.m1056.fast.pf.f32 v4.l16.r8.u2.c5.plane.gsh.m1056.fast.pf.f32.tk1"
B="$B; 384 399360 fp8 v8.l16.r8.u1.c3.plane.greg.m792.fast.pf v8.l16.r8.u2.c3.plane.greg.m396.fast.pf.tk2"
mkdir -p gpu/out; cp call7.sh gpu/out/
RMSNORM_AB="$A" AB_TIMEOUT=200 bash scripts/gpu-session.sh ab; mv gpu/out/ab.log gpu/out/ab-bf16.log
RMSNORM_AB="$B" AB_TIMEOUT=200 bash scripts/gpu-session.sh ab; cp gpu/out/ab.log gpu/out/ab-fp8.log
cat gpu/out/ab-bf16.log gpu/out/ab-fp8.log | sed 's/ output bytes differ from the first knobs.//; s/ab C=//; s/plane.//' 
