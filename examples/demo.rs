//! Runs the fused RMSNorm + SiLU on a Wan2.1 VAE decoder shape (24 960 rows of C = 384, bf16),
//! checks it against the f64 reference with the cuDNN test's tolerances and prints the error
//! and the time. Uses CUDA when a GPU is present, otherwise the CubeCL CPU runtime.
//!
//! `cargo run --release --example demo -- [--device cpu|cuda] [--rows T] [--channels C]`

use std::time::Instant;

use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_rmsnorm_silu::kernels::reference::{compare, rms_norm_silu_f64};
use burn_rmsnorm_silu::kernels::{Activation, NormParams};
use burn_rmsnorm_silu::rms_norm_silu;
use half::bf16;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// CUDA when a driver and a device answer, else the CubeCL CPU runtime.
fn pick_device() -> (Device, &'static str) {
    match arg("--device").as_deref() {
        Some("cuda") => return (Device::cuda(0), "CUDA device 0"),
        Some("cpu") => return (Device::cpu(), "CubeCL CPU runtime"),
        Some(other) => panic!("--device must be cpu or cuda, got {other}"),
        None => {}
    }
    let has_driver = std::path::Path::new("/dev/nvidiactl").exists();
    if has_driver {
        let probe = std::panic::catch_unwind(|| {
            let d = Device::cuda(0);
            let t = Tensor::<1>::ones([4], &d).sum().into_scalar::<f32>();
            (t == 4.0).then_some(d)
        });
        if let Ok(Some(d)) = probe {
            return (d, "CUDA device 0");
        }
        eprintln!("demo: a CUDA driver is present but CUDA did not start; using the CPU runtime");
    }
    (Device::cpu(), "CubeCL CPU runtime (no GPU found)")
}

/// Deterministic pseudo-random normal samples (xorshift + Box-Muller), seeded from the clock.
fn randn(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u1, u2) = (next().max(1e-300), next());
            (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        })
        .collect()
}

fn main() {
    let rows: usize = arg("--rows").map_or(24_960, |v| v.parse().expect("--rows"));
    let channels: usize = arg("--channels").map_or(384, |v| v.parse().expect("--channels"));
    let (device, name) = pick_device();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;

    // The cuDNN engine's test recipe: x = randn*5 + 5, gamma ~ U[0.5, 2], eps = 1e-6 / C.
    let round = |v: f64| bf16::from_f64(v).to_f64();
    let x: Vec<f64> = randn(rows * channels, seed)
        .iter()
        .map(|v| round(v * 5.0 + 5.0))
        .collect();
    let gamma: Vec<f64> = randn(channels, seed ^ 0x9e37)
        .iter()
        .map(|v| round(0.5 + 1.5 * (0.5 + 0.5 * v.tanh())))
        .collect();
    let eps = 1e-6 / channels as f32;
    let to_bf16 = |v: &[f64]| v.iter().map(|&v| bf16::from_f64(v)).collect::<Vec<_>>();
    let xt = Tensor::<2>::from_data(
        TensorData::new(to_bf16(&x), [rows, channels]),
        (&device, DType::BF16),
    );
    let gt = Tensor::<1>::from_data(
        TensorData::new(to_bf16(&gamma), [channels]),
        (&device, DType::BF16),
    );
    assert_eq!(xt.dtype(), DType::BF16);

    println!("rms_norm_silu on {name}: x [{rows}, {channels}] bf16, eps = 1e-6/C");
    let y = rms_norm_silu(xt.clone(), gt.clone(), eps);
    let got: Vec<f64> = y.into_data().iter::<f64>().collect();
    let want = rms_norm_silu_f64(&x, &gamma, channels, NormParams::rms(eps), Activation::Silu);
    let c = compare(&got, &want, 2e-2, 2e-2);
    println!(
        "  vs f64 reference: max abs err {:.3e}, max rel err {:.3e}, mismatches at atol=rtol=2e-2: {} of {}",
        c.max_abs,
        c.max_rel,
        c.mismatches,
        want.len()
    );

    let runs = 20;
    device.sync().expect("sync");
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let y = rms_norm_silu(xt.clone(), gt.clone(), eps);
        device.sync().expect("sync");
        times.push(start.elapsed().as_secs_f64());
        drop(y);
    }
    times.sort_by(f64::total_cmp);
    let median = times[runs / 2];
    let bytes = (rows * channels * 4 + channels * 2) as f64;
    println!(
        "  time through the Burn API (median of {runs}, host clock incl. dispatch): {:.1} us, {:.1} GB/s",
        median * 1e6,
        bytes / median / 1e9
    );
    if c.mismatches > 0 {
        std::process::exit(1);
    }
}
