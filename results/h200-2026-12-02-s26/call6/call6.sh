set -u
mkdir -p gpu/out; cp call6.sh gpu/out/
TESTS_FILTER="every_knob_path" TESTS_TIMEOUT=330 TESTS_THREADS=4 bash scripts/gpu-session.sh tests
grep -E "^test |test result" gpu/out/tests.log | tail -5
