set -u
mkdir -p gpu/out; cp call3.sh gpu/out/
s=$(date +%s); bash scripts/gpu-session.sh bench; echo "bench $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
s=$(date +%s); timeout 150 python3 benches/torch_compare.py --out gpu/out > gpu/out/torch.log 2>&1; echo "torch $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
python3 benches/report.py gpu/out 2>&1 | tail -25
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 bash scripts/gpu-session.sh quant; echo "quant $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -iE "fp8" gpu/out/quant.log | head -40 | cut -c1-140
s=$(date +%s); TESTS_FILTER="lut_configurations_match_the_reference word_cache" TESTS_TIMEOUT=200 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
grep -E "^test |test result" gpu/out/tests.log | tail -4
tar czf $OUT/results.tgz -C gpu out
