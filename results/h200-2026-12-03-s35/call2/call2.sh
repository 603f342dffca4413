set -u
mkdir -p gpu/out; cp call2.sh gpu/out/
s=$(date +%s); TESTS_FILTER="every_nvfp4_knob_path nvfp4_lane_counts nvfp4_table_entries lut_configurations" TESTS_TIMEOUT=500 TESTS_THREADS=4 RMSNORM_TEST_CASE_THREADS=4 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^test |test result|panicked|FAIL" gpu/out/tests.log | tail -20
