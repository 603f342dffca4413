set -u
mkdir -p gpu/out; cp call1.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 575 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
# 1. CUDA tests of the FP8 table (two new entries) and every knob path on this build.
s=$(date +%s); TESTS_THREADS=4 TESTS_FILTER="fp8_table_entries every_knob_path_writes_every_element lut_configurations_match_the_reference" TESTS_TIMEOUT=250 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
grep -E "^test |test result" gpu/out/tests.log | tail -8
tar czf $OUT/results.tgz -C gpu out
# 2. bf16 C = 1024 at T = 99840/399360: the entry against other layouts, alternated.
export RMSNORM_AB_ALTERNATE=1
K="selected v8.l32.r2.u2.c4.plane.gglob.m-.fast v8.l32.r2.u1.c4.plane.gglob.m-.fast v8.l32.r1.u1.c4.plane.greg.m-.fast v8.l16.r2.u1.c8.plane.gglob.m-.fast v8.l32.r4.u1.c4.plane.gglob.m-.fast v8.l32.r1.u1.c4.plane.gglob.m-.fast.wd"
export RMSNORM_AB="1024 99840 bf16 $K; 1024 399360 bf16 $K"
s=$(date +%s); AB_TIMEOUT=120 bash scripts/gpu-session.sh ab; echo "ab $(( $(date +%s)-s )) s"; mv gpu/out/ab.log gpu/out/ab-1024.log
unset RMSNORM_AB_ALTERNATE
grep -E "^ab |^alternate" gpu/out/ab-1024.log | sed -E 's/ us//g' | cut -c1-150
tar czf $OUT/results.tgz -C gpu out
# 3. ours (ab: entry + copy) and torch.compile at the same two shapes, in turn, twice.
for i in 1 2; do
  export RMSNORM_AB="1024 99840 bf16 selected; 1024 399360 bf16 selected"
  s=$(date +%s); AB_TIMEOUT=60 bash scripts/gpu-session.sh ab; echo "ours$i $(( $(date +%s)-s )) s"; mv gpu/out/ab.log gpu/out/ours$i.log
  grep -E "^ab " gpu/out/ours$i.log | cut -c1-120
  s=$(date +%s); mkdir -p gpu/out/torch$i; timeout 90 python3 benches/torch_compare.py --out gpu/out/torch$i --c 1024 --t 99840,399360 > gpu/out/torch$i.log 2>&1; echo "torch$i $(( $(date +%s)-s )) s"
  grep "C=" gpu/out/torch$i.log
  tar czf $OUT/results.tgz -C gpu out
done
unset RMSNORM_AB
# 4. FP8 at T = 24960: prefetching entries against full grids without prefetch, code warm too.
export RMSNORM_AB_CODE_WARM=1
export RMSNORM_AB="256 24960 fp8 selected v8.l16.r8.u1.c2.plane.greg.m-.fast.wd v8.l16.r8.u1.c2.plane.greg.m-.fast v8.l8.r16.u1.c4.plane.greg.m-.fast.wd; 320 24960 fp8 selected v4.l16.r8.u1.c5.plane.greg.m-.fast.wd v8.l8.r16.u1.c5.plane.greg.m-.fast.wd v4.l16.r8.u1.c5.plane.greg.m-.fast; 512 24960 fp8 selected v8.l32.r4.u1.c2.plane.greg.m-.fast.wd v8.l16.r8.u1.c4.plane.greg.m-.fast.wd; 384 24960 fp8 selected v8.l16.r8.u1.c3.plane.greg.m-.fast.wd v8.l8.r16.u1.c6.plane.greg.m-.fast.wd v8.l16.r8.u1.c3.plane.greg.m-.fast; 640 24960 fp8 selected v4.l32.r4.u1.c5.plane.greg.m-.fast.wd v8.l16.r8.u1.c5.plane.greg.m-.fast.wd v4.l32.r4.u1.c5.plane.gsh.m-.fast.f32; 1024 24960 fp8 selected v8.l32.r4.u1.c4.plane.greg.m-.fast.wd v8.l64.r2.u1.c2.shared.greg.m-.fast.wd"
s=$(date +%s); AB_TIMEOUT=$(left) bash scripts/gpu-session.sh ab; echo "ab-fp8 $(( $(date +%s)-s )) s"; mv gpu/out/ab.log gpu/out/ab-fp8.log
grep -E "^ab |^codewarm" gpu/out/ab-fp8.log | sed -E 's/plane.greg.//; s/ us//g' | cut -c1-140
tar czf $OUT/results.tgz -C gpu out
