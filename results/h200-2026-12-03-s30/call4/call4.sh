set -u
mkdir -p gpu/out; rm -f gpu/out/*; cp call4.sh gpu/out/
s=$(date +%s); TESTS_FILTER="channels::gradients_over_the_channel_axis fp8::fp8_table_entries_match_the_host_quantiser kernel_knobs::every_knob_path_writes_every_element kernel_knobs::lut_configurations_match_the_reference kernel_knobs::out_of_range_rows_are_rescued_on_every_knob_path" TESTS_TIMEOUT=320 TESTS_THREADS=5 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "\.\.\. |test result" gpu/out/tests.log | grep -v "running for"
