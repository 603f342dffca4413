set -u
mkdir -p gpu/out; cp call4.sh gpu/out/
TESTS_FILTER="kernel_knobs fp8 timing" TESTS_TIMEOUT=290 TESTS_THREADS=4 bash scripts/gpu-session.sh tests
grep -E "^test .*(FAILED|ok)$|test result|panicked" gpu/out/tests.log | grep -v " ok$" | head -30
grep -c " ok$" gpu/out/tests.log
mkdir -p $OUT/san; SANITIZE_OUT=$OUT/san SANITIZE_FILTER="ticketed" SANITIZE_TIMEOUT=150 SANITIZE_PARALLEL=1 bash scripts/sanitize.sh racecheck memcheck synccheck > $OUT/san/sanitize.log 2>&1; tail -5 $OUT/san/sanitize.log

