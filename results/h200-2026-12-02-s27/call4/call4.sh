set -u
mkdir -p gpu/out; cp call4.sh gpu/out/
X="--section MemoryWorkloadAnalysis --section SchedulerStats"
n() { RMSNORM_AB="$1" NCU_ARGS=ab NCU_KERNEL=rms_norm_rows NCU_SKIP=2 NCU_OPTS="$X" NCU_TIMEOUT=120 bash scripts/gpu-session.sh ncu >/dev/null; mv gpu/out/ncu.log gpu/out/ncu-$2.log; }
n "64 399360 fp8 v8.l8.r16.u2.c1.plane.greg.m1056.fast.pf" fp8-64
n "64 399360 bf16 v8.l8.r16.u2.c1.plane.greg.m792.fast.pf" bf16-64
n "160 99840 fp8 v8.l8.r16.u1.c3.plane.gsh.m1056.fast.pf.f32" fp8-160
RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=120 bash scripts/gpu-session.sh quant > /dev/null
tar czf $OUT/results.tgz -C gpu out
for f in gpu/out/ncu-*.log; do echo "== $f"; grep -E "^  *(Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Registers Per|Achieved Occ|Theoretical Occ|No Eligible|Eligible Warps|Warp Cycles Per Issued|Issued Instructions  |Grid Size|Block Size|Dynamic Shared)" $f | sed 's/  */ /g'; done
tail -3 gpu/out/quant.log | cut -c1-100
