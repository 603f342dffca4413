set -u
mkdir -p gpu/out; cp commands.sh gpu/out/
s=$(date +%s); bash scripts/gpu-steps.sh bench; tar czf $OUT/results.tgz -C gpu out; echo "bench $(( $(date +%s)-s )) s"
s=$(date +%s); TESTS_FILTER="nvfp4::nvfp4_table_entries nvfp4::nvfp4_bytes_match nvfp4::nvfp4_lane_counts nvfp4::kernel_codecs kernel_knobs::lut_configurations fp8::fp8_table_entries fp8::fp8_codes kernel_knobs::selected_knobs forward" TESTS_TIMEOUT=150 TESTS_THREADS=16 bash scripts/gpu-steps.sh tests; echo "tests $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
tail -3 gpu/out/bench.log
grep -E "test result|FAIL|panicked" gpu/out/tests.log | head; grep -E "\.\.\. " gpu/out/tests.log | grep -v "running for" | wc -l; grep -E "running for" gpu/out/tests.log | tail -8
