set -u
mkdir -p gpu/out; cp call6.sh gpu/out/
s=$(date +%s); TESTS_FILTER="nvfp4 kernel_knobs forward backward" TESTS_TIMEOUT=500 TESTS_THREADS=12 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^test |test result|panicked|FAILED" gpu/out/tests.log | tail -45
