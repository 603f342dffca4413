set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp commands.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 560 - ($(date +%s) - T0) )); }
pack(){ tar czf $OUT/results.tgz -C gpu out; }
s=$(date +%s); TESTS_FILTER="nvfp4:: --skip every_nvfp4_knob_path" TESTS_TIMEOUT=300 bash scripts/gpu-steps.sh tests >/dev/null; echo "tests $(( $(date +%s)-s )) s"; grep -E "test result|panicked|FAILED|failed" gpu/out/tests.log | head -20; pack
M=plane.m-.fast
export RMSNORM_AB="192 399360 nvfp4 selected v8.l4.r32.b3.$M.raw v8.l4.r32.b3.$M.raw.gs; 192 99840 nvfp4 selected v8.l4.r32.b3.$M.raw.gs v8.l4.r32.b3.$M.raw; 160 399360 nvfp4 selected v8.l5.r24.b2.$M.raw; 160 99840 nvfp4 selected v8.l10.r6.b1.plane.m-.u2.fast; 128 399360 nvfp4 selected v8.l4.r32.b2.$M.raw.gs"
[ $(left) -gt 60 ] && { s=$(date +%s); RMSNORM_AB_ALTERNATE=1 AB_TIMEOUT=$(( $(left) - 10 )) bash scripts/gpu-steps.sh ab >/dev/null; echo "ab $(( $(date +%s)-s )) s"; grep -E "^ab |error|panic" gpu/out/ab.log | cut -c1-170; pack; }
echo "left $(left) s"
