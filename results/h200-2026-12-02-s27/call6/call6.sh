set -u
mkdir -p gpu/out; cp call6.sh gpu/out/
TESTS_FILTER="kernel_knobs fp8 forward timing" TESTS_TIMEOUT=400 TESTS_THREADS=8 bash scripts/gpu-session.sh tests
tar czf $OUT/results.tgz -C gpu out
grep -E "^test |test result" gpu/out/tests.log | grep -v " ok$" | tail -30; grep -c " ok$" gpu/out/tests.log
