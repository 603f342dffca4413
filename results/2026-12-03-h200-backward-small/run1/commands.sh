set -u
mkdir -p gpu/out; cp commands.sh gpu/out/
s=$(date +%s); RMSNORM_BENCH_C=96,192,384 RMSNORM_BENCH_T=6240,24960 RMSNORM_BACKWARD_SWEEP=0 BACKWARD_TIMEOUT=200 bash scripts/gpu-steps.sh backward; echo "backward $(( $(date +%s)-s )) s"
s=$(date +%s); TESTS_FILTER="backward autodiff" TESTS_TIMEOUT=300 TESTS_THREADS=16 bash scripts/gpu-steps.sh tests; echo "tests $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "interleaved|default" gpu/out/backward.log | head -20; grep -E "test result|FAIL|panicked" gpu/out/tests.log | head; grep -E "\.\.\. " gpu/out/tests.log | grep -v "running for" | wc -l
