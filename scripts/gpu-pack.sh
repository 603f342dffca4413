#!/usr/bin/env bash
# Builds release binaries here and packs them (stripped, xz) into gpu/ for the `device` tool,
# which carries gpu/ to a GPU machine that has no Rust toolchain (at most two or three fit in
# one call's 64 MiB). Usage: scripts/gpu-pack.sh [tests] [demo] [bench] [conv] [wan] [wan-tests] [fixtures]   (default: tests demo)
# Everything is built with the workspace's default features, sharing CI's compiled dependencies
# (GPU_FEATURES, e.g. "cuda", builds tests and benches with those features only). Sizes (xz): tests ~31 MB, bench ~27 MB, wan ~31 MB; fixtures 17 MB.
# Then, on the GPU machine: `bash scripts/cuda-suite.sh` or `bash scripts/gpu-steps.sh [steps]` (see README "Testing on CUDA").
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
mkdir -p gpu
what=("$@")
gpu_features=()
[ -z "${GPU_FEATURES:-}" ] || gpu_features=(--no-default-features --features "$GPU_FEATURES")
[ ${#what[@]} -gt 0 ] || what=(tests demo)
# (--workspace: with `-p`, cargo resolves other features and rebuilds Burn and cubecl.)
artifact() { # cargo command and its target selection -> newest executable path
    cargo "$@" --workspace --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable"): print(m["executable"])' | tail -1
}
rm -f gpu/*.xz; rm -rf gpu/fixtures
# The cross-check fixtures and key lists for the CUDA fixture tests.
pack_fixtures() {
    mkdir -p gpu/fixtures && cp -r wan-vae/tests/fixtures/wan21_small wan-vae/tests/fixtures/wan22_small \
        wan-vae/tests/fixtures/wan_keys gpu/fixtures/
}
for w in "${what[@]}"; do
    case "$w" in
        tests) bin=$(artifact test --release ${gpu_features[@]+"${gpu_features[@]}"} --test main) ;;
        bench) bin=$(artifact bench ${gpu_features[@]+"${gpu_features[@]}"} --bench rmsnorm) ;;
        demo) cargo build --release --tests --examples; bin=target/release/examples/demo ;;
        conv) bin=$(artifact bench ${gpu_features[@]+"${gpu_features[@]}"} --bench conv) ;;
        # The decoder (its convolutions take the measured table, not a run-time autotune).
        # (Built with the whole workspace's features: `-p wan-vae` alone resolves other features
        # and rebuilds Burn.)
        wan) cargo build --release --workspace --bins
             bin=target/release/wan-vae ;;
        wan-tests) bin=$(cargo test --release --workspace \
                 --test decoder --no-run --message-format=json 2>/dev/null | python3 -c 'import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable"): print(m["executable"])' | tail -1)
             pack_fixtures ;;
        # The cross-check fixtures alone, for the tests' Wan fixture cases on CUDA (with
        # `tests`: ~47 MB, within the carry; the bench does not fit beside them).
        fixtures) pack_fixtures; continue ;;
        *) echo "unknown binary $w" >&2; exit 2 ;;
    esac
    cp "$bin" "gpu/$w"
    strip "gpu/$w" 2>/dev/null || true
    xz -T2 -9e -f "gpu/$w"   # -9e: ~1.5 MB smaller per binary than -6 (the carry is 64 MiB)
done
ls -la gpu
