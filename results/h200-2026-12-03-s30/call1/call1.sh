set -u
mkdir -p gpu/out; cp call1.sh gpu/out/
s=$(date +%s); CHANNELS_TIMEOUT=200 bash scripts/gpu-session.sh channels; echo "channels $(( $(date +%s)-s )) s"
s=$(date +%s); TESTS_FILTER="channels kernel_knobs fp8" TESTS_TIMEOUT=320 TESTS_THREADS=8 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "ab |sweep best|backward:|x1\." gpu/out/channels.log | head -40; tail -25 gpu/out/tests.log
