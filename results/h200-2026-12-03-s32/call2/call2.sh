set -u
mkdir -p gpu/out; cp call2.sh gpu/out/
s=$(date +%s); TESTS_FILTER="kernel_knobs::lut_configurations kernel_knobs::table_derived kernel_knobs::selected_knobs kernel_knobs::selection_is_valid" TESTS_TIMEOUT=420 TESTS_THREADS=16 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "test result|FAIL|panicked|^test |ran " gpu/out/tests.log | head -20
