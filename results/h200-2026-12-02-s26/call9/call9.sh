set -u
mkdir -p gpu/out; cp call9.sh gpu/out/
RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=100 bash scripts/gpu-session.sh bench quant
tail -2 gpu/out/bench.log; tail -2 gpu/out/quant.log
