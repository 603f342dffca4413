#!/usr/bin/env bash
# Makes the offline build of cubecl's CUDA and CPU runtimes work on a Debian machine that
# reaches only package registries (see README "Set-up").
#
# cubecl-llvm's build dependency `tracel-llvm-bundler` downloads a prebuilt LLVM from GitHub
# unless its install folder already holds the marker `.tracel-llvm-installed`. We install
# Debian's LLVM 22 and point the bundler's folder at it. What this changes on the system:
#   - apt packages llvm-22-dev, libpolly-22-dev, libzstd-dev (+ xz-utils, zstd)
#   - the symlink $XDG_DATA_HOME/tracel/tracel-llvm-23.1.0-4 -> /usr/lib/llvm-22
#   - the marker file /usr/lib/llvm-22/.tracel-llvm-installed
#   - the symlink /usr/lib/x86_64-linux-gnu/liblibz3.so -> libz3.so (llvm-config names z3 by
#     full path, which the bundler turns into -llibz3)
# Idempotent: a second run only checks and returns.
set -euo pipefail

LLVM_DIR=/usr/lib/llvm-22
TRACEL_DIR="${XDG_DATA_HOME:-$HOME/.local/share}/tracel"
TRACEL_LINK="$TRACEL_DIR/tracel-llvm-23.1.0-4"
Z3_ALIAS=/usr/lib/x86_64-linux-gnu/liblibz3.so

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if [ ! -x "$LLVM_DIR/bin/llvm-config" ] || ! dpkg -s libpolly-22-dev libzstd-dev >/dev/null 2>&1; then
    echo "setup: installing Debian LLVM 22 (llvm-22-dev, libpolly-22-dev, libzstd-dev)" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        llvm-22-dev libpolly-22-dev libzstd-dev xz-utils >/dev/null
fi

mkdir -p "$TRACEL_DIR"
[ "$(readlink "$TRACEL_LINK" 2>/dev/null)" = "$LLVM_DIR" ] || ln -sfn "$LLVM_DIR" "$TRACEL_LINK"
[ -e "$LLVM_DIR/.tracel-llvm-installed" ] || as_root touch "$LLVM_DIR/.tracel-llvm-installed"
if [ -e /usr/lib/x86_64-linux-gnu/libz3.so ] && [ ! -e "$Z3_ALIAS" ]; then
    as_root ln -sf /usr/lib/x86_64-linux-gnu/libz3.so "$Z3_ALIAS"
fi
