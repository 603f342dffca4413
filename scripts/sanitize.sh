#!/usr/bin/env bash
# Runs NVIDIA compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over every kernel
# variant this crate can launch, on a CUDA machine, from the test binary packed by
# `scripts/gpu-pack.sh tests`. The test suite launches, on small shapes: every knob path
# (register cache and streaming, plane and shared-memory lane reductions, gamma in registers /
# shared / global, several rows per unit, capped grids, fast_math), every tuned table entry
# (sm90 and the valid sm100 ones), the heuristic and table-derived fallbacks, the FP8 and NVFP4
# outputs and scale layouts, the rescue pass for out-of-range rows, pitched rows, the
# channels-first kernels, channels-last strides and copied layouts, and the backward (autodiff)
# path. Only this crate's norm kernels are instrumented there (`rms_norm_*`); a second pass per
# tool runs the convolution tests with every kernel instrumented (the direct convolution,
# cubek's implicit GEMMs on the table's configurations, and the Burn ops around them).
#
# Each pass is the suite in parallel processes (scripts/cuda-suite.sh) with the kernel caches of
# a warm-up run without a sanitizer, so the tools spend their time on the kernels, not on NVRTC.
#
# Usage (on the device): bash scripts/sanitize.sh [tool...]   (default: all four)
# Logs: ${SANITIZE_OUT:-gpu/out}/<tool>[-conv]-<shard>.log; prints one summary per pass and exits
# non-zero if any tool reported an error or a pass failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${SANITIZE_OUT:-gpu/out}
mkdir -p "$out"
export CUDA_PATH=${CUDA_PATH:-${CUDA_HOME:-/usr/local/cuda}} SUITE_OUT=$out
sanitizer=$(command -v compute-sanitizer || echo "$CUDA_PATH/bin/compute-sanitizer")
"$sanitizer" --version | tail -1
# SANITIZE_FILTER="nvfp4 channels" limits the run to tests whose names contain those words
# (for a re-check of changed kernels).
read -r -a filter_words <<< "${SANITIZE_FILTER:-}"
tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(memcheck racecheck initcheck synccheck)
# Warm-up without a sanitizer: Burn's autotuners (matmul, reduce) copy *output* buffers to
# benchmark candidates, which initcheck reports as uninitialised reads in Burn's `copy` kernel
# (unary_numeric) the first time a tuning key is seen (H200: 1055 such reports on a cold
# autotune cache, 0 with it warm). The warm-up also fills each shard's kernel cache.
# SANITIZE_WARMUP=0 skips it when gpu/suite-caches.tgz (an earlier suite's caches, autotune
# results included) is carried: the passes then restore those caches.
if [ "${SANITIZE_WARMUP:-1}" = 0 ] && [ -f gpu/suite-caches.tgz ]; then
    rm -rf gpu/shard-* && tar xzf gpu/suite-caches.tgz -C gpu
    echo "warm-up skipped: the shards' caches restored from gpu/suite-caches.tgz"
else
    SUITE_NAME=warmup SUITE_TIMEOUT=${SANITIZE_WARMUP_TIMEOUT:-480} bash scripts/cuda-suite.sh \
        ${filter_words[@]+"${filter_words[@]}"} > "$out/warmup.summary" 2>&1; head -3 "$out/warmup.summary"
fi
status=0
pass() { # tool, name, kernel filter ("" for every kernel), test filter words...
    local tool=$1 name=$2 kernels=$3 extra=""
    shift 3
    [ "$tool" = racecheck ] && extra="--racecheck-report all"
    SUITE_NAME=$name SUITE_KEEP_CACHE=1 SUITE_TIMEOUT=${SANITIZE_TIMEOUT:-240} \
        SUITE_WRAP="$sanitizer --tool $tool $kernels --print-limit 20 --error-exitcode 99 $extra" \
        bash scripts/cuda-suite.sh "$@" > "$out/$name.summary" 2>&1 || status=1
    echo "== $name: $(sed -n 1,2p "$out/$name.summary" | tr '\n' ' ')"
    grep -E "SUMMARY|FAILED|has been running" "$out/$name.summary"
}
for tool in "${tools[@]}"; do
    # initcheck tracks which bytes were written only through instrumented kernels and copies, so
    # it instruments every kernel (Burn's too): with the filter it would call Burn-written
    # buffers uninitialised.
    kernels="--kernel-name kns=rms_norm"
    [ "$tool" = initcheck ] && kernels=""
    pass "$tool" "$tool" "$kernels" ${filter_words[@]+"${filter_words[@]}"}
    [ "${SANITIZE_CONV:-1}" = 0 ] || pass "$tool" "$tool-conv" "" conv::
done
# initcheck over Burn's own matmul alone (the ignored `upstream` probe): whether the reports in
# cubek's `matmul_entry_*` kernels need anything of this crate.
if [[ " ${tools[*]} " == *" initcheck "* ]] && [ "${SANITIZE_UPSTREAM:-1}" = 1 ]; then
    (cd gpu/shard-0 && RMSNORM_TEST_DEVICE=cuda timeout 120 "$sanitizer" --tool initcheck --print-limit 20 \
        ../tests --ignored upstream) > "$out/initcheck-upstream.log" 2>&1
    echo "== initcheck-upstream: $(grep -E "^test result|ERROR SUMMARY" "$out/initcheck-upstream.log" | tr '\n' ' ')"
fi
exit $status
