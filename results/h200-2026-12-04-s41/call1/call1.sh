set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp call1.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
pack(){ tar czf $OUT/results.tgz -C gpu out; }
# 1. The new NVFP4 encoder and scale path (and the bf16 gamma words) on CUDA.
s=$(date +%s); TESTS_THREADS=4 TESTS_FILTER="kernel_codecs nvfp4_bytes nvfp4_table_entries nan_stays swizzled nvfp4_api nvfp4_raw_cache nvfp4_lane_counts fp8_table_entries" TESTS_TIMEOUT=380 bash scripts/gpu-session.sh tests >/dev/null; echo "tests $(( $(date +%s)-s )) s"
grep -E "^test |test result" gpu/out/tests.log | tail -12
pack
# 2. FP8 and NVFP4 with the selected knobs (this build).
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=$(( $(left) - 5 )) bash scripts/gpu-session.sh quant >/dev/null; echo "quant $(( $(date +%s)-s )) s"
cut -c1-200 gpu/out/quant.log | grep "^C=" | head -40
pack
