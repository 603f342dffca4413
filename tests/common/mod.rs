//! Shared test helpers: the device under test, fresh random inputs, the f64 reference.

#![allow(dead_code)]

use burn::backend::DispatchDevice;
use burn::tensor::{DType, Device, Tensor, TensorData};
use half::{bf16, f16};
use rand::{Rng, SeedableRng, rngs::StdRng};
use rmsnorm_silu_kernels::reference::{Comparison, compare, rms_norm_silu_f64};
use rmsnorm_silu_kernels::{Activation, NormParams};

/// The device the tests run on: the CubeCL CPU runtime, or CUDA with `RMSNORM_TEST_DEVICE=cuda`.
pub fn device() -> Device {
    match std::env::var("RMSNORM_TEST_DEVICE").as_deref() {
        Ok("cuda") => Device::cuda(0),
        #[cfg(feature = "cpu")]
        Ok("cpu") | Err(_) => Device::cpu(),
        // The CUDA-only build that travels to the GPU machine (scripts/gpu-pack.sh).
        #[cfg(not(feature = "cpu"))]
        Ok("cpu") | Err(_) => {
            panic!("built without the `cpu` feature: set RMSNORM_TEST_DEVICE=cuda")
        }
        Ok(other) => panic!("RMSNORM_TEST_DEVICE must be `cpu` or `cuda`, got {other}"),
    }
}

/// The CubeCL client of [`device`], for tests that launch kernels directly.
///
/// # Panics
/// Naming `what` when the device is not a CubeCL one.
pub fn cube_client(what: &str) -> rmsnorm_silu_kernels::cubecl::prelude::Client {
    let DispatchDevice::Cube(cube) = device().as_dispatch().clone() else {
        panic!("{what} needs a CubeCL device");
    };
    cube.client()
}

pub fn on_gpu() -> bool {
    matches!(std::env::var("RMSNORM_TEST_DEVICE").as_deref(), Ok("cuda"))
}

/// The RNG of one test. Its seed is fixed by default (derived from the test's name, so every
/// run draws the same inputs); `RMSNORM_TEST_SEED=<u64>` replays a given seed and
/// `RMSNORM_TEST_SEED=random` draws a fresh one. The seed is printed (shown on failure).
pub fn rng(test: &str) -> StdRng {
    let seed = match std::env::var("RMSNORM_TEST_SEED").as_deref() {
        Err(_) => fixed_seed(test),
        Ok("random") => rand::rng().random::<u64>(),
        Ok(value) => value.parse().unwrap_or_else(|_| {
            panic!("RMSNORM_TEST_SEED must be a u64 or `random`, got {value:?}")
        }),
    };
    eprintln!("{test}: RMSNORM_TEST_SEED={seed}");
    StdRng::seed_from_u64(seed)
}

/// FNV-1a of the test's name: a stable seed per test (std's hasher may change between releases).
fn fixed_seed(test: &str) -> u64 {
    test.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Standard normal samples (Box-Muller).
pub fn randn(rng: &mut StdRng, n: usize) -> Vec<f64> {
    (0..n)
        .map(|_| {
            let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
            let u2: f64 = rng.random::<f64>();
            (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        })
        .collect()
}

/// Uniform samples in `[lo, hi)`.
pub fn uniform(rng: &mut StdRng, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n)
        .map(|_| lo + (hi - lo) * rng.random::<f64>())
        .collect()
}

/// Values rounded to `dtype`, as the f64 values the device will actually see.
pub fn round_to(values: &[f64], dtype: DType) -> Vec<f64> {
    values
        .iter()
        .map(|&v| match dtype {
            DType::BF16 => bf16::from_f64(v).to_f64(),
            DType::F16 => f16::from_f64(v).to_f64(),
            DType::F32 => v as f32 as f64,
            DType::F64 => v,
            other => panic!("no rounding for {other:?}"),
        })
        .collect()
}

/// `TensorData` of `values` stored as `dtype`.
pub fn data(values: &[f64], shape: Vec<usize>, dtype: DType) -> TensorData {
    match dtype {
        DType::BF16 => TensorData::new(values.iter().map(|&v| bf16::from_f64(v)).collect(), shape),
        DType::F16 => TensorData::new(values.iter().map(|&v| f16::from_f64(v)).collect(), shape),
        DType::F32 => TensorData::new(values.iter().map(|&v| v as f32).collect(), shape),
        DType::F64 => TensorData::new(values.to_vec(), shape),
        other => panic!("no data for {other:?}"),
    }
}

/// A tensor of `values` (rounded to `dtype`) on `device`.
pub fn tensor<const D: usize>(
    values: &[f64],
    shape: [usize; D],
    dtype: DType,
    device: &Device,
) -> Tensor<D> {
    let t = Tensor::<D>::from_data(data(values, shape.to_vec(), dtype), (device, dtype));
    assert_eq!(t.dtype(), dtype, "test tensor has the wrong dtype");
    t
}

/// Values of a tensor as f64.
pub fn values<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data().iter::<f64>().collect()
}

