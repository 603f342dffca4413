set -u
mkdir -p gpu/out; cp call4.sh gpu/out/
(cd gpu && xz -dkf bench.xz && chmod +x bench)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
export RMSNORM_AB_CODE_WARM=1
export RMSNORM_AB="96 24960 bf16 selected; 128 24960 fp8 selected v8.l16.r8.u1.c1.plane.greg.m-.fast; 96 399360 fp8 selected"
s=$(date +%s); AB_TIMEOUT=100 bash scripts/gpu-session.sh ab; echo "ab $(( $(date +%s)-s )) s"; mv gpu/out/ab.log gpu/out/ab-codewarm.log
unset RMSNORM_AB_CODE_WARM RMSNORM_AB
grep -E "^codewarm" gpu/out/ab-codewarm.log | sed -E 's/plane.greg.//; s/ us//g' | cut -c10-120
tar czf $OUT/results.tgz -C gpu out
s=$(date +%s); bash scripts/gpu-session.sh bench; echo "bench $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
s=$(date +%s); timeout 150 python3 benches/torch_compare.py --out gpu/out > gpu/out/torch.log 2>&1; echo "torch $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
python3 benches/report.py gpu/out 2>&1 | tail -25
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 bash scripts/gpu-session.sh quant; echo "quant $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -iE "fp8" gpu/out/quant.log | head -40 | cut -c1-140
s=$(date +%s); TESTS_FILTER="lut_configurations_match_the_reference fp8_table_entries every_knob_path_writes_every_element word_cache" TESTS_TIMEOUT=200 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
grep -E "^test |test result" gpu/out/tests.log | tail -20
tar czf $OUT/results.tgz -C gpu out
