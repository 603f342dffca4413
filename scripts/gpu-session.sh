#!/usr/bin/env bash
# One device call that measures everything (fits the 10-minute limit; each step has its own
# timeout, and every step writes its results under $OUT as it goes):
#   1. the CUDA test suite ("sweep": the large ignored cases; "sanitize": compute-sanitizer),
#   2. the tuner (writes sm90.txt, or sm90_fp8.txt with tunefp8: copy it to kernels/lut/ and
#      commit),
#   3. the fallback comparison, 4. the channel-axis shapes, 5. the benchmark table,
#   6. torch eager / torch.compile for the rows and the channel-axis shapes.
# Here first: scripts/gpu-pack.sh tests bench   (then carry gpu/tests.xz and gpu/bench.xz).
# On the device: bash scripts/gpu-session.sh [steps...]   (default: all; e.g. "tests bench")
set -uo pipefail
cd "$(dirname "$0")/.."
# Results go to gpu/out and are packed into one $OUT/results.tgz at the end (the device tool
# brings back at most 8 files).
out=$PWD/gpu/out
mkdir -p "$out"
for f in gpu/*.xz; do xz -dkf "$f"; done
chmod +x gpu/tests gpu/bench gpu/bench-* gpu/wan gpu/wan-untuned 2>/dev/null
# cubecl's environment (compiled kernels and autotune results, one database) in gpu/ for every
# binary run from gpu/: steps share it, and it goes back in $OUT/env.tgz so that the next call
# can carry gpu/env.tgz and skip NVRTC and Burn's autotuning (minutes for the Wan decoder).
cp scripts/cubecl.toml gpu/cubecl.toml
# CUBECL_LOG=1: cubecl's own account of what takes the time (every autotune candidate and its
# timing, every kernel compiled) in $out/autotune.log and $out/compile.log.
if [ "${CUBECL_LOG:-0}" = 1 ]; then cat >> gpu/cubecl.toml <<TOML

[autotune.logger]
file = "$out/autotune.log"
level = "full"

[compilation.logger]
file = "$out/compile.log"
level = "basic"
TOML
fi
[ -f gpu/env.tgz ] && tar xzf gpu/env.tgz -C gpu && echo "cubecl environment restored: $(du -sh gpu/default.db* | tr '\n' ' ')"
export CUDA_PATH=${CUDA_PATH:-${CUDA_HOME:-/usr/local/cuda}} PYTHONUNBUFFERED=1
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests sanitize fallback channels backward bench torch)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
for step in "${steps[@]}"; do
    start=$(date +%s)
    case "$step" in
        tests) skip=(); [ -d gpu/fixtures/wan21_small ] || skip=(--skip wan_vae)
               (cd gpu && WAN_FIXTURES=$PWD/fixtures RMSNORM_TEST_DEVICE=cuda timeout "${TESTS_TIMEOUT:-150}" \
                   ./tests --test-threads="${TESTS_THREADS:-4}" ${skip[@]+"${skip[@]}"} ${TESTS_FILTER:-}) \
                   > "$out/tests.log" 2>&1 ;;
        sweep) (cd gpu && RMSNORM_TEST_DEVICE=cuda timeout 200 ./tests --ignored --test-threads=1) \
                   > "$out/sweep.log" 2>&1 ;;
        sanitize) SANITIZE_OUT="$out" SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-135} \
                   bash scripts/sanitize.sh > "$out/sanitize.log" 2>&1; cat "$out/sanitize.log" ;;
        tune) (cd gpu && timeout "${TUNE_TIMEOUT:-240}" ./bench tune --lut "$out/sm90.txt" --out "$out") \
                   > "$out/tune.log" 2>&1 ;;
        tunefp8) (cd gpu && timeout "${TUNE_TIMEOUT:-240}" ./bench tune --output fp8 --lut "$out/sm90_fp8.txt" --out "$out") \
                   > "$out/tunefp8.log" 2>&1 ;;
        fallback) (cd gpu && timeout "${FALLBACK_TIMEOUT:-150}" ./bench fallback --out "$out") > "$out/fallback.log" 2>&1 ;;
        channels) (cd gpu && timeout "${CHANNELS_TIMEOUT:-240}" ./bench channels --out "$out") > "$out/channels.log" 2>&1 ;;
        # BENCH_BIN=bench-old (another build carried as gpu/bench-old.xz) and QUANT_TAG=-old
        # (quant-old.log, quant-old/quant.csv) for a same-session comparison of two builds.
        quant) (cd gpu && timeout "${QUANT_TIMEOUT:-300}" "./${BENCH_BIN:-bench}" quant --out "$out${QUANT_TAG:+/quant$QUANT_TAG}") \
                   > "$out/quant${QUANT_TAG:-}.log" 2>&1 ;;
        # RMSNORM_AB="C T out knobs knobs ...; ...": same-run timings of row-kernel knobs.
        ab) (cd gpu && timeout "${AB_TIMEOUT:-200}" ./bench ab) > "$out/ab.log" 2>&1 ;;
        # The copy-roof experiment: copy shapes in CubeCL, torch's copy_ and Triton copies.
        copies) (cd gpu && timeout "${COPIES_TIMEOUT:-150}" ./bench copies --out "$out") > "$out/copies.log" 2>&1
                [ "${COPIES_TORCH:-1}" = 0 ] || timeout 120 python3 benches/torch_compare.py --out "$out" --copies >> "$out/copies.log" 2>&1 ;;
        backward) (cd gpu && timeout "${BACKWARD_TIMEOUT:-200}" ./bench backward --out "$out") > "$out/backward.log" 2>&1 ;;
        bench) (cd gpu && timeout 150 ./bench bench --out "$out") > "$out/bench.log" 2>&1 ;;
        ncu) # Nsight Compute on one launch of a kernel in the quick quant bench (NCU_KERNEL, a
             # regex; NCU_C the widths; NCU_ARGS other bench arguments, e.g. "backward" with
             # RMSNORM_BENCH_T; NCU_OPTS more ncu options, e.g. "--clock-control none" for the
             # boost clock): speed of light, warp stalls, pipes, occupancy. NCU_SKIP: matching
             # launches skipped (default 2: `quant` launches the NVFP4 heuristic's 52 first, so
             # with RMSNORM_QUANT_SWEEP=0, NCU_SKIP=60 profiles the table's kernel instead).
             ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
             if [ -z "$ncu_bin" ]; then echo "no ncu: $(ls /usr/local/cuda/bin | tr '\n' ' ')" > "$out/ncu.log"; else
             (cd gpu && RMSNORM_BENCH_C=${NCU_C:-1024} timeout "${NCU_TIMEOUT:-240}" "$ncu_bin" -k "regex:${NCU_KERNEL:-nvfp4_rows}" \
                 --launch-skip "${NCU_SKIP:-2}" --launch-count "${NCU_COUNT:-1}" --section SpeedOfLight --section WarpStateStats \
                 --section ComputeWorkloadAnalysis --section Occupancy --section InstructionStats --section LaunchStats \
                 ${NCU_OPTS:-} ./bench ${NCU_ARGS:-quant --quick}) > "$out/ncu.log" 2>&1; fi
             grep -E "Duration|Throughput|Issue|Stall|Occupancy|Pipe|Registers|==PROF==|ERR" "$out/ncu.log" | head -60 ;;
        torch) timeout 150 python3 benches/torch_compare.py --out "$out" > "$out/torch.log" 2>&1
               timeout 60 python3 benches/torch_compare.py --out "$out" --channels >> "$out/torch.log" 2>&1
               timeout 100 python3 benches/torch_compare.py --out "$out" --backward >> "$out/torch.log" 2>&1 ;;
        wanfix) # The cross-check fixtures on CUDA, f32 and bf16, vs PyTorch's output.
             for v in ${WANFIX_MODELS:-wan21_small wan22_small}; do for dt in ${WANFIX_DTYPES:-f32 bf16}; do
                 (cd gpu && CUBECL_AUTOTUNE_LEVEL=${WAN_AUTOTUNE:-minimal} timeout "${WANFIX_TIMEOUT:-60}" "./${WAN_BIN:-wan}" --weights fixtures/$v/diffusion_pytorch_model.safetensors \
                     --latent fixtures/$v/io.safetensors --dtype $dt --no-write --no-check --no-norm-time --device cuda) \
                     > "$out/wanfix-$v-$dt.log" 2>&1
                 echo "$v $dt: $(grep -hE 'reference|check:' "$out/wanfix-$v-$dt.log" | tr '\n' ' ')"
             done; done ;;
        wan) # Full-size Wan2.1 decoder (random weights), 480p latent [1, 16, 3, 60, 104], bf16:
             # fused vs composed norm sites, peak GPU memory sampled by nvidia-smi. Burn's
             # convolutions autotune on first use (minutes at cubecl's default level), so the
             # Wan steps autotune at the minimal level unless WAN_AUTOTUNE says otherwise.
             # WAN_TAG names the logs (wan<TAG>-<mode>.log); WAN_BIN=wan-untuned runs the build without Burn's autotuning; WAN_MODES="fused" runs one mode; WAN_CONV=matmul (read by the binary) swaps the
             # convolutions for matmuls; WAN_TRACE=1 times every convolution.
             # WAN_BUDGET=S: the modes share S seconds (each still at most WAN_TIMEOUT), so a
             # warm-up call gives the first mode what it needs and the next one the rest.
             wan_end=$(( $(date +%s) + ${WAN_BUDGET:-100000} ))
             for mode in ${WAN_MODES:-fused unfused}; do
                 extra=(); [ $mode = unfused ] && extra=(--unfused)
                 left=$(( wan_end - $(date +%s) )); limit=${WAN_TIMEOUT:-280}
                 [ $left -lt $limit ] && limit=$left
                 [ $limit -lt 10 ] && { echo "wan $mode: no time left"; continue; }
                 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 \
                     > "$out/wan${WAN_TAG:-}-$mode-mem.txt" 2>/dev/null & smi=$!
                 (cd gpu && CUBECL_AUTOTUNE_LEVEL=${WAN_AUTOTUNE:-minimal} timeout "$limit" "./${WAN_BIN:-wan}" --size full --frames 3 --height 60 --width 104 \
                     --dtype bf16 --no-check --no-write --device cuda ${extra[@]+"${extra[@]}"} \
                     --out "$out/wan${WAN_TAG:-}-$mode") > "$out/wan${WAN_TAG:-}-$mode.log" 2>&1
                 kill $smi 2>/dev/null
                 echo "wan $mode: peak $(sort -n "$out/wan${WAN_TAG:-}-$mode-mem.txt" | tail -1) MiB" >> "$out/wan${WAN_TAG:-}-$mode.log"
                 tail -4 "$out/wan${WAN_TAG:-}-$mode.log"
             done ;;
        *) echo "unknown step $step"; continue ;;
    esac
    echo "step $step: rc=$? in $(( $(date +%s) - start )) s"
    # Packed after every step: a call that runs out of time still brings back what finished.
    if [ -n "${OUT:-}" ]; then
        tar czf "$OUT/results.tgz" -C gpu out
        # ("local" in cubecl.toml puts it in the binaries' working directory, gpu/.)
        (cd gpu && ls default.db* >/dev/null 2>&1 && tar czf "$OUT/env.tgz" default.db*) \
            || echo "no cubecl environment in gpu/: $(ls target/environment 2>&1 | tr '\n' ' ')"
    fi
done
grep -hE "test result|FAILED" "$out/tests.log" "$out/sweep.log" 2>/dev/null
tail -n 3 "$out/tune.log" "$out/fallback.log" "$out/channels.log" 2>/dev/null | cut -c1-160
tail -n 40 "$out"/quant*.log "$out/backward.log" 2>/dev/null | cut -c1-200
