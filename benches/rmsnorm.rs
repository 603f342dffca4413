//! Benchmarks and the knob tuner for the fused RMSNorm + SiLU kernel (custom harness).
//!
//! ```text
//! cargo bench --bench rmsnorm                  # bench: the 55 tuned shapes + fallback shapes
//! cargo bench --bench rmsnorm -- tune          # sweep knobs per shape, write kernels/lut/sm<NN>.txt
//! cargo bench --bench rmsnorm -- fallback      # heuristic vs best knobs on shapes outside the LUT
//! cargo bench --bench rmsnorm -- channels      # the Wan VAE's channel-axis shapes, both layouts
//! cargo bench --bench rmsnorm -- backward      # the fused backward against its copy roof
//! cargo bench --bench rmsnorm -- quant         # FP8 and NVFP4 outputs (NVFP4 knobs swept;
//!                                              # RMSNORM_QUANT_SWEEP=0: the selected knobs only)
//! RMSNORM_AB="96 24960 bf16 selected <knobs>; ..." cargo bench --bench rmsnorm -- ab
//!                                              # knobs side by side in one run (5 rounds;
//!                                              # `selected`: the crate's own choice;
//!                                              # RMSNORM_AB_ALTERNATE=1: also timed in turn;
//!                                              # RMSNORM_AB_CODE_WARM=1: also with the code warm)
//! cargo bench --bench rmsnorm -- copies        # copy shapes of the same bytes (the roof's choice)
//! options: --out DIR (CSV files; default target/bench)  --lut FILE  --quick (fewer shapes)
//!          --output fp8 (tune: the table for FP8 output, kernels/lut/sm<NN>_fp8.txt)
//! ```
//! Device timers (CUDA events through cubecl profile windows), warm-up, medians of >= 50 runs
//! (15 per candidate while tuning), the L2 flushed before every timed run, fresh random inputs
//! per shape, and a same-bytes copy measured in the same run as the roof (one 16-byte vector per
//! unit on a full grid, the fastest shape of `copies`, as fast as torch's `copy_`); `bench`,
//! `quant` and `ab` time a kernel and its copies in 5 interleaved rounds. Runs on CUDA device 0
//! (`--device cpu` for the CubeCL CPU runtime, for a smoke test only).

use std::fmt::Write as _;
use std::time::Instant;

use burn::backend::DispatchDevice;
use burn::tensor::activation::silu;
use burn::tensor::{DType, Device, Distribution, Tensor};
use burn_rmsnorm_silu::kernels::cubecl::ir::{ElemType, FloatKind};
use burn_rmsnorm_silu::kernels::cubecl::prelude::*;
use burn_rmsnorm_silu::kernels::cubecl::server::Handle;
use burn_rmsnorm_silu::kernels::device::device_sm;
use burn_rmsnorm_silu::kernels::select::pick_vector_size;
use burn_rmsnorm_silu::kernels::timing::{CopyShape, Timer, median};
use burn_rmsnorm_silu::kernels::validate::validate_knobs;
use burn_rmsnorm_silu::kernels::{
    Activation, GammaIn, KnobSource, Knobs, LaneReduce, NormParams, RowsProblem, heuristic_knobs,
    launch_forward, select_knobs_with_source, table_derived_knobs,
};
use burn_rmsnorm_silu::rms_norm_silu;

const CHANNELS: [usize; 11] = [64, 128, 160, 256, 320, 512, 640, 1024, 96, 192, 384];
const TOKENS: [usize; 5] = [1560, 6240, 24960, 99840, 399360];
const FALLBACK_CHANNELS: [usize; 6] = [48, 200, 768, 1536, 2048, 4096];
const FALLBACK_TOKENS: [usize; 3] = [1000, 50000, 1597440];
const BF16: ElemType = ElemType::Float(FloatKind::BF16);

struct Args {
    mode: String,
    out: String,
    lut: Option<String>,
    quick: bool,
    device: String,
    /// `tune` only: the output kind to tune for (`bf16`, or `fp8` for FP8 E4M3 output).
    output: String,
}

/// `all`, or those of them named in `RMSNORM_BENCH_C=1024,2048` (for a short run;
/// `tune` then writes a table of those C only, to merge by hand). Used by `tune`, `fallback`,
/// `quant`, `backward` and `channels` (the shapes of those C).
fn bench_channels(all: &[usize]) -> Vec<usize> {
    env_subset("RMSNORM_BENCH_C", all)
}

/// `all`, or those of them named in `RMSNORM_BENCH_T=24960,99840` (used by `tune`, `fallback`
/// and `backward`).
fn bench_rows(all: &[usize]) -> Vec<usize> {
    env_subset("RMSNORM_BENCH_T", all)
}

/// The values of `all` listed (comma-separated) in the environment variable `var`; all of them
/// when it is unset.
fn env_subset(var: &str, all: &[usize]) -> Vec<usize> {
    match std::env::var(var) {
        Err(_) => all.to_vec(),
        Ok(list) => {
            let wanted: Vec<usize> = list
                .split(',')
                .map(|v| {
                    v.trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("{var}: comma-separated numbers, got `{list}`"))
                })
                .collect();
            all.iter().copied().filter(|v| wanted.contains(v)).collect()
        }
    }
}

const MODES: [&str; 8] = [
    "bench", "tune", "fallback", "channels", "backward", "quant", "ab", "copies",
];

fn args() -> Args {
    let raw: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let value = |name: &str| {
        raw.iter()
            .position(|a| a == name)
            .and_then(|i| raw.get(i + 1).cloned())
    };
    Args {
        mode: match raw.first().filter(|a| !a.starts_with("--")) {
            None => "bench".into(),
            Some(m) if MODES.contains(&m.as_str()) => m.clone(),
            Some(m) => panic!("unknown mode `{m}`: expected one of {MODES:?}"),
        },
        out: value("--out").unwrap_or_else(|| "target/bench".into()),
        lut: value("--lut"),
        quick: raw.iter().any(|a| a == "--quick"),
        device: value("--device").unwrap_or_else(|| "cuda".into()),
        output: match value("--output").as_deref() {
            None | Some("bf16") => "bf16".into(),
            Some("fp8") => "fp8".into(),
            Some(other) => panic!("--output must be bf16 or fp8, got {other}"),
        },
    }
}

/// One problem's device buffers (fresh random inputs).
struct Buffers {
    x: Handle,
    gamma: Handle,
    out: Handle,
    problem: RowsProblem,
    /// Write FP8 E4M3 (1 byte per element) instead of bf16.
    fp8: bool,
    /// SiLU, or the identity with `RMSNORM_ACTIVATION=identity`: what the activation costs.
    activation: Activation,
}

impl Buffers {
    fn new(timer: &mut Timer, rows: usize, channels: usize) -> Self {
        Buffers {
            x: timer.random(BF16, rows * channels, -5.0, 20.0),
            gamma: timer.random(BF16, channels, 0.5, 1.5),
            out: timer.client.empty(rows * channels * 2),
            problem: RowsProblem::dense(rows, channels),
            fp8: false,
            activation: match std::env::var("RMSNORM_ACTIVATION").as_deref() {
                Err(_) | Ok("silu") => Activation::Silu,
                Ok("identity") => Activation::Identity,
                Ok(other) => panic!("RMSNORM_ACTIVATION: silu or identity, got `{other}`"),
            },
        }
    }

    fn bytes(&self) -> f64 {
        let RowsProblem { rows, channels, .. } = self.problem;
        let per_element = if self.fp8 { 3 } else { 4 };
        (rows * channels * per_element + channels * 2) as f64
    }

    /// The norm every timed launch uses: RMS with eps = 1e-6 / C.
    fn norm(&self) -> NormParams {
        NormParams::rms(1e-6 / self.problem.channels as f32)
    }

    fn launch(&self, client: &Client, knobs: &Knobs) {
        if self.fp8 {
            self.launch_fp8(client, knobs);
            return;
        }
        launch_forward(
            client,
            self.x.clone(),
            self.gamma.clone(),
            self.out.clone(),
            BF16,
            BF16,
            self.problem,
            self.norm(),
            self.activation,
            knobs,
        )
        .expect("launch");
    }

    /// FP8 E4M3 out (scale 1) into `out`, whatever `fp8` says.
    fn launch_fp8(&self, client: &Client, knobs: &Knobs) {
        burn_rmsnorm_silu::kernels::forward::launch_forward_fp8(
            client,
            self.x.clone(),
            self.gamma.clone(),
            self.out.clone(),
            BF16,
            BF16,
            self.problem,
            self.norm(),
            self.activation,
            1.0,
            knobs,
        )
        .expect("fp8 launch");
    }

    /// NVFP4 out (TransformerEngine recipe, `s_enc` 100, row-major scales into `scales`, codes
    /// into `out`, the SiLU), whatever `fp8` says.
    fn launch_nvfp4(
        &self,
        client: &Client,
        scales: &Handle,
        knobs: &burn_rmsnorm_silu::kernels::nvfp4::Fp4Knobs,
    ) -> Result<(), burn_rmsnorm_silu::kernels::ForwardError> {
        use burn_rmsnorm_silu::kernels::nvfp4::{
            Fp4Recipe, Fp4Target, ScaleLayout, launch_forward_nvfp4,
        };
        launch_forward_nvfp4(
            client,
            self.x.clone(),
            self.gamma.clone(),
            Fp4Target {
                codes: self.out.clone(),
                scales: scales.clone(),
                recipe: Fp4Recipe::TransformerEngine,
                layout: ScaleLayout::RowMajor,
                s_enc: 100.0,
            },
            BF16,
            BF16,
            self.problem,
            self.norm(),
            Activation::Silu,
            knobs,
        )
    }

    fn valid(&self, client: &Client, knobs: &Knobs) -> bool {
        check_row_knobs(client, knobs, self.problem, self.fp8).is_ok()
    }
}

