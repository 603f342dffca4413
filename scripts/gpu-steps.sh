#!/usr/bin/env bash
# One run on a GPU machine that measures everything (fits a 10-minute command limit; each step has its own
# timeout, and every step writes its results under $OUT as it goes):
#   1. the CUDA test suite ("sweep": the large ignored cases; "sanitize": compute-sanitizer),
#   2. the tuner (writes sm90.txt, or sm90_fp8.txt with tunefp8: copy it to kernels/lut/ and
#      commit),
#   3. the fallback comparison, 4. the channel-axis shapes, 5. the benchmark table,
#   6. torch eager / torch.compile for the rows and the channel-axis shapes.
# Here first: scripts/gpu-pack.sh tests bench   (then carry gpu/tests.xz and gpu/bench.xz).
# On the device: bash scripts/gpu-steps.sh [steps...]   (default: all; e.g. "tests bench")
set -uo pipefail
cd "$(dirname "$0")/.."
# Results go to gpu/out and are packed into one $OUT/results.tgz at the end (the device tool
# brings back at most 8 files).
out=$PWD/gpu/out
mkdir -p "$out"
for f in gpu/*.xz; do xz -dkf "$f"; done
chmod +x gpu/tests gpu/bench gpu/bench-* gpu/conv gpu/wan gpu/wan-tests 2>/dev/null
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
# Results and cubecl's environment into $OUT (after every step, and within long steps): a run
# that reaches the command's time limit still brings back what finished.
pack() {
    [ -n "${OUT:-}" ] || return 0
    tar czf "$OUT/results.tgz" -C gpu out
    # ("local" in cubecl.toml puts it in the binaries' working directory, gpu/.)
    (cd gpu && ls default.db* >/dev/null 2>&1 && tar czf "$OUT/env.tgz" default.db*) \
        || echo "no cubecl environment in gpu/: $(ls target/environment 2>&1 | tr '\n' ' ')"
}
for step in "${steps[@]}"; do
    start=$(date +%s)
    case "$step" in
        # The whole suite as parallel processes (scripts/cuda-suite.sh; TESTS_FILTER limits it).
        # (Its kernel caches then serve a later `sanitize` step of the same run: no warm-up.)
        tests) SUITE_OUT="$out" SUITE_TIMEOUT=${TESTS_TIMEOUT:-480} bash scripts/cuda-suite.sh ${TESTS_FILTER:-} \
                   > "$out/tests.log" 2>&1; cat "$out/tests.log"
               [ -z "${OUT:-}" ] || { cp "$OUT/suite-caches.tgz" gpu/suite-caches.tgz 2>/dev/null && suite_caches=1; } ;;
        # The ignored GPU probes: the FP8 mma.sync forms (`fp8_mma`) and the write-behind's cost.
        probes) (cd gpu && RMSNORM_TEST_DEVICE=cuda timeout "${PROBES_TIMEOUT:-120}" ./tests --ignored fp8_mma into_costs \
                   --nocapture --test-threads=1) > "$out/probes.log" 2>&1
                grep -E "^test |matches|differ|plain|panicked|ptxas|error" "$out/probes.log" | cut -c1-200 ;;
        sweep) (cd gpu && RMSNORM_TEST_DEVICE=cuda timeout 200 ./tests --ignored --test-threads=1) \
                   > "$out/sweep.log" 2>&1 ;;
        sanitize) SANITIZE_OUT="$out" SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-135} \
                   SANITIZE_WARMUP=${SANITIZE_WARMUP:-$([ -n "${suite_caches:-}" ] && echo 0 || echo 1)} \
                   bash scripts/sanitize.sh > "$out/sanitize.log" 2>&1; cat "$out/sanitize.log" ;;
        tune) (cd gpu && timeout "${TUNE_TIMEOUT:-240}" ./bench tune --lut "$out/sm90.txt" --out "$out") \
                   > "$out/tune.log" 2>&1 ;;
        tunefp8) (cd gpu && timeout "${TUNE_TIMEOUT:-240}" ./bench tune --output fp8 --lut "$out/sm90_fp8.txt" --out "$out") \
                   > "$out/tunefp8.log" 2>&1 ;;
        fallback) (cd gpu && timeout "${FALLBACK_TIMEOUT:-150}" ./bench fallback --out "$out") > "$out/fallback.log" 2>&1 ;;
        channels) (cd gpu && timeout "${CHANNELS_TIMEOUT:-240}" ./bench channels --out "$out") > "$out/channels.log" 2>&1 ;;
        # BENCH_BIN=bench-old (another build carried as gpu/bench-old.xz) and QUANT_TAG=-old
        # (quant-old.log, quant-old/quant.csv) for a same-run comparison of two builds.
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
        # The convolution tuner (scripts/conv-tune.sh: CONV_SHAPES="0 3" shape indices,
        # CONV_BUDGET seconds) and cuDNN on the same shapes (torchconvs).
        convtune) bash scripts/conv-tune.sh "$out" ${CONV_SHAPES:-} 2>&1 | tee "$out/conv_tune_driver.log" | tail -25 ;;
        # The wgmma convolution alone (the tuner's phase 0: the table's choice beside every wgmma
        # launch shape, each checked against the f64 reference) on the shapes whose C_in it
        # takes; the tuned table merged into the compiled-in one (conv/sm90_conv_merged.txt, for
        # the decoder's --conv-table).
        wgmmatune) CONV_PROBE=none CONV_BUDGET=${CONV_BUDGET:-200} \
                   CONV_EXCLUDE=sync_cyclic,sync_strided,sync_tilewise,async_cyclic,async_strided,tma,spec_cyclic,spec_strided,spec_tma,inferred,direct \
                   bash scripts/conv-tune.sh "$out/conv" ${CONV_SHAPES:-4 5 1 0 6 9 10 3 8 2} 2>&1 \
                   | tee "$out/wgmma_tune_driver.log" | tail -14 ;;
        convbench) (cd gpu && timeout "${CONV_TIMEOUT:-300}" ./conv bench --out "$out") > "$out/conv_bench.log" 2>&1
                   tail -20 "$out/conv_bench.log" ;;
        torchconvs) timeout 200 python3 scripts/wan_torch.py convs "$out" > "$out/torch_convs.log" 2>&1
                    cat "$out/torch_convs.log" | cut -c1-160 ;;
        wanfix) # The cross-check fixtures on CUDA: the decoder's tests (f32 and bf16 vs PyTorch).
             (cd gpu && WAN_FIXTURES=$PWD/fixtures RMSNORM_TEST_DEVICE=cuda timeout "${WANFIX_TIMEOUT:-200}" ./wan-tests \
                 --test-threads=1) > "$out/wanfix.log" 2>&1; grep -E "test |error|result" "$out/wanfix.log" ;;
        wancheck) # The decoder on CUDA against the cross-check fixtures' diffusers f32 decodes
             # (the binary compares with the fixture's `decoded_unclamped`), f32 and bf16, Wan2.1
             # and Wan2.2 layouts, with the wan binary alone.
             for m in wan21_small wan22_small; do for d in f32 bf16; do
                 f=../wan-vae/tests/fixtures/$m
                 (cd gpu && timeout "${WANCHECK_TIMEOUT:-120}" ./wan --weights "$f/diffusion_pytorch_model.safetensors" \
                     --latent "$f/io.safetensors" --raw-latent --dtype $d --device cuda --no-write --no-check \
                     --no-profile) > "$out/wancheck-$m-$d.log" 2>&1
                 echo "$m $d: rc=$? $(grep -E "^reference" "$out/wancheck-$m-$d.log")" | tee -a "$out/wancheck.log"
             done; done ;;
        wanprobe) # Where the decode's time and memory go, without diffusers: the full-size decoder
             # with random weights on a random 480p latent of WAN_FRAMES (default 21) latent
             # frames, the assembly timed both ways (--probe-assembly), cubecl's memory events in
             # wanprobe-memory.log; then the same with the pools' free pages kept
             # (--release-memory-first 0) or released every frame instead of after the first 3, and
             # with a synchronisation around each call. Each run's peak from nvidia-smi and from
             # cubecl's pools.
             wanrun() { # name, cubecl.toml addition, wan arguments...
                 local name=$1 extra=$2; shift 2
                 cp gpu/cubecl.toml gpu/cubecl.toml.plain; printf '%b' "$extra" >> gpu/cubecl.toml
                 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/$name-mem.txt" 2>/dev/null & smi=$!
                 (cd gpu && timeout "${WAN_TIMEOUT:-150}" ./wan --size full --frames "${WAN_FRAMES:-21}" --height 60 --width 104 \
                     --dtype bf16 --device cuda --no-write --no-check "$@") > "$out/$name.log" 2>&1
                 echo "rc=$?; peak $(sort -n "$out/$name-mem.txt" | tail -1) MiB in use on the GPU (nvidia-smi)" >> "$out/$name.log"
                 kill $smi 2>/dev/null; mv gpu/cubecl.toml.plain gpu/cubecl.toml
                 echo "== $name $*"; grep -vE "^latent frame|^Wan VAE|^latent \[|^81 frames" "$out/$name.log" | cut -c1-400
             }
             wanrun wanprobe "\n[memory.logger]\nfile = \"$out/wanprobe-memory.log\"\nlevel = \"basic\"\n" --probe-assembly
             wanrun wanprobe-keep "" --no-profile --release-memory-first 0
             wanrun wanprobe-every1 "" --no-profile --release-memory-every 1
             wanrun wanprobe-synced "" --no-profile --sync-calls on ;;
        wan) # The full-size Wan2.1 decoder (diffusers' random weights) at 480p, bf16, side by side
             # with diffusers on the same weights and latent: WAN_FRAMES latent frames (default
             # "3 21"); peak GPU memory sampled by nvidia-smi; the PSNR of each video against
             # diffusers' f32 decode. Needs diffusers as a wheel in .whl/ (see the device README).
             python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
                 && export PYTHONPATH=/tmp/site
             work=$PWD/gpu/work; mkdir -p "$work"   # weights, latents, videos: not packed into $OUT
             for t in ${WAN_FRAMES:-3 21}; do
                 [ -f "$work/latent_t$t.safetensors" ] || timeout 240 python3 scripts/wan_torch.py prepare "$work" $t \
                     > "$out/wan-prepare-$t.log" 2>&1 || tail -5 "$out/wan-prepare-$t.log"
                 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/wan-$t-mem.txt" 2>/dev/null & smi=$!
                 (cd gpu && timeout "${WAN_TIMEOUT:-200}" ./wan --weights "$work/wan21_random_decoder.safetensors" \
                     --latent "$work/latent_t$t.safetensors" --raw-latent --dtype bf16 --no-write ${WAN_ARGS:---no-check} \
                     --device cuda --save "$work/ours_t$t.safetensors") > "$out/wan-$t.log" 2>&1
                 kill $smi 2>/dev/null
                 echo "ours, T = $t: peak $(sort -n "$out/wan-$t-mem.txt" | tail -1) MiB in use on the GPU (nvidia-smi)" >> "$out/wan-$t.log"
                 grep -vE "^latent frame|\[#" "$out/wan-$t.log" | tail -8 | cut -c1-260
                 timeout 60 python3 scripts/wan_torch.py psnr "$work" $t "$work/ours_t$t.safetensors" 2>&1 \
                     | tail -2 | tee -a "$out/wan-$t.log"
                 rm -f "$work/ours_t$t.safetensors"; pack
                 # WAN_VARIANT="flags[; flags...]": the same decode again with other decoder flags
                 # (e.g. "--attention chunks; --precision fp8"), each with its own log
                 # (wan-<T>-variant<i>.log), peak and PSNR.
                 IFS=';' read -r -a variants <<< "${WAN_VARIANT:-}"
                 for vi in "${!variants[@]}"; do
                     v=${variants[$vi]}; [ -n "${v// }" ] || continue; name=wan-$t-variant$vi
                     nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/$name-mem.txt" 2>/dev/null & smi=$!
                     (cd gpu && timeout "${WAN_TIMEOUT:-200}" ./wan --weights "$work/wan21_random_decoder.safetensors" \
                         --latent "$work/latent_t$t.safetensors" --raw-latent --dtype bf16 --no-write ${WAN_ARGS:---no-check} \
                         --device cuda --no-profile --save "$work/ours_t${t}_variant.safetensors" $v) > "$out/$name.log" 2>&1
                     kill $smi 2>/dev/null
                     echo "ours ($v), T = $t: peak $(sort -n "$out/$name-mem.txt" | tail -1) MiB in use on the GPU (nvidia-smi)" >> "$out/$name.log"
                     timeout 60 python3 scripts/wan_torch.py psnr "$work" $t "$work/ours_t${t}_variant.safetensors" 2>&1 \
                         | tail -1 >> "$out/$name.log"
                     rm -f "$work/ours_t${t}_variant.safetensors"
                     grep -E "^decode|^memory|peak|PSNR" "$out/$name.log" | cut -c1-260; pack
                 done
                 [ "${WAN_TORCH:-1}" = 1 ] || continue
                 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/torch-$t-mem.txt" 2>/dev/null & smi=$!
                 timeout 240 python3 scripts/wan_torch.py decode "$work" $t > "$out/torch-decode-$t.log" 2>&1
                 kill $smi 2>/dev/null
                 echo "diffusers, T = $t: peak $(sort -n "$out/torch-$t-mem.txt" | tail -1) MiB in use on the GPU (nvidia-smi)" >> "$out/torch-decode-$t.log"
                 cat "$out/torch-decode-$t.log" | tail -4 | cut -c1-240; pack
             done
             ;;
        *) echo "unknown step $step"; continue ;;
    esac
    echo "step $step: rc=$? in $(( $(date +%s) - start )) s"
    pack
done
# (A later call on the same machine starts cold again, as its `tests` step should.)
[ -z "${suite_caches:-}" ] || rm -f gpu/suite-caches.tgz
grep -hE "test result|FAILED" "$out"/suite-*.log "$out/sweep.log" 2>/dev/null
tail -n 3 "$out/tune.log" "$out/fallback.log" "$out/channels.log" 2>/dev/null | cut -c1-160
tail -n 40 "$out"/quant*.log "$out/backward.log" 2>/dev/null | cut -c1-200
