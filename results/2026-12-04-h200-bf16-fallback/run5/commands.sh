set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp commands.sh gpu/out/
# FP8 misses: full grids with two rows in flight per unit against the entries.
export RMSNORM_AB="64 99840 fp8 selected v8.l4.r32.u2.c2.plane.greg.m-.fast v8.l8.r16.u2.c1.plane.greg.m-.fast; 128 99840 fp8 selected v8.l8.r16.u2.c2.plane.greg.m-.fast v8.l16.r8.u2.c1.plane.greg.m-.fast; 256 99840 fp8 selected v8.l16.r8.u2.c2.plane.greg.m-.fast; 160 99840 fp8 selected v4.l8.r16.u2.c5.plane.greg.m-.fast.wd; 96 399360 fp8 selected v8.l4.r16.u2.c3.plane.greg.m-.fast v8.l6.r20.u2.c2.plane.greg.m-.fast; 64 399360 fp8 selected v8.l4.r32.u2.c2.plane.greg.m-.fast"
s=$(date +%s); AB_TIMEOUT=330 bash scripts/gpu-steps.sh ab >/dev/null; echo "ab $(( $(date +%s)-s )) s"
grep -E "^ab |refus|invalid|panic" gpu/out/ab.log | sed -E 's/plane.greg.//; s/ us//g; s/output bytes differ from the first knobs/diff/' | cut -c1-150
tar czf $OUT/results.tgz -C gpu out