/// Whether the row kernel can run `knobs` on `problem` with the benchmarks' buffers (bf16 x and
/// gamma, bf16 or FP8 out, aligned allocations), and why not.
fn check_row_knobs(
    client: &Client,
    knobs: &Knobs,
    problem: RowsProblem,
    fp8: bool,
) -> Result<(), String> {
    let out = if fp8 { 1 } else { 2 };
    validate_knobs(client, knobs, problem, &[0; 3], &[2, 2, out]).map_err(|e| format!("{e:?}"))
}

/// Rounds of [`interleaved_medians`]: a slow drift of the device (clocks, temperature) between
/// the first and the last timed run then reaches every launch alike instead of whichever was
/// timed last.
const ROUNDS: usize = 5;

/// Medians of `runs` timed calls of each of `launches`, taken in [`ROUNDS`] rounds of
/// `runs / ROUNDS` calls per launch in turn (the L2 flushed before each, as [`Timer::time`]):
/// the kernel and its copy roof share the same stretch of time.
fn interleaved_medians<const K: usize>(
    timer: &Timer,
    runs: usize,
    mut launches: [&mut dyn FnMut(); K],
) -> [f64; K] {
    let mut times: [Vec<f64>; K] = std::array::from_fn(|_| Vec::with_capacity(runs));
    let per_round = runs.div_ceil(ROUNDS);
    for _ in 0..ROUNDS {
        for (launch, slot) in launches.iter_mut().zip(&mut times) {
            slot.extend(timer.time(2, per_round, &mut **launch));
        }
    }
    times.map(|t| median(&t))
}

/// Kernel time (median of `runs`) for `knobs`.
fn time_knobs(timer: &Timer, b: &Buffers, knobs: &Knobs, runs: usize) -> f64 {
    median(&timer.time(2, runs, || b.launch(&timer.client, knobs)))
}

/// The same-bytes copy in the same run: the roof (bf16 out: read T*C*2, write T*C*2; FP8 out:
/// half of the 3 bytes per element read, half written).
fn time_copy(timer: &Timer, b: &Buffers, runs: usize) -> f64 {
    let bytes = copy_bytes(b);
    median(&timer.time(2, runs, || timer.copy(&b.x, &b.out, bytes)))
}

/// The read-heavy copy (`Timer::copy_read_heavy`) of `n` bf16 elements of `x` into `dst`,
/// writing `num / den` of the bytes read: median of 50 runs.
fn time_read_heavy(
    timer: &Timer,
    x: &Handle,
    dst: &Handle,
    n: usize,
    num: usize,
    den: usize,
) -> f64 {
    median(&timer.time(2, 50, || {
        timer.copy_read_heavy(x, dst, n * 2 / 16 * 16, num, den)
    }))
}

/// The bytes an NVFP4 output moves per `n` elements: 2 read, 1/2 of codes and 1/16 of scales
/// written.
fn nvfp4_bytes(n: usize) -> usize {
    n * 2 + n / 2 + n / 16
}

/// What a copy roof for a kernel that moves `bytes` in all copies one way (`Timer::copy`: half
/// the traffic read, half written), in whole 16-byte vectors.
fn half_and_half(bytes: usize) -> usize {
    (bytes / 2).div_ceil(16) * 16
}

/// The bytes each copy roof moves one way for `b`'s shape and output.
fn copy_bytes(b: &Buffers) -> usize {
    let n = b.problem.rows * b.problem.channels;
    if b.fp8 { half_and_half(n * 3) } else { n * 2 }
}

/// The knob space the tuner sweeps for one shape: 16-byte vectors; lanes per row from 1 to
/// 256 (plane shuffles up to 32, shared memory above) with at most 16 vectors per lane; 1, 2 or
/// 4 rows in flight per unit; 32, 64, 128 or 256 units per cube (a plane of 32 holding one row
/// of 1024 channels on a full grid is Inductor's kernel at C = 1024, and ours too since its loads
/// are issued together); one cube per row group or a persistent grid at full occupancy (at most
/// 32 cubes per SM). Refinements of the best are added by [`refinements`].
fn candidates(client: &Client, problem: RowsProblem) -> Vec<Knobs> {
    let v = pick_vector_size(client, problem, 2, 2, 256);
    let vecs = problem.channels / v;
    let mut out = Vec::new();
    for lanes in [1u32, 2, 4, 8, 16, 32, 64, 128, 256] {
        if lanes as usize > vecs.next_power_of_two() {
            continue;
        }
        let vpl = vecs.div_ceil(lanes as usize);
        if vpl > 16 {
            continue;
        }
        for u in [1u32, 2, 4] {
            if vpl * u as usize > 16 {
                continue;
            }
            for units in [32u32, 64, 128, 256] {
                if units < lanes {
                    continue;
                }
                for occupancy in [0u32, (2048 / units).min(32)] {
                    out.push(Knobs {
                        vector_size: v,
                        lanes_per_row: lanes,
                        rows_per_cube: units / lanes,
                        rows_per_unit: u,
                        vectors_per_lane: vpl,
                        lane_reduce: if lanes <= 32 {
                            LaneReduce::Plane
                        } else {
                            LaneReduce::Shared
                        },
                        gamma: GammaIn::Registers,
                        max_cubes: (occupancy > 0).then_some(occupancy * sms(client)),
                        fast_math: false,
                        prefetch: false,
                        f32_cache: false,
                        word_cache: false,
                        groups_per_ticket: 0,
                    });
                }
            }
        }
    }
    out.extend(packed_candidates(client, v, vecs));
    out
}

/// Lane counts that are not powers of two, rows packed into planes (plane reduction): the
/// counts up to a plane that divide the row's vectors with at most 4 per lane (C = 96: 3, 6 and
/// 12 lanes; 160: 5, 10, 20; 192: 6, 12, 24), 4 or 8 planes per cube, 1 or 2 rows per unit.
fn packed_candidates(client: &Client, v: usize, vecs: usize) -> Vec<Knobs> {
    let plane = client.properties().hardware.plane_size_min;
    let mut out = Vec::new();
    for lanes in 3..=plane {
        if lanes.is_power_of_two() || !vecs.is_multiple_of(lanes as usize) {
            continue;
        }
        let vpl = vecs / lanes as usize;
        if vpl > 4 {
            continue;
        }
        let per_plane = plane / lanes;
        for u in [1u32, 2] {
            for planes in [4u32, 8] {
                for occupancy in [0u32, 2048 / (planes * plane)] {
                    out.push(Knobs {
                        vector_size: v,
                        lanes_per_row: lanes,
                        rows_per_cube: planes * per_plane,
                        rows_per_unit: u,
                        vectors_per_lane: vpl,
                        lane_reduce: LaneReduce::Plane,
                        gamma: GammaIn::Registers,
                        max_cubes: (occupancy > 0).then_some(occupancy * sms(client)),
                        fast_math: false,
                        prefetch: false,
                        f32_cache: false,
                        word_cache: false,
                        groups_per_ticket: 0,
                    });
                }
            }
        }
    }
    out
}

/// Variations of the best candidate: PTX fast math, gamma placement, grid occupancy, cube size,
/// half-width vectors.
fn refinements(client: &Client, problem: RowsProblem, best: Knobs) -> Vec<Knobs> {
    let mut out = vec![
        Knobs {
            fast_math: true,
            ..best
        },
        Knobs {
            gamma: GammaIn::Shared,
            ..best
        },
        Knobs {
            gamma: GammaIn::Global,
            ..best
        },
    ];
    let units = best.units_per_cube();
    for occ in [1u32, 2, 4, 8, 16, 32] {
        if occ * units <= 2048 {
            out.push(Knobs {
                max_cubes: Some(occ * sms(client)),
                ..best
            });
        }
    }
    if units * 2 <= 1024 {
        out.push(Knobs {
            rows_per_cube: best.rows_per_cube * 2,
            max_cubes: best.max_cubes.map(|m| (m / 2).max(1)),
            ..best
        });
    }
    if best.vector_size > 1 && problem.channels.is_multiple_of(best.vector_size / 2) {
        let v = best.vector_size / 2;
        let vpl = (problem.channels / v).div_ceil(best.lanes_per_row as usize);
        if vpl * best.rows_per_unit as usize <= 16 {
            out.push(Knobs {
                vector_size: v,
                vectors_per_lane: vpl,
                ..best
            });
        }
    }
    out
}

/// The best so far with the next row group prefetched (staged through shared memory), on
/// persistent grids of 1 to 8 cubes per SM, with gamma where the best keeps it and in shared
/// memory (fewer registers beside the words in flight), and with one row in flight per unit (twice
/// the groups, for shapes with few). Only where a cube walks at least two groups.
fn prefetch_variants(client: &Client, problem: RowsProblem, best: Knobs) -> Vec<Knobs> {
    let mut out = Vec::new();
    if !best.caches_row(problem.channels) {
        return out;
    }
    // Prefetch also with one row per unit where the sweep preferred more, and with two where
    // it preferred one: on the H200, FP8 C = 64 at T = 399360 ran 1.26x the copy on the
    // tuner's `l4.c2` and 1.10x on `l8.c1` with two rows per unit and prefetch (2026-12-02).
    let mut bases = vec![best];
    if best.rows_per_unit > 1 {
        bases.push(Knobs {
            rows_per_unit: 1,
            ..best
        });
    } else if best.vectors_per_lane * 2 <= 16 {
        bases.push(Knobs {
            rows_per_unit: 2,
            ..best
        });
    }
    for base in bases {
        let groups = problem.rows.div_ceil(base.rows_per_step());
        for gamma in [base.gamma, GammaIn::Shared] {
            for occ in [1u32, 2, 3, 4, 6, 8] {
                let cubes = occ * sms(client);
                if occ * base.units_per_cube() <= 2048 && groups >= 2 * cubes as usize {
                    out.push(Knobs {
                        prefetch: true,
                        gamma,
                        max_cubes: Some(cubes),
                        ..base
                    });
                }
            }
            if base.gamma == GammaIn::Shared {
                break;
            }
        }
    }
    out
}

fn sms(client: &Client) -> u32 {
    client
        .properties()
        .hardware
        .num_streaming_multiprocessors
        .unwrap_or(1)
}

