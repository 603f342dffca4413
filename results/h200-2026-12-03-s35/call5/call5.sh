set -u
mkdir -p gpu/out; cp call5.sh gpu/out/
(cd gpu && xz -dkf bench.xz bench-old.xz && chmod +x bench bench-old)
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=110 bash scripts/gpu-session.sh quant; echo "quant $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
s=$(date +%s); RMSNORM_QUANT_SWEEP=0 QUANT_TIMEOUT=110 BENCH_BIN=bench-old QUANT_TAG=-old bash scripts/gpu-session.sh quant; echo "quant-old $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
paste -d'|' <(grep -E "^C=" gpu/out/quant.log | sed -E 's/ +/ /g' | cut -d'|' -f2 | cut -c1-80) <(grep -E "^C=" gpu/out/quant-old.log | sed -E 's/ +/ /g' | cut -d'|' -f1,2 | cut -c1-120)
for v in new old; do
  [ $v = old ] && (cd gpu && mv bench bench-new && cp bench-old bench)
  s=$(date +%s); RMSNORM_QUANT_SWEEP=0 NCU_C=64 NCU_SKIP=60 NCU_TIMEOUT=80 bash scripts/gpu-session.sh ncu > /dev/null; echo "ncu $v $(( $(date +%s)-s )) s"
  cp gpu/out/ncu.log gpu/out/ncu-64-$v.log
  grep -E "Duration|Issue Slots|Executed Ipc A|Issued Instructions  |Registers Per|Achieved Occ|Grid Size" gpu/out/ncu.log | sed -E 's/ +/ /g' | tr '\n' ';'; echo
done
tar czf $OUT/results.tgz -C gpu out
