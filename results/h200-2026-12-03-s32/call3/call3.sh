set -u
mkdir -p gpu/out; cp call3.sh gpu/out/
s=$(date +%s); TESTS_TIMEOUT=540 TESTS_THREADS=16 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "test result|FAIL|panicked" gpu/out/tests.log | head -20; grep -c " ok$" gpu/out/tests.log; grep "running for" gpu/out/tests.log | tail -5
