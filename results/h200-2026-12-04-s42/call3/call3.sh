set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp call3.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 585 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
pack(){ tar czf $OUT/results.tgz -C gpu out; }
# 1. The long NVFP4 knob-path test on CUDA, cold (NVRTC); the compiled kernels stay in gpu/default.db
#    for a warm rerun in the next call if it does not finish here.
s=$(date +%s); TESTS_FILTER="every_knob_path_writes_every_element" TESTS_THREADS=1 TESTS_TIMEOUT=$(( $(left) - 5 )) bash scripts/gpu-session.sh tests >/dev/null; echo "knob-path test $(( $(date +%s)-s )) s"; mv gpu/out/tests.log gpu/out/tests-knob-paths.log; tail -5 gpu/out/tests-knob-paths.log; pack
echo "left $(left) s"
