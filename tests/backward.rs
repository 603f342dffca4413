//! The fused backward kernels (`kernels::backward`): launched directly into NaN-poisoned
//! buffers and checked against central finite differences of the f64 host reference, and
//! through the Autodiff backend against Burn's autodiff of the composed ops, over odd C, one
//! row, many cubes, both norms and activations; dgamma is bitwise deterministic.

use burn::tensor::DType;
use burn_cubecl::{CubeDevice, tensor::CubeTensor};
use rmsnorm_silu_kernels::backward::{
    BackwardKnobs, BackwardOperands, launch_backward, launch_backward_with,
};
use rmsnorm_silu_kernels::reference::rms_norm_silu_f64;
use rmsnorm_silu_kernels::{Activation, NormParams};

use crate::common::*;
use crate::kernel_knobs::{cube_device, download, elem, upload};

/// A row backward's host inputs: `x` and `dy` of `[rows, channels]` (row-major) and `gamma`,
/// uploaded in `dtype`.
#[derive(Clone, Copy)]
pub struct RowGradients<'a> {
    pub x: &'a [f64],
    pub gamma: &'a [f64],
    pub dy: &'a [f64],
    pub rows: usize,
    pub channels: usize,
    pub dtype: DType,
}

impl<'a> RowGradients<'a> {
    pub fn new(
        x: &'a [f64],
        gamma: &'a [f64],
        dy: &'a [f64],
        [rows, channels]: [usize; 2],
        dtype: DType,
    ) -> Self {
        Self {
            x,
            gamma,
            dy,
            rows,
            channels,
            dtype,
        }
    }
}

/// The kernels' (dx, dgamma) for `L = sum(dy * y)`, from poisoned outputs.
fn fused_gradients(
    inputs: RowGradients,
    norm: NormParams,
    activation: Activation,
) -> (Vec<f64>, Vec<f64>) {
    let knobs = BackwardKnobs {
        fast_math: false,
        ..BackwardKnobs::for_device(&cube_device().client())
    };
    fused_gradients_with(inputs, norm, activation, knobs)
        .unwrap_or_else(|e| panic!("C={}: {e}", inputs.channels))
}

/// A backward launch's buffers on the device: x and dy of `shape` (dy = `w`), gamma `[C]`,
/// and NaN-poisoned dx (of `shape`) and dgamma.
pub struct GradientBuffers {
    pub x: CubeTensor,
    pub gamma: CubeTensor,
    pub dy: CubeTensor,
    pub dx: CubeTensor,
    pub dgamma: CubeTensor,
}

impl GradientBuffers {
    pub fn upload(
        x: &[f64],
        gamma: &[f64],
        w: &[f64],
        shape: Vec<usize>,
        dtype: DType,
        device: &CubeDevice,
    ) -> Self {
        let channels = gamma.len();
        Self {
            x: upload(x, shape.clone(), dtype, device),
            gamma: upload(gamma, vec![channels], dtype, device),
            dy: upload(w, shape.clone(), dtype, device),
            dx: upload(&vec![f64::NAN; x.len()], shape, dtype, device),
            dgamma: upload(&vec![f64::NAN; channels], vec![channels], dtype, device),
        }
    }

    /// The kernels' view of the five buffers, all of `dtype`.
    pub fn operands(&self, dtype: DType) -> BackwardOperands {
        BackwardOperands {
            x: self.x.handle.clone(),
            gamma: self.gamma.handle.clone(),
            dy: self.dy.handle.clone(),
            dx: self.dx.handle.clone(),
            dgamma: self.dgamma.handle.clone(),
            x_type: elem(dtype),
            gamma_type: elem(dtype),
        }
    }

    /// (dx, dgamma) as written by the kernel.
    pub fn gradients(self) -> (Vec<f64>, Vec<f64>) {
        (download(self.dx), download(self.dgamma))
    }
}

/// [`fused_gradients`] with given knobs; the launch's refusal as an error.
pub fn fused_gradients_with(
    inputs: RowGradients,
    norm: NormParams,
    activation: Activation,
    knobs: BackwardKnobs,
) -> Result<(Vec<f64>, Vec<f64>), String> {
    let RowGradients {
        x,
        gamma,
        dy,
        rows,
        channels,
        dtype,
    } = inputs;
    let b = GradientBuffers::upload(x, gamma, dy, vec![rows, channels], dtype, &cube_device());
    launch_backward_with(
        &b.x.client,
        b.operands(dtype),
        rows,
        channels,
        norm,
        activation,
        knobs,
    )
    .map_err(|e| e.to_string())?;
    Ok(b.gradients())
}

