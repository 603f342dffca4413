set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp commands.sh gpu/out/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
# The 55 bf16 shapes and torch.compile again (a second sample of call 3's comparison).
s=$(date +%s); bash scripts/gpu-steps.sh bench >/dev/null; echo "bench $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
s=$(date +%s); timeout 150 python3 benches/torch_compare.py --out gpu/out > gpu/out/torch.log 2>&1; echo "torch $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
python3 benches/report.py gpu/out 2>&1 | tail -4
