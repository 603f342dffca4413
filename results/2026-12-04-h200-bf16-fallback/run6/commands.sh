set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp commands.sh gpu/out/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
# 1. CUDA: the FP8 table test with the three new T = 99840 entries.
s=$(date +%s); TESTS_THREADS=4 TESTS_FILTER="fp8_table_entries" TESTS_TIMEOUT=120 bash scripts/gpu-steps.sh tests >/dev/null; echo "tests $(( $(date +%s)-s )) s"
grep -E "^test |test result" gpu/out/tests.log | tail -3
tar czf $OUT/results.tgz -C gpu out
# 2. The FP8 and NVFP4 tables (selected knobs) with the new entries.
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=120 bash scripts/gpu-steps.sh quant >/dev/null; echo "quant $(( $(date +%s)-s )) s"
cut -c1-58 gpu/out/quant.log | grep "^C="
tar czf $OUT/results.tgz -C gpu out