/// Central differences of `L = sum(w * y)` in f64 through the host reference.
fn finite_differences(
    x: &[f64],
    gamma: &[f64],
    w: &[f64],
    channels: usize,
    norm: NormParams,
    activation: Activation,
) -> (Vec<f64>, Vec<f64>) {
    let loss = |x: &[f64], gamma: &[f64]| -> f64 {
        rms_norm_silu_f64(x, gamma, channels, norm, activation)
            .iter()
            .zip(w)
            .map(|(y, w)| y * w)
            .sum()
    };
    let h = 1e-6;
    let mut dx = vec![0.0; x.len()];
    let mut xp = x.to_vec();
    for i in 0..x.len() {
        let step = h * x[i].abs().max(1e-3);
        xp[i] = x[i] + step;
        let up = loss(&xp, gamma);
        xp[i] = x[i] - step;
        let down = loss(&xp, gamma);
        xp[i] = x[i];
        dx[i] = (up - down) / (2.0 * step);
    }
    let mut dgamma = vec![0.0; channels];
    let mut gp = gamma.to_vec();
    for c in 0..channels {
        let step = h * gamma[c].abs().max(1e-3);
        gp[c] = gamma[c] + step;
        let up = loss(x, &gp);
        gp[c] = gamma[c] - step;
        let down = loss(x, &gp);
        gp[c] = gamma[c];
        dgamma[c] = (up - down) / (2.0 * step);
    }
    (dx, dgamma)
}

/// max |w gamma r| over the elements: the size of the terms that make up dx.
fn term_scale(x: &[f64], gamma: &[f64], w: &[f64], channels: usize, norm: NormParams) -> f64 {
    let mut scale = 0.0f64;
    for (row, wrow) in x.chunks_exact(channels).zip(w.chunks_exact(channels)) {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / channels as f64;
        let r = 1.0 / (ms + norm.eps as f64).max(norm.floor as f64).sqrt();
        for (wv, g) in wrow.iter().zip(gamma) {
            scale = scale.max((wv * g * r).abs());
        }
    }
    scale
}

#[test]
fn fused_backward_matches_finite_differences() {
    let mut rng = rng("backward fd");
    let mut failures = Vec::new();
    let cases = [
        (1usize, 1usize),
        (5, 3),
        (7, 48),
        (1, 96),
        (33, 160),
        (3, 384),
        (130, 24),
    ];
    for (rows, channels) in cases {
        for (norm, activation, what) in [
            (NormParams::rms(1e-5), Activation::Silu, "rms silu"),
            (NormParams::rms(1e-5), Activation::Identity, "rms identity"),
            (
                NormParams::l2_clamp(1e-12, channels),
                Activation::Silu,
                "wan silu",
            ),
        ] {
            let (x, gamma, w) = f32_inputs(&mut rng, rows, channels);
            let label = format!("T={rows} C={channels} {what}: ");
            record_failure(&mut failures, &label, || {
                let (dx, dgamma) = fused_gradients(
                    RowGradients::new(&x, &gamma, &w, [rows, channels], DType::F32),
                    norm,
                    activation,
                );
                let (dx_fd, dgamma_fd) =
                    finite_differences(&x, &gamma, &w, channels, norm, activation);
                // dx is a difference of terms of size |w gamma r|; for C = 1 they cancel to
                // ~0, so the tolerance is relative to those terms, not to dx itself.
                let terms = term_scale(&x, &gamma, &w, channels, norm);
                assert_close(&dx, &dx_fd, 1e-4 * terms, 1e-4, "dx vs finite differences");
                assert_close_to_scale(&dgamma, &dgamma_fd, 1e-4, "dgamma vs finite differences");
            });
        }
    }
    assert_no_failures(&failures);
}

