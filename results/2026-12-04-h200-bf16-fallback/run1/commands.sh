set -u
mkdir -p gpu/out; cp commands.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 560 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
cp scripts/cubecl.toml gpu/cubecl.toml
for f in gpu/*.xz; do xz -dkf "$f"; done; chmod +x gpu/bench gpu/bench-exp
pack(){ tar czf $OUT/results.tgz -C gpu out; }
# 1. bf16 C = 96 T = 24960: the entry against three lighter layouts (cold, in turn, code-warm).
export RMSNORM_AB="96 24960 bf16 selected v8.l4.r16.u1.c3.plane.greg.m-.fast v8.l6.r20.u1.c2.plane.greg.m-.fast v8.l12.r10.u1.c1.plane.greg.m-.fast"
s=$(date +%s); RMSNORM_AB_ALTERNATE=1 RMSNORM_AB_CODE_WARM=1 AB_TIMEOUT=120 bash scripts/gpu-steps.sh ab >/dev/null; echo "ab-96 $(( $(date +%s)-s )) s"; mv gpu/out/ab.log gpu/out/ab-96.log
grep -E "^ab |alternate|warm" gpu/out/ab-96.log | sed -E 's/plane.greg.//; s/ us//g; s/output bytes differ from the first knobs/diff/' | cut -c1-150
pack
# 2. exp/normal-epilogue-first against main: the 55 bf16 shapes and the FP8/NVFP4 table, in turn.
for i in 1 2; do for bin in bench bench-exp; do
  s=$(date +%s); (cd gpu && timeout 120 ./$bin bench --out out/$bin-$i) > gpu/out/$bin-$i.log 2>&1; echo "$bin bench $i $(( $(date +%s)-s )) s"; pack
done; done
for bin in bench bench-exp; do
  s=$(date +%s); RMSNORM_QUANT_SWEEP=0 BENCH_BIN=$bin QUANT_TAG=-$bin QUANT_TIMEOUT=100 bash scripts/gpu-steps.sh quant >/dev/null; echo "$bin quant $(( $(date +%s)-s )) s"; pack
done
# 3. The exp build's C = 96 case (code-warm), if time is left.
[ $(left) -gt 170 ] && { s=$(date +%s); (cd gpu && RMSNORM_AB_CODE_WARM=1 timeout 60 ./bench-exp ab) > gpu/out/ab-96-exp.log 2>&1; echo "ab-96-exp $(( $(date +%s)-s )) s"; pack; }
# 4. The fallback at C = 48 (its tuner sweep), the rest of the time.
s=$(date +%s); RMSNORM_BENCH_C=48 FALLBACK_TIMEOUT=$(( $(left) - 5 )) bash scripts/gpu-steps.sh fallback >/dev/null; echo "fallback $(( $(date +%s)-s )) s"
grep "^fallback" gpu/out/fallback.log | cut -c1-220
pack
