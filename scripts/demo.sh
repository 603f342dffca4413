#!/usr/bin/env bash
# Runs the demo: the fused op on a Wan2.1 VAE shape, checked against the f64 reference, timed.
# CUDA when a GPU is present, otherwise the CubeCL CPU runtime. Does its own set-up first.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec cargo run --release --example demo -- "$@"