/// The PTX SiLU' (`fast_math`): on CUDA against the finite differences like the IEEE path;
/// elsewhere refused with a reason.
#[test]
fn fast_math_backward_on_cuda_only() {
    let mut rng = rng("backward fast");
    for (rows, channels) in [(5usize, 3usize), (33, 160), (3, 384)] {
        let norm = NormParams::rms(1e-5);
        let (x, gamma, w) = f32_inputs(&mut rng, rows, channels);
        let result = fused_gradients_with(
            RowGradients::new(&x, &gamma, &w, [rows, channels], DType::F32),
            norm,
            Activation::Silu,
            BackwardKnobs {
                fast_math: true,
                ..BackwardKnobs::for_device(&cube_device().client())
            },
        );
        if !on_gpu() {
            let err = result.expect_err("fast_math off CUDA must be refused");
            assert!(err.contains("needs a CUDA device"), "{err}");
            continue;
        }
        let (dx, dgamma) = result.unwrap();
        let (dx_fd, dgamma_fd) =
            finite_differences(&x, &gamma, &w, channels, norm, Activation::Silu);
        let terms = term_scale(&x, &gamma, &w, channels, norm);
        assert_close(
            &dx,
            &dx_fd,
            1e-4 * terms,
            1e-4,
            "fast dx vs finite differences",
        );
        assert_close_to_scale(
            &dgamma,
            &dgamma_fd,
            1e-4,
            "fast dgamma vs finite differences",
        );
    }
}

/// Every register cap, cube size and grid size the bench sweeps gives the finite-difference
/// gradients (odd C, a masked last vector slot, rows spread over several cubes); the ones this device
/// refuses (more lanes per row than a cube has, as on the CPU runtime) say why, and bad knob
/// values are refused with their name.
#[test]
fn every_backward_knob_setting_matches_finite_differences() {
    let mut rng = rng("backward knobs");
    let client = cube_device().client();
    let base = BackwardKnobs {
        fast_math: false,
        ..BackwardKnobs::for_device(&client)
    };
    let norm = NormParams::rms(1e-5);
    let mut launched = 0;
    let mut failures = Vec::new();
    // (300, 24): more row groups than the CPU runtime's 64 cubes, so each cube walks several
    // (the prefetch's steady state and its partial last group).
    let shapes = [(37usize, 3usize), (19, 24), (11, 40), (5, 200), (300, 24)];
    // Grid sizes, and vectors narrower than the layout allows (`max_vector`).
    let grids = [
        (1usize, 128usize, true, Some(0), 0usize),
        (2, 256, false, Some(1), 0),
        (4, 128, true, Some(3), 2),
        (2, 256, false, None, 1),
    ];
    let settings = [1usize, 2, 4, 8, 64]
        .into_iter()
        .flat_map(|cap| {
            [(128usize, false), (256, false), (128, true), (256, true)]
                .map(|(units, prefetch)| (cap, units, prefetch, None, 0))
        })
        .chain(grids);
    let cases: Vec<((usize, usize), BackwardKnobs)> = settings
        .flat_map(|(cap, units, prefetch, cubes_per_sm, max_vector)| {
            let knobs = BackwardKnobs {
                max_vectors_per_lane: cap,
                units_per_cube: units,
                prefetch,
                cubes_per_sm,
                max_vector,
                ..base
            };
            shapes.map(|shape| (shape, knobs))
        })
        .collect();
    // On a GPU a seeded sample that covers every shape and knob value (each case compiles).
    let cases = sample_cases(cases, |((rows, channels), knobs)| {
        format!("T{rows}xC{channels} {knobs}")
    });
    let inputs: Vec<_> = shapes
        .iter()
        .map(|&(rows, channels)| {
            let (x, gamma, w) = f32_inputs(&mut rng, rows, channels);
            let fd = finite_differences(&x, &gamma, &w, channels, norm, Activation::Silu);
            let terms = term_scale(&x, &gamma, &w, channels, norm);
            (x, gamma, w, fd, terms)
        })
        .collect();
    for &((rows, channels), knobs) in &cases {
        let shape = shapes.iter().position(|&s| s == (rows, channels)).unwrap();
        let (x, gamma, w, (dx_fd, dgamma_fd), terms) = &inputs[shape];
        let result = fused_gradients_with(
            RowGradients::new(x, gamma, w, [rows, channels], DType::F32),
            norm,
            Activation::Silu,
            knobs,
        );
        let label = format!("T={rows} C={channels} {knobs}: ");
        match result {
            Err(e) => assert!(e.contains("lanes per row"), "{label}{e}"),
            Ok((dx, dgamma)) => {
                launched += 1;
                record_failure(&mut failures, &label, || {
                    assert_close(&dx, dx_fd, 1e-4 * terms, 1e-4, "dx");
                    assert_close_to_scale(&dgamma, dgamma_fd, 1e-4, "dgamma");
                });
            }
        }
    }
    assert_no_failures(&failures);
    assert!(
        launched >= 32.min(cases.len() * 3 / 4),
        "only {launched} of {} knob settings launched",
        cases.len()
    );
    for (knobs, what) in [
        (
            BackwardKnobs {
                max_vectors_per_lane: 0,
                ..base
            },
            "max_vectors_per_lane",
        ),
        (
            BackwardKnobs {
                units_per_cube: 96,
                ..base
            },
            "units_per_cube",
        ),
        (
            BackwardKnobs {
                max_vector: 3,
                ..base
            },
            "max_vector",
        ),
    ] {
        let x = vec![1.0; 8];
        let err = fused_gradients_with(
            RowGradients::new(&x, &x[..4], &x, [2, 4], DType::F32),
            norm,
            Activation::Silu,
            knobs,
        )
        .expect_err("bad knobs must be refused");
        assert!(err.contains(what), "{err}");
    }
}

