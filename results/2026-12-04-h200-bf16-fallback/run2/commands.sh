set -u
mkdir -p gpu/out; cp commands.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
pack(){ tar czf $OUT/results.tgz -C gpu out; }
# 1. CUDA: every table entry (new bf16 C = 96 T = 24960 entry) against the reference.
s=$(date +%s); TESTS_THREADS=4 TESTS_FILTER="lut_configurations_match_the_reference" TESTS_TIMEOUT=200 bash scripts/gpu-steps.sh tests >/dev/null; echo "tests $(( $(date +%s)-s )) s"
grep -E "^test |test result" gpu/out/tests.log | tail -3
pack
# 2. FP8 C = 64 T = 399360: full grids with two rows in flight per unit against the prefetching entry.
export RMSNORM_AB="64 399360 fp8 selected v8.l8.r16.u2.c1.plane.greg.m-.fast v8.l4.r32.u2.c2.plane.greg.m-.fast v8.l4.r8.u2.c2.plane.greg.m-.fast"
s=$(date +%s); AB_TIMEOUT=60 bash scripts/gpu-steps.sh ab >/dev/null; echo "ab $(( $(date +%s)-s )) s"
grep -E "^ab " gpu/out/ab.log | sed -E 's/plane.greg.//; s/ us//g; s/output bytes differ from the first knobs/diff/' | cut -c1-150
pack
# 3. The fallback's tuner sweeps, the rest of the time (each shape's line is logged as it ends).
s=$(date +%s); RMSNORM_BENCH_C=768,1536,2048,4096 FALLBACK_TIMEOUT=$(( $(left) - 5 )) bash scripts/gpu-steps.sh fallback >/dev/null; echo "fallback $(( $(date +%s)-s )) s"
grep "^fallback" gpu/out/fallback.log | cut -c1-230
pack
