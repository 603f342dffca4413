#!/usr/bin/env bash
# Runs the demo: the Wan VAE decoder port with every norm site on the fused op (a small
# random-weight decoder; a 3-frame latent -> 9 frames of 64x96), checked against the same decode
# with composed Burn ops, frames written to wan_vae_out/ as PNGs, a GIF and an MP4. CUDA when a GPU is
# present, otherwise the CubeCL CPU runtime. Does its own set-up first. Arguments go to the
# decoder's program (e.g. --weights PATH --latent PATH --dtype bf16; see wan-vae/src/main.rs).
# The single-op demo (error vs an f64 reference on a Wan shape): cargo run --release --example demo
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# Built with the whole workspace's features, so that it reuses the test suite's build.
cargo build --release --workspace --bins
exec "${CARGO_TARGET_DIR:-target}/release/wan-vae" "$@"
