set -u
mkdir -p gpu/out; cp call1.sh gpu/out/
bash scripts/gpu-session.sh bench
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind
(s=$(date +%s); timeout 170 python3 benches/torch_compare.py --out gpu/out > gpu/out/torch.log 2>&1; echo "torch rc=$? $(( $(date +%s)-s )) s")
find /tmp/ind -name '*.best_config' -o -name '*.py' | tar czf gpu/out/inductor.tgz -T - 2>/dev/null; ls -la gpu/out/inductor.tgz
RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=100 bash scripts/gpu-session.sh quant
RMSNORM_AB="1024 99840 bf16 v8.l32.r4.u1.c4.plane.greg.m792.fast.pf.tk1 v8.l128.r1.u1.c1.shared.greg.m-.fast v4.l256.r1.u1.c1.shared.greg.m-.fast v8.l64.r2.u1.c2.shared.greg.m-.fast v8.l32.r8.u1.c4.plane.greg.m-.fast; 512 99840 bf16 v8.l32.r4.u1.c2.plane.greg.m792.fast.pf v8.l64.r2.u1.c1.shared.greg.m-.fast v8.l32.r8.u1.c2.plane.greg.m-.fast v4.l128.r2.u1.c1.shared.greg.m-.fast v8.l16.r16.u1.c4.plane.greg.m-.fast" AB_TIMEOUT=100 bash scripts/gpu-session.sh ab
RMSNORM_BENCH_C=96 RMSNORM_BENCH_T=24960,399360 TUNE_TIMEOUT=110 bash scripts/gpu-session.sh tune
tar czf $OUT/results.tgz -C gpu out
tail -3 gpu/out/torch.log; cat gpu/out/ab.log | cut -c1-150; tail -3 gpu/out/tune.log
