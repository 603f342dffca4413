set -u
mkdir -p gpu/out; cp call4.sh gpu/out/
s=$(date +%s); TESTS_FILTER="nvfp4_raw nvfp4_table_entries" TESTS_TIMEOUT=440 TESTS_THREADS=2 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
grep -E "^test |test result|panicked" gpu/out/tests.log
tar czf $OUT/results.tgz -C gpu out
