#!/usr/bin/env bash
# Runs the whole test suite (the kernels on the CubeCL CPU runtime, Flex, autodiff, fusion).
# Does its own set-up first. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec cargo test --release --workspace "$@"
