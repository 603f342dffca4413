set -u
mkdir -p gpu/out; cp call2.sh gpu/out/
s=$(date +%s); RMSNORM_BENCH_C=384 RMSNORM_CHANNELS_SWEEP=0 CHANNELS_TIMEOUT=60 bash scripts/gpu-session.sh channels; echo "channels $(( $(date +%s)-s )) s"
s=$(date +%s); TESTS_FILTER="channels kernel_knobs fp8" TESTS_TIMEOUT=470 TESTS_THREADS=16 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "ab |backward:|x1\." gpu/out/channels.log | head -20; grep -E "test result|FAIL|panicked" gpu/out/tests.log | head; grep -E "\.\.\. " gpu/out/tests.log | grep -v "running for" | wc -l