/// The best knobs for a shape and their time: sweep, then refine around the best.
fn tune_shape(timer: &Timer, b: &Buffers) -> (Knobs, f64) {
    let client = &timer.client;
    let mut best: Option<(Knobs, f64)> = None;
    let consider = |k: Knobs, best: &mut Option<(Knobs, f64)>| -> Option<f64> {
        if !b.valid(client, &k) {
            return None;
        }
        let t = time_knobs(timer, b, &k, 15);
        if best.is_none_or(|(_, bt)| t < bt) {
            *best = Some((k, t));
        }
        Some(t)
    };
    let mut swept = Vec::new();
    for k in candidates(client, b.problem) {
        if let Some(t) = consider(k, &mut best) {
            swept.push((k, t));
        }
    }
    let first = best.expect("at least one valid candidate").0;
    for k in refinements(client, b.problem, first) {
        consider(k, &mut best);
    }
    // Prefetch changes which shape is best (e.g. more lanes with fewer vectors each), so it is
    // tried on the refined best, on the sweep's next two distinct lane layouts, and on the best
    // packed layout (lanes not a power of two) if none of those is packed: on the H200, C = 96
    // at T = 24960 ranked 6 lanes x 2 vectors fourth without prefetch and first with it
    // (7.74 against 8.42 us, 2026-12-02).
    swept.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut bases = vec![best.unwrap().0];
    let layout = |k: &Knobs| (k.lanes_per_row, k.vectors_per_lane);
    for (k, _) in &swept {
        if bases.len() == 3 {
            break;
        }
        if !bases.iter().any(|b| layout(b) == layout(k)) {
            bases.push(*k);
        }
    }
    let packed = |k: &Knobs| !k.lanes_per_row.is_power_of_two();
    if !bases.iter().any(packed)
        && let Some((k, _)) = swept.iter().find(|(k, _)| packed(k))
    {
        bases.push(*k);
    }
    for base in bases {
        for k in prefetch_variants(client, b.problem, base) {
            consider(k, &mut best);
        }
    }
    // The f32 register cache on the final layout (prefetch only): fewer conversions, more
    // registers.
    let last = best.unwrap().0;
    if last.prefetch {
        consider(
            Knobs {
                f32_cache: true,
                ..last
            },
            &mut best,
        );
    }
    // The word cache on the final layout (x kept as loaded words, widened at each use): fewer
    // registers where several vectors per lane are cached (H200, 2026-12-03: 1-5% faster at
    // C = 192-640 T <= 99840 in bf16, up to 5% slower at C = 64 and C = 1024 T >= 99840).
    let last = best.unwrap().0;
    if last.caches_row(b.problem.channels) && last.vectors_per_lane > 1 {
        consider(
            Knobs {
                word_cache: true,
                f32_cache: false,
                ..last
            },
            &mut best,
        );
    }
    // Half-width vectors on the final layout where its lanes leave vector slots idle (C = 160
    // on 8 lanes: 20 vectors of 8 in 24 slots, 40 of 4 in exactly 40): the same units per row
    // without the idle slots, whose instructions a warp issues anyway. `refinements` tries
    // half-width vectors before prefetch only.
    let last = best.unwrap().0;
    if let Some(half) = half_width_exact(b.problem, last) {
        for f32_cache in [last.f32_cache, !last.f32_cache] {
            consider(Knobs { f32_cache, ..half }, &mut best);
        }
    }
    // The ticketed walk on the final layout (persistent grids only): its groups drawn in order,
    // one or four per ticket, and one per ticket with twice the rows per unit (tickets paid on
    // the H200 with groups of 8-16 KB, 2026-12-02).
    let last = best.unwrap().0;
    if last.max_cubes.is_some() {
        let doubled = Knobs {
            rows_per_unit: last.rows_per_unit * 2,
            ..last
        };
        let mut ticketed = vec![(last, 1), (last, 4)];
        if doubled.vectors_per_lane * doubled.rows_per_unit as usize <= 16 {
            ticketed.push((doubled, 1));
        }
        for (k, groups_per_ticket) in ticketed {
            consider(
                Knobs {
                    groups_per_ticket,
                    ..k
                },
                &mut best,
            );
        }
    }
    let (k, _) = best.unwrap();
    // Re-measure the winner with the full run count.
    (k, time_knobs(timer, b, &k, 50))
}

/// `k` with vectors of half the width where that fills its lanes' vector slots exactly and
/// `k`'s own vectors do not (same lanes, twice the vectors per lane at most 16 per row in
/// flight); `None` otherwise.
fn half_width_exact(problem: RowsProblem, k: Knobs) -> Option<Knobs> {
    let v = k.vector_size / 2;
    let lanes = k.lanes_per_row as usize;
    if v == 0 || !problem.channels.is_multiple_of(v) || !k.caches_row(problem.channels) {
        return None;
    }
    let vecs = problem.channels / v;
    let idle_now = !(problem.channels / k.vector_size).is_multiple_of(lanes);
    let vpl = vecs / lanes;
    (idle_now && vecs.is_multiple_of(lanes) && vpl * k.rows_per_unit as usize <= 16).then_some(
        Knobs {
            vector_size: v,
            vectors_per_lane: vpl,
            ..k
        },
    )
}

fn occupancy_of(k: &Knobs, client: &Client) -> u32 {
    k.max_cubes.map_or(0, |m| m / sms(client))
}

fn tune(timer: &mut Timer, args: &Args) {
    let client = timer.client.clone();
    let output = args.output.as_str();
    let sm = device_sm(&client).expect("tuning needs a CUDA device");
    let name = client.properties().identity.name.clone();
    let date = std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut lut = format!(
        "# {name} (sm_{sm}) knob table, measured {date}. Written by the tuner:\n\
         #   cargo bench --bench rmsnorm -- tune --output {output}   (bf16 in, {output} out)\n\
         # columns: C T out knobs occupancy(cubes per SM, 0 = one cube per row group) kernel_us copy_us\n"
    );
    let path = args.lut.clone().unwrap_or_else(|| match output {
        "fp8" => format!("kernels/lut/sm{sm}_fp8.txt"),
        _ => format!("kernels/lut/sm{sm}.txt"),
    });
    let tokens = bench_rows(if args.quick { &TOKENS[..2] } else { &TOKENS });
    for channels in bench_channels(&CHANNELS) {
        for &rows in &tokens {
            let mut b = Buffers::new(timer, rows, channels);
            b.fp8 = output == "fp8";
            let start = Instant::now();
            let (k, t) = tune_shape(timer, &b);
            let copy = time_copy(timer, &b, 50);
            let occ = occupancy_of(&k, &client);
            let table_knobs = Knobs {
                max_cubes: None,
                ..k
            };
            writeln!(
                lut,
                "{channels} {rows} {output} {table_knobs} {occ} {t:.2} {copy:.2}"
            )
            .unwrap();
            println!(
                "tune C={channels:5} T={rows:7}: {k} {t:8.2} us, copy {copy:8.2} us, x{:.3} ({:.1} s)",
                t / copy,
                start.elapsed().as_secs_f64()
            );
            // Written after every shape, so an interrupted run keeps what it measured.
            std::fs::write(&path, &lut).expect("write the LUT");
        }
    }
    println!("wrote {path}");
}

/// Heuristic vs tuner-best on shapes outside the table.
fn fallback(timer: &mut Timer, args: &Args) {
    let client = timer.client.clone();
    let mut csv = String::from(
        "c,t,heuristic_knobs,heuristic_us,table_derived_knobs,table_derived_us,best_knobs,best_us,heuristic_ratio,table_derived_ratio\n",
    );
    for channels in bench_channels(&FALLBACK_CHANNELS) {
        for rows in bench_rows(&FALLBACK_TOKENS) {
            let b = Buffers::new(timer, rows, channels);
            let h = heuristic_knobs(&client, b.problem, 2, 2, 256);
            let th = time_knobs(timer, &b, &h, 50);
            let d = table_derived_knobs(&client, b.problem, 2, 2, 256).unwrap_or(h);
            let td = time_knobs(timer, &b, &d, 50);
            let (best, tb) = tune_shape(timer, &b);
            let tb = tb.min(th).min(td);
            writeln!(
                csv,
                "{channels},{rows},{h},{th:.2},{d},{td:.2},{best},{tb:.2},{:.3},{:.3}",
                th / tb,
                td / tb
            )
            .unwrap();
            println!(
                "fallback C={channels:5} T={rows:8}: heuristic {h} x{:.3}, table-derived {d} x{:.3}, best {best} {tb:8.2} us",
                th / tb,
                td / tb
            );
        }
    }
    write_file(args, "fallback.csv", &csv);
}

