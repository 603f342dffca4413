set -u
mkdir -p gpu/out; cp call3.sh gpu/out/
s=$(date +%s); TESTS_FILTER="nvfp4" TESTS_TIMEOUT=150 TESTS_THREADS=4 RMSNORM_TEST_CASE_THREADS=8 bash scripts/gpu-session.sh tests; echo "tests $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^test |test result" gpu/out/tests.log | tail -20
export RMSNORM_AB="160 24960 bf16 selected v8.l4.r32.u1.c5.plane.greg.m-.fast v8.l4.r16.u1.c5.plane.greg.m-.fast; 160 24960 fp8 selected v8.l4.r32.u1.c5.plane.greg.m-.fast; 384 99840 fp8 selected v8.l16.r8.u1.c3.plane.greg.m-.fast"
s=$(date +%s); (cd gpu && timeout 60 ./bench ab > out/ab.log 2>&1); echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^ab" gpu/out/ab.log | sed -E 's/, [0-9]+ output bytes differ.*vs f64: /; /' | cut -c1-120
s=$(date +%s); bash scripts/gpu-session.sh bench; tar czf $OUT/results.tgz -C gpu out; echo "bench $(( $(date +%s)-s )) s"
tail -3 gpu/out/bench.log
s=$(date +%s); timeout 110 python3 benches/torch_compare.py --out gpu/out > gpu/out/torch.log 2>&1; echo "torch $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
tail -2 gpu/out/torch.log
