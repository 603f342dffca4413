set -u
mkdir -p gpu/out; cp call7.sh gpu/out/
s=$(date +%s); TESTS_FILTER="lut_configurations every_nvfp4_knob_path nvfp4_table_entries every_knob_path_writes nvfp4_lane_counts out_of_range_rows every_backward_knob ticketed_walks every_channels_backward" TESTS_TIMEOUT=420 TESTS_THREADS=12 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^test |test result|panicked|FAILED" gpu/out/tests.log | grep -v "running for" | tail -20
