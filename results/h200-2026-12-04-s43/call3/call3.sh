set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp call3.sh gpu/out/
pack(){ tar czf $OUT/results.tgz -C gpu out; }
s=$(date +%s); TESTS_FILTER="every_nvfp4_knob_path" TESTS_TIMEOUT=560 TESTS_THREADS=1 bash scripts/gpu-session.sh tests >/dev/null; echo "tests $(( $(date +%s)-s )) s"; grep -E "^test |test result|panicked" gpu/out/tests.log | tail -30; pack
