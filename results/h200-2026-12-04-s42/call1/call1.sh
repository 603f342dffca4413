set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp call1.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
pack(){ tar czf $OUT/results.tgz -C gpu out; }
xz -dkf gpu/bench-exp.xz; xz -dkf gpu/bench.xz
# 1. FP8/NVFP4 (selected knobs): exp/prologue-cuts (exp) and main (508acec), in turn, twice.
for r in 1 2; do
  for b in exp main; do
    bin=bench; [ $b = exp ] && bin=bench-exp
    s=$(date +%s); BENCH_BIN=$bin QUANT_TAG=-$b-$r RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=100 bash scripts/gpu-session.sh quant >/dev/null; echo "quant $b $r $(( $(date +%s)-s )) s"
  done
  pack
done
# 2. NVFP4 C = 320 T = 399360: the entry against the sweep's winner, in turn.
export RMSNORM_AB="320 399360 nvfp4 selected v8.l4.r64.b5.plane.m-.fast.raw"
s=$(date +%s); RMSNORM_AB_ALTERNATE=1 AB_TIMEOUT=60 bash scripts/gpu-session.sh ab >/dev/null; echo "ab $(( $(date +%s)-s )) s"; grep -E "^ab |alternate" gpu/out/ab.log | cut -c1-160; pack
# 3. Nsight Compute with warp stall reasons: NVFP4 table kernel at C = 640 T = 99840.
s=$(date +%s); NCU_C=640 NCU_SKIP=60 RMSNORM_QUANT_SWEEP=0 NCU_TIMEOUT=100 NCU_OPTS="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active" bash scripts/gpu-session.sh ncu > gpu/out/ncu-summary.txt 2>&1; echo "ncu $(( $(date +%s)-s )) s"; mv gpu/out/ncu.log gpu/out/ncu640.log; pack
# 4. The 55 bf16 shapes, exp then main.
[ $(left) -gt 70 ] && { s=$(date +%s); (cd gpu && timeout $(( $(left) - 5 )) ./bench-exp bench --out out/bench-exp > out/bench-exp.log 2>&1); echo "bench exp $(( $(date +%s)-s )) s"; pack; }
[ $(left) -gt 70 ] && { s=$(date +%s); (cd gpu && timeout $(( $(left) - 5 )) ./bench bench --out out/bench-main > out/bench-main.log 2>&1); echo "bench main $(( $(date +%s)-s )) s"; pack; }
echo "left $(left) s"
