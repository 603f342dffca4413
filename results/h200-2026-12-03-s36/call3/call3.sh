set -u
mkdir -p gpu/out; cp call3.sh gpu/out/
s=$(date +%s); TESTS_FILTER="nvfp4_raw nvfp4_table_entries every_nvfp4_knob_path" TESTS_TIMEOUT=330 TESTS_THREADS=4 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
grep -E "^test |test result" gpu/out/tests.log
tar czf $OUT/results.tgz -C gpu out
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=110 bash scripts/gpu-session.sh quant; echo "quant $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^C=" gpu/out/quant.log | sed -E 's/ +/ /g' | cut -c1-150
