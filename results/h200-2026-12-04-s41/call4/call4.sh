set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp call4.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 330 - ($(date +%s) - T0) )); }
pack(){ tar czf $OUT/results.tgz -C gpu out; }
# 1. Nsight Compute on the table's NVFP4 kernel at C = 1024 T = 99840 (this build).
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 NCU_SKIP=60 NCU_TIMEOUT=100 bash scripts/gpu-session.sh ncu > gpu/out/ncu-summary.txt 2>&1; echo "ncu $(( $(date +%s)-s )) s"
grep -E "Duration|Issue Slots|Registers Per|Theoretical Occ|Achieved Occ|highest-utilized|Executed Instructions  " gpu/out/ncu.log | head -12
pack
# 2. The NVFP4 sweep with this build's kernel (data for the table; not applied this session).
s=$(date +%s); QUANT_TAG=-sweep QUANT_TIMEOUT=$(( $(left) - 5 )) bash scripts/gpu-session.sh quant >/dev/null; echo "quant sweep $(( $(date +%s)-s )) s"
grep "^C=" gpu/out/quant-sweep.log | cut -c1-170
pack
