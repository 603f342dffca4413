set -u
mkdir -p gpu/out; cp call5.sh gpu/out/
RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=120 bash scripts/gpu-session.sh bench quant
tail -3 gpu/out/bench.log; tail -3 gpu/out/quant.log