/// The Wan VAE decoder's channel-axis shapes `[B, C, T, H, W]`, normalised over C in both
/// physical layouts: dense channels-first (the channels kernel) and channels-last memory (the
/// row kernel over B*T*H*W rows), each against a same-bytes copy in the same run.
fn channels(timer: &mut Timer, args: &Args) {
    use burn_rmsnorm_silu::kernels::channels::{
        ChannelsConfig, ChannelsProblem, channels_backward_config, channels_config,
        launch_channels_backward, launch_channels_with, tiled_channels_config,
    };
    let client = timer.client.clone();
    // RMSNORM_CHANNELS_SWEEP=0: no sweeps; =forward: the forward's only.
    let sweep_mode = std::env::var("RMSNORM_CHANNELS_SWEEP").unwrap_or_default();
    let sweep_channels = sweep_mode != "0";
    let sweep_backward = sweep_channels && sweep_mode != "forward";
    let shapes = [
        [1usize, 96, 4, 480, 832],
        [1, 192, 4, 240, 416],
        [1, 384, 1, 60, 104],
    ];
    let mut csv = String::from("shape,layout,kernel_us,copy_us,ratio_to_copy,gbps\n");
    let wanted = bench_channels(&shapes.map(|s| s[1]));
    for shape in shapes.into_iter().filter(|s| wanted.contains(&s[1])) {
        let [b, c, t, h, w] = shape;
        let positions = t * h * w;
        let n = b * c * positions;
        let x = timer.random(BF16, n, -5.0, 20.0);
        let gamma = timer.random(BF16, c, 0.5, 1.5);
        let out = client.empty(n * 2);
        let eps = 1e-6 / c as f32;
        let copy = median(&timer.time(2, 50, || timer.copy(&x, &out, n * 2)));
        let problem = ChannelsProblem::dense(b, c, positions);
        let norm = NormParams::rms(eps);
        // The launch shapes compared: the heuristic's, one unit per position vector (C walked
        // twice) and the tiled form (channels split over groups, cached), each with the PTX
        // SiLU off and on.
        let per_position = ChannelsConfig {
            position_units: 256,
            channel_groups: 1,
            channels_per_unit: 0,
            max_vector: 0,
            plane_groups: 1,
            prefetch: false,
            bf16_input: false,
            single_tile: true,
            activation: Activation::Silu,
            fast_math: false,
        };
        let tiled = tiled_channels_config(&client, c, b * positions / 8, Activation::Silu);
        let mut variants: Vec<(String, Option<ChannelsConfig>)> =
            vec![("channels-first heuristic".into(), None)];
        for (name, cfg) in [("per-position", per_position), ("tiled", tiled)] {
            for fast_math in [false, true] {
                let label = format!(
                    "channels-first {name}{}",
                    if fast_math { " fast" } else { "" }
                );
                variants.push((label, Some(ChannelsConfig { fast_math, ..cfg })));
            }
        }
        let launch_forward = |cfg: Option<ChannelsConfig>| {
            launch_channels_with(
                &client,
                x.clone(),
                gamma.clone(),
                out.clone(),
                BF16,
                BF16,
                problem,
                norm,
                Activation::Silu,
                cfg,
            )
        };
        let mut results = Vec::new();
        for (label, cfg) in variants {
            let time = median(&timer.time(2, 50, || launch_forward(cfg).expect("channels launch")));
            results.push((label, time));
        }
        // The heuristic's shape with and without `single_tile` (a no-op where a cube has
        // several tiles), interleaved with the copy.
        let heuristic = channels_config(&client, c, b * positions, 8, Activation::Silu);
        let (one, loop_) = single_tile_ab(
            timer,
            &format!("{shape:?} ab forward"),
            heuristic,
            || timer.copy(&x, &out, n * 2),
            |cfg| launch_forward(Some(cfg)).expect("channels launch"),
        );
        results.push(("channels-first ab single tile".into(), one));
        results.push(("channels-first ab loop".into(), loop_));
        // A sweep of the launch shape with the PTX SiLU (`channels_sweep`), best reported;
        // `RMSNORM_CHANNELS_SWEEP=0` skips it (forward and backward).
        let sweep = if sweep_channels {
            channels_sweep(&client, c, false)
        } else {
            Vec::new()
        };
        let best = fastest(timer, sweep.iter().copied(), 20, |cfg| {
            launch_forward(Some(cfg))
        });
        if let Some((cfg, us)) = best {
            println!(
                "{shape:?} channels-first sweep best of {}: {} {us:9.2} us, x{:.3}",
                sweep.len(),
                channels_label(&cfg),
                us / copy
            );
            results.push((
                format!("channels-first sweep best {}", channels_label(&cfg)),
                us,
            ));
        }
        let rows = Buffers {
            x: x.clone(),
            gamma: gamma.clone(),
            out: out.clone(),
            problem: RowsProblem::dense(b * positions, c),
            fp8: false,
            activation: Activation::Silu,
        };
        let (knobs, _) = select_knobs_with_source(&client, rows.problem, 2, 2, 256);
        results.push(("channels-last".into(), time_knobs(timer, &rows, &knobs, 50)));
        let bytes = (n * 4 + c * 2) as f64;
        for (layout, k) in &results {
            let k = *k;
            writeln!(
                csv,
                "{shape:?},{layout},{k:.2},{copy:.2},{:.3},{:.1}",
                k / copy,
                bytes / k / 1e3
            )
            .unwrap();
            println!(
                "{shape:?} {layout:>28}: {k:9.2} us, copy {copy:9.2} us, x{:.3}, {:.0} GB/s",
                k / copy,
                bytes / k / 1e3
            );
        }
        // The channels-first backward (reads x, dy; writes dx: 6 bytes per element).
        let dy = timer.random(BF16, n, -1.0, 2.0);
        let dgamma = client.empty(c * 2);
        let (src, dst) = (client.empty(n * 3), client.empty(n * 3));
        let copy3 = median(&timer.time(2, 50, || timer.copy(&src, &dst, n * 3)));
        let launch_backward = |cfg: Option<ChannelsConfig>| {
            launch_channels_backward(
                &client,
                x.clone(),
                gamma.clone(),
                dy.clone(),
                out.clone(),
                dgamma.clone(),
                BF16,
                BF16,
                b,
                c,
                positions,
                norm,
                Activation::Silu,
                cfg,
            )
        };
        let mut report_backward = |layout: &str, us: f64, note: String| {
            writeln!(
                csv,
                "{shape:?},{layout},{us:.2},{copy3:.2},{:.3},{:.1}",
                us / copy3,
                (n * 6) as f64 / us / 1e3
            )
            .unwrap();
            println!(
                "{shape:?} {layout:>28}: {us:9.2} us, copy {copy3:9.2} us, x{:.3}{note}",
                us / copy3
            );
        };
        let backward = median(&timer.time(2, 50, || {
            launch_backward(None).expect("channels backward launch")
        }));
        report_backward("channels-first backward", backward, String::new());
        if let Some(heuristic) =
            channels_backward_config(&client, c, b * positions, 8, Activation::Silu)
        {
            single_tile_ab(
                timer,
                &format!("{shape:?} ab backward"),
                heuristic,
                || timer.copy(&src, &dst, n * 3),
                |cfg| launch_backward(Some(cfg)).expect("channels backward launch"),
            );
        }
        // The channels-last backward: the row backward over B*T*H*W rows of C (the same bytes).
        let rows_backward = median(&timer.time(2, 50, || {
            burn_rmsnorm_silu::kernels::backward::launch_backward(
                &client,
                x.clone(),
                gamma.clone(),
                dy.clone(),
                out.clone(),
                dgamma.clone(),
                BF16,
                BF16,
                b * positions,
                c,
                norm,
                Activation::Silu,
            )
            .expect("row backward launch")
        }));
        let knobs = burn_rmsnorm_silu::kernels::backward::BackwardKnobs::for_shape(
            &client,
            c,
            b * positions,
        );
        report_backward(
            "channels-last backward",
            rows_backward,
            format!(" ({knobs})"),
        );
        // The backward over its own sweep (every channel cached).
        let backward_sweep = if sweep_backward {
            channels_sweep(&client, c, true)
        } else {
            Vec::new()
        };
        let best = fastest(timer, backward_sweep, 20, |cfg| launch_backward(Some(cfg)));
        if let Some((cfg, us)) = best {
            writeln!(
                csv,
                "{shape:?},channels-first backward sweep best {},{us:.2},{copy3:.2},{:.3},{:.1}",
                channels_label(&cfg),
                us / copy3,
                (n * 6) as f64 / us / 1e3
            )
            .unwrap();
            println!(
                "{shape:?} channels-first backward sweep best: {} {us:9.2} us, x{:.3}",
                channels_label(&cfg),
                us / copy3
            );
        }
    }
    write_file(args, "channels.csv", &csv.replace(", ", "x"));
}

/// `cfg` as given and with `single_tile` off, in 5 interleaved rounds with `copy`; prints the
/// three times and returns the kernel's two (single tile, loop).
fn single_tile_ab(
    timer: &Timer,
    label: &str,
    cfg: burn_rmsnorm_silu::kernels::channels::ChannelsConfig,
    mut copy: impl FnMut(),
    launch: impl Fn(burn_rmsnorm_silu::kernels::channels::ChannelsConfig),
) -> (f64, f64) {
    let looped = burn_rmsnorm_silu::kernels::channels::ChannelsConfig {
        single_tile: false,
        ..cfg
    };
    let [copy_us, one, loop_] = interleaved_medians(
        timer,
        50,
        [&mut copy, &mut || launch(cfg), &mut || launch(looped)],
    );
    println!(
        "{label} {}: single tile {one:.2} us (x{:.3}), loop {loop_:.2} us (x{:.3}), copy \
         {copy_us:.2} us",
        channels_label(&cfg),
        one / copy_us,
        loop_ / copy_us
    );
    (one, loop_)
}

/// The fastest of `candidates` (median of `runs` launches each) and its time; the ones the
/// device refuses (`launch` returns an error) are skipped.
fn fastest<K: Copy, E>(
    timer: &Timer,
    candidates: impl IntoIterator<Item = K>,
    runs: usize,
    launch: impl Fn(K) -> Result<(), E>,
) -> Option<(K, f64)> {
    ranked(timer, candidates, runs, launch).into_iter().next()
}

/// Every candidate the device accepts with its time (median of `runs` launches), fastest
/// first.
fn ranked<K: Copy, E>(
    timer: &Timer,
    candidates: impl IntoIterator<Item = K>,
    runs: usize,
    launch: impl Fn(K) -> Result<(), E>,
) -> Vec<(K, f64)> {
    let mut times = Vec::new();
    for k in candidates {
        if launch(k).is_err() {
            continue;
        }
        let us = median(&timer.time(2, runs, || {
            let _ = launch(k);
        }));
        times.push((k, us));
    }
    times.sort_by(|a, b| a.1.total_cmp(&b.1));
    times
}

