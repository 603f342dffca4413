//! Decodes a Wan video latent with the Burn port of the Wan VAE decoder, every norm site on the
//! fused RMSNorm + SiLU op, and writes the frames as PNG images and an animated GIF.
//!
//! ```text
//! cargo run --release --example wan_vae_decode -- [--weights PATH] [--latent PATH |
//!     --frames N --height H --width W] [--dtype bf16|f32] [--unfused] [--out DIR]
//!     [--model wan21|wan22] [--size small|full] [--device cpu|cuda] [--seed S] [--no-check] [--no-write]
//!     [--conv burn|matmul] [--no-norm-time]
//! ```
//! It warms up with whole decodes (compilation, Burn's autotuning), times the decode
//! per latent frame with no extra synchronisation, then decodes once more with a device sync
//! around every norm call for the time spent in the norm sites (skip with `--no-norm-time`).
//! `--conv matmul` runs every 3D convolution as a sum of one matmul per kernel tap instead of
//! Burn's autotuned `conv3d` (see `wan::layers::conv3d_by_matmul`).
//! After the timed decode it decodes again with the norm sites composed from Burn ops and
//! prints the largest difference (skip with `--no-check`).
//! Without `--weights` it builds a random-weight decoder (`--size small` by default: the
//! cross-check fixtures' width, base 16) so it runs on the CPU runtime in seconds. `--latent`
//! reads a safetensors file's `z` (or its only) tensor `[1, z_dim, T, h, w]`, de-normalised
//! with the model's latent statistics unless `--raw-latent`; otherwise a random latent of
//! `--frames x --height x --width` is drawn.

mod wan;

use std::io::Write;
use std::time::{Duration, Instant};

use burn::tensor::{DType, Device, Tensor, TensorData};
use wan::config::WanConfig;
use wan::decoder::WanDecoder;
use wan::layers::{Ctx, denormalize};
use wan::weights::Weights;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

fn number(name: &str, default: usize) -> usize {
    arg(name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| fail(&format!("{name} must be a whole number, got `{v}`")))
    })
}

fn fail(message: &str) -> ! {
    eprintln!("wan_vae_decode: {message}");
    std::process::exit(2)
}

/// CUDA when a driver and a device answer, else the CubeCL CPU runtime.
fn pick_device() -> (Device, &'static str) {
    match arg("--device").as_deref() {
        Some("cuda") => return (Device::cuda(0), "CUDA device 0"),
        Some("cpu") => return (cpu_runtime(), "CubeCL CPU runtime"),
        Some(other) => fail(&format!("--device must be cpu or cuda, got `{other}`")),
        None => {}
    }
    if std::path::Path::new("/dev/nvidiactl").exists() {
        let probe = std::panic::catch_unwind(|| {
            let d = Device::cuda(0);
            let t = Tensor::<1>::ones([4], &d).sum().into_scalar::<f32>();
            (t == 4.0).then_some(d)
        });
        if let Ok(Some(d)) = probe {
            return (d, "CUDA device 0");
        }
    }
    (cpu_runtime(), "CubeCL CPU runtime (no GPU found)")
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

/// A safetensors file's bytes (read once: `--latent` serves as the input and the reference).
fn read_file(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| fail(&format!("--latent {path}: {e}")))
}

/// A latent from a safetensors file: the tensor `z`, or the file's only tensor.
fn read_latent(path: &str, bytes: &[u8], device: &Device) -> Tensor<5> {
    let file = safetensors::SafeTensors::deserialize(bytes)
        .unwrap_or_else(|e| fail(&format!("--latent {path}: not a safetensors file: {e}")));
    let names = file.names();
    let name = if names.contains(&"z") {
        "z".to_string()
    } else if names.len() == 1 {
        names[0].to_string()
    } else {
        fail(&format!("--latent {path}: no tensor `z` among {names:?}"))
    };
    read_tensor(path, bytes, &name, device).expect("listed tensor")
}

/// The 5-D tensor `name` of a safetensors file, if it has one.
fn read_tensor(path: &str, bytes: &[u8], name: &str, device: &Device) -> Option<Tensor<5>> {
    let file = safetensors::SafeTensors::deserialize(bytes)
        .unwrap_or_else(|e| fail(&format!("--latent {path}: not a safetensors file: {e}")));
    let view = file.tensor(name).ok()?;
    let shape = view.shape().to_vec();
    if shape.len() != 5 {
        fail(&format!(
            "--latent {path}: `{name}` must be [B, z_dim, T, h, w], got {shape:?}"
        ));
    }
    let values = wan::weights::to_f32(&view).unwrap_or_else(|other| {
        fail(&format!(
            "--latent {path}: dtype {other:?} (expected F32, F16 or BF16)"
        ))
    });
    Some(Tensor::from_data(TensorData::new(values, shape), device))
}