/// Fresh f32-representable x (normal), gamma (in [0.5, 2]) and upstream gradient w (normal)
/// for `[rows, C]`.
fn f32_inputs(
    rng: &mut rand::rngs::StdRng,
    rows: usize,
    channels: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let x = round_to(&randn(rng, rows * channels), DType::F32);
    let gamma = round_to(&uniform(rng, channels, 0.5, 2.0), DType::F32);
    let w = round_to(&randn(rng, rows * channels), DType::F32);
    (x, gamma, w)
}

/// Fresh bf16-representable x, gamma (in [0.5, 2]) and upstream gradient w for `[rows, C]`.
fn bf16_inputs(test: &str, rows: usize, channels: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut rng = rng(test);
    let x = round_to(&randn(&mut rng, rows * channels), DType::BF16);
    let gamma = round_to(&uniform(&mut rng, channels, 0.5, 2.0), DType::BF16);
    let w = round_to(&randn(&mut rng, rows * channels), DType::BF16);
    (x, gamma, w)
}

/// bf16 in and out (fp32 inside): against the f64 finite differences of the same bf16 inputs,
/// within bf16 output rounding; C = 256 with the device's knobs, and C = 384 in vectors of 4
/// (32 lanes x 3 vectors, no idle slot; prefetched as 8-byte word pairs on a GPU).
#[test]
fn fused_backward_in_bf16() {
    let norm = NormParams::rms(1e-6);
    let device_knobs = BackwardKnobs {
        fast_math: false,
        ..BackwardKnobs::for_device(&cube_device().client())
    };
    let vectors_of_four = BackwardKnobs {
        max_vector: 4,
        max_vectors_per_lane: 4,
        units_per_cube: 128,
        prefetch: on_gpu(),
        ..device_knobs
    };
    for (channels, knobs) in [(256, device_knobs), (384, vectors_of_four)] {
        let rows = 9;
        let (x, gamma, w) = bf16_inputs(&format!("backward bf16 C={channels}"), rows, channels);
        let (dx, dgamma) = fused_gradients_with(
            RowGradients::new(&x, &gamma, &w, [rows, channels], DType::BF16),
            norm,
            Activation::Silu,
            knobs,
        )
        .unwrap_or_else(|e| panic!("{knobs}: {e}"));
        let (dx_fd, dgamma_fd) =
            finite_differences(&x, &gamma, &w, channels, norm, Activation::Silu);
        assert_close_to_scale(&dx, &dx_fd, 1e-2, &format!("bf16 {knobs} dx"));
        assert_close_to_scale(&dgamma, &dgamma_fd, 1e-2, &format!("bf16 {knobs} dgamma"));
    }
}

/// The default launcher (`launch_backward`, the device's default knobs) on a C whose bf16
/// vectors are 2 bytes: on CUDA its default prefetch cannot stage half words, and the launch
/// must run without it rather than refuse.
#[test]
fn default_backward_runs_where_prefetch_cannot() {
    let (rows, channels) = (50, 33);
    let norm = NormParams::rms(1e-6);
    let (x, gamma, w) = bf16_inputs("backward default odd C", rows, channels);
    let device = cube_device();
    let b = GradientBuffers::upload(&x, &gamma, &w, vec![rows, channels], DType::BF16, &device);
    launch_backward(
        &b.x.client,
        b.operands(DType::BF16),
        rows,
        channels,
        norm,
        Activation::Silu,
    )
    .expect("the default backward runs for C = 33 in bf16");
    let (dx, dgamma) = b.gradients();
    let (dx_fd, dgamma_fd) = finite_differences(&x, &gamma, &w, channels, norm, Activation::Silu);
    assert_close_to_scale(&dx, &dx_fd, 1e-2, "bf16 dx, C = 33");
    assert_close_to_scale(&dgamma, &dgamma_fd, 1e-2, "bf16 dgamma, C = 33");
}