/// The channels-first launch shapes the `channels` mode sweeps for C channels (PTX SiLU on
/// where the device has it): vectors of 2, 4 or 8 positions x 2..256 position units x 1..64
/// channel groups (64 to 256 units a cube), each with the unit's channels cached in registers
/// where they fit a budget (forward: 256 bf16 values; backward, which keeps x and dy as f32 and
/// gamma and its gradient per channel: about 192 registers; with prefetch also the next tile's
/// x and dy as words) and, for the forward with 8-position vectors, walked twice.
fn channels_sweep(
    client: &Client,
    channels: usize,
    backward: bool,
) -> Vec<burn_rmsnorm_silu::kernels::channels::ChannelsConfig> {
    use burn_rmsnorm_silu::kernels::channels::ChannelsConfig;
    let fast_math = burn_rmsnorm_silu::kernels::device::has_ptx_math(client);
    let mut out = Vec::new();
    for max_vector in [2usize, 4, 8] {
        for px in [2u32, 4, 8, 16, 32, 64, 128, 256] {
            for groups in [1u32, 2, 4, 8, 16, 32, 64] {
                if !(64..=256).contains(&(px * groups)) {
                    continue;
                }
                let per_unit = channels.div_ceil(groups as usize);
                let fits = if backward {
                    per_unit * (2 * max_vector + 2) <= 192
                } else {
                    per_unit * max_vector <= 256
                };
                let walked = !backward && max_vector == 8;
                // The backward's prefetch holds the next tile's x and dy as words too.
                let prefetch_fits = backward && per_unit * (3 * max_vector + 2) <= 192;
                let options = [
                    (fits, per_unit, false),
                    (walked, 0, false),
                    (prefetch_fits, per_unit, true),
                ];
                for (_, channels_per_unit, prefetch) in options.into_iter().filter(|o| o.0) {
                    out.push(ChannelsConfig {
                        position_units: px,
                        channel_groups: groups,
                        channels_per_unit,
                        max_vector,
                        plane_groups: 1,
                        prefetch,
                        bf16_input: false,
                        single_tile: true,
                        activation: Activation::Silu,
                        fast_math,
                    });
                }
            }
        }
    }
    out
}

/// `p128.g4.k24.v2.fast.pf`: position units, channel groups, channels cached per unit (0:
/// walked), positions per vector at most, PTX SiLU, backward prefetch; `.loop` where
/// `single_tile` is off.
fn channels_label(cfg: &burn_rmsnorm_silu::kernels::channels::ChannelsConfig) -> String {
    format!(
        "p{}.g{}.k{}.v{}{}{}{}",
        cfg.position_units,
        cfg.channel_groups,
        cfg.channels_per_unit,
        cfg.max_vector,
        if cfg.fast_math { ".fast" } else { "" },
        if cfg.prefetch { ".pf" } else { "" },
        if cfg.single_tile { "" } else { ".loop" }
    )
}

fn write_file(args: &Args, name: &str, text: &str) {
    std::fs::create_dir_all(&args.out).expect("create the output folder");
    let path = format!("{}/{name}", args.out);
    std::fs::write(&path, text).expect("write");
    println!("wrote {path}");
}

/// Burn's own composed ops on the same shape, as Burn fuses them: device time of a profile
/// window around the ops and the sync that flushes Burn's fusion queue.
fn time_burn_composed(timer: &Timer, device: &Device, rows: usize, channels: usize) -> f64 {
    let x = Tensor::<2>::random([rows, channels], Distribution::Normal(5.0, 5.0), device)
        .cast(DType::BF16);
    let gamma =
        Tensor::<1>::random([channels], Distribution::Uniform(0.5, 2.0), device).cast(DType::BF16);
    let eps = 1e-6 / channels as f64;
    let composed = || {
        let x32 = x.clone().cast(DType::F32);
        let rms = (x32.clone().square().mean_dim(1) + eps).sqrt();
        let y = silu(x32 / rms * gamma.clone().cast(DType::F32).unsqueeze::<2>());
        let y = y.cast(DType::BF16);
        device.sync().expect("sync");
        y
    };
    median(&timer.time(3, 20, || drop(composed())))
}

