set -u
mkdir -p gpu/out; cp commands.sh gpu/out/
(cd gpu && xz -dkf bench.xz && chmod +x bench)
export RMSNORM_AB="1024 399360 bf16 v8.l32.r1.u1.c4.plane.gglob.m-.fast v8.l32.r2.u1.c4.plane.greg.m-.fast v8.l32.r4.u1.c4.plane.greg.m-.fast v8.l16.r2.u1.c8.plane.gglob.m-.fast v8.l32.r1.u1.c4.plane.greg.m-.fast v8.l32.r8.u1.c4.plane.greg.m1056.fast"
s=$(date +%s); (cd gpu && timeout 100 ./bench ab > out/ab.log 2>&1); echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^ab" gpu/out/ab.log | sed -E 's/, [0-9]+ output bytes differ.*vs f64: /; /' | cut -c1-150
s=$(date +%s); bash scripts/gpu-steps.sh bench; tar czf $OUT/results.tgz -C gpu out; echo "bench $(( $(date +%s)-s )) s"
tail -3 gpu/out/bench.log
s=$(date +%s); timeout 200 python3 benches/torch_compare.py --out gpu/out > gpu/out/torch.log 2>&1; echo "torch $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
tail -3 gpu/out/torch.log
s=$(date +%s); RMSNORM_BENCH_C=384 RMSNORM_CHANNELS_SWEEP=forward CHANNELS_TIMEOUT=150 bash scripts/gpu-steps.sh channels; echo "channels $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "384" gpu/out/channels.log | cut -c1-150 | tail -14
