set -u
mkdir -p gpu/out; cp call2.sh gpu/out/
A="96 24960 bf16 v8.l6.r20.u1.c2.plane.greg.m792.fast.pf v8.l4.r16.u1.c3.plane.greg.m4224.fast;
160 24960 bf16 v4.l8.r16.u1.c5.plane.greg.m792.fast.pf v8.l10.r12.u1.c2.plane.greg.m792.fast.pf.f32;
160 99840 bf16 v8.l8.r16.u1.c3.plane.greg.m792.fast.pf v8.l4.r16.u1.c5.plane.gsh.m4224 v8.l4.r16.u1.c5.plane.gsh.m4224.fast;
64 399360 bf16 v8.l8.r16.u2.c1.plane.greg.m792.fast.pf v8.l4.r8.u2.c2.plane.greg.m-.fast;
96 99840 bf16 v8.l4.r32.u1.c3.plane.gsh.m1056.fast.pf v8.l4.r16.u1.c3.plane.greg.m4224.fast;
1024 99840 bf16 v8.l32.r1.u1.c4.plane.gglob.m-.fast;
640 6240 bf16 v8.l32.r4.u1.c3.plane.greg.m528.fast.pf;
64 99840 fp8 v8.l4.r32.u1.c2.plane.greg.m792.fast.pf.f32;
160 24960 fp8 v4.l8.r16.u1.c5.plane.greg.m792.fast.pf"
xz -dkf gpu/bench.xz; chmod +x gpu/bench
s=$(date +%s)
for i in 1; do for f in ex2rcp tanh; do
(cd gpu && RMSNORM_SILU=$f RMSNORM_AB="$A" timeout 80 ./bench ab) > gpu/out/ab-$f-$i.log 2>&1
done; done
(cd gpu && RMSNORM_ACTIVATION=identity RMSNORM_AB="$A" timeout 80 ./bench ab) > gpu/out/ab-identity.log 2>&1
(cd gpu && RMSNORM_SILU=newton RMSNORM_AB="$A" timeout 80 ./bench ab) > gpu/out/ab-newton-1.log 2>&1
echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/ab.tgz -C gpu out
for f in gpu/out/ab-*.log; do echo "== $f"; grep "^ab" $f | sed 's/ output bytes differ from the first knobs.;/ d;/' | cut -c1-230; done
s=$(date +%s); RMSNORM_BENCH_C=48 FALLBACK_TIMEOUT=110 bash scripts/gpu-session.sh fallback; echo "fallback $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep "^fallback" gpu/out/fallback.log | cut -c1-250
