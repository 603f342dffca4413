set -u
mkdir -p gpu/out; cp commands.sh gpu/out/
export RMSNORM_AB="64 99840 fp8 v8.l4.r32.u1.c2.plane.greg.m792.fast.pf.f32 v8.l8.r16.u1.c1.plane.greg.m-.fast; 128 24960 fp8 v8.l8.r16.u1.c2.plane.greg.m792.fast.pf.f32 v8.l16.r8.u1.c1.plane.greg.m-.fast; 128 99840 fp8 v8.l8.r16.u1.c2.plane.greg.m1056.fast.pf v8.l16.r8.u1.c1.plane.greg.m-.fast; 160 99840 fp8 v8.l8.r16.u1.c3.plane.gsh.m1056.fast.pf.f32 v4.l8.r16.u1.c5.plane.greg.m-.fast; 256 24960 fp8 v8.l16.r8.u1.c2.plane.greg.m1056.fast.pf.f32 v8.l32.r4.u1.c1.plane.greg.m-.fast; 320 24960 fp8 v4.l16.r8.u1.c5.plane.greg.m792.fast.pf v4.l16.r8.u1.c5.plane.greg.m-.fast; 320 99840 fp8 v4.l16.r8.u1.c5.plane.gsh.m1056.fast.pf.f32 v4.l16.r8.u1.c5.plane.greg.m-.fast; 384 24960 fp8 v8.l16.r8.u1.c3.plane.greg.m792.fast.pf v8.l16.r8.u1.c3.plane.greg.m-.fast; 640 24960 fp8 v4.l32.r4.u1.c5.plane.gsh.m1056.fast.pf.f32 v4.l32.r4.u1.c5.plane.greg.m-.fast; 1024 24960 fp8 v8.l64.r2.u1.c2.shared.greg.m1056.fast.pf.f32 v8.l32.r1.u1.c4.plane.gglob.m-.fast; 192 24960 fp8 v8.l8.r16.u1.c3.plane.greg.m792.fast.pf.f32 v8.l8.r16.u1.c3.plane.greg.m-.fast; 192 99840 fp8 v8.l8.r16.u1.c3.plane.greg.m792.fast.pf v8.l8.r16.u1.c3.plane.greg.m-.fast"
s=$(date +%s); (cd gpu && timeout 150 ./bench ab > out/ab-fp8b.log 2>&1); echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^ab" gpu/out/ab-fp8b.log | sed -E 's/ \(read-heavy.*//' | cut -c1-120
s=$(date +%s); RMSNORM_TEST_CASE_THREADS=8 TESTS_FILTER="kernel_knobs::every_knob_path_writes_every_element" TESTS_TIMEOUT=330 TESTS_THREADS=4 bash scripts/gpu-steps.sh tests; echo "tests $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "test result|FAIL|panicked|^test " gpu/out/tests.log | head -20
