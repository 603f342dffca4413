#!/usr/bin/env bash
# Builds the release test binary and the demo here, and packs them (stripped, xz) into gpu/
# for the `device` tool, which carries gpu/ to a GPU machine that has no Rust toolchain.
# Then, on the GPU machine: `bash scripts/gpu-run.sh` (see README "Testing on CUDA").
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
mkdir -p gpu
test_bin=$(cargo test --release -p burn-rmsnorm-silu --test main --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="main" and m.get("executable"): print(m["executable"])' | tail -1)
cargo build --release --example demo
cp "$test_bin" gpu/tests
cp target/release/examples/demo gpu/demo
strip gpu/tests gpu/demo 2>/dev/null || true
rm -f gpu/*.xz
xz -T2 -6 gpu/tests gpu/demo
ls -la gpu
