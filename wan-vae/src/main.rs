//! The `wan-vae` program: decodes a Wan video latent with the Burn port of the Wan VAE decoder,
//! every norm site on the fused RMSNorm + SiLU op, and writes the frames as PNG images, an
//! animated GIF and an H.264 MP4 (`wan-vae --help` lists the options).
//!
//! It warms up with one whole decode (kernel compilation) and reports when the first latent
//! frame was decoded after the program started, times the decode per latent frame with no
//! extra synchronisation, then decodes once more with a device sync around every convolution,
//! norm and attention call for the breakdown of its time (skip with `--no-profile`), and once
//! more with the norm sites composed from Burn ops to print the largest difference (skip with
//! `--no-check`). Without `--weights` it builds a random-weight decoder (`--size small` by
//! default: the cross-check fixtures' width, base 16) that runs on the CPU runtime in seconds.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_rmsnorm_silu::AttentionRoutine;
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use wan_vae::{Ctx, Precision, WanConfig, WanDecoder, Weights, denormalize};

mod cli;

use cli::io::{
    flat, max_relative_difference, psnr, read_file, read_latent, read_tensor, save_video, to_rgb,
    write_outputs,
};
use cli::timing::timed_decode;

/// Decodes a Wan video latent with the Burn port of the Wan VAE decoder (every norm site on the
/// fused RMSNorm + SiLU op) and writes the frames as PNG images, an animated GIF and an MP4.
#[derive(Parser, Debug)]
#[command(name = "wan-vae", version)]
struct Args {
    /// Decoder weights: a Wan2.1 or Wan2.2 VAE safetensors file, diffusers or original key
    /// names (the layout is detected from the shapes). Without it: random weights.
    #[arg(long, value_name = "FILE")]
    weights: Option<PathBuf>,
    /// Random weights' model layout (without --weights).
    #[arg(long, value_enum, default_value_t = Model::Wan21, conflicts_with = "weights")]
    model: Model,
    /// Random weights' width: the cross-check fixtures' (base 16, runs on the CPU runtime in
    /// seconds) or the published model's (without --weights).
    #[arg(long, value_enum, default_value_t = Size::Small, conflicts_with = "weights")]
    size: Size,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// A safetensors file whose `z` (or only) tensor `[1, z_dim, T, h, w]` is the latent.
    /// Without it: a random latent of --frames x --height x --width.
    #[arg(long, value_name = "FILE")]
    latent: Option<PathBuf>,
    /// The latent is already de-normalised (skip the model's latent statistics).
    #[arg(long, requires = "latent")]
    raw_latent: bool,
    /// Latent frames of the random latent (video frames: 1 + 4 (T - 1)).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "latent")]
    frames: u32,
    /// Latent height of the random latent (video: 8x).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "latent")]
    height: u32,
    /// Latent width of the random latent (video: 8x, or 16x for Wan2.2).
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "latent")]
    width: u32,
    /// The middle block's attention: cubek's flash attention, or the query rows in chunks of
    /// at most 64 MiB of f32 scores (two tensor-core products and an exact softmax per chunk).
    #[arg(long, value_enum, default_value_t = AttentionKind::Flash)]
    attention: AttentionKind,
    /// Residual connections: by a separate add after the last convolution (`separate`), or
    /// added in that convolution's store (`in-conv`, where the backend can; not yet measured
    /// on a GPU).
    #[arg(long, value_enum, default_value_t = ResidualKind::Separate)]
    residual: ResidualKind,
    /// Weights' and activations' dtype.
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    dtype: Dtype,
    /// What the norm -> convolution sites compute in: `fp8` (the last two up stages) and
    /// `fp8-all` (every site but conv_out) round their weights to E4M3 per output channel and
    /// the norms' outputs to E4M3 with delayed per-tensor scales (the convolutions still run in
    /// --dtype: FP8 numerics, not FP8 speed).
    #[arg(long, value_enum, default_value_t = SitePrecision::Native)]
    precision: SitePrecision,
    /// The device; by default CUDA when a GPU answers, else the CubeCL CPU runtime.
    #[arg(long, value_enum)]
    device: Option<DeviceKind>,
    /// Norm sites composed from Burn ops instead of the fused kernel.
    #[arg(long)]
    unfused: bool,
    /// Skip the second decode with the other norm implementation and its comparison.
    #[arg(long)]
    no_check: bool,
    /// Skip the profiled decode (a device sync around every convolution, norm and attention
    /// call, for the breakdown of the time).
    #[arg(long)]
    no_profile: bool,
    /// Write no PNG frames, GIF or MP4.
    #[arg(long)]
    no_write: bool,
    /// Directory of the PNG frames, `video.gif` and `video.mp4` (H.264, 16 frames a second).
    #[arg(long, value_name = "DIR", default_value = "wan_vae_out")]
    out: PathBuf,
    /// Also write the unclamped video as f32 `video` to this safetensors file.
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
    /// A convolution table fresh from the tuner (benches/conv/), used instead of the
    /// compiled-in one.
    #[arg(long, value_name = "FILE")]
    conv_table: Option<PathBuf>,
    /// A device synchronisation around each norm, convolution and attention call; by default
    /// on the CubeCL CPU runtime only (measured faster there, slower on CUDA, where Burn's
    /// fusion queues a latent frame's operations)
    #[arg(long, value_enum)]
    sync_calls: Option<Switch>,
    /// Also time the video's assembly from the decoded chunks twice each way: one
    /// concatenation, and slice assignments into a zero video (before the timed assembly)
    #[arg(long)]
    probe_assembly: bool,
    /// Give the memory pools' free pages back to the driver after every N latent frames
    /// (cubecl's memory cleanup); 0: never (beyond --release-memory-first)
    #[arg(long, value_name = "N", default_value_t = 0)]
    release_memory_every: usize,
    /// Also give them back after each of the first N latent frames, where the chunk shapes
    /// still change (after them the pools' pages are reused as they are)
    #[arg(long, value_name = "N", default_value_t = 3)]
    release_memory_first: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Switch {
    On,
    Off,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Model {
    Wan21,
    Wan22,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Size {
    Small,
    Full,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum AttentionKind {
    Flash,
    Chunks,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ResidualKind {
    InConv,
    Separate,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Dtype {
    F32,
    Bf16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SitePrecision {
    Native,
    Fp8,
    Fp8All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DeviceKind {
    Cpu,
    Cuda,
}

fn fail(message: &str) -> ! {
    eprintln!("wan-vae: {message}");
    std::process::exit(2)
}

/// CUDA when a driver and a device answer, else the CubeCL CPU runtime.
fn pick_device(kind: Option<DeviceKind>) -> (Device, DeviceKind, &'static str) {
    match kind {
        Some(DeviceKind::Cuda) => return (Device::cuda(0), DeviceKind::Cuda, "CUDA device 0"),
        Some(DeviceKind::Cpu) => return (cpu_runtime(), DeviceKind::Cpu, "CubeCL CPU runtime"),
        None => {}
    }
    if std::path::Path::new("/dev/nvidiactl").exists() {
        let probe = std::panic::catch_unwind(|| {
            let d = Device::cuda(0);
            let t = Tensor::<1>::ones([4], &d).sum().into_scalar::<f32>();
            (t == 4.0).then_some(d)
        });
        if let Ok(Some(d)) = probe {
            return (d, DeviceKind::Cuda, "CUDA device 0");
        }
    }
    (
        cpu_runtime(),
        DeviceKind::Cpu,
        "CubeCL CPU runtime (no GPU found)",
    )
}

#[cfg(feature = "cpu")]
fn cpu_runtime() -> Device {
    Device::cpu()
}

/// The CUDA-only build that travels to the GPU machine (scripts/gpu-pack.sh) has no CPU runtime.
#[cfg(not(feature = "cpu"))]
fn cpu_runtime() -> Device {
    fail("this binary was built without the `cpu` feature (CUDA only): pass --device cuda")
}

/// Warnings of the libraries (a convolution configuration cubek refuses, a flash attention that
/// falls back) on stderr.
struct StderrWarnings;

impl log::Log for StderrWarnings {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            eprintln!("{}: {}", record.level(), record.args());
        }
    }

    fn flush(&self) {}
}

fn main() {
    let process_start = Instant::now();
    let _ = log::set_logger(&StderrWarnings).map(|()| log::set_max_level(log::LevelFilter::Warn));
    let args = Args::parse();
    let (device, device_kind, device_name) = pick_device(args.device);
    let dtype = match args.dtype {
        Dtype::F32 => DType::F32,
        Dtype::Bf16 => DType::BF16,
    };
    let attention = match args.attention {
        AttentionKind::Flash => AttentionRoutine::Flash,
        AttentionKind::Chunks => AttentionRoutine::QueryChunks {
            max_score_bytes: 64 << 20,
        },
    };
    let precision = match args.precision {
        SitePrecision::Native => Precision::Native,
        SitePrecision::Fp8 => Precision::Fp8,
        SitePrecision::Fp8All => Precision::Fp8All,
    };
    let fused = !args.unfused;
    if let Some(file) = &args.conv_table {
        let path = file.display();
        // A convolution table fresh from the tuner, tried before it is compiled in.
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| fail(&format!("--conv-table {path}: {e}")));
        let n = burn_rmsnorm_silu::kernels::conv::table::install(&text)
            .unwrap_or_else(|e| fail(&format!("--conv-table {path}: {e}")));
        println!("convolution table: {n} entries from {path}");
    }

    let (config, mut weights, source) = match &args.weights {
        Some(path) => {
            let shown = path.display().to_string();
            let weights = Weights::from_file(&shown).unwrap_or_else(|e| fail(&e.to_string()));
            let config =
                WanConfig::detect(|k| weights.shape(k)).unwrap_or_else(|e| fail(&e.to_string()));
            (config, weights, shown)
        }
        None => {
            let config = match (args.model, args.size) {
                (Model::Wan21, Size::Small) => WanConfig::small21(),
                (Model::Wan21, Size::Full) => WanConfig::wan21(),
                (Model::Wan22, Size::Small) => WanConfig::small22(),
                (Model::Wan22, Size::Full) => WanConfig::wan22(),
            };
            (
                config,
                Weights::random(args.seed),
                format!("random weights (seed {})", args.seed),
            )
        }
    };
    let load_start = Instant::now();
    let decoder = WanDecoder::load_with(&config, &mut weights, &device, dtype, precision)
        .unwrap_or_else(|e| fail(&e.to_string()));
    drop(weights);
    let load_time = load_start.elapsed();

    let latent_bytes = args.latent.as_deref().map(read_file);
    let z = match &args.latent {
        Some(path) => {
            let z = read_latent(path, latent_bytes.as_deref().expect("read"), &device);
            if z.dims()[1] != config.z_dim {
                fail(&format!(
                    "--latent has {} channels; this decoder takes z_dim = {}",
                    z.dims()[1],
                    config.z_dim
                ));
            }
            if args.raw_latent {
                z
            } else if !config.has_published_statistics() {
                fail(&format!(
                    "--latent: this decoder (z_dim {}) has no published latent statistics to \
                     de-normalise with; pass --raw-latent with latents already de-normalised",
                    config.z_dim
                ))
            } else {
                denormalize(z, &config)
            }
        }
        None => {
            let shape = [
                1,
                config.z_dim,
                args.frames as usize,
                args.height as usize,
                args.width as usize,
            ];
            Tensor::random(shape, burn::tensor::Distribution::Normal(0.0, 1.0), &device)
        }
    }
    .cast(dtype);
    let [_, _, latent_frames, h, w] = z.dims();
    let f = config.spatial_factor();
    println!(
        "Wan VAE decoder (z {}, base {}, {}) on {device_name}, {dtype:?}, {} norm sites, {source}",
        config.z_dim,
        config.base_dim,
        if config.residual {
            "Wan2.2 layout"
        } else {
            "Wan2.1 layout"
        },
        if fused {
            "fused"
        } else {
            "composed (--unfused)"
        },
    );
    println!(
        "latent [1, {}, {latent_frames}, {h}, {w}] -> video [1, 3, {}, {}, {}]; weights loaded in {:.2} s",
        config.z_dim,
        config.output_frames(latent_frames),
        h * f,
        w * f,
        load_time.as_secs_f64()
    );

    // Warm-up: one whole decode (the first, second and later latent frames run different
    // shapes because of the causal cache; each new shape compiles its kernels), then the timed
    // decode with no extra synchronisation, then (unless --no-profile) a decode with a device
    // sync around every norm, convolution and attention call for the breakdown.
    let profile = !args.no_profile;
    let warm = Instant::now();
    // The same calls and synchronisations as the timed decode: Burn's fusion compiles (and
    // autotunes) a kernel per sequence of operations between two synchronisations, so a
    // warm-up that synchronises elsewhere leaves kernels for the timed decode to compile.
    let sync_calls = match args.sync_calls {
        Some(switch) => switch == Switch::On,
        None => matches!(device_kind, DeviceKind::Cpu),
    };
    let context = |profile: bool| {
        Ctx::new(fused, profile)
            .with_attention(attention)
            .with_residual_in_conv(args.residual == ResidualKind::InConv)
            .with_sync_calls(sync_calls)
            .with_release_memory_every(args.release_memory_every)
            .with_release_memory_first(args.release_memory_first)
    };
    let (_, warm_times) = timed_decode(&decoder, z.clone(), &context(false), false, false);
    println!(
        "warm-up decode (compiles the kernels): {:.2} s; first latent frame decoded {:.2} s after \
         the program started",
        warm.elapsed().as_secs_f64(),
        (warm.duration_since(process_start) + warm_times.per_frame[0]).as_secs_f64()
    );

    let start = Instant::now();
    let (video, times) = timed_decode(
        &decoder,
        z.clone(),
        &context(false),
        true,
        args.probe_assembly,
    );
    let total = start.elapsed();
    let per_frame = times.per_frame;
    println!(
        "after the last frame: {:.2} ms until the device is idle, {:.2} ms assembling the video",
        times.after_frames.as_secs_f64() * 1e3,
        times.assembly.as_secs_f64() * 1e3
    );
    println!(
        "memory at its peak (sampled after each latent frame; free pages {}): {}",
        match (args.release_memory_every, args.release_memory_first) {
            (0, 0) => "kept".to_string(),
            (1, _) => "released after every frame".to_string(),
            (0, f) => format!("released after each of the first {f} frames"),
            (n, 0) => format!("released every {n} frames"),
            (n, f) => format!("released after each of the first {f} frames and every {n}"),
        },
        times.memory.describe()
    );
    let profiled = context(true);
    let profiled_total = if profile {
        let start = Instant::now();
        let _ = timed_decode(&decoder, z.clone(), &profiled, false, false);
        start.elapsed()
    } else {
        Duration::ZERO
    };
    let z_check = z;
    if let Some(path) = &args.latent {
        // A file that also holds PyTorch's output of the same decode (`decoded_unclamped`, as
        // the cross-check fixtures do): compare before the clamp, and the PSNR after it.
        let bytes = latent_bytes.as_deref().expect("read with --latent");
        if let Some(reference) = read_tensor(path, bytes, "decoded_unclamped", &device) {
            let path = path.display();
            let (a, b) = (flat(video.clone()), flat(reference));
            println!(
                "reference: vs `decoded_unclamped` of {path}: max |difference| / max |reference| \
                 = {:.2e}, PSNR {:.2} dB (clamped video, {dtype:?})",
                max_relative_difference(&a, &b),
                psnr(&a, &b)
            );
        }
    }
    if !args.no_check && precision != Precision::Native {
        // FP8 sites run the fused kernel in both decodes, and E4M3 rounds the composed sites'
        // slightly different values to different codes: no rounding-level comparison there.
        println!(
            "check skipped: --precision {:?} (FP8 sites)",
            args.precision
        );
    } else if !args.no_check {
        // The same decode with the norm sites composed from Burn ops: the fused op must not
        // change the video beyond rounding.
        let check = decoder
            .decode(z_check, &context(false).with_fused(!fused), |_, _| {})
            .unwrap_or_else(|e| fail(&e.to_string()));
        let (a, b) = (flat(video.clone()), flat(check));
        println!(
            "check: fused vs composed norm sites, max |difference| / max |output| = {:.2e} \
             (unclamped, {dtype:?})",
            max_relative_difference(&a, &b)
        );
    }
    if let Some(path) = &args.save {
        save_video(path, video.clone());
    }
    let video = video.clamp(-1.0, 1.0);
    let (frames, width, height) = to_rgb(video);
    for (i, t) in per_frame.iter().enumerate() {
        println!("latent frame {i}: {:8.2} ms", t.as_secs_f64() * 1e3);
    }
    let steady: Vec<f64> = per_frame.iter().skip(1).map(|t| t.as_secs_f64()).collect();
    let steady_ms = if steady.is_empty() {
        f64::NAN
    } else {
        1e3 * steady.iter().sum::<f64>() / steady.len() as f64
    };
    println!(
        "decode: {:.3} s for {latent_frames} latent frames ({:.2} ms per frame, {steady_ms:.2} ms \
         per frame after the first; {})",
        total.as_secs_f64(),
        total.as_secs_f64() * 1e3 / latent_frames as f64,
        if sync_calls {
            "synchronised around each call"
        } else {
            "no synchronisation between frames"
        }
    );
    if profile {
        let share = |d: Duration| 100.0 * d.as_secs_f64() / profiled_total.as_secs_f64();
        let mut parts = vec![
            ("convolutions".to_string(), profiled.conv_time.get()),
            (
                format!("{} norm calls", profiled.norm_calls.get()),
                profiled.norm_time.get(),
            ),
            ("attention".to_string(), profiled.attention_time.get()),
            ("cache joins".to_string(), profiled.join_time.get()),
            ("residual adds".to_string(), profiled.add_time.get()),
        ];
        let accounted: Duration = parts.iter().map(|(_, d)| *d).sum();
        parts.push((
            "the rest".to_string(),
            profiled_total.saturating_sub(accounted),
        ));
        let shown: Vec<String> = parts
            .iter()
            .map(|(what, d)| format!("{what} {:.3} s ({:.1}%)", d.as_secs_f64(), share(*d)))
            .collect();
        println!(
            "breakdown (a second decode, {:.3} s with a device sync around each call): {}; \
             at most {:.2} GiB in live tensors after a call",
            profiled_total.as_secs_f64(),
            shown.join(", "),
            profiled.peak_memory.get().in_use as f64 / (1u64 << 30) as f64
        );
        print_sites(&profiled, dtype.size());
    }
    if args.no_write {
        println!(
            "{} frames of {width}x{height} decoded (--no-write: nothing written)",
            frames.len()
        );
    } else {
        write_outputs(&args.out, &frames, width, height);
        println!(
            "wrote {} PNG frames, video.gif and video.mp4 ({width}x{height}) to {}/",
            frames.len(),
            args.out.display()
        );
    }
}

/// The profiled decode's norm sites and convolutions by input shape, the costliest first: calls,
/// time per call and, for the norm sites, the rate over the bytes read and written.
fn print_sites(ctx: &Ctx, elem_bytes: usize) {
    let sites = ctx.sites.borrow();
    let mut rows: Vec<_> = sites.iter().collect();
    rows.sort_by_key(|row| std::cmp::Reverse(row.1.1));
    println!("by site (kind, input [B, T, H, W, C] and output channels: calls, time):");
    for ((kind, shape), (calls, time)) in rows {
        let per_call = time.as_secs_f64() / *calls as f64;
        let rate = if *kind == "norm" {
            let bytes = 2 * shape.iter().product::<usize>() * elem_bytes;
            format!(", {:.0} GB/s", bytes as f64 / per_call / 1e9)
        } else {
            String::new()
        };
        println!(
            "  {kind:<11} {shape:?}: {calls} calls, {:.1} ms, {:.1} us a call{rate}",
            time.as_secs_f64() * 1e3,
            per_call * 1e6
        );
    }
}