/// Frames `[3, F, H, W]` in [-1, 1] -> one RGB byte buffer per frame.
fn to_rgb(video: Tensor<5>) -> (Vec<Vec<u8>>, usize, usize) {
    let [_, _, frames, height, width] = video.dims();
    let v = video
        .slice(burn::tensor::s![0..1])
        .cast(DType::F32)
        .permute([0, 2, 3, 4, 1]) // [1, F, H, W, 3]
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("f32 frames");
    let per_frame = height * width * 3;
    let rgb = (0..frames)
        .map(|f| {
            v[f * per_frame..(f + 1) * per_frame]
                .iter()
                .map(|&x| ((x.clamp(-1.0, 1.0) + 1.0) * 127.5).round() as u8)
                .collect()
        })
        .collect();
    (rgb, width, height)
}

fn flat(t: Tensor<5>) -> Vec<f32> {
    t.cast(DType::F32)
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("f32 values")
}

fn write_outputs(dir: &str, frames: &[Vec<u8>], width: usize, height: usize) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| fail(&format!("--out {dir}: {e}")));
    for (i, rgb) in frames.iter().enumerate() {
        let path = format!("{dir}/frame_{i:03}.png");
        let file = std::fs::File::create(&path).unwrap_or_else(|e| fail(&format!("{path}: {e}")));
        let mut encoder =
            png::Encoder::new(std::io::BufWriter::new(file), width as u32, height as u32);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().expect("png header");
        writer.write_image_data(rgb).expect("png data");
    }
    let path = format!("{dir}/video.gif");
    let file = std::fs::File::create(&path).unwrap_or_else(|e| fail(&format!("{path}: {e}")));
    let mut gif = gif::Encoder::new(file, width as u16, height as u16, &[]).expect("gif header");
    gif.set_repeat(gif::Repeat::Infinite).expect("gif repeat");
    for rgb in frames {
        let mut frame = gif::Frame::from_rgb_speed(width as u16, height as u16, rgb, 10);
        frame.delay = 6; // 1/100 s units: ~16 fps, Wan's frame rate
        gif.write_frame(&frame).expect("gif frame");
    }
}

fn progress(done: usize, total: usize, elapsed: Duration) {
    let width = 30;
    let filled = done * width / total.max(1);
    eprint!(
        "\r[{}{}] latent frame {done}/{total}  {:.2} s",
        "#".repeat(filled),
        " ".repeat(width - filled),
        elapsed.as_secs_f64()
    );
    let _ = std::io::stderr().flush();
    if done == total {
        eprintln!();
    }
}

/// Decodes `z` with a device sync after every latent frame: the video and, per frame, the time
/// it took and the norm time `ctx` recorded during it.
fn timed_decode(
    decoder: &WanDecoder,
    z: Tensor<5>,
    ctx: &Ctx,
    show_progress: bool,
) -> (Tensor<5>, Vec<(Duration, Duration)>) {
    let latent_frames = z.dims()[2];
    let start = Instant::now();
    let mut frame_start = Instant::now();
    let mut per_frame = Vec::new();
    let mut norm_before = ctx.norm_time.get();
    if show_progress {
        progress(0, latent_frames, Duration::ZERO);
    }
    let video = decoder.decode(z, ctx, |i, out| {
        out.device().sync().expect("sync");
        let norm_now = ctx.norm_time.get();
        per_frame.push((frame_start.elapsed(), norm_now - norm_before));
        norm_before = norm_now;
        frame_start = Instant::now();
        if show_progress {
            progress(i + 1, latent_frames, start.elapsed());
        }
    });
    (video, per_frame)
}

