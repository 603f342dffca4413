set -u
mkdir -p gpu/out; cp call1.sh gpu/out/
(cd gpu && xz -dkf bench.xz && chmod +x bench)
export RMSNORM_AB="64 99840 bf16 selected v8.l8.r16.u1.c1.plane.greg.m-.fast v8.l8.r32.u1.c1.plane.greg.m-.fast v8.l4.r32.u1.c2.plane.greg.m-.fast v8.l8.r16.u2.c1.plane.greg.m-.fast; 128 99840 bf16 selected v8.l16.r8.u1.c1.plane.greg.m-.fast v8.l8.r16.u1.c2.plane.greg.m-.fast v8.l16.r16.u1.c1.plane.greg.m-.fast; 256 99840 bf16 selected v8.l32.r4.u1.c1.plane.greg.m-.fast v8.l16.r8.u1.c2.plane.greg.m-.fast v8.l32.r8.u1.c1.plane.greg.m-.fast; 320 99840 bf16 selected v8.l16.r8.u1.c3.plane.greg.m-.fast v8.l8.r16.u1.c5.plane.greg.m-.fast v4.l16.r8.u1.c5.plane.greg.m-.fast; 192 99840 bf16 selected v8.l8.r16.u1.c3.plane.greg.m-.fast v8.l8.r32.u1.c3.plane.greg.m-.fast; 640 99840 bf16 selected v8.l32.r4.u1.c3.plane.greg.m-.fast v8.l16.r8.u1.c5.plane.greg.m-.fast; 640 24960 bf16 selected v8.l32.r4.u1.c3.plane.greg.m-.fast v8.l16.r8.u1.c5.plane.greg.m-.fast; 320 24960 bf16 selected v8.l16.r8.u1.c3.plane.greg.m-.fast v8.l8.r16.u1.c5.plane.greg.m-.fast; 1024 24960 bf16 selected v8.l32.r2.u1.c4.plane.gglob.m-.fast v8.l32.r1.u1.c4.plane.greg.m-.fast v8.l32.r4.u1.c4.plane.greg.m-.fast v8.l32.r1.u1.c4.plane.gglob.m-"
s=$(date +%s); (cd gpu && timeout 170 ./bench ab > out/ab.log 2>&1); echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^ab" gpu/out/ab.log | sed -E 's/, [0-9]+ output bytes differ.*vs f64: /; /' | cut -c1-110
s=$(date +%s); TESTS_FILTER="every_nvfp4_knob_path nvfp4_lane_counts nvfp4_table_entries swizzled_scales" TESTS_TIMEOUT=330 TESTS_THREADS=4 RMSNORM_TEST_CASE_THREADS=8 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^test |test result" gpu/out/tests.log | tail -20
