set -u
mkdir -p gpu/out; rm -rf gpu/out/*; cp call5.sh gpu/out/
pack(){ tar czf $OUT/results.tgz -C gpu out; }
xz -dkf gpu/bench.xz; chmod +x gpu/bench
# NVFP4: the prefetch buffer in shared memory (cp.async, `.pf.raw.as`) against the table's entries, in turn.
export RMSNORM_AB="1024 399360 nvfp4 selected v8.l32.r4.b2.plane.m1056.fast.pf.raw.as v8.l32.r4.b2.plane.m528.fast.pf.raw.as; 640 399360 nvfp4 selected v8.l8.r16.b5.plane.m660.fast.pf.raw.as v8.l8.r16.b5.plane.m396.fast.pf.raw.as; 256 399360 nvfp4 selected v8.l16.r8.b1.plane.m1056.fast.pf.raw.as"
s=$(date +%s); RMSNORM_AB_ALTERNATE=1 AB_TIMEOUT=110 bash scripts/gpu-session.sh ab >/dev/null; echo "ab $(( $(date +%s)-s )) s"; grep -E "^ab |alternate|error|panic" gpu/out/ab.log | cut -c1-200; pack
