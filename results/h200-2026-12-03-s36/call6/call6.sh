set -u
mkdir -p gpu/out; cp call6.sh gpu/out/
s=$(date +%s); TESTS_FILTER="nvfp4_table_entries" TESTS_TIMEOUT=280 TESTS_THREADS=1 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
grep -E "^test |test result|panicked" gpu/out/tests.log
tar czf $OUT/results.tgz -C gpu out
