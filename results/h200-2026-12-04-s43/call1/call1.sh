set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp call1.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
pack(){ tar czf $OUT/results.tgz -C gpu out; }
xz -dkf gpu/bench.xz; xz -dkf gpu/bench-main.xz; chmod +x gpu/bench gpu/bench-main
# 1. FP8/NVFP4 (selected knobs): exp/pair-encoder (pairs) and main (4a93281), in turn, twice.
for r in 1 2; do
  for b in pairs main; do
    bin=bench; [ $b = main ] && bin=bench-main
    [ $(left) -gt 150 ] || break
    s=$(date +%s); BENCH_BIN=$bin QUANT_TAG=-$b-$r RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=110 bash scripts/gpu-session.sh quant >/dev/null; echo "quant $b $r $(( $(date +%s)-s )) s"
  done
  pack
done
# 2. NVFP4: two rows per unit with the raw cache on full grids (pair encoder build), in turn with the entries.
export RMSNORM_AB="1024 399360 nvfp4 selected v8.l32.r2.b2.plane.m-.u2.fast.raw v8.l32.r4.b2.plane.m-.u2.fast.raw; 512 399360 nvfp4 selected v8.l16.r4.b2.plane.m-.u2.fast.raw; 1024 99840 nvfp4 selected v8.l32.r2.b2.plane.m-.u2.fast.raw"
[ $(left) -gt 60 ] && { s=$(date +%s); RMSNORM_AB_ALTERNATE=1 AB_TIMEOUT=$(( $(left) - 15 )) bash scripts/gpu-session.sh ab >/dev/null; echo "ab $(( $(date +%s)-s )) s"; grep -E "^ab |alternate|error|panic" gpu/out/ab.log | cut -c1-200; pack; }
echo "left $(left) s"
