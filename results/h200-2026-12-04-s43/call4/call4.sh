set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp call4.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 470 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
pack(){ tar czf $OUT/results.tgz -C gpu out; }
xz -dkf gpu/bench.xz; chmod +x gpu/bench
# 1. The NVFP4 sweep with the pair encoder (172d82d) for the widest C.
s=$(date +%s); RMSNORM_BENCH_C=1024,640,512,384,320 QUANT_TAG=-sweep QUANT_TIMEOUT=$(( $(left) - 80 )) bash scripts/gpu-session.sh quant >/dev/null; echo "sweep $(( $(date +%s)-s )) s"; grep -E "^C=" gpu/out/quant-sweep.log | cut -c1-250; pack
# 2. Nsight Compute: the table's NVFP4 kernel at C = 1024 T = 99840 with the pair encoder (instructions, issue).
[ $(left) -gt 50 ] && { s=$(date +%s); NCU_C=1024 NCU_SKIP=60 RMSNORM_QUANT_SWEEP=0 NCU_TIMEOUT=$(( $(left) - 5 )) NCU_OPTS="--metrics smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,launch__registers_per_thread" bash scripts/gpu-session.sh ncu > gpu/out/ncu-summary.txt 2>&1; echo "ncu $(( $(date +%s)-s )) s"; grep -E "inst_executed|issue_active|warps_active|duration|registers" gpu/out/ncu.log | head -12; pack; }
echo "left $(left) s"
