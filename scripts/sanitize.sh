#!/usr/bin/env bash
# Runs NVIDIA compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over every kernel
# variant this crate can launch, on a CUDA machine, from the test binary packed by
# `scripts/gpu-pack.sh tests`. The test suite launches, on small shapes: every knob path
# (register cache and streaming, plane and shared-memory lane reductions, gamma in registers /
# shared / global, several rows per unit, capped grids, fast_math), every tuned table entry
# (sm90 and the valid sm100 ones), the heuristic and table-derived fallbacks, the FP8 output,
# the rescue pass for out-of-range rows, pitched rows, the channels-first kernel, channels-last
# strides and copied layouts, and the backward (autodiff) path. Only this crate's norm kernels
# are instrumented there (`rms_norm_*`); a second pass per tool runs the convolution tests with
# every kernel instrumented (the direct convolution, cubek's implicit GEMMs).
#
# Usage (on the device): bash scripts/sanitize.sh [tool...]   (default: all four)
# Logs: ${OUT:-gpu/out}/sanitize-<tool>.log; prints one summary line per tool and exits
# non-zero if any tool reported an error or its run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${SANITIZE_OUT:-gpu/out}
mkdir -p "$out"
[ -x gpu/tests ] || { xz -dkf gpu/tests.xz && chmod +x gpu/tests; }
export CUDA_PATH=${CUDA_PATH:-${CUDA_HOME:-/usr/local/cuda}} RMSNORM_TEST_DEVICE=cuda
sanitizer=$(command -v compute-sanitizer || echo "$CUDA_PATH/bin/compute-sanitizer")
# The whole CUDA suite (not the large ignored sweep): it asserts every result as well. The Wan
# decoder tests are left out: they run Burn's convolutions for minutes and launch no kernel
# variant the other tests do not.
tests=(--skip wan_vae)
# SANITIZE_FILTER="nvfp4 channels" limits the run to tests whose names contain those words
# (for a re-check of changed kernels).
read -r -a filter_words <<< "${SANITIZE_FILTER:-}"
tests+=(${filter_words[@]+"${filter_words[@]}"})
tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(memcheck racecheck initcheck synccheck)
# Only this crate's kernels are instrumented (compute-sanitizer 2022+ option).
only=(--kernel-name kns=rms_norm)
"$sanitizer" --version | tail -1
# Run from gpu/, where cubecl.toml turns on cubecl's compilation cache (kept in gpu/, as
# scripts/gpu-steps.sh keeps it): the first run pays for NVRTC, the others reuse its PTX (the
# test binary JIT-compiles a few hundred configs).
cp scripts/cubecl.toml gpu/cubecl.toml
cd gpu
case "$out" in /*) ;; *) out="../$out" ;; esac
# initcheck tracks which bytes were written only through instrumented kernels and copies, so
# it instruments every kernel (Burn's too): with the filter it would call Burn-written buffers
# uninitialised.
# One tool over the suite with this crate's norm kernels instrumented; then (unless
# SANITIZE_CONV=0) over the convolution tests with every kernel instrumented: the direct
# convolution, cubek's implicit GEMMs on the table's configurations, and the Burn ops around them.
run_tool() {
    local tool=$1 rc=0
    run_pass "$tool" "$tool" "${only[@]}" -- ${tests[@]+"${tests[@]}"} || rc=1
    if [ "${SANITIZE_CONV:-1}" != 0 ]; then
        run_pass "$tool" "$tool-conv" -- conv:: || rc=1
    fi
    return $rc
}
run_pass() {
    local tool=$1 name=$2 start extra=() filter=() args=()
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do filter+=("$1"); shift; done
    shift
    args=("$@")
    local log="$out/sanitize-$name.log"
    start=$(date +%s)
    [ "$tool" = racecheck ] && extra=(--racecheck-report all)
    [ "$tool" = initcheck ] && filter=()
    timeout "${SANITIZE_TIMEOUT:-170}" "$sanitizer" --tool "$tool" ${filter[@]+"${filter[@]}"} \
        --print-limit 20 --error-exitcode 99 ${extra[@]+"${extra[@]}"} \
        ./tests ${args[@]+"${args[@]}"} --test-threads=4 > "$log" 2>&1
    local rc=$?
    summary=$(grep -E "(ERROR|RACECHECK|INITCHECK|SYNCCHECK) SUMMARY" "$log" | tail -1)
    result=$(grep -E "^test result" "$log" | tail -1)
    echo "$name: rc=$rc in $(( $(date +%s) - start )) s; ${summary:-no summary}; ${result:-no test result}"
    return $rc
}
# Warm-up without a sanitizer: Burn's autotuners (matmul, reduce) copy *output* buffers to
# benchmark candidates, which initcheck reports as uninitialised reads in Burn's `copy` kernel
# (unary_numeric) the first time a tuning key is seen. Measured on the H200: 1055 such reports
# on a cold autotune cache, 0 on the same tests with the cache warm. The warm-up also fills the
# compilation cache, so the tools run fast.
start=$(date +%s)
timeout "${SANITIZE_WARMUP_TIMEOUT:-300}" ./tests ${tests[@]+"${tests[@]}"} --test-threads=8 \
    > "$out/sanitize-warmup.log" 2>&1
echo "warm-up: rc=$? in $(( $(date +%s) - start )) s; $(grep -E '^test result' "$out/sanitize-warmup.log" | tail -1)"
status=0
if [ -n "${SANITIZE_PARALLEL:-}" ]; then
    # Tools in parallel processes on the one GPU (each has its own cubecl cache warm-up).
    pids=()
    for tool in "${tools[@]}"; do run_tool "$tool" & pids+=($!); done
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
else
    for tool in "${tools[@]}"; do run_tool "$tool" || status=1; done
fi
exit $status
