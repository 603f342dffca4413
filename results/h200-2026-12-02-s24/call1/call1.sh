export RMSNORM_BENCH_C=96,192,384 RMSNORM_BENCH_T=6240,24960 RMSNORM_BACKWARD_SWEEP=0
BACKWARD_TIMEOUT=100 bash scripts/gpu-session.sh backward; mv gpu/out/backward.log gpu/out/backward-new0.log
cd gpu; for i in 1 2; do timeout 90 ./bench-old backward > out/backward-old$i.log 2>&1; timeout 90 ./bench backward > out/backward-new$i.log 2>&1; done
export RMSNORM_BENCH_C=384 RMSNORM_CHANNELS_SWEEP=0
for i in 1 2; do timeout 60 ./bench-old channels > out/channels-old$i.log 2>&1; timeout 60 ./bench channels > out/channels-new$i.log 2>&1; done
cd ..; grep -h "default\|floors" gpu/out/backward-*.log | head -80; grep -h "" gpu/out/channels-*.log | head -40
RMSNORM_BENCH_C=96,192,384 RMSNORM_BENCH_T=6240 RMSNORM_BACKWARD_SWEEP=1 BACKWARD_TIMEOUT=150 bash scripts/gpu-session.sh backward
grep -h "default\|fastest" gpu/out/backward.log
