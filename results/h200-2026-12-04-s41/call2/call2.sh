set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp call2.sh gpu/out/
T0=$(date +%s); left(){ echo $(( 570 - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > gpu/out/gpu.txt
pack(){ tar czf $OUT/results.tgz -C gpu out; }
xz -dkf gpu/bench-old.xz; xz -dkf gpu/bench.xz
# 1. FP8/NVFP4 (selected knobs): the build before this session (old) and this one (new), in turn, twice.
for r in 1 2; do
  for b in new old; do
    bin=bench; [ $b = old ] && bin=bench-old
    s=$(date +%s); BENCH_BIN=$bin QUANT_TAG=-$b-$r RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=100 bash scripts/gpu-session.sh quant >/dev/null; echo "quant $b $r $(( $(date +%s)-s )) s"
    rm -f gpu/env.tgz  # restored once: later steps keep the kernels compiled since
  done
  pack
done
# 2. Nsight Compute: the new NVFP4 kernel at C = 1024 T = 99840.
s=$(date +%s); NCU_TIMEOUT=120 bash scripts/gpu-session.sh ncu > gpu/out/ncu-summary.txt 2>&1; echo "ncu $(( $(date +%s)-s )) s"
pack
# 3. FP8 one-wave entries without the word cache: with it (.wd), in turn.
export RMSNORM_AB="96 24960 fp8 selected v8.l6.r20.u1.c2.plane.greg.m-.fast.wd; 64 24960 fp8 selected v8.l8.r16.u1.c1.plane.greg.m-.fast.wd; 128 24960 fp8 selected v8.l16.r8.u1.c1.plane.greg.m-.fast.wd; 64 99840 fp8 selected v8.l8.r16.u2.c1.plane.greg.m-.fast.wd"
[ $(left) -gt 60 ] && { s=$(date +%s); RMSNORM_AB_ALTERNATE=1 AB_TIMEOUT=$(( $(left) > 150 ? 150 : $(left) - 5 )) bash scripts/gpu-session.sh ab >/dev/null; echo "ab $(( $(date +%s)-s )) s"; grep -E "^ab |alternate" gpu/out/ab.log | cut -c1-140; pack; }
# 4. The 55 bf16 shapes, new then old (the gamma words in every row kernel).
[ $(left) -gt 50 ] && { s=$(date +%s); (cd gpu && timeout $(( $(left) - 5 )) ./bench bench --out out/bench-new > out/bench-new.log 2>&1); echo "bench new $(( $(date +%s)-s )) s"; pack; }
[ $(left) -gt 50 ] && { s=$(date +%s); (cd gpu && timeout $(( $(left) - 5 )) ./bench-old bench --out out/bench-old > out/bench-old.log 2>&1); echo "bench old $(( $(date +%s)-s )) s"; pack; }
