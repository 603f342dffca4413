#!/usr/bin/env bash
# The convolution tuner on the GPU machine (binary gpu/conv from scripts/gpu-pack.sh conv), one
# process per shape: a candidate kernel that faults poisons its process's CUDA context, so a
# shape's failure does not take the others with it.
#   1. Probe: one shape (CONV_PROBE, default 6) checked serially; a routine whose kernel faults
#      (the last one the log names) is excluded and the probe runs again.
#   2. Every shape (arguments, default all) in parallel-check mode without those routines.
# Each shape's best configuration is appended to OUT/sm90_conv.txt (copy it to kernels/lut/).
# Usage, from the repository root: bash scripts/conv-tune.sh OUT [shape indices...]
# CONV_BUDGET: seconds for the whole run (default 300); CONV_EXCLUDE: routines to leave out;
# CONV_PROBE=none skips the probe (with CONV_EXCLUDE naming the routines known to fault).
# The tuned entries then replace their shapes' lines of kernels/lut/sm90_conv.txt in
# OUT/sm90_conv_merged.txt (the whole table, for the decoder's --conv-table).
set -uo pipefail
out=$(realpath -m "$1"); shift
mkdir -p "$out"
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=($(seq 0 15))
exclude=${CONV_EXCLUDE:-}
deadline=$(( $(date +%s) + ${CONV_BUDGET:-300} ))
probes=(1 2 3 4 5)
[ "${CONV_PROBE:-6}" = none ] && probes=()
for try in ${probes[@]+"${probes[@]}"}; do
    log=$out/conv_probe_$try.log
    (cd gpu && timeout 150 ./conv tune --only "${CONV_PROBE:-6}" --serial --out "$out/probe" \
        ${exclude:+--exclude "$exclude"}) > "$log" 2>&1 && break
    culprit=$(grep '^checking ' "$log" | tail -1 | awk '{print $2}' | cut -d. -f1)
    [ -n "$culprit" ] || { echo "probe failed without naming a candidate: $(tail -3 "$log")"; break; }
    echo "probe: a $culprit kernel faulted ($(grep '^checking ' "$log" | tail -1))"
    exclude=${exclude:+$exclude,}$culprit
done
echo "excluded routines: ${exclude:-none}"
for i in "${shapes[@]}"; do
    left=$(( deadline - $(date +%s) ))
    [ $left -gt 20 ] || { echo "no time left for shape $i"; continue; }
    (cd gpu && timeout $left ./conv tune --only "$i" --out "$out" ${exclude:+--exclude "$exclude"}) \
        >> "$out/conv_tune.log" 2>&1 || echo "shape $i: exit $?"
done
grep BEST "$out/conv_tune.log"
# The compiled-in table with the tuned shapes' lines replaced (same c_in c_out kt kh kw rows).
awk 'NR == FNR { if ($0 !~ /^#/ && NF == 9) tuned[$1" "$2" "$3" "$4" "$5" "$6] = $0; next }
     $0 !~ /^#/ && NF == 9 && ($1" "$2" "$3" "$4" "$5" "$6) in tuned { print tuned[$1" "$2" "$3" "$4" "$5" "$6]; next }
     { print }' "$out/sm90_conv.txt" kernels/lut/sm90_conv.txt > "$out/sm90_conv_merged.txt" 2>/dev/null \
    && echo "merged table: $out/sm90_conv_merged.txt"
