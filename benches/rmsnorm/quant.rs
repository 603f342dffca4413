//! The benchmark's `quant`: FP8 and NVFP4 outputs (NVFP4 knobs swept; `RMSNORM_QUANT_SWEEP=0`: the selected
//! knobs only).

use super::*;

/// The NVFP4 knob space for one shape: lanes per row 1..256 (plane shuffles up to the plane,
/// shared memory above), 128 or 256 units per cube, blocks cached when at most 16 per lane
/// (else streamed), the PTX SiLU; and lane counts that are not powers of two but divide the
/// row's blocks (rows packed into planes).
pub(crate) fn fp4_candidates(
    client: &Client,
    channels: usize,
) -> Vec<burn_rmsnorm_silu::kernels::nvfp4::Fp4Knobs> {
    use burn_rmsnorm_silu::kernels::nvfp4::Fp4Knobs;
    let hw = &client.properties().hardware;
    let blocks = channels / 16;
    let mut out = Vec::new();
    for lanes in [1u32, 2, 4, 8, 16, 32, 64, 128, 256] {
        if lanes as usize > blocks.next_power_of_two() {
            continue;
        }
        for units in [128u32, 256] {
            if lanes > units {
                continue;
            }
            let bpl = blocks.div_ceil(lanes as usize);
            // The PTX SiLU won every shape of the first sweep (H200, 2026-11-30): the sweep
            // keeps to it, which halves its time.
            out.push(Fp4Knobs {
                vector_size: 8,
                lanes_per_row: lanes,
                rows_per_cube: units / lanes,
                rows_per_unit: 1,
                blocks_per_lane: if bpl <= 16 { bpl } else { 0 },
                lane_reduce: if lanes <= hw.plane_size_min {
                    LaneReduce::Plane
                } else {
                    LaneReduce::Shared
                },
                fast_math: true,
                max_cubes: None,
                raw_cache: false,
                gamma_shared: false,
            });
        }
    }
    // Lane counts that are not powers of two and divide the row's blocks (C = 96, 160, 192,
    // 320, 384, 640: no idle lane of a row), rows packed side by side into planes; 4 or 8
    // planes per cube (even, so the two-rows-per-unit variants below keep whole planes).
    let plane = hw.plane_size_min;
    for lanes in [3u32, 5, 6, 10, 12] {
        if plane < 32 || lanes > plane || !blocks.is_multiple_of(lanes as usize) {
            continue;
        }
        let bpl = blocks / lanes as usize;
        if bpl > 4 {
            continue;
        }
        for planes in [4u32, 8] {
            out.push(Fp4Knobs {
                vector_size: 8,
                lanes_per_row: lanes,
                rows_per_cube: plane / lanes * planes,
                rows_per_unit: 1,
                blocks_per_lane: bpl,
                lane_reduce: LaneReduce::Plane,
                fast_math: true,
                max_cubes: None,
                raw_cache: false,
                gamma_shared: false,
            });
        }
    }
    out
}