/// End-to-end time of one `rms_norm_silu` call through the Burn API (host clock, warm L2,
/// including dispatch and the sync).
fn time_end_to_end(device: &Device, rows: usize, channels: usize) -> f64 {
    let x = Tensor::<2>::random([rows, channels], Distribution::Normal(5.0, 5.0), device)
        .cast(DType::BF16);
    let gamma =
        Tensor::<1>::random([channels], Distribution::Uniform(0.5, 2.0), device).cast(DType::BF16);
    let eps = 1e-6 / channels as f32;
    let mut times = Vec::new();
    for i in 0..60 {
        device.sync().expect("sync");
        let start = Instant::now();
        let y = rms_norm_silu(x.clone(), gamma.clone(), eps);
        device.sync().expect("sync");
        if i >= 10 {
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
        drop(y);
    }
    median(&times)
}

fn bench(timer: &mut Timer, device: &Device, args: &Args) {
    let client = timer.client.clone();
    let mut csv = String::from(
        "c,t,dtype,knobs,source,kernel_us,copy_us,ratio_to_copy,kernel_gbps,copy_gbps,burn_composed_us,speedup_vs_burn,end_to_end_us,copy_unrolled_us\n",
    );
    let mut shapes: Vec<(usize, usize)> = Vec::new();
    let tokens: &[usize] = if args.quick { &TOKENS[..2] } else { &TOKENS };
    for &c in &CHANNELS {
        for &t in tokens {
            shapes.push((c, t));
        }
    }
    println!(
        "{:>5} {:>7} {:>34} {:>10} {:>9} {:>9} {:>7} {:>8} {:>9} {:>8} {:>9}",
        "C",
        "T",
        "knobs",
        "source",
        "kernel_us",
        "copy_us",
        "x_copy",
        "GB/s",
        "burn_us",
        "e2e_us",
        "copy4_us"
    );
    for (channels, rows) in shapes {
        let b = Buffers::new(timer, rows, channels);
        let (knobs, source) = select_knobs_with_source(&client, b.problem, 2, 2, 256);
        let copy_len = copy_bytes(&b);
        let [kernel, copy, copy_unrolled] = interleaved_medians(
            timer,
            60,
            [
                &mut || b.launch(&client, &knobs),
                &mut || timer.copy(&b.x, &b.out, copy_len),
                &mut || timer.copy_unrolled(&b.x, &b.out, copy_len),
            ],
        );
        let bytes = b.bytes();
        drop(b);
        let burn = time_burn_composed(timer, device, rows, channels);
        let e2e = if rows <= 6240 {
            time_end_to_end(device, rows, channels)
        } else {
            f64::NAN
        };
        let source = match source {
            KnobSource::Environment => "env",
            KnobSource::Lut(burn_rmsnorm_silu::kernels::lut::Match::Exact) => "lut",
            KnobSource::Lut(_) => "lut-near",
            KnobSource::TableDerived => "table-derived",
            KnobSource::Heuristic => "heuristic",
        };
        writeln!(
            csv,
            "{channels},{rows},bf16,{knobs},{source},{kernel:.2},{copy:.2},{:.3},{:.1},{:.1},{burn:.2},{:.2},{e2e:.2},{copy_unrolled:.2}",
            kernel / copy,
            bytes / kernel / 1e3,
            bytes / copy / 1e3,
            burn / kernel
        )
        .unwrap();
        println!(
            "{channels:5} {rows:7} {:>34} {source:>10} {kernel:9.2} {copy:9.2} {:7.3} {:8.1} {burn:9.2} {e2e:8.2} {copy_unrolled:9.2}",
            knobs.to_string(),
            kernel / copy,
            bytes / kernel / 1e3
        );
    }
    write_file(args, "bench.csv", &csv);
}

/// `base` on every grid of `cubes_per_sm` crossed with every `(vectors per lane, units per
/// cube)` of `shapes`, in vectors of at most `max_vector` elements (0: the widest).
fn grid_sweep(
    base: burn_rmsnorm_silu::kernels::backward::BackwardKnobs,
    cubes_per_sm: &[u32],
    shapes: &[(usize, usize)],
    max_vector: usize,
) -> Vec<burn_rmsnorm_silu::kernels::backward::BackwardKnobs> {
    cubes_per_sm
        .iter()
        .flat_map(|&n| {
            shapes.iter().map(move |&(cap, units)| {
                burn_rmsnorm_silu::kernels::backward::BackwardKnobs {
                    cubes_per_sm: Some(n),
                    max_vectors_per_lane: cap,
                    units_per_cube: units,
                    max_vector,
                    ..base
                }
            })
        })
        .collect()
}

/// The fused backward (dx and dgamma) on bf16 rows, against a copy of the same bytes: it reads
/// x and dy and writes dx (6 bytes per element; gamma and dgamma are negligible), so the roof is
/// a copy of 3 bytes per element. Times the default knobs for the shape, the same with the IEEE
/// SiLU', and a sweep of the register cap (1, 2, 4, 8 vectors per lane) x units per cube (128,
/// 256) x prefetch (off, on) with the device's SiLU', then of the grid size (cubes per SM) for
/// caps 1 and 2, and of vectors of 4 elements on several grids, and reports the best (and the
/// sweep's five fastest in the log).
fn backward(timer: &mut Timer, args: &Args) {
    use burn_rmsnorm_silu::kernels::backward::{BackwardKnobs, launch_backward_with};
    let client = timer.client.clone();
    let mut csv = String::from(
        "c,t,kernel_us,copy_us,ratio_to_copy,gbps,ieee_us,ieee_ratio,best_knobs,best_us,best_ratio\n",
    );
    for c in bench_channels(&[96usize, 192, 384, 1024]) {
        // (T = 6240 at C = 384 is the Wan decoder's [1, 384, 1, 60, 104] in channels-last
        // memory; T = 6240 is only timed where RMSNORM_BENCH_T asks for it.)
        let default_rows = [24_960usize, 99_840, 399_360];
        let rows = if std::env::var("RMSNORM_BENCH_T").is_ok() {
            bench_rows(&[6_240, 24_960, 99_840, 399_360])
        } else {
            default_rows.to_vec()
        };
        for t in rows {
            let default = BackwardKnobs::for_shape(&client, c, t);
            let n = t * c;
            let x = timer.random(BF16, n, -5.0, 20.0);
            let dy = timer.random(BF16, n, -1.0, 2.0);
            let gamma = timer.random(BF16, c, 0.5, 1.5);
            let dx = client.empty(n * 2);
            let dgamma = client.empty(c * 2);
            let (src, dst) = (client.empty(n * 3), client.empty(n * 3));
            let copy = median(&timer.time(2, 50, || timer.copy(&src, &dst, n * 3)));
            let launch = |knobs: BackwardKnobs| {
                launch_backward_with(
                    &client,
                    x.clone(),
                    gamma.clone(),
                    dy.clone(),
                    dx.clone(),
                    dgamma.clone(),
                    BF16,
                    BF16,
                    t,
                    c,
                    NormParams::rms(1e-6 / c as f32),
                    Activation::Silu,
                    knobs,
                )
            };
            let time = |knobs: BackwardKnobs| {
                median(&timer.time(2, 50, || launch(knobs).expect("backward launch")))
            };
            let kernel = time(default);
            // The dgamma kernel (the backward's second) on the partial rows of the default's
            // grid (4 cubes per SM where the default leaves the grid to the shape).
            let cubes =
                (sms(&client) * default.cubes_per_sm.filter(|&n| n > 0).unwrap_or(4)) as usize;
            let parts = client.empty(cubes * c * 4);
            let reduce_dgamma = || {
                burn_rmsnorm_silu::kernels::backward::launch_reduce_dgamma(
                    &client,
                    parts.clone(),
                    dgamma.clone(),
                    BF16,
                    cubes,
                    c / 8,
                    8,
                )
            };
            // The second kernel alone, where the default fixes the cubes per SM.
            let reduce = default
                .cubes_per_sm
                .filter(|&n| n > 0)
                .map(|_| median(&timer.time(2, 50, reduce_dgamma)));
            // What any backward of two dependent kernels costs at least here: the copy of the
            // same bytes followed by a second launch, the smallest kernel (a 16-byte copy) or
            // the dgamma kernel.
            let (tiny_src, tiny_dst) = (client.empty(16), client.empty(16));
            let copy_then_tiny = median(&timer.time(2, 50, || {
                timer.copy(&src, &dst, n * 3);
                timer.copy(&tiny_src, &tiny_dst, 16);
            }));
            let copy_then_dgamma = median(&timer.time(2, 50, || {
                timer.copy(&src, &dst, n * 3);
                reduce_dgamma();
            }));
            println!(
                "backward C={c:5} T={t:7}: two-launch floors: copy {copy:.2} us, copy + 16-byte \
                 copy {copy_then_tiny:.2} us (x{:.3}), copy + dgamma kernel ({cubes} parts) \
                 {copy_then_dgamma:.2} us (x{:.3})",
                copy_then_tiny / copy,
                copy_then_dgamma / copy
            );
            let ieee = time(BackwardKnobs {
                fast_math: false,
                ..default
            });
            // RMSNORM_BACKWARD_SWEEP=0: the default knobs and the floors only.
            let sweep_on = std::env::var("RMSNORM_BACKWARD_SWEEP").map_or(true, |v| v != "0");
            let sweep = [1usize, 2, 4, 8]
                .into_iter()
                .flat_map(|cap| {
                    [(128usize, false), (256, false), (128, true), (256, true)].map(
                        |(units, prefetch)| BackwardKnobs {
                            max_vectors_per_lane: cap,
                            units_per_cube: units,
                            prefetch,
                            max_vector: 0,
                            ..default
                        },
                    )
                })
                // The persistent grid's size (one cube per row group, 1 to 8 per SM) for 1 and 2
                // vectors per lane and both cube sizes (the widest vectors, as above).
                .chain(grid_sweep(
                    default,
                    &[0, 1, 2, 3, 4, 6, 8],
                    &[(1, 128), (1, 256), (2, 128), (2, 256)],
                    0,
                ))
                // Vectors of 4 elements (no idle lane where C / 8 is not a power of two, as
                // C = 96, 192, 384 in bf16), 2 to 4 vectors per lane, on grids of 2 to 6 cubes
                // per SM.
                .chain(grid_sweep(
                    default,
                    &[2, 3, 4, 5, 6],
                    &[(2, 128), (2, 256), (4, 128), (4, 256)],
                    4,
                ));
            let times = if sweep_on {
                ranked(timer, sweep, 20, launch)
            } else {
                Vec::new()
            };
            let top: Vec<String> = times
                .iter()
                .take(5)
                .map(|(k, us)| format!("{k} {us:.2}"))
                .collect();
            println!(
                "backward C={c:5} T={t:7}: sweep's fastest: {}",
                top.join(", ")
            );
            if let Some(us) = reduce {
                println!(
                    "backward C={c:5} T={t:7}: the dgamma kernel alone {us:.2} us (copy {copy:.2})"
                );
            }
            let best = times
                .first()
                .copied()
                .filter(|&(_, us)| us < kernel)
                .unwrap_or((default, kernel));
            let gbps = (n * 6 + c * 4) as f64 / kernel / 1e3;
            writeln!(
                csv,
                "{c},{t},{kernel:.2},{copy:.2},{:.3},{gbps:.1},{ieee:.2},{:.3},{},{:.2},{:.3}",
                kernel / copy,
                ieee / copy,
                best.0,
                best.1,
                best.1 / copy
            )
            .unwrap();
            println!(
                "backward C={c:5} T={t:7}: default {default} {kernel:9.2} us, copy {copy:9.2} us, \
                 x{:.3}, {gbps:.0} GB/s; IEEE {ieee:9.2} us, x{:.3}; best {} {:9.2} us, x{:.3}",
                kernel / copy,
                ieee / copy,
                best.0,
                best.1,
                best.1 / copy
            );
        }
    }
    write_file(args, "backward.csv", &csv);
}

/// The NVFP4 knob space for one shape: lanes per row 1..256 (plane shuffles up to the plane,
/// shared memory above), 128 or 256 units per cube, blocks cached when at most 16 per lane
/// (else streamed), the PTX SiLU; and lane counts that are not powers of two but divide the
/// row's blocks (rows packed into planes).
fn fp4_candidates(
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
fn quant(timer: &mut Timer, args: &Args) {
    use burn_rmsnorm_silu::kernels::nvfp4::{heuristic_fp4_knobs, select_fp4_knobs};
    let client = timer.client.clone();
    let mut csv = String::from(
        "c,t,fp8_us,fp8_copy_us,fp8_ratio,nvfp4_heuristic_us,nvfp4_best_us,nvfp4_copy_us,\
         nvfp4_ratio,nvfp4_best_knobs,fp8_read_heavy_copy_us,fp8_read_heavy_ratio,\
         nvfp4_read_heavy_copy_us,nvfp4_read_heavy_ratio,fp8_two_to_one_copy_us\n",
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
            let [fp8, fp8_copy, fp8_rw_copy, fp8_two_to_one] = interleaved_medians(
                timer,
                50,
                [
                    &mut || b.launch_fp8(&client, &knobs),
                    &mut || timer.copy(&b.x, &scratch, half_and_half(n * 3)),
                    &mut || timer.copy_read_heavy(&b.x, &scratch, n * 2 / 16 * 16, 1, 2),
                    &mut || timer.copy_two_to_one(&b.x, &scratch, n * 2 / 32 * 32),
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
                 {fp8_rw_copy:.2},{:.3},{nv_rw_copy:.2},{:.3},{fp8_two_to_one:.2}",
                fp8 / fp8_copy,
                best_time / nv_copy,
                best.0,
                fp8 / fp8_rw_copy,
                best_time / nv_rw_copy,
            )
            .unwrap();
            println!(
                "C={c:5} T={t:7}: fp8 {fp8:8.2} us (copy {fp8_copy:8.2}, x{:.3}) | nvfp4 heuristic \
                 {h_time:8.2} us, best {best_time:8.2} us {} (copy {nv_copy:8.2}, x{:.3}, \
                 heuristic x{:.3}) | read-heavy copies: fp8 {fp8_rw_copy:8.2} us (x{:.3}; two \
                 loads per unit {fp8_two_to_one:8.2} us), nvfp4 {nv_rw_copy:8.2} us (x{:.3})",
                fp8 / fp8_copy,
                best.0,
                best_time / nv_copy,
                h_time / nv_copy,
                fp8 / fp8_rw_copy,
                best_time / nv_rw_copy,
            );
        }
    }
    write_file(args, "quant.csv", &csv);
}

/// One case of `RMSNORM_AB`: `C T out knobs...`.
struct AbCase<'a> {
    channels: usize,
    rows: usize,
    /// `bf16`, `fp8` or `nvfp4`.
    out: &'a str,
    knobs: Vec<&'a str>,
}

/// The `;`-separated cases of an `RMSNORM_AB` spec; panics naming a malformed one.
fn ab_cases(spec: &str) -> Vec<AbCase<'_>> {
    spec.split(';')
        .filter(|c| !c.trim().is_empty())
        .map(|case| {
            let words: Vec<&str> = case.split_whitespace().collect();
            let [c, t, out, knobs @ ..] = words.as_slice() else {
                panic!("RMSNORM_AB case `{case}`: expected C T out knobs...");
            };
            let number = |s: &str| -> usize {
                s.parse()
                    .unwrap_or_else(|_| panic!("RMSNORM_AB case `{case}`: `{s}` is not a number"))
            };
            assert!(
                matches!(*out, "bf16" | "fp8" | "nvfp4"),
                "RMSNORM_AB case `{case}`: out must be bf16, fp8 or nvfp4, got `{out}`"
            );
            AbCase {
                channels: number(c),
                rows: number(t),
                out,
                knobs: knobs.to_vec(),
            }
        })
        .collect()
}

