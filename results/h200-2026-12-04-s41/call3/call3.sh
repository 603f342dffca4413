set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp call3.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 570 - ($(date +%s) - T0) )); }
pack(){ tar czf $OUT/results.tgz -C gpu out; }
# CUDA tests of this build not finished in call 1 (env.tgz: call 1's compiled kernels).
s=$(date +%s); TESTS_THREADS=4 TESTS_FILTER="nvfp4_table_entries nvfp4_raw_cache_writes lut_configurations selected_knobs_are_valid" TESTS_TIMEOUT=300 bash scripts/gpu-session.sh tests >/dev/null; echo "tests $(( $(date +%s)-s )) s"
grep -E "^test |test result" gpu/out/tests.log | grep -v "running for" | tail -8
mv gpu/out/tests.log gpu/out/tests-1.log; rm -f gpu/env.tgz
pack
s=$(date +%s); TESTS_THREADS=4 TESTS_FILTER="every_nvfp4_knob_path every_knob_path_writes" TESTS_TIMEOUT=$(( $(left) - 10 )) bash scripts/gpu-session.sh tests >/dev/null; echo "tests $(( $(date +%s)-s )) s"
grep -E "^test |test result" gpu/out/tests.log | grep -v "running for" | tail -8
pack
