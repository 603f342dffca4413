set -u
mkdir -p gpu/out; cp call2.sh gpu/out/
export RMSNORM_AB="1024 99840 bf16 v4.l256.r1.u1.c1.shared.greg.m-.fast v8.l32.r4.u1.c4.plane.greg.m792.fast.pf.tk1"
X="--section MemoryWorkloadAnalysis --section SchedulerStats"
NCU_ARGS=ab NCU_KERNEL=rms_norm_rows NCU_SKIP=2 NCU_OPTS="$X" NCU_TIMEOUT=150 bash scripts/gpu-session.sh ncu; mv gpu/out/ncu.log gpu/out/ncu-l256.log
NCU_ARGS=ab NCU_KERNEL=rms_norm_rows NCU_SKIP=60 NCU_OPTS="$X" NCU_TIMEOUT=150 bash scripts/gpu-session.sh ncu; mv gpu/out/ncu.log gpu/out/ncu-table.log
tar czf $OUT/results.tgz -C gpu out
for f in gpu/out/ncu-*.log; do echo "== $f"; grep -E "Duration|DRAM Through|Memory Through|Achieved Occ|Theoretical Occ|Registers Per|Shared Memory Config|Dynamic Shared|Static Shared|Block Limit|Warp Cycles Per Issued|Eligible Warps|Issued Warp|No Eligible|Grid Size|Block Size|Waves" $f | head -40; done
