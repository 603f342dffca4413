set -u
mkdir -p gpu/out; cp call1.sh gpu/out/
export RMSNORM_AB="96 24960 bf16 v8.l6.r20.u1.c2.plane.greg.m-.fast v8.l12.r8.u1.c1.shared.greg.m-.fast v8.l12.r16.u1.c1.shared.greg.m-.fast v8.l12.r8.u1.c1.shared.greg.m-.fast.pf v8.l12.r8.u1.c1.shared.gglob.m-.fast v8.l4.r32.u1.c3.plane.greg.m-.fast; 160 24960 bf16 v4.l8.r16.u1.c5.plane.greg.m-.fast v8.l20.r8.u1.c1.shared.greg.m-.fast v8.l20.r16.u1.c1.shared.greg.m-.fast v8.l20.r8.u1.c1.shared.gglob.m-.fast v8.l4.r32.u1.c5.plane.greg.m-.fast; 96 24960 fp8 v8.l6.r20.u1.c2.plane.greg.m-.fast v8.l12.r8.u1.c1.shared.greg.m-.fast; 160 24960 fp8 v4.l8.r16.u1.c5.plane.greg.m-.fast v8.l20.r8.u1.c1.shared.greg.m-.fast; 96 99840 bf16 v8.l4.r16.u1.c3.plane.greg.m-.fast v8.l12.r8.u1.c1.shared.greg.m-.fast"
s=$(date +%s); (cd gpu && xz -dkf bench.xz && chmod +x bench && timeout 200 ./bench ab > out/ab.log 2>&1); echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^ab" gpu/out/ab.log | sed -E 's/, [0-9]+ output bytes differ.*vs f64: /; /' | cut -c1-170
s=$(date +%s); bash scripts/gpu-session.sh bench; tar czf $OUT/results.tgz -C gpu out; echo "bench $(( $(date +%s)-s )) s"
tail -3 gpu/out/bench.log
s=$(date +%s); timeout 200 python3 benches/torch_compare.py --out gpu/out > gpu/out/torch.log 2>&1; echo "torch $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
tail -5 gpu/out/torch.log
