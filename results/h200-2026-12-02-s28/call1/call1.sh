set -u
mkdir -p gpu/out; cp call1.sh gpu/out/
s=$(date +%s); bash scripts/gpu-session.sh bench; echo "bench $(( $(date +%s)-s )) s"
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind
(s=$(date +%s); timeout 170 python3 benches/torch_compare.py --out gpu/out > gpu/out/torch.log 2>&1; echo "torch rc=$? $(( $(date +%s)-s )) s")
find /tmp/ind \( -name '*.best_config' -o -name '*.py' -o -name '*.json' -o -name '*.cubin' -o -name '*.ptx' \) -size -400k | tar czf gpu/out/inductor.tgz -T - 2>/dev/null; ls -la gpu/out/inductor.tgz
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=120 bash scripts/gpu-session.sh quant; echo "quant $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
tail -2 gpu/out/bench.log; tail -3 gpu/out/torch.log; tail -2 gpu/out/quant.log
