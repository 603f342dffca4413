set -u
mkdir -p gpu/out; cp call4.sh gpu/out/
s=$(date +%s); TESTS_FILTER="nvfp4" TESTS_TIMEOUT=200 TESTS_THREADS=4 RMSNORM_TEST_CASE_THREADS=8 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^test |test result" gpu/out/tests.log | tail -20