/// Rows too wide for the kernel's register cache on this device are refused with a reason
/// (the Burn integration then uses composed ops; `autodiff` tests cover that path).
#[test]
fn too_wide_rows_are_refused_or_correct() {
    let mut rng = rng("backward wide");
    let (rows, channels) = (2, 8192);
    let x = round_to(&randn(&mut rng, rows * channels), DType::F32);
    let gamma = round_to(&uniform(&mut rng, channels, 0.5, 2.0), DType::F32);
    let device = cube_device();
    let xt = upload(&x, vec![rows, channels], DType::F32, &device);
    let gt = upload(&gamma, vec![channels], DType::F32, &device);
    let result = launch_backward(
        &xt.client,
        BackwardOperands {
            x: xt.handle.clone(),
            gamma: gt.handle.clone(),
            dy: xt.handle.clone(),
            dx: xt.handle.clone(),
            dgamma: gt.handle.clone(),
            x_type: elem(DType::F32),
            gamma_type: elem(DType::F32),
        },
        rows,
        channels,
        NormParams::rms(1e-5),
        Activation::Silu,
    );
    if on_gpu() {
        // A GPU row has up to 1024 lanes: 8192 f32 fit.
        assert!(result.is_ok(), "{result:?}");
    } else {
        let err = result.expect_err("8192 f32 channels exceed the CPU runtime's cache");
        assert!(err.to_string().contains("lanes per row"), "{err}");
    }
}

/// The same call gives bitwise identical dx and dgamma over 20 runs (fixed grid, fixed
/// reduction order, no atomics).
#[test]
fn fused_backward_is_bitwise_deterministic() {
    let mut rng = rng("backward determinism");
    let (rows, channels) = (301, 96);
    let (x, gamma, w) = f32_inputs(&mut rng, rows, channels);
    let run = || {
        fused_gradients(
            RowGradients::new(&x, &gamma, &w, [rows, channels], DType::F32),
            NormParams::rms(1e-5),
            Activation::Silu,
        )
    };
    let first = run();
    for i in 1..20 {
        let again = run();
        assert!(
            again
                .0
                .iter()
                .zip(&first.0)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "run {i}: dx differs"
        );
        assert!(
            again
                .1
                .iter()
                .zip(&first.1)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "run {i}: dgamma differs"
        );
    }
}

/// `dgamma = sum_rows dy silu'(u) xhat` in f64 (`xhat = x / rms(x)`, `u = xhat gamma`), the
/// clamp inactive.
fn dgamma_f64(x: &[f64], gamma: &[f64], dy: &[f64], channels: usize, eps: f64) -> Vec<f64> {
    let mut dgamma = vec![0.0; channels];
    for (row, dy) in x.chunks(channels).zip(dy.chunks(channels)) {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / channels as f64;
        let r = 1.0 / (ms + eps).sqrt();
        for c in 0..channels {
            let xhat = row[c] * r;
            let u = xhat * gamma[c];
            let s = 1.0 / (1.0 + (-u).exp());
            dgamma[c] += dy[c] * s * (1.0 + u * (1.0 - s)) * xhat;
        }
    }
    dgamma
}

/// dgamma over thousands of cubes (one per row group, so the second kernel sums thousands of
/// partial rows: on a GPU its widest cubes, 1024 units) against the f64 sum, from a poisoned
/// output.
#[test]
fn dgamma_over_many_cubes_matches_f64() {
    let mut rng = rng("dgamma many cubes");
    let client = cube_device().client();
    let (rows, channels) = (20_000usize, 96usize);
    let eps = 1e-5;
    let (x, gamma, w) = f32_inputs(&mut rng, rows, channels);
    let want = dgamma_f64(&x, &gamma, &w, channels, eps);
    let knobs = BackwardKnobs {
        fast_math: false,
        cubes_per_sm: Some(0),
        ..BackwardKnobs::for_device(&client)
    };
    let (_, dgamma) = fused_gradients_with(
        RowGradients::new(&x, &gamma, &w, [rows, channels], DType::F32),
        NormParams::rms(eps as f32),
        Activation::Silu,
        knobs,
    )
    .expect("backward launch");
    assert_close_to_scale(&dgamma, &want, 1e-5, &format!("{knobs}"));
}
