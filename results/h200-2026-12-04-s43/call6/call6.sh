set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp call6.sh gpu/out/
pack(){ tar czf $OUT/results.tgz -C gpu out; }
xz -dkf gpu/tests.xz; chmod +x gpu/tests
# The NVFP4 table test on CUDA with the three new entries (07872ae), the NVRTC cache of calls 4-5 carried.
s=$(date +%s); TESTS_FILTER="nvfp4_table_entries_are_valid_and_correct" TESTS_TIMEOUT=200 TESTS_THREADS=1 bash scripts/gpu-session.sh tests >/dev/null; echo "tests $(( $(date +%s)-s )) s"; grep -E "^test |test result|panicked" gpu/out/tests.log | tail -10; pack
