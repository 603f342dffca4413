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
    Activation, GammaIn, KnobSource, Knobs, LaneReduce, NormParams, RowOperands, RowsProblem,
    heuristic_knobs, launch_forward, select_knobs_with_source, table_derived_knobs,
};
use burn_rmsnorm_silu::rms_norm_silu;

// One module per mode; this file holds the arguments, the buffers and the timing helpers they
// share.
mod ab;
mod backward;
mod channels;
mod copies;
mod quant;
mod table;
mod tune;

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
            RowOperands {
                x: self.x.clone(),
                gamma: self.gamma.clone(),
                x_type: BF16,
                gamma_type: BF16,
            },
            self.out.clone(),
            self.problem,
            self.norm(),
            self.activation,
            knobs,
        )
        .expect("launch");
    }

    /// FP8 E4M3 out (scale 1) into `out`, whatever `fp8` says.
    fn launch_fp8(&self, client: &Client, knobs: &Knobs) {
        let target =
            burn_rmsnorm_silu::kernels::forward::OutputTarget::fp8(self.out.clone(), 1.0, None);
        self.launch_fp8_to(client, knobs, target);
    }

    /// [`Self::launch_fp8`] with the scale read on the device (delayed scaling).
    fn launch_fp8_device_scale(
        &self,
        client: &Client,
        knobs: &Knobs,
        scale: &burn_rmsnorm_silu::kernels::forward::DeviceScale,
    ) {
        let target = burn_rmsnorm_silu::kernels::forward::OutputTarget::fp8_device_scale(
            self.out.clone(),
            scale.clone(),
            None,
        );
        self.launch_fp8_to(client, knobs, target);
    }

    fn launch_fp8_to(
        &self,
        client: &Client,
        knobs: &Knobs,
        target: burn_rmsnorm_silu::kernels::forward::OutputTarget,
    ) {
        burn_rmsnorm_silu::kernels::forward::launch_forward_to(
            client,
            RowOperands {
                x: self.x.clone(),
                gamma: self.gamma.clone(),
                x_type: BF16,
                gamma_type: BF16,
            },
            target,
            self.problem,
            self.norm(),
            self.activation,
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
    ) -> Result<(), burn_rmsnorm_silu::kernels::KernelError> {
        use burn_rmsnorm_silu::kernels::nvfp4::{
            Fp4Recipe, Fp4Target, ScaleLayout, launch_forward_nvfp4,
        };
        launch_forward_nvfp4(
            client,
            RowOperands {
                x: self.x.clone(),
                gamma: self.gamma.clone(),
                x_type: BF16,
                gamma_type: BF16,
            },
            Fp4Target {
                codes: self.out.clone(),
                scales: scales.clone(),
                recipe: Fp4Recipe::TransformerEngine,
                layout: ScaleLayout::RowMajor,
                s_enc: 100.0,
                device_amax: None,
            },
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

fn sms(client: &Client) -> u32 {
    client
        .properties()
        .hardware
        .num_streaming_multiprocessors
        .unwrap_or(1)
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

fn write_file(args: &Args, name: &str, text: &str) {
    std::fs::create_dir_all(&args.out).expect("create the output folder");
    let path = format!("{}/{name}", args.out);
    std::fs::write(&path, text).expect("write");
    println!("wrote {path}");
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
        "tune" => tune::tune(&mut timer, &args),
        "fallback" => tune::fallback(&mut timer, &args),
        "channels" => channels::channels(&mut timer, &device, &args),
        "backward" => backward::backward(&mut timer, &args),
        "quant" => quant::quant(&mut timer, &args),
        "ab" => ab::ab(&mut timer),
        "copies" => copies::copies(&mut timer, &args),
        _ => table::bench(&mut timer, &device, &args),
    }
}
