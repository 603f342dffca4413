set -u
mkdir -p gpu/out; cp call1.sh gpu/out/
s=$(date +%s); RMSNORM_BENCH_C=64,96,128,160,192 RMSNORM_BENCH_T=24960,99840,399360 TUNE_TIMEOUT=230 bash scripts/gpu-session.sh tune; echo "tune $(( $(date +%s)-s )) s"
s=$(date +%s); RMSNORM_BENCH_C=768,1536,2048,4096 FALLBACK_TIMEOUT=310 bash scripts/gpu-session.sh fallback; echo "fallback $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep "^tune" gpu/out/tune.log | cut -c1-150; grep "^fallback" gpu/out/fallback.log | cut -c1-250
ls -la $OUT