/// Reference output for inputs already rounded to their dtypes.
pub fn reference(x: &[f64], gamma: &[f64], norm: NormParams, activation: Activation) -> Vec<f64> {
    rms_norm_silu_f64(x, gamma, gamma.len(), norm, activation)
}

/// The cuDNN engine's test recipe for `T x C` in `dtype`: `x = randn*5 + 5`,
/// `gamma ~ U[0.5, 2]`, `eps = 1e-6 / C`. Returns rounded x, gamma, eps.
pub fn cudnn_inputs(
    rng: &mut StdRng,
    rows: usize,
    channels: usize,
    dtype: DType,
) -> (Vec<f64>, Vec<f64>, f32) {
    let x: Vec<f64> = randn(rng, rows * channels)
        .iter()
        .map(|v| v * 5.0 + 5.0)
        .collect();
    let gamma = uniform(rng, channels, 0.5, 2.0);
    (
        round_to(&x, dtype),
        round_to(&gamma, dtype),
        1e-6 / channels as f32,
    )
}

/// Asserts `got` matches `want` within `atol + rtol |want|` everywhere; on failure the message
/// lists the first mismatches (flat index, got, want) and how many outputs are NaN.
pub fn assert_close(got: &[f64], want: &[f64], atol: f64, rtol: f64, what: &str) -> Comparison {
    let c = compare(got, want, atol, rtol);
    if c.mismatches > 0 {
        let first: Vec<String> = got
            .iter()
            .zip(want)
            .enumerate()
            .filter(|(_, (g, w))| {
                let err = (*g - *w).abs();
                !(g.is_nan() && w.is_nan())
                    && *g != *w
                    && (err.is_nan() || err > atol + rtol * w.abs())
            })
            .take(12)
            .map(|(i, (g, w))| format!("[{i}] {g} vs {w}"))
            .collect();
        let nans = got.iter().filter(|v| v.is_nan()).count();
        panic!(
            "{what}: {} of {} elements outside atol {atol} rtol {rtol} ({nans} NaN); first: {}",
            c.mismatches,
            want.len(),
            first.join(", ")
        );
    }
    c
}

/// `||got - want|| / ||want|| <= rel` and every element within `rel * (|want| + max|want|)`.
pub fn assert_close_to_scale(got: &[f64], want: &[f64], rel: f64, what: &str) {
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert_close(got, want, rel * scale, rel, what);
    let diff: f64 = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w) * (g - w))
        .sum::<f64>()
        .sqrt();
    let norm: f64 = want.iter().map(|w| w * w).sum::<f64>().sqrt();
    assert!(
        diff <= rel * norm,
        "{what}: relative L2 error {:.3e} > {rel:e}",
        diff / norm
    );
}

/// The message `f` panics with (it must panic).
pub fn panic_message(f: impl FnOnce()) -> String {
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("must panic");
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Runs `check`, recording its panic message (prefixed by `label`) instead of unwinding, so a
/// test over many cases reports every failing case at once (see [`assert_no_failures`]).
pub fn record_failure(failures: &mut Vec<String>, label: &str, check: impl FnOnce()) {
    if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)) {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into());
        failures.push(format!("{label}{msg}"));
    }
}

/// Runs `check` on every case and returns the failures (see [`record_failure`]), each prefixed
/// by `label(index, case)`, in case order. On CUDA up to 8 cases run at once on their own
/// threads: a case's time is mostly its kernels' NVRTC compilation on the host (seconds each),
/// so one thread left `every_knob_path_writes_every_element` unfinished after 450 s cold on the
/// H200 (2026-12-03). Elsewhere the cases run in order on the calling thread (CI already runs
/// the tests side by side). `RMSNORM_TEST_CASE_THREADS=n` sets the thread count anywhere.
pub fn run_cases<T: Sync>(
    cases: &[T],
    label: impl Fn(usize, &T) -> String + Sync,
    check: impl Fn(&T) + Sync,
) -> Vec<String> {
    let picked: Vec<(usize, &T)> = cases.iter().enumerate().collect();
    let workers = match std::env::var("RMSNORM_TEST_CASE_THREADS").map(|v| v.parse::<usize>()) {
        Ok(Ok(n)) => n.max(1),
        _ if on_gpu() => std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
        _ => 1,
    };
    let run = |i: usize, case: &T| {
        let mut failures = Vec::new();
        record_failure(&mut failures, &label(i, case), || check(case));
        failures.into_iter().map(move |f| (i, f))
    };
    let mut found: Vec<(usize, String)> = if workers <= 1 {
        picked.iter().flat_map(|&(i, c)| run(i, c)).collect()
    } else {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let found = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| {
                    loop {
                        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(i, case)) = picked.get(n) else {
                            break;
                        };
                        let failed: Vec<_> = run(i, case).collect();
                        found.lock().unwrap().extend(failed);
                    }
                });
            }
        });
        found.into_inner().unwrap()
    };
    found.sort_by_key(|(i, _)| *i);
    found.into_iter().map(|(_, f)| f).collect()
}

