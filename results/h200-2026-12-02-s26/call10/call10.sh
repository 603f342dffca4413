set -u
mkdir -p gpu/out; cp call10.sh gpu/out/
TESTS_FILTER="table_derived lut_configurations" TESTS_TIMEOUT=150 TESTS_THREADS=4 bash scripts/gpu-session.sh tests
grep -E "^test |test result|panicked" gpu/out/tests.log | tail -8
