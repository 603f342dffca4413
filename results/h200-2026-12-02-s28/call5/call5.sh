set -u
mkdir -p gpu/out; cp call5.sh gpu/out/
for f in gpu/*.xz; do xz -dkf $f; done; chmod +x gpu/bench gpu/bench-old; tar xzf gpu/env.tgz -C gpu; cp scripts/cubecl.toml gpu/
R="96 399360 fp8 v8.l4.r32.u1.c3.plane.greg.m792.fast.pf; 384 99840 fp8 v8.l16.r8.u1.c3.plane.greg.m792.fast.pf; 512 24960 fp8 v8.l32.r4.u1.c2.plane.greg.m1056.fast.pf; 256 24960 fp8 v8.l16.r8.u1.c2.plane.greg.m1056.fast.pf.f32; 64 99840 fp8 v8.l4.r32.u1.c2.plane.greg.m792.fast.pf.f32"
N="1024 399360 bf16 v8.l32.r4.u1.c4.plane.greg.m792.fast.pf.tk1 v8.l32.r1.u1.c4.plane.gglob.m-.fast v8.l32.r1.u1.c4.plane.gsh.m-.fast v8.l32.r2.u1.c4.plane.gglob.m-.fast; 1024 24960 bf16 v8.l64.r2.u1.c2.shared.greg.m1056.fast.pf v8.l32.r1.u1.c4.plane.gglob.m-.fast; 512 99840 bf16 v8.l32.r4.u1.c2.plane.greg.m792.fast.pf v8.l32.r1.u1.c2.plane.gglob.m-.fast v8.l32.r2.u1.c2.plane.gglob.m-.fast v8.l16.r2.u1.c4.plane.gglob.m-.fast; 512 399360 bf16 v8.l32.r8.u1.c2.plane.greg.m528.fast.pf.tk1 v8.l32.r1.u1.c2.plane.gglob.m-.fast v8.l16.r2.u1.c4.plane.gglob.m-.fast; 1024 99840 fp8 v8.l32.r4.u1.c4.plane.greg.m1056.fast.pf.tk2 v8.l32.r1.u1.c4.plane.gglob.m-.fast; 1024 399360 fp8 v8.l32.r4.u1.c4.plane.greg.m1056.fast.pf.tk2 v8.l32.r1.u1.c4.plane.gglob.m-.fast"
s=$(date +%s)
for b in bench-old bench bench-old bench; do (cd gpu && RMSNORM_AB="$R" timeout 80 ./$b ab >> out/abR-$b.log 2>&1); done; echo "R $(( $(date +%s)-s )) s"
for i in 1 2; do (cd gpu && RMSNORM_AB="$N" timeout 120 ./bench ab >> out/abN.log 2>&1); done; echo "N $(( $(date +%s)-s )) s"
tar czf $OUT/env.tgz -C gpu default.db default.db-wal default.db-tshm 2>/dev/null
tar czf $OUT/results.tgz -C gpu out
for f in gpu/out/abR-bench-old.log gpu/out/abR-bench.log gpu/out/abN.log; do echo "== $f"; grep "^ab" $f | cut -c4-112; done
