set -u
mkdir -p gpu/out; cp commands.sh gpu/out/
s=$(date +%s); RMSNORM_BENCH_C=768,1536,2048 FALLBACK_TIMEOUT=420 bash scripts/gpu-steps.sh fallback; echo "fallback $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep "^fallback" gpu/out/fallback.log | cut -c1-190