/// FP8 (row kernel, selected knobs) and NVFP4 (heuristic knobs and the best of a sweep) on the
/// tuned widths at T >= 24960, each against a copy of the same bytes in the same run (FP8 moves
/// 2 + 1 bytes per element, NVFP4 2 + 0.5 + 1/16).
pub(crate) fn quant(timer: &mut Timer, args: &Args) {
    use burn_rmsnorm_silu::kernels::nvfp4::{heuristic_fp4_knobs, select_fp4_knobs};
    let client = timer.client.clone();
    let mut csv = String::from(
        "c,t,fp8_us,fp8_copy_us,fp8_ratio,nvfp4_heuristic_us,nvfp4_best_us,nvfp4_copy_us,\
         nvfp4_ratio,nvfp4_best_knobs,fp8_read_heavy_copy_us,fp8_read_heavy_ratio,\
         nvfp4_read_heavy_copy_us,nvfp4_read_heavy_ratio,fp8_two_to_one_copy_us,\
         fp8_device_scale_us,fp8_device_scale_ratio\n",
    );
    let tokens: &[usize] = if args.quick {
        &[99_840]
    } else {
        &[24_960, 99_840, 399_360]
    };
    // `RMSNORM_QUANT_SWEEP=0`: the NVFP4 knobs the crate selects (table or heuristic) only.
    let sweep = std::env::var("RMSNORM_QUANT_SWEEP").map_or(true, |v| v != "0");
    for c in bench_channels(&CHANNELS) {
        for &t in tokens {
            let n = t * c;
            let b = Buffers::new(timer, t, c);
            let scratch = client.empty(n * 2);
            // The FP8 table's knobs (then the bf16 table's, the derived ones, the heuristic).
            let knobs = burn_rmsnorm_silu::kernels::select::select_output_knobs_with_source(
                &client, b.problem, 2, 2, "fp8", 256,
            )
            .0;
            // FP8 next to its roofs: the half-and-half copy of its 3 bytes per element, and the
            // same bytes moved as the kernel moves them (2 read, 1 written per element) with
            // one load per unit and with two loads and one store per unit.
            // And with the scale read on the device (the delayed-scaling path: never folded).
            let device_scale = burn_rmsnorm_silu::kernels::forward::DeviceScale {
                scale: client.create_from_slice(&1.0f32.to_ne_bytes()),
                decode: client.empty(4),
            };
            let [fp8, fp8_copy, fp8_rw_copy, fp8_two_to_one, fp8_device] = interleaved_medians(
                timer,
                50,
                [
                    &mut || b.launch_fp8(&client, &knobs),
                    &mut || timer.copy(&b.x, &scratch, half_and_half(n * 3)),
                    &mut || timer.copy_read_heavy(&b.x, &scratch, n * 2 / 16 * 16, 1, 2),
                    &mut || timer.copy_two_to_one(&b.x, &scratch, n * 2 / 32 * 32),
                    &mut || b.launch_fp8_device_scale(&client, &knobs, &device_scale),
                ],
            );
            // NVFP4: heuristic, then the sweep.
            let scales = client.empty(n / 16);
            let launch_nvfp4 = |k: &burn_rmsnorm_silu::kernels::nvfp4::Fp4Knobs| {
                b.launch_nvfp4(&client, &scales, k).expect("nvfp4 launch")
            };
            let run = |k: &burn_rmsnorm_silu::kernels::nvfp4::Fp4Knobs, runs: usize| {
                median(&timer.time(2, runs, || launch_nvfp4(k)))
            };
            let heuristic = heuristic_fp4_knobs(&client, c, 2);
            let h_time = run(&heuristic, 50);
            let mut best = (heuristic, h_time);
            if !sweep {
                best.0 = select_fp4_knobs(&client, c, t, 2);
            }
            let mut layouts = Vec::new();
            for k in fp4_candidates(&client, c).into_iter().filter(|_| sweep) {
                let time = run(&k, 15);
                layouts.push((k, time));
                if time < best.1 {
                    best = (k, time);
                }
            }
            layouts.sort_by(|a, b| a.1.total_cmp(&b.1));
            // The two best layouts with a persistent grid (1-8 cubes per SM; gamma stays in
            // registers across the rows a lane walks), with and without prefetch (the next row
            // group's x loaded before the current one is computed) where the row fits the
            // register cache.
            let sms = client
                .properties()
                .hardware
                .num_streaming_multiprocessors
                .unwrap_or(132);
            for (layout, _) in layouts.into_iter().take(2) {
                let cached = layout.caches_row(c);
                for per_sm in [1u32, 2, 4, 8] {
                    let k = burn_rmsnorm_silu::kernels::nvfp4::Fp4Knobs {
                        max_cubes: Some(sms * per_sm),
                        ..layout
                    };
                    let time = run(&k, 15);
                    if time < best.1 {
                        best = (k, time);
                    }
                }
                // Two rows per unit (the cube keeps its size): one grid or a persistent one.
                if layout.rows_per_cube >= 2 {
                    let two = burn_rmsnorm_silu::kernels::nvfp4::Fp4Knobs {
                        rows_per_cube: layout.rows_per_cube / 2,
                        rows_per_unit: 2,
                        ..layout
                    };
                    let mut variants = vec![two];
                    for per_sm in [2u32, 4] {
                        variants.push(burn_rmsnorm_silu::kernels::nvfp4::Fp4Knobs {
                            max_cubes: Some(sms * per_sm),
                            ..two
                        });
                    }
                    variants.dedup();
                    for k in variants {
                        let time = run(&k, 15);
                        if time < best.1 {
                            best = (k, time);
                        }
                    }
                }
                // The raw register cache (x kept as loaded, widened at each use: fewer
                // registers, one more instruction per element), on the layout's own grid and
                // on a persistent one.
                if cached {
                    let raw = burn_rmsnorm_silu::kernels::nvfp4::Fp4Knobs {
                        raw_cache: true,
                        ..layout
                    };
                    for k in [
                        raw,
                        burn_rmsnorm_silu::kernels::nvfp4::Fp4Knobs {
                            max_cubes: Some(sms * 4),
                            ..raw
                        },
                    ] {
                        let time = run(&k, 15);
                        if time < best.1 {
                            best = (k, time);
                        }
                    }
                    // Gamma in shared memory (widened once per cube), with either cache, on
                    // the layout's own grid.
                    for raw_cache in [false, true] {
                        let k = burn_rmsnorm_silu::kernels::nvfp4::Fp4Knobs {
                            raw_cache,
                            gamma_shared: true,
                            ..layout
                        };
                        let time = run(&k, 15);
                        if time < best.1 {
                            best = (k, time);
                        }
                    }
                }
            }
            // The chosen knobs next to their roofs: the half-and-half copy of 2 + 1/2 + 1/16
            // bytes per element, and the read-heavy copy (2 read, 9/16 written).
            let [best_time, nv_copy, nv_rw_copy] = interleaved_medians(
                timer,
                50,
                [
                    &mut || launch_nvfp4(&best.0),
                    &mut || timer.copy(&b.x, &scratch, half_and_half(nvfp4_bytes(n))),
                    &mut || timer.copy_read_heavy(&b.x, &scratch, n * 2 / 16 * 16, 9, 32),
                ],
            );
            writeln!(
                csv,
                "{c},{t},{fp8:.2},{fp8_copy:.2},{:.3},{h_time:.2},{best_time:.2},{nv_copy:.2},{:.3},{},\
                 {fp8_rw_copy:.2},{:.3},{nv_rw_copy:.2},{:.3},{fp8_two_to_one:.2},{fp8_device:.2},{:.3}",
                fp8 / fp8_copy,
                best_time / nv_copy,
                best.0,
                fp8 / fp8_rw_copy,
                best_time / nv_rw_copy,
                fp8_device / fp8_copy,
            )
            .unwrap();
            println!(
                "C={c:5} T={t:7}: fp8 {fp8:8.2} us (copy {fp8_copy:8.2}, x{:.3}) | nvfp4 heuristic \
                 {h_time:8.2} us, best {best_time:8.2} us {} (copy {nv_copy:8.2}, x{:.3}, \
                 heuristic x{:.3}) | read-heavy copies: fp8 {fp8_rw_copy:8.2} us (x{:.3}; two \
                 loads per unit {fp8_two_to_one:8.2} us), nvfp4 {nv_rw_copy:8.2} us (x{:.3}) | fp8 \
                 device scale {fp8_device:8.2} us (x{:.3})",
                fp8 / fp8_copy,
                best.0,
                best_time / nv_copy,
                h_time / nv_copy,
                fp8 / fp8_rw_copy,
                best_time / nv_rw_copy,
                fp8_device / fp8_copy,
            );
        }
    }
    write_file(args, "quant.csv", &csv);
}
