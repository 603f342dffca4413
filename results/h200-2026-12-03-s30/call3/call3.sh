set -u
mkdir -p gpu/out; cp call3.sh gpu/out/
s=$(date +%s); bash scripts/gpu-session.sh bench; echo "bench $(( $(date +%s)-s )) s"
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind
(s=$(date +%s); timeout 200 python3 benches/torch_compare.py --out gpu/out > gpu/out/torch.log 2>&1; echo "torch rc=$? $(( $(date +%s)-s )) s")
tar czf $OUT/results.tgz -C gpu out
tail -3 gpu/out/bench.log; tail -3 gpu/out/torch.log
