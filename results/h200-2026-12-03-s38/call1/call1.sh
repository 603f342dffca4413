set -u
mkdir -p gpu/out; cp call1.sh gpu/out/
(cd gpu && xz -dkf bench.xz && chmod +x bench)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
# 1. Code-warm experiment + candidate layouts (bf16 C=96/160, FP8 one-wave).
export RMSNORM_AB_CODE_WARM=1
export RMSNORM_AB="96 24960 bf16 selected v8.l3.r40.u1.c4.plane.greg.m-.fast.wd v8.l3.r40.u1.c4.plane.greg.m-.fast; 160 24960 bf16 selected v4.l10.r12.u1.c4.plane.greg.m-.fast.wd v8.l5.r24.u1.c4.plane.greg.m-.fast.wd; 1024 24960 bf16 selected; 64 24960 bf16 selected; 128 24960 fp8 selected v8.l16.r8.u1.c1.plane.greg.m-.fast v8.l16.r8.u2.c1.plane.greg.m792.fast.pf v8.l8.r16.u2.c2.plane.greg.m792.fast.pf.wd; 192 24960 fp8 selected v8.l8.r16.u2.c3.plane.greg.m792.fast.pf.wd v8.l8.r16.u1.c3.plane.greg.m-.fast.wd; 96 24960 fp8 selected v8.l4.r32.u1.c3.plane.greg.m-.fast.wd"
s=$(date +%s); AB_TIMEOUT=240 bash scripts/gpu-session.sh ab; echo "ab $(( $(date +%s)-s )) s"; mv gpu/out/ab.log gpu/out/ab1.log
tar czf $OUT/results.tgz -C gpu out
grep -E "^ab|^codewarm" gpu/out/ab1.log | sed -E 's/, [0-9]+ output bytes differ.*vs f64: /; /' | cut -c1-140
# 2. ncu: stall reasons of the one-wave bf16 kernel.
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
$ncu_bin --query-metrics 2>/dev/null | grep -i -E "stalled_(no_instruction|long_scoreboard|wait|barrier|short_scoreboard|math|lg_throttle|drain|membar|branch|dispatch|mio|not_selected|selected|imc|sleeping|tex|misc)" | head -40 > gpu/out/ncu-metrics.txt
cat gpu/out/ncu-metrics.txt | awk '{print $1}' | tr '\n' ' '; echo
unset RMSNORM_AB_CODE_WARM
for spec in "96 24960 bf16" "1024 24960 bf16"; do
  tag=$(echo $spec | tr ' ' '-')
  s=$(date +%s); RMSNORM_AB="$spec selected" NCU_ARGS=ab NCU_KERNEL=rms_norm_rows NCU_SKIP=4 NCU_TIMEOUT=90 NCU_OPTS="--print-details all --section SourceCounters --metrics sm__cycles_active.avg,sm__cycles_active.max,gpc__cycles_elapsed.max" bash scripts/gpu-session.sh ncu > /dev/null; echo "ncu $spec $(( $(date +%s)-s )) s"
  cp gpu/out/ncu.log gpu/out/ncu-$tag.log
  grep -i -E "Duration|SM Active|cycles_active|Stall|No Instruction|Long Scoreboard|Wait|Registers Per|Achieved Occ|SM Frequency|ERR" gpu/out/ncu.log | sed -E 's/ +/ /g' | head -40
done
tar czf $OUT/results.tgz -C gpu out
