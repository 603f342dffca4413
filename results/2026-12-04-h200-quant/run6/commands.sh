set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp commands.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 190 - ($(date +%s) - T0) )); }
pack(){ tar czf $OUT/results.tgz -C gpu out; }
xz -dkf gpu/tests.xz; chmod +x gpu/tests
s=$(date +%s); TESTS_FILTER="nvfp4::nvfp4_table" TESTS_TIMEOUT=100 bash scripts/gpu-steps.sh tests >/dev/null; echo "tests $(( $(date +%s)-s )) s"; grep -E "test result|panicked|FAILED|failed" gpu/out/tests.log | head; pack
xz -dkf gpu/bench.xz; chmod +x gpu/bench
[ $(left) -gt 40 ] && { s=$(date +%s); RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=$(( $(left) - 5 )) bash scripts/gpu-steps.sh quant >/dev/null; echo "quant $(( $(date +%s)-s )) s"; pack; }
echo "left $(left) s"