/// Refuses `RMSNORM_AB` cases with row-kernel knobs their shape cannot run, naming every bad
/// one, before anything is timed (a launch would panic on the first, minutes into a device
/// call, and the cases after it would not run).
fn check_ab_knobs(timer: &Timer, cases: &[AbCase]) {
    let mut bad = Vec::new();
    for case in cases {
        let fp8 = match case.out {
            "bf16" => false,
            "fp8" => true,
            _ => continue,
        };
        let problem = RowsProblem::dense(case.rows, case.channels);
        for k in case.knobs.iter().filter(|k| **k != "selected") {
            let result = Knobs::parse(k)
                .and_then(|knobs| check_row_knobs(&timer.client, &knobs, problem, fp8));
            if let Err(e) = result {
                let (c, t, out) = (case.channels, case.rows, case.out);
                bad.push(format!("C={c} T={t} {out} {k}: {e}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "RMSNORM_AB: knobs this shape cannot run:\n{}",
        bad.join("\n")
    );
}

/// Same-run comparison of row-kernel knobs: `RMSNORM_AB="C T out knobs knobs ...; ..."` (out
/// `bf16` or `fp8`, or `nvfp4` with NVFP4 knobs, see [`ab_nvfp4`]; a knobs word `selected`
/// stands for the crate's own selection). Five
/// rounds, each timing every knobs string and the same-bytes copy (50 runs each, medians), so
/// drift between them hits all alike; prints each one's median over the rounds and its ratio
/// to the copy.
fn ab(timer: &mut Timer) {
    let spec = std::env::var("RMSNORM_AB").expect("RMSNORM_AB=\"C T out knobs knobs ...; ...\"");
    let cases = ab_cases(&spec);
    check_ab_knobs(timer, &cases);
    for case in &cases {
        let (c, t, out) = (case.channels, case.rows, case.out);
        let mut b = Buffers::new(timer, t, c);
        b.fp8 = match out {
            "bf16" => false,
            "fp8" => true,
            _ => {
                ab_nvfp4(timer, &b, &case.knobs);
                continue;
            }
        };
        // `selected`: what the crate picks for this shape and output (the table entry with its
        // grid, `m` = occupancy x SMs), so that a comparison with the table needs no knobs
        // copied by hand from the table files.
        let knobs: Vec<Knobs> = case
            .knobs
            .iter()
            .map(|k| match *k {
                "selected" => {
                    burn_rmsnorm_silu::kernels::select::select_output_knobs_with_source(
                        &timer.client,
                        b.problem,
                        2,
                        2,
                        out,
                        256,
                    )
                    .0
                }
                k => Knobs::parse(k).unwrap_or_else(|e| panic!("{e}")),
            })
            .collect();
        let mut times = vec![Vec::new(); knobs.len()];
        let mut copies = Vec::new();
        // FP8 out: also the read-heavy copy (2 bytes read, 1 written per element).
        let mut read_heavy = Vec::new();
        let n = b.problem.rows * b.problem.channels;
        for _ in 0..5 {
            for (k, slot) in knobs.iter().zip(&mut times) {
                slot.push(time_knobs(timer, &b, k, 50));
            }
            copies.push(time_copy(timer, &b, 50));
            if b.fp8 {
                read_heavy.push(time_read_heavy(timer, &b.x, &b.out, n, 1, 2));
            }
        }
        let copy = median(&copies);
        let rw_copy = median(&read_heavy);
        if std::env::var("RMSNORM_AB_ALTERNATE").is_ok_and(|v| v == "1") {
            alternate(timer, &b, &knobs, out);
        }
        if std::env::var("RMSNORM_AB_CODE_WARM").is_ok_and(|v| v == "1") {
            code_warm(timer, &b, &knobs, out);
        }
        let outputs = written_outputs(timer, &b, &knobs);
        let reference = host_reference(timer, &b);
        for ((k, slot), written) in knobs.iter().zip(&times).zip(&outputs) {
            let t_k = median(slot);
            let differing = written
                .iter()
                .zip(&outputs[0])
                .filter(|(a, b)| a != b)
                .count();
            let rw = if b.fp8 {
                format!(" (read-heavy copy {rw_copy:.2} us, x{:.3})", t_k / rw_copy)
            } else {
                String::new()
            };
            println!(
                "ab C={c} T={t} {out}: {k} {t_k:.2} us, copy {copy:.2} us, x{:.3}{rw}, \
                 {differing} output bytes differ from the first knobs'; {}",
                t_k / copy,
                accuracy(written, &reference, b.fp8)
            );
        }
    }
}

/// [`ab`] for NVFP4 out (TransformerEngine recipe, `s_enc` 100, row-major scales): NVFP4 knobs
/// strings (`selected`: the crate's own choice), five rounds of 50 runs each and of the
/// half-and-half copy of the 2 + 1/2 + 1/16 bytes per element; the codes and scales each
/// knobs write are compared with the first knobs' bytes.
fn ab_nvfp4(timer: &mut Timer, b: &Buffers, knobs: &[&str]) {
    use burn_rmsnorm_silu::kernels::nvfp4::{Fp4Knobs, select_fp4_knobs};
    let client = timer.client.clone();
    let RowsProblem { rows, channels, .. } = b.problem;
    let (c, t) = (channels, rows);
    let n = rows * channels;
    let knobs: Vec<Fp4Knobs> = knobs
        .iter()
        .map(|k| match *k {
            "selected" => select_fp4_knobs(&client, channels, rows, 2),
            k => Fp4Knobs::parse(k).unwrap_or_else(|e| panic!("{e}")),
        })
        .collect();
    let scales = client.empty(n / 16);
    let scratch = client.empty(n * 2);
    // One row of its own for `RMSNORM_AB_CODE_WARM=1` (see `code_warm`).
    let tiny = std::env::var("RMSNORM_AB_CODE_WARM")
        .is_ok_and(|v| v == "1")
        .then(|| {
            (
                Buffers::new(timer, 1, channels),
                client.empty(channels.div_ceil(16) * 4),
            )
        });
    let try_launch = |k: &Fp4Knobs| b.launch_nvfp4(&client, &scales, k);
    // Knobs this device refuses are reported and left out (the other cases still run).
    let knobs: Vec<Fp4Knobs> = knobs
        .into_iter()
        .filter(|k| match try_launch(k) {
            Ok(()) => true,
            Err(e) => {
                println!("ab C={c} T={t} nvfp4: {k} refused: {e}");
                false
            }
        })
        .collect();
    let launch = |k: &Fp4Knobs| try_launch(k).expect("launched before");
    let bytes = half_and_half(nvfp4_bytes(n));
    let mut times = vec![Vec::new(); knobs.len()];
    let mut copies = Vec::new();
    for _ in 0..5 {
        for (k, slot) in knobs.iter().zip(&mut times) {
            slot.push(median(&timer.time(2, 50, || launch(k))));
        }
        copies.push(median(
            &timer.time(2, 50, || timer.copy(&b.x, &scratch, bytes)),
        ));
    }
    let copy = median(&copies);
    if let Some((tiny, tiny_scales)) = &tiny {
        // As `code_warm`: each knobs again with the same kernel on one row of its own between
        // the flush and the timed launch.
        for k in &knobs {
            let cold = median(&timer.time(2, 100, || launch(k)));
            let warm = median(&timer.time_after(
                2,
                100,
                || {
                    tiny.launch_nvfp4(&client, tiny_scales, k)
                        .expect("tiny launch")
                },
                || launch(k),
            ));
            println!("codewarm C={c} T={t} nvfp4: {k} {cold:.2} -> {warm:.2} us");
        }
    }
    let mut first: Option<Vec<u8>> = None;
    for (k, slot) in knobs.iter().zip(&times) {
        launch(k);
        let mut written = client.read_one(b.out.clone()).expect("codes").to_vec();
        written.truncate(n / 2);
        written.extend(client.read_one(scales.clone()).expect("scales").to_vec());
        let differing = first.as_ref().map_or(0, |f| {
            f.iter().zip(&written).filter(|(a, b)| a != b).count()
        });
        first.get_or_insert(written);
        let t_k = median(slot);
        println!(
            "ab C={c} T={t} nvfp4: {k} {t_k:.2} us, copy {copy:.2} us, x{:.3}, {differing} code \
             and scale bytes differ from the first knobs'",
            t_k / copy
        );
    }
}

/// `RMSNORM_AB_ALTERNATE=1`: the knobs and the copy timed once each in turn (every launch after
/// its own L2 flush), 100 turns, so that each sees the same stretch of device time; prints
/// the medians next to `ab`'s batched ones. A check on the batched harnesses (`bench` times in
/// rounds of 12 runs, `ab` in rounds of 50): on the H200 their ratios agreed with these within
/// ~3% at T = 24960, while the absolute times of kernel and copy moved together by up to 10%.
fn alternate(timer: &Timer, b: &Buffers, knobs: &[Knobs], out: &str) {
    let (c, t) = (b.problem.channels, b.problem.rows);
    let bytes = copy_bytes(b);
    let mut times = vec![Vec::new(); knobs.len()];
    let mut copies = Vec::new();
    for k in knobs {
        b.launch(&timer.client, k);
    }
    timer.copy(&b.x, &b.out, bytes);
    for _ in 0..100 {
        for (k, slot) in knobs.iter().zip(&mut times) {
            slot.extend(timer.time(0, 1, || b.launch(&timer.client, k)));
        }
        copies.extend(timer.time(0, 1, || timer.copy(&b.x, &b.out, bytes)));
    }
    let copy = median(&copies);
    for (k, slot) in knobs.iter().zip(&times) {
        let t_k = median(slot);
        println!(
            "alternate C={c} T={t} {out}: {k} {t_k:.2} us, copy {copy:.2} us, x{:.3}",
            t_k / copy
        );
    }
}

/// `RMSNORM_AB_CODE_WARM=1`: each knobs and the copy timed as in [`ab`], and again with the
/// same kernel launched on one row of its own (a 16-byte copy for the copy) between the L2 flush
/// and the timed call. The flush evicts the kernels' code with their data; the second timing
/// finds the code in the L2 (and in one SM) with the data still cold, so the difference is what
/// fetching a kernel's instructions from DRAM costs it.
fn code_warm(timer: &mut Timer, b: &Buffers, knobs: &[Knobs], out: &str) {
    let (c, t) = (b.problem.channels, b.problem.rows);
    let mut tiny = Buffers::new(timer, 1, b.problem.channels);
    tiny.fp8 = b.fp8;
    let bytes = copy_bytes(b);
    let client = timer.client.clone();
    let mut cold = vec![Vec::new(); knobs.len() + 1];
    let mut warm = vec![Vec::new(); knobs.len() + 1];
    for _ in 0..5 {
        for (i, k) in knobs.iter().enumerate() {
            cold[i].extend(timer.time(2, 20, || b.launch(&client, k)));
            warm[i].extend(timer.time_after(
                2,
                20,
                || tiny.launch(&client, k),
                || b.launch(&client, k),
            ));
        }
        let last = knobs.len();
        cold[last].extend(timer.time(2, 20, || timer.copy(&b.x, &b.out, bytes)));
        warm[last].extend(timer.time_after(
            2,
            20,
            || timer.copy(&tiny.x, &tiny.out, 16),
            || timer.copy(&b.x, &b.out, bytes),
        ));
    }
    let (copy_cold, copy_warm) = (median(&cold[knobs.len()]), median(&warm[knobs.len()]));
    println!("codewarm C={c} T={t} {out}: copy {copy_cold:.2} -> {copy_warm:.2} us");
    for (i, k) in knobs.iter().enumerate() {
        let (tc, tw) = (median(&cold[i]), median(&warm[i]));
        println!(
            "codewarm C={c} T={t} {out}: {k} {tc:.2} -> {tw:.2} us, x{:.3} -> x{:.3}",
            tc / copy_cold,
            tw / copy_warm
        );
    }
}

/// `y` of the bench's inputs in f64 on the host (eps as [`Buffers::norm`], `b`'s activation),
/// for [`accuracy`].
fn host_reference(timer: &mut Timer, b: &Buffers) -> Vec<f64> {
    let RowsProblem { rows, channels, .. } = b.problem;
    let bf16s = |h: &Handle, n: usize| -> Vec<f64> {
        let bytes = timer
            .client
            .read_one(h.clone())
            .expect("read back")
            .to_vec();
        bytes[..n * 2]
            .chunks_exact(2)
            .map(|w| half::bf16::from_le_bytes([w[0], w[1]]).to_f64())
            .collect()
    };
    burn_rmsnorm_silu::kernels::reference::rms_norm_silu_f64(
        &bf16s(&b.x, rows * channels),
        &bf16s(&b.gamma, channels),
        channels,
        b.norm(),
        b.activation,
    )
}

/// How far `written` (bf16, or FP8 codes of scale 1) is from the f64 `reference`: the largest
/// absolute error, the largest error in units of the output's last place, and how many
/// outputs are not the correctly rounded value.
fn accuracy(written: &[u8], reference: &[f64], fp8: bool) -> String {
    use burn_rmsnorm_silu::kernels::formats::{e4m3_decode, e4m3_encode};
    let (mut max_abs, mut max_ulps, mut not_rounded) = (0.0f64, 0.0f64, 0usize);
    for (i, &want) in reference.iter().enumerate() {
        let (got, exact, ulp) = if fp8 {
            let code = e4m3_encode(want as f32);
            let next = e4m3_decode(code ^ 1) as f64;
            let here = e4m3_decode(code) as f64;
            (e4m3_decode(written[i]) as f64, here, (next - here).abs())
        } else {
            let got = half::bf16::from_le_bytes([written[i * 2], written[i * 2 + 1]]);
            let exact = half::bf16::from_f64(want);
            let next = half::bf16::from_bits(exact.to_bits() ^ 1);
            let ulp = (next.to_f64() - exact.to_f64()).abs();
            (got.to_f64(), exact.to_f64(), ulp)
        };
        max_abs = max_abs.max((got - want).abs());
        if ulp > 0.0 && ulp.is_finite() {
            max_ulps = max_ulps.max((got - exact).abs() / ulp);
        }
        not_rounded += usize::from(got != exact);
    }
    format!(
        "vs f64: max abs error {max_abs:.3e}, max {max_ulps:.0} ulp, {not_rounded} of {} not the rounded value",
        reference.len()
    )
}

/// The output bytes each of `knobs` writes, each launched once (after its timed runs) into an
/// output filled with fresh random bytes: a config that skips rows, or whose counters a timed
/// launch left wrong, differs from the first config where knobs of the same math agree bit for
/// bit.
fn written_outputs(timer: &mut Timer, b: &Buffers, knobs: &[Knobs]) -> Vec<Vec<u8>> {
    let RowsProblem { rows, channels, .. } = b.problem;
    let bytes = rows * channels * if b.fp8 { 1 } else { 2 };
    knobs
        .iter()
        .map(|k| {
            let poison = timer.random(BF16, bytes.div_ceil(4) * 2, -1e4, 2e4);
            timer.copy(&poison, &b.out, bytes.div_ceil(4) * 4);
            b.launch(&timer.client, k);
            let mut written = timer
                .client
                .read_one(b.out.clone())
                .expect("read the output")
                .to_vec();
            written.truncate(bytes);
            written
        })
        .collect()
}

/// `copies`: the copy-roof experiment. Times the roof (`Timer::copy`) and [`CopyShape`] variants
/// (vectors per unit, cube size, persistent grid or one cube per tile, tickets) of the same
/// bytes as bf16 in and out of `[T, C]`, three rounds of 30 runs each, and writes `copies.csv`
/// (median over rounds, ratio to the roof).
/// C = 512, 1024 at T = 24960, 99840, 399360 unless `RMSNORM_BENCH_C` / `RMSNORM_BENCH_T` say.
fn copies(timer: &mut Timer, args: &Args) {
    let shape = |per_unit, cube_dim, cubes_per_sm, ticketed| CopyShape {
        per_unit,
        cube_dim,
        cubes_per_sm,
        ticketed,
    };
    // The roof itself first (`Timer::copy`, marked per_unit 0: one vector per unit, 256 units,
    // full grid), then strided tiles on full and persistent grids, then ticketed persistent
    // grids (u1 d256 g8 was the earlier roof).
    let mut shapes = vec![shape(0, 256, 0, false)];
    for per_unit in [1, 2, 4] {
        for cube_dim in [128, 256] {
            for cubes_per_sm in [0, 8] {
                shapes.push(shape(per_unit, cube_dim, cubes_per_sm, false));
            }
        }
    }
    for per_unit in [1, 2, 4, 8] {
        for cube_dim in [128, 256, 512] {
            for cubes_per_sm in [4, 8, 16] {
                if cube_dim * cubes_per_sm <= 2048 {
                    shapes.push(shape(per_unit, cube_dim, cubes_per_sm, true));
                }
            }
        }
    }
    // Each variant first copies an odd number of vectors (a partial last tile) exactly.
    let bytes: Vec<u8> = (0..4 * 100_003u32)
        .flat_map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes())
        .collect();
    let src = timer.client.create_from_slice(&bytes);
    for shape in shapes.iter().skip(1) {
        let dst = timer.client.create_from_slice(&vec![0xa5u8; bytes.len()]);
        timer.copy_shaped(&src, &dst, bytes.len(), *shape);
        let back = timer.client.read_one(dst).expect("read the copy");
        assert!(back[..] == bytes[..], "copy {shape:?} is wrong");
    }
    let mut csv =
        String::from("c,t,per_unit,cube_dim,cubes_per_sm,ticketed,us,gbps,ratio_to_copy\n");
    for c in bench_channels(&[512, 1024]) {
        for t in bench_rows(&[24960, 99840, 399360]) {
            let bytes = c * t * 2;
            let src = timer.random(BF16, c * t, -2.0, 4.0);
            let dst = timer.client.empty(bytes);
            let mut times = vec![Vec::new(); shapes.len()];
            for _ in 0..3 {
                for (shape, slot) in shapes.iter().zip(&mut times) {
                    let shape = *shape;
                    slot.push(median(&timer.time(2, 30, || {
                        if shape.per_unit == 0 {
                            timer.copy(&src, &dst, bytes)
                        } else {
                            timer.copy_shaped(&src, &dst, bytes, shape)
                        }
                    })));
                }
            }
            let medians: Vec<f64> = times.iter().map(|t| median(t)).collect();
            let copy = medians[0];
            let mut order: Vec<usize> = (0..shapes.len()).collect();
            order.sort_by(|a, b| medians[*a].total_cmp(&medians[*b]));
            println!("copies C={c} T={t}: the roof (Timer::copy, u0) {copy:.2} us");
            for &i in &order {
                let s = shapes[i];
                let us = medians[i];
                let gbps = 2.0 * bytes as f64 / us / 1e3;
                csv.push_str(&format!(
                    "{c},{t},{},{},{},{},{us:.2},{gbps:.1},{:.4}\n",
                    s.per_unit,
                    s.cube_dim,
                    s.cubes_per_sm,
                    s.ticketed,
                    us / copy
                ));
            }
            for &i in order.iter().take(12) {
                let s = shapes[i];
                println!(
                    "  u{} d{} g{}{}: {:.2} us, x{:.3}",
                    s.per_unit,
                    s.cube_dim,
                    s.cubes_per_sm,
                    if s.ticketed { " tickets" } else { "" },
                    medians[i],
                    medians[i] / copy
                );
            }
        }
    }
    std::fs::create_dir_all(&args.out).expect("create the output folder");
    std::fs::write(format!("{}/copies.csv", args.out), csv).expect("write copies.csv");
}

fn main() {
    let args = args();
    let device = match args.device.as_str() {
        "cuda" => Device::cuda(0),
        #[cfg(feature = "cpu")]
        "cpu" => Device::cpu(),
        other => panic!("--device must be cuda or cpu (with the `cpu` feature), got {other}"),
    };
    let DispatchDevice::Cube(cube) = device.as_dispatch() else {
        panic!("benchmarks need a CubeCL device");
    };
    let mut timer = Timer::new(cube.client());
    let props = timer.client.properties();
    println!(
        "device: {} ({}), {} SMs",
        props.identity.name,
        props.identity.fingerprint,
        props.hardware.num_streaming_multiprocessors.unwrap_or(0)
    );
    match args.mode.as_str() {
        "tune" => tune(&mut timer, &args),
        "fallback" => fallback(&mut timer, &args),
        "channels" => channels(&mut timer, &args),
        "backward" => backward(&mut timer, &args),
        "quant" => quant(&mut timer, &args),
        "ab" => ab(&mut timer),
        "copies" => copies(&mut timer, &args),
        _ => bench(&mut timer, &device, &args),
    }
}
