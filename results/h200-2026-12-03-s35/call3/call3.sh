set -u
mkdir -p gpu/out; cp call3.sh gpu/out/
s=$(date +%s); bash scripts/gpu-session.sh bench; echo "bench $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
s=$(date +%s); timeout 150 python3 benches/torch_compare.py --out gpu/out > gpu/out/torch.log 2>&1; echo "torch $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
export RMSNORM_AB="160 99840 fp8 selected v4.l8.r16.u1.c5.plane.greg.m-.fast v8.l8.r16.u1.c3.plane.greg.m-.fast; 192 24960 fp8 selected v8.l8.r16.u1.c3.plane.greg.m-.fast; 128 24960 fp8 selected v8.l16.r8.u1.c1.plane.greg.m-.fast v8.l8.r16.u1.c2.plane.greg.m-.fast; 320 24960 fp8 selected v8.l8.r16.u1.c5.plane.greg.m-.fast v4.l16.r8.u1.c5.plane.greg.m-.fast; 64 99840 fp8 selected v8.l8.r16.u1.c1.plane.greg.m-.fast; 192 99840 fp8 selected v8.l8.r16.u1.c3.plane.greg.m-.fast; 320 99840 fp8 selected v4.l16.r8.u1.c5.plane.greg.m-.fast; 384 24960 fp8 selected v8.l16.r8.u1.c3.plane.greg.m-.fast; 256 24960 fp8 selected v8.l16.r8.u1.c2.plane.greg.m-.fast v8.l32.r4.u1.c1.plane.greg.m-.fast; 1024 24960 fp8 selected v8.l32.r4.u1.c4.plane.greg.m-.fast"
s=$(date +%s); (cd gpu && timeout 120 ./bench ab > out/ab.log 2>&1); echo "ab $(( $(date +%s)-s )) s"
tar czf $OUT/results.tgz -C gpu out
grep -E "^ab" gpu/out/ab.log | sed -E 's/, [0-9]+ output bytes differ.*vs f64: /; /' | cut -c1-110
python3 benches/report.py gpu/out 2>&1 | tail -25
