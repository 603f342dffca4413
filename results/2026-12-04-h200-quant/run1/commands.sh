set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp commands.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
pack(){ tar czf $OUT/results.tgz -C gpu out; }
xz -dkf gpu/bench.xz; xz -dkf gpu/bench-main.xz; chmod +x gpu/bench gpu/bench-main
# 1. NVFP4 gamma in shared memory (.gs, .raw.gs), exp/s44 build, in turn with the entries.
export RMSNORM_AB="640 399360 nvfp4 selected v8.l8.r32.b5.plane.m-.fast.raw.gs; 1024 399360 nvfp4 selected v8.l32.r4.b2.plane.m-.fast.gs v8.l32.r4.b2.plane.m-.fast.raw.gs; 640 24960 nvfp4 selected v8.l16.r8.b3.plane.m-.fast.gs v8.l16.r8.b3.plane.m-.fast.raw.gs; 640 99840 nvfp4 selected v8.l8.r32.b5.plane.m-.fast.raw.gs; 512 399360 nvfp4 selected v8.l16.r8.b2.plane.m-.fast.raw.gs; 256 399360 nvfp4 selected v8.l8.r16.b2.plane.m-.fast.raw.gs; 320 399360 nvfp4 selected v8.l4.r64.b5.plane.m-.fast.gs; 384 399360 nvfp4 selected v8.l8.r16.b3.plane.m-.fast.gs; 1024 99840 nvfp4 selected v8.l32.r4.b2.plane.m-.fast.gs"
s=$(date +%s); RMSNORM_AB_ALTERNATE=1 AB_TIMEOUT=200 bash scripts/gpu-steps.sh ab >/dev/null; echo "ab-gs $(( $(date +%s)-s )) s"; mv gpu/out/ab.log gpu/out/ab-gs.log; grep -E "^ab |alternate|error|panic" gpu/out/ab-gs.log | cut -c1-200; pack
# 2. Start offsets (.st<ns>) on one-wave launches, FP8 / bf16 / NVFP4 at T = 24960.
export RMSNORM_AB="96 24960 fp8 selected v8.l6.r20.u1.c2.plane.greg.m-.fast.wd.st200 v8.l6.r20.u1.c2.plane.greg.m-.fast.wd.st400 v8.l6.r20.u1.c2.plane.greg.m-.fast.wd.st800; 160 24960 fp8 selected v4.l8.r16.u1.c5.plane.greg.m-.fast.wd.st200 v4.l8.r16.u1.c5.plane.greg.m-.fast.wd.st400 v4.l8.r16.u1.c5.plane.greg.m-.fast.wd.st800; 192 24960 fp8 selected v8.l8.r16.u1.c3.plane.greg.m-.fast.wd.st400; 96 24960 bf16 selected v8.l6.r20.u1.c2.plane.greg.m-.fast.st400; 64 24960 nvfp4 selected v8.l4.r64.b1.plane.m-.fast.st400; 256 24960 nvfp4 selected v8.l16.r8.b1.plane.m-.fast.st400"
[ $(left) -gt 100 ] && { s=$(date +%s); RMSNORM_AB_ALTERNATE=1 AB_TIMEOUT=$(( $(left) - 160 )) bash scripts/gpu-steps.sh ab >/dev/null; echo "ab-st $(( $(date +%s)-s )) s"; mv gpu/out/ab.log gpu/out/ab-st.log; grep -E "^ab |alternate|error|panic" gpu/out/ab-st.log | cut -c1-200; pack; }
# 3. NVFP4/FP8 selected knobs: exp/s44 (raw pass 2 through the words) and main, in turn.
for b in s44 main; do
  bin=bench; [ $b = main ] && bin=bench-main
  [ $(left) -gt 60 ] || break
  s=$(date +%s); BENCH_BIN=$bin QUANT_TAG=-$b-1 RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=$(( $(left) - 10 )) bash scripts/gpu-steps.sh quant >/dev/null; echo "quant $b $(( $(date +%s)-s )) s"
  pack
done
echo "left $(left) s"
