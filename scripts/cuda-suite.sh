#!/usr/bin/env bash
# Runs the whole CUDA test suite from the test binary packed by `scripts/gpu-pack.sh tests`, as
# SUITE_SHARDS processes side by side (default: one per core, at most 16), each running one
# test at a time (SUITE_THREADS, default 1). A cold suite's time is mostly NVRTC, and cubecl
# compiles one process's kernels one at a time (under its device context's lock), so separate
# processes are what compiles in parallel, and one test per process makes each test's reported
# time its own (two compile-heavy tests in one process wait on each other's compilations). Tests are
# dealt to the shards in list order, so a module's heavy tests land on different shards. Each
# shard runs in a directory of its own with its own cubecl environment (kernel cache): no two
# processes write one cache file.
#
# Usage (on the device): bash scripts/cuda-suite.sh [test-binary arguments, e.g. a filter]
# SUITE_TIMEOUT (s, default 480) bounds each shard. SUITE_WRAP: a command each shard runs under
# (scripts/sanitize.sh passes compute-sanitizer); SUITE_KEEP_CACHE=1 keeps the shards' kernel
# caches from an earlier run (the same tests deal out the same way). The caches go to
# $OUT/suite-caches.tgz when $OUT is set; carried back as gpu/suite-caches.tgz, they make a run on
# a fresh machine warm (a sanitizer pass split over two machines). Logs:
# ${SUITE_OUT:-gpu/out}/${SUITE_NAME:-suite}-<n>.log with every test's time; <name>.log has the
# totals and the slowest tests. Exits non-zero if a shard failed or timed out.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${SUITE_OUT:-gpu/out}
mkdir -p "$out"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
[ -x gpu/tests ] || { xz -dkf gpu/tests.xz && chmod +x gpu/tests; }
# (RMSNORM_TEST_DEVICE=cpu runs the same shards on the CPU runtime, to try the script here.)
export CUDA_PATH=${CUDA_PATH:-${CUDA_HOME:-/usr/local/cuda}} RMSNORM_TEST_DEVICE=${RMSNORM_TEST_DEVICE:-cuda}
shards=${SUITE_SHARDS:-$(nproc)}
[ "$shards" -ge 1 ] || shards=1
[ "$shards" -le 16 ] || shards=16
mapfile -t names < <(gpu/tests --list "$@" 2>/dev/null | sed -n 's/: test$//p')
[ ${#names[@]} -gt 0 ] || { echo "no tests listed by gpu/tests" >&2; exit 2; }
# The Wan fixture cases need the fixtures beside the binary (`gpu-pack.sh fixtures`).
export WAN_FIXTURES=$PWD/gpu/fixtures
name=${SUITE_NAME:-suite}
wrap=()
[ -z "${SUITE_WRAP:-}" ] || read -r -a wrap <<< "$SUITE_WRAP"
keep=${SUITE_KEEP_CACHE:-0}
if [ "$keep" != 1 ] && [ -f gpu/suite-caches.tgz ]; then
    rm -rf gpu/shard-* && tar xzf gpu/suite-caches.tgz -C gpu && keep=1
fi
start=$(date +%s)
pids=()
for ((s = 0; s < shards; s++)); do
    group=()
    for ((i = s; i < ${#names[@]}; i += shards)); do group+=("${names[$i]}"); done
    [ ${#group[@]} -gt 0 ] || continue
    dir=gpu/shard-$s
    [ "$keep" = 1 ] || rm -rf "$dir"
    mkdir -p "$dir" && cp scripts/cubecl.toml "$dir/"
    # --report-time (libtest, unstable: RUSTC_BOOTSTRAP) prints each test's wall time.
    (cd "$dir" && RUSTC_BOOTSTRAP=1 timeout "${SUITE_TIMEOUT:-480}" ${wrap[@]+"${wrap[@]}"} ../tests \
        --exact "${group[@]}" --test-threads=${SUITE_THREADS:-1} -Zunstable-options --report-time) > "$out/$name-$s.log" 2>&1 &
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
cache="cold (no kernel cache)"
[ "$keep" != 1 ] || cache="with the shards' kernel caches"
if [ -n "${OUT:-}" ]; then
    (cd gpu && tar czf "$OUT/suite-caches.tgz" $(ls -d shard-*/default.db* 2>/dev/null)) 2>/dev/null || true
fi
logs=("$out/$name"-[0-9]*.log)
{
    echo "$(date -u +%F) $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1):" \
        "${#names[@]} tests in ${#pids[@]} processes, $(( $(date +%s) - start )) s $cache${SUITE_WRAP:+, under $SUITE_WRAP}"
    grep -h "^test result" "${logs[@]}" | awk '{p += $4; f += $6} END {print p " passed, " f " failed in all shards"}'
    grep -hE "^test .* (FAILED|has been running)" "${logs[@]}"
    grep -hE "(ERROR|RACECHECK|INITCHECK|SYNCCHECK) SUMMARY" "${logs[@]}" | sort | uniq -c
    echo "slowest:"
    grep -hE "^test .* ok <" "${logs[@]}" | sed -E 's/^test (.*) \.\.\. ok <(.*)s>/\2 \1/' | sort -rn | head -12
} | tee "$out/$name.log"
exit $rc
