set -u
mkdir -p gpu/out; cp call2.sh gpu/out/
s=$(date +%s); bash scripts/gpu-session.sh bench; echo "bench $(( $(date +%s)-s )) s"



s=$(date +%s); RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=120 bash scripts/gpu-session.sh quant; echo "quant $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
tail -2 gpu/out/bench.log; tail -3 gpu/out/torch.log; tail -2 gpu/out/quant.log
