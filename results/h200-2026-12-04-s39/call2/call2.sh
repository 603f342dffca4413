set -u
mkdir -p gpu/out; cp call2.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 580 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
(cd gpu && xz -dkf bench.xz && chmod +x bench)
# 1. The 55 bf16 shapes and torch.compile in the same call (issue 3).
s=$(date +%s); bash scripts/gpu-session.sh bench; echo "bench $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
s=$(date +%s); timeout 150 python3 benches/torch_compare.py --out gpu/out > gpu/out/torch.log 2>&1; echo "torch $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
python3 benches/report.py gpu/out 2>&1 | tail -25
# 2. FP8: full grids without prefetch against the prefetching entries (T = 24960 C = 640/1024,
#    T = 99840 all C, T = 399360 C = 64/96/160).
export RMSNORM_AB="640 24960 fp8 selected v4.l32.r4.u1.c5.plane.greg.m-.fast.wd v8.l16.r8.u1.c5.plane.greg.m-.fast.wd v4.l32.r4.u1.c5.plane.gsh.m-.fast.wd; 1024 24960 fp8 selected v8.l32.r4.u1.c4.plane.greg.m-.fast.wd v8.l64.r2.u1.c2.shared.greg.m-.fast.wd v8.l32.r1.u1.c4.plane.gglob.m-.fast; 64 99840 fp8 selected v8.l4.r32.u1.c2.plane.greg.m-.fast.wd v8.l8.r16.u1.c1.plane.greg.m-.fast; 128 99840 fp8 selected v8.l8.r16.u1.c2.plane.greg.m-.fast.wd v8.l16.r8.u1.c1.plane.greg.m-.fast; 160 99840 fp8 selected v4.l8.r16.u1.c5.plane.greg.m-.fast.wd v8.l8.r16.u1.c3.plane.greg.m-.fast.wd; 256 99840 fp8 selected v8.l16.r8.u1.c2.plane.greg.m-.fast.wd; 320 99840 fp8 selected v4.l16.r8.u1.c5.plane.greg.m-.fast.wd; 512 99840 fp8 selected v8.l16.r8.u1.c4.plane.greg.m-.fast.wd v8.l32.r4.u1.c2.plane.greg.m-.fast.wd; 640 99840 fp8 selected v4.l32.r4.u1.c5.plane.greg.m-.fast.wd v8.l16.r8.u1.c5.plane.greg.m-.fast.wd; 1024 99840 fp8 selected v8.l32.r4.u1.c4.plane.greg.m-.fast.wd v8.l32.r1.u1.c4.plane.gglob.m-.fast; 96 99840 fp8 selected v8.l4.r16.u1.c3.plane.greg.m-.fast.wd; 192 99840 fp8 selected v8.l8.r16.u1.c3.plane.greg.m-.fast.wd; 384 99840 fp8 selected v8.l16.r8.u1.c3.plane.greg.m-.fast.wd; 64 399360 fp8 selected v8.l8.r16.u1.c1.plane.greg.m-.fast v8.l4.r32.u1.c2.plane.greg.m-.fast.wd; 96 399360 fp8 selected v8.l4.r16.u1.c3.plane.greg.m-.fast v8.l4.r16.u1.c3.plane.greg.m-.fast.wd; 160 399360 fp8 selected v4.l8.r16.u1.c5.plane.greg.m-.fast.wd"
s=$(date +%s); AB_TIMEOUT=$(( $(left) - 10 )) bash scripts/gpu-session.sh ab; echo "ab-fp8 $(( $(date +%s)-s )) s"; mv gpu/out/ab.log gpu/out/ab-fp8.log
grep -E "^ab " gpu/out/ab-fp8.log | sed -E 's/plane.greg.//; s/ us//g; s/output bytes differ from the first knobs/diff/' | cut -c1-150
tar czf $OUT/results.tgz -C gpu out
# 3. CUDA: the FP8 table test (its layouts now on 8 threads) with this build's table.
s=$(date +%s); TESTS_FILTER="fp8_table_entries" TESTS_TIMEOUT=$(left) bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
grep -E "^test |test result|ran " gpu/out/tests.log | tail -5
tar czf $OUT/results.tgz -C gpu out
