set -u
mkdir -p gpu/out; cp call3.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 500 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
# 1. CUDA: the FP8 table test with the 13 new entries.
s=$(date +%s); TESTS_FILTER="fp8_table_entries" TESTS_TIMEOUT=120 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
grep -E "^test |test result" gpu/out/tests.log | tail -3
tar czf $OUT/results.tgz -C gpu out
# 2. The FP8 and NVFP4 tables with the new entries.
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=150 bash scripts/gpu-session.sh quant; echo "quant $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
cut -c1-58 gpu/out/quant.log
# 3. FP8 at T = 399360 (and C = 128/256 at T = 99840): full grids against the prefetching entries.
export RMSNORM_AB="128 399360 fp8 selected v8.l8.r16.u1.c2.plane.greg.m-.fast.wd v8.l16.r8.u1.c1.plane.greg.m-.fast; 192 399360 fp8 selected v8.l8.r16.u1.c3.plane.greg.m-.fast.wd; 256 399360 fp8 selected v8.l16.r8.u1.c2.plane.greg.m-.fast.wd v8.l32.r4.u1.c1.plane.gglob.m-.fast; 320 399360 fp8 selected v4.l16.r8.u1.c5.plane.greg.m-.fast.wd; 384 399360 fp8 selected v8.l16.r8.u1.c3.plane.greg.m-.fast.wd; 512 399360 fp8 selected v8.l16.r8.u1.c4.plane.greg.m-.fast.wd v8.l32.r1.u1.c2.plane.gglob.m-.fast; 640 399360 fp8 selected v8.l16.r8.u1.c5.plane.greg.m-.fast.wd; 1024 399360 fp8 selected v8.l32.r1.u1.c4.plane.gglob.m-.fast; 256 99840 fp8 selected v8.l32.r4.u1.c1.plane.gglob.m-.fast; 128 99840 fp8 selected v8.l16.r8.u1.c1.plane.gglob.m-.fast"
s=$(date +%s); AB_TIMEOUT=$(left) bash scripts/gpu-session.sh ab; echo "ab-fp8 $(( $(date +%s)-s )) s"; mv gpu/out/ab.log gpu/out/ab-fp8.log
grep -E "^ab " gpu/out/ab-fp8.log | sed -E 's/plane.greg.//; s/ us//g; s/output bytes differ from the first knobs/diff/' | cut -c1-150
tar czf $OUT/results.tgz -C gpu out
