set -u
mkdir -p gpu/out; cp call8.sh gpu/out/
TESTS_FILTER="lut_configurations fp8_table_entries ticketed selected_knobs table_derived" TESTS_TIMEOUT=240 TESTS_THREADS=4 bash scripts/gpu-session.sh tests
grep -E "^test |test result|ran " gpu/out/tests.log | tail -12
