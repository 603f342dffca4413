set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp commands.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
pack(){ tar czf $OUT/results.tgz -C gpu out; }
xz -dkf gpu/bench.xz; xz -dkf gpu/tests.xz; chmod +x gpu/bench gpu/tests
# 1. The NVFP4 CUDA tests but the long knob-path one (main with the raw cache's pass 2 through the words, .gs, the C = 320 entry).
s=$(date +%s); TESTS_FILTER="nvfp4:: --skip every_nvfp4_knob_path" TESTS_TIMEOUT=200 bash scripts/gpu-steps.sh tests >/dev/null; echo "tests $(( $(date +%s)-s )) s"; grep -E "test result|panicked|FAILED|failed" gpu/out/tests.log | head -20; pack
# 2. The NVFP4 sweep (with .gs and .raw.gs on every layout) for the narrower C.
s=$(date +%s); RMSNORM_BENCH_C=320,192,160,256,128 QUANT_TAG=-sweep QUANT_TIMEOUT=$(( $(left) - 15 )) bash scripts/gpu-steps.sh quant >/dev/null; echo "sweep $(( $(date +%s)-s )) s"; grep -E "^C=" gpu/out/quant-sweep.log | cut -c1-200; pack
echo "left $(left) s"
