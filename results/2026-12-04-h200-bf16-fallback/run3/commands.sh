set -u
mkdir -p gpu/out; cp commands.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
pack(){ tar czf $OUT/results.tgz -C gpu out; }
# 1. The 55 bf16 shapes (new C = 96 T = 24960 entry) and torch.compile in the same call (issue 3).
s=$(date +%s); bash scripts/gpu-steps.sh bench >/dev/null; echo "bench $(( $(date +%s)-s )) s"
pack
s=$(date +%s); timeout 150 python3 benches/torch_compare.py --out gpu/out > gpu/out/torch.log 2>&1; echo "torch $(( $(date +%s)-s )) s"
pack
python3 benches/report.py gpu/out 2>&1 | tail -22
# 2. The fallback's last width (C = 200: tuner sweep against the selection).
s=$(date +%s); RMSNORM_BENCH_C=200 FALLBACK_TIMEOUT=200 bash scripts/gpu-steps.sh fallback >/dev/null; echo "fallback $(( $(date +%s)-s )) s"
grep "^fallback" gpu/out/fallback.log | cut -c1-230
pack
# 3. CUDA: the selection and fallback tests with this build's tables.
s=$(date +%s); TESTS_THREADS=4 TESTS_FILTER="table_derived_fallback selected_knobs selection_is_valid" TESTS_TIMEOUT=$(( $(left) - 60 )) bash scripts/gpu-steps.sh tests >/dev/null; echo "tests $(( $(date +%s)-s )) s"
grep -E "^test |test result" gpu/out/tests.log | tail -5
pack
# 4. C = 96 T = 24960: the new entry against the old, in turn.
export RMSNORM_AB="96 24960 bf16 selected v8.l4.r32.u1.c3.plane.greg.m-.fast"
[ $(left) -gt 40 ] && { s=$(date +%s); RMSNORM_AB_ALTERNATE=1 AB_TIMEOUT=$(( $(left) - 5 )) bash scripts/gpu-steps.sh ab >/dev/null; echo "ab $(( $(date +%s)-s )) s"; grep -E "^ab |alternate" gpu/out/ab.log | cut -c1-120; pack; }