/// Knob-path case lists longer than this are sampled on a GPU (each case compiles its own
/// kernels there, ~1.5 s of NVRTC apiece, one at a time per process) unless
/// `RMSNORM_TEST_FULL=1`; the CPU runtime runs every case.
pub const SAMPLED_CASES: usize = 24;

/// The cases of a knob-path sweep to run: all of them on the CPU runtime, with
/// `RMSNORM_TEST_FULL=1`, or when there are at most [`SAMPLED_CASES`]; otherwise a seeded sample
/// (`RMSNORM_TEST_SEED`, see [`rng`]) that covers every value of every knob at least once
/// (every dotted or spaced part of `key`, as knobs print themselves), topped up at random to
/// [`SAMPLED_CASES`], in the original order.
pub fn sample_cases<T>(cases: Vec<T>, key: impl Fn(&T) -> String) -> Vec<T> {
    sample_cases_up_to(cases, SAMPLED_CASES, key)
}

/// [`sample_cases`] with its own total: for sweeps whose every case compiles several kernels.
pub fn sample_cases_up_to<T>(cases: Vec<T>, total: usize, key: impl Fn(&T) -> String) -> Vec<T> {
    let count = cases.len();
    let full = std::env::var("RMSNORM_TEST_FULL").is_ok_and(|v| v == "1");
    if full || !on_gpu() || count <= total {
        return cases;
    }
    let keys: Vec<Vec<String>> = cases.iter().map(|c| key_parts(&key(c))).collect();
    let keep = covering_sample(&keys, total, &mut rng(&format!("sample of {count} cases")));
    let sample: Vec<T> = cases
        .into_iter()
        .zip(keep)
        .filter_map(|(c, k)| k.then_some(c))
        .collect();
    eprintln!(
        "running {} of {count} cases, every knob value covered (RMSNORM_TEST_FULL=1 runs all)",
        sample.len()
    );
    sample
}

/// The keys of a sweep written as nested loops that this run takes ([`sample_cases_up_to`] over
/// the keys): the loops skip a case whose key is not in the set.
pub fn sampled_keys(keys: Vec<String>, total: usize) -> std::collections::HashSet<String> {
    sample_cases_up_to(keys, total, String::clone)
        .into_iter()
        .collect()
}

/// The knob values of a case's key: its dotted, colon-, comma- or space-separated parts.
fn key_parts(key: &str) -> Vec<String> {
    key.split(|c: char| c == '.' || c == ':' || c == ',' || c.is_whitespace())
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// Which cases to keep: in a seeded random order, every case that brings a part no earlier
/// kept case had, then others at random up to `total`.
fn covering_sample(keys: &[Vec<String>], total: usize, rng: &mut StdRng) -> Vec<bool> {
    let count = keys.len();
    let mut order: Vec<usize> = (0..count).collect();
    for i in (1..count).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    let mut covered = std::collections::HashSet::new();
    let mut keep = vec![false; count];
    let mut rest = Vec::new();
    for i in order {
        if keys[i].iter().any(|part| !covered.contains(part)) {
            covered.extend(keys[i].iter().cloned());
            keep[i] = true;
        } else {
            rest.push(i);
        }
    }
    let chosen = keep.iter().filter(|&&k| k).count();
    for i in rest.into_iter().take(total.saturating_sub(chosen)) {
        keep[i] = true;
    }
    keep
}

#[test]
fn knob_samples_cover_every_value() {
    // 4 x 3 x 5 = 60 combinations of three knobs.
    let keys: Vec<Vec<String>> = (0..60)
        .map(|i| key_parts(&format!("l{}.r{}.b{}", i % 4, (i / 4) % 3, i / 12)))
        .collect();
    let mut rng = StdRng::seed_from_u64(7);
    let keep = covering_sample(&keys, 20, &mut rng);
    assert_eq!(keep.iter().filter(|&&k| k).count(), 20);
    let parts: std::collections::HashSet<&String> = keys
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .flat_map(|(p, _)| p)
        .collect();
    assert_eq!(parts.len(), 4 + 3 + 5, "every value of every knob");
    // Coverage wins over the total when it needs more cases.
    let keep = covering_sample(&keys, 2, &mut rng);
    let n = keep.iter().filter(|&&k| k).count();
    assert!(
        (5..=12).contains(&n),
        "{n} cases to cover 5 values of one knob"
    );
}

/// Fails with every recorded failure.
pub fn assert_no_failures(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
