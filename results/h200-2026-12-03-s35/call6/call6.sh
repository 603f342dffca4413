set -u
mkdir -p gpu/out; cp call6.sh gpu/out/
(cd gpu && xz -dkf bench.xz && chmod +x bench)
export RMSNORM_AB_ALTERNATE=1 RMSNORM_AB="96 24960 bf16 selected; 160 24960 bf16 selected; 64 24960 bf16 selected; 1024 24960 bf16 selected"
s=$(date +%s); (cd gpu && timeout 60 ./bench ab > out/ab.log 2>&1); echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^(ab|alternate)" gpu/out/ab.log | sed -E 's/, [0-9]+ output bytes differ.*//' | cut -c1-120
s=$(date +%s); (cd gpu && RMSNORM_BENCH_C=64,96,160,1024 timeout 40 ./bench bench --out out) > gpu/out/bench.log 2>&1; echo "bench $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "24960" gpu/out/bench.log | cut -c1-150
