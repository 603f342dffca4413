set -u
mkdir -p gpu/out; cp call2.sh gpu/out/
(cd gpu && xz -dkf bench.xz bench-old.xz && chmod +x bench bench-old)
export RMSNORM_AB="160 24960 bf16 selected v8.l10.r12.u1.c2.plane.greg.m-.fast v8.l5.r24.u1.c4.plane.greg.m-.fast v4.l8.r16.u1.c5.plane.greg.m-; 384 99840 bf16 selected v8.l16.r8.u2.c3.plane.greg.m396.fast.pf.tk2 v8.l16.r8.u1.c3.plane.greg.m-.fast v8.l16.r8.u2.c3.plane.greg.m-.fast v8.l16.r8.u2.c3.plane.greg.m792.fast.pf.tk1 v8.l32.r4.u1.c3.plane.greg.m-.fast; 96 24960 bf16 selected v8.l6.r20.u1.c2.plane.greg.m-.fast v8.l4.r32.u1.c3.plane.greg.m-; 384 1560 bf16 selected v8.l16.r8.u1.c3.plane.greg.m-.fast"
s=$(date +%s); (cd gpu && timeout 100 ./bench ab > out/ab.log 2>&1); echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^ab" gpu/out/ab.log | sed -E 's/, [0-9]+ output bytes differ.*vs f64: /; /' | cut -c1-120
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=110 bash scripts/gpu-session.sh quant; echo "quant $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=110 BENCH_BIN=bench-old QUANT_TAG=-old bash scripts/gpu-session.sh quant; echo "quant-old $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
paste -d'|' <(grep -E "^C=" gpu/out/quant.log | sed -E 's/ +/ /g' | cut -d'|' -f2 | cut -c1-80) <(grep -E "^C=" gpu/out/quant-old.log | sed -E 's/ +/ /g' | cut -d'|' -f1,2 | cut -c1-120)
for spec in "96 24960 bf16" "160 24960 bf16" "96 99840 fp8" "64 399360 fp8"; do
  tag=$(echo $spec | tr ' ' '-')
  s=$(date +%s); RMSNORM_AB="$spec selected" NCU_ARGS=ab NCU_KERNEL=rms_norm_rows NCU_SKIP=4 NCU_TIMEOUT=60 bash scripts/gpu-session.sh ncu > /dev/null; echo "ncu $spec $(( $(date +%s)-s )) s"
  cp gpu/out/ncu.log gpu/out/ncu-$tag.log
  grep -E "Duration|Issue Slots|Executed Ipc A|Issued Instructions  |Registers Per|Achieved Occ|SM Frequency" gpu/out/ncu.log | sed -E 's/ +/ /g' | tr '\n' ';'; echo
done
tar czf $OUT/results.tgz -C gpu out
s=$(date +%s); RMSNORM_BENCH_C=64,96,384,1024 CEILING_TIMEOUT=100 bash scripts/gpu-session.sh ceiling; echo "ceiling $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^C=" gpu/out/ceiling.log | sed -E 's/ +/ /g; s/ \(1\/2\/4 M[^)]*\)//' | cut -c1-200
