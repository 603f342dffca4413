#!/usr/bin/env bash
# Runs NVIDIA compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over every kernel
# variant this crate can launch, on a CUDA machine, from the test binary packed by
# `scripts/gpu-pack.sh tests`. The selected tests launch, on small shapes: every knob path
# (register cache and streaming, plane and shared-memory lane reductions, gamma in registers /
# shared / global, several rows per unit, capped grids, fast_math), every tuned table entry
# (sm90 and the valid sm100 ones), the heuristic and table-derived fallbacks, the FP8 output,
# the rescue pass for out-of-range rows, pitched rows, the channels-first kernel, channels-last
# strides and copied layouts, and the backward (autodiff) path. Only this crate's kernels are
# instrumented (`rms_norm_*`); Burn's own kernels run unchecked.
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
tests=(kernel_knobs:: fp8:: channels:: edge_cases:: autodiff:: fusion:: module::
       forward::odd_channel_counts forward::one_row_and_zero_rows forward::f16_input
       forward::wan_l2_clamp forward::ranks_one_to_five)
tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(memcheck racecheck initcheck synccheck)
# Only this crate's kernels are instrumented (the option was `--filter` in older releases).
if "$sanitizer" --help 2>/dev/null | grep -q -- "--kernel-name"; then
    only=(--kernel-name kns=rms_norm)
else
    only=(--filter kns=rms_norm)
fi
"$sanitizer" --version | tail -1
status=0
for tool in "${tools[@]}"; do
    log="$out/sanitize-$tool.log"
    start=$(date +%s)
    extra=()
    [ "$tool" = racecheck ] && extra=(--racecheck-report all)
    timeout "${SANITIZE_TIMEOUT:-170}" "$sanitizer" --tool "$tool" "${only[@]}" \
        --print-limit 20 --error-exitcode 99 "${extra[@]}" \
        ./gpu/tests "${tests[@]}" --test-threads=1 > "$log" 2>&1
    rc=$?
    summary=$(grep -E "(ERROR|RACECHECK|INITCHECK|SYNCCHECK) SUMMARY" "$log" | tail -1)
    result=$(grep -E "^test result" "$log" | tail -1)
    echo "$tool: rc=$rc in $(( $(date +%s) - start )) s; ${summary:-no summary}; ${result:-no test result}"
    [ $rc -eq 0 ] || status=1
done
exit $status