fn main() {
    let (device, device_name) = pick_device();
    let dtype = match arg("--dtype").as_deref() {
        None | Some("f32") => DType::F32,
        Some("bf16") => DType::BF16,
        Some(other) => fail(&format!("--dtype must be bf16 or f32, got `{other}`")),
    };
    let fused = !flag("--unfused");
    match arg("--conv").as_deref() {
        None | Some("burn") => {}
        Some("matmul") => wan::layers::use_conv_by_matmul(),
        Some(other) => fail(&format!("--conv must be burn or matmul, got `{other}`")),
    }
    let seed: u64 = number("--seed", 7) as u64;
    let out_dir = arg("--out").unwrap_or_else(|| "wan_vae_out".into());

    let (config, mut weights, source) = match arg("--weights") {
        Some(path) => {
            let weights = Weights::from_file(&path).unwrap_or_else(|e| fail(&e));
            let config = WanConfig::detect(|k| weights.shape(k)).unwrap_or_else(|e| fail(&e));
            (config, weights, path)
        }
        None => {
            let full = match arg("--size").as_deref() {
                None | Some("small") => false,
                Some("full") => true,
                Some(other) => fail(&format!("--size must be small or full, got `{other}`")),
            };
            let config = match (arg("--model").as_deref(), full) {
                (None | Some("wan21"), false) => WanConfig::small21(),
                (None | Some("wan21"), true) => WanConfig::wan21(),
                (Some("wan22"), false) => WanConfig::small22(),
                (Some("wan22"), true) => WanConfig::wan22(),
                (Some(other), _) => fail(&format!("--model must be wan21 or wan22, got `{other}`")),
            };
            (
                config,
                Weights::random(seed),
                format!("random weights (seed {seed})"),
            )
        }
    };
    let load_start = Instant::now();
    let decoder = WanDecoder::load(&config, &mut weights, &device, dtype);
    drop(weights);
    let load_time = load_start.elapsed();

    let latent_bytes = arg("--latent").map(|path| read_file(&path));
    let z = match arg("--latent") {
        Some(path) => {
            let z = read_latent(&path, latent_bytes.as_deref().expect("read"), &device);
            if z.dims()[1] != config.z_dim {
                fail(&format!(
                    "--latent has {} channels; this decoder takes z_dim = {}",
                    z.dims()[1],
                    config.z_dim
                ));
            }
            if flag("--raw-latent") {
                z
            } else {
                denormalize(z, &config)
            }
        }
        None => {
            let shape = [
                1,
                config.z_dim,
                number("--frames", 3),
                number("--height", 8),
                number("--width", 12),
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

    // Warm-up: one whole decode as timed below and one as the norm-timed pass (the first,
    // second and later latent frames run different shapes because of the causal cache, and a
    // device sync around each norm call changes how Burn's fusion groups the other ops, so
    // each pass compiles kernels of its own). Then the timed decode with no extra
    // synchronisation, then (unless --no-norm-time) a decode with a device sync around every
    // norm call for the time spent in the norm sites.
    let measure_norms = !flag("--no-norm-time");
    let warm = Instant::now();
    let _ = decoder
        .decode(z.clone(), &Ctx::new(fused, false), |_, _| {})
        .into_data();
    if measure_norms {
        let _ = decoder
            .decode(z.clone(), &Ctx::new(fused, true), |_, _| {})
            .into_data();
    }
    println!(
        "warm-up (compiles and tunes kernels): {:.2} s",
        warm.elapsed().as_secs_f64()
    );

    let ctx = Ctx::new(fused, false);
    let start = Instant::now();
    let (video, per_frame) = timed_decode(&decoder, z.clone(), &ctx, true);
    let total = start.elapsed();
    let norm_ctx = Ctx::new(fused, true);
    let norm_per_frame: Vec<Duration> = if measure_norms {
        let (_, frames) = timed_decode(&decoder, z.clone(), &norm_ctx, false);
        frames.into_iter().map(|(_, norm)| norm).collect()
    } else {
        vec![Duration::ZERO; per_frame.len()]
    };
    let z_check = z;
    if let Some(path) = arg("--latent") {
        // A cross-check fixture (`../shared/fixtures/wan*_small/io.safetensors`) also holds
        // PyTorch's output: compare before the clamp.
        let bytes = latent_bytes.as_deref().expect("read with --latent");
        if let Some(reference) = read_tensor(&path, bytes, "decoded_unclamped", &device) {
            let (a, b) = (flat(video.clone()), flat(reference));
            let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let worst = a
                .iter()
                .zip(&b)
                .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
            println!(
                "reference: vs PyTorch's decoded_unclamped, max |difference| / max |reference| \
                 = {:.2e} ({dtype:?})",
                worst / scale
            );
        }
    }
    if !flag("--no-check") {
        // The same decode with the norm sites composed from Burn ops: the fused op must not
        // change the video beyond rounding.
        let check = decoder.decode(z_check, &Ctx::new(!fused, false), |_, _| {});
        let (a, b) = (flat(video.clone()), flat(check));
        let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let worst = a
            .iter()
            .zip(&b)
            .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        println!(
            "check: fused vs composed norm sites, max |difference| / max |output| = {:.2e} \
             (unclamped, {dtype:?})",
            worst / scale
        );
    }
    let video = video.clamp(-1.0, 1.0);
    let (frames, width, height) = to_rgb(video);
    for (i, ((t, _), norm)) in per_frame.iter().zip(&norm_per_frame).enumerate() {
        println!(
            "latent frame {i}: {:8.2} ms, norm sites {:7.2} ms ({:4.1}%)",
            t.as_secs_f64() * 1e3,
            norm.as_secs_f64() * 1e3,
            100.0 * norm.as_secs_f64() / t.as_secs_f64()
        );
    }
    let norm_total = norm_ctx.norm_time.get();
    println!(
        "decode: {:.3} s for {latent_frames} latent frames ({:.2} ms per frame); {} norm calls \
         took {:.3} s ({:.1}% of the decode; timed in a second decode with a device sync \
         around each call)",
        total.as_secs_f64(),
        total.as_secs_f64() * 1e3 / latent_frames as f64,
        norm_ctx.norm_calls.get(),
        norm_total.as_secs_f64(),
        100.0 * norm_total.as_secs_f64() / total.as_secs_f64()
    );
    if flag("--no-write") {
        println!(
            "{} frames of {width}x{height} decoded (--no-write: nothing written)",
            frames.len()
        );
    } else {
        write_outputs(&out_dir, &frames, width, height);
        println!(
            "wrote {} PNG frames and video.gif ({width}x{height}) to {out_dir}/",
            frames.len()
        );
    }
}
