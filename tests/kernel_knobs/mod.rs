//! The row kernel launched directly with explicit knobs on the raw CubeCL backend, into
//! poisoned (NaN) output buffers: every knob path must write every element correctly.

use burn::backend::{DispatchDevice, ops::FloatTensorOps};
use burn::tensor::{DType, read_sync};
use burn_cubecl::{CubeBackend, CubeDevice, kernel::into_contiguous, tensor::CubeTensor};
use burn_rmsnorm_silu::RmsNormSiluBackend;
use rmsnorm_silu_kernels::cubecl::ir::{ElemType, FloatKind};
use rmsnorm_silu_kernels::validate::validate_knobs;
use rmsnorm_silu_kernels::{
    Activation, GammaIn, Knobs, LaneReduce, NormParams, RowOperands, RowsProblem, launch_forward,
    select_knobs,
};

use crate::common::*;

// Every knob path, the selection and tables, and the memory layouts the kernel reads.
mod layouts;
mod paths;
mod selection;

pub fn cube_device() -> CubeDevice {
    match device().as_dispatch() {
        DispatchDevice::Cube(d) => d.clone(),
        other => panic!("kernel tests need a CubeCL device, got {other:?}"),
    }
}

/// A dense (unpitched) device tensor: uploads may pitch rows on CUDA, and `launch_forward`
/// takes raw buffers.
pub fn upload(values: &[f64], shape: Vec<usize>, dtype: DType, device: &CubeDevice) -> CubeTensor {
    let t = into_contiguous(CubeBackend::float_from_data(
        data(values, shape, dtype),
        device,
    ));
    assert!(t.is_contiguous());
    t
}

pub fn download(t: CubeTensor) -> Vec<f64> {
    read_sync(CubeBackend::float_into_data(t))
        .expect("read back")
        .iter::<f64>()
        .collect()
}

pub fn elem(dtype: DType) -> ElemType {
    match dtype {
        DType::BF16 => ElemType::Float(FloatKind::BF16),
        DType::F16 => ElemType::Float(FloatKind::F16),
        DType::F32 => ElemType::Float(FloatKind::F32),
        other => panic!("{other:?}"),
    }
}

/// Launches with `knobs` into a NaN-filled output and checks every element.
fn check_knobs(knobs: Knobs, rows: usize, channels: usize, dtype: DType, activation: Activation) {
    let mut rng = rng("kernel_knobs");
    let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, dtype);
    let tol = if dtype == DType::F32 { 1e-5 } else { 2e-2 };
    let inputs = Inputs {
        x: &x,
        gamma: &gamma,
        rows,
        channels,
        dtype,
    };
    check_knobs_on(knobs, inputs, NormParams::rms(eps), activation, tol);
}

/// A problem's host values (already representable in `dtype`).
#[derive(Clone, Copy)]
struct Inputs<'a> {
    x: &'a [f64],
    gamma: &'a [f64],
    rows: usize,
    channels: usize,
    dtype: DType,
}

/// Launches with `knobs` on `inputs` into a NaN-filled output and checks every element against
/// the f64 reference within `tol` (absolute and relative).
fn check_knobs_on(
    knobs: Knobs,
    inputs: Inputs,
    norm: NormParams,
    activation: Activation,
    tol: f64,
) {
    let Inputs {
        x,
        gamma,
        rows,
        channels,
        dtype,
    } = inputs;
    let device = cube_device();
    let want = reference(x, gamma, norm, activation);
    let xt = upload(x, vec![rows, channels], dtype, &device);
    let gt = upload(gamma, vec![channels], dtype, &device);
    let out = upload(
        &vec![f64::NAN; rows * channels],
        vec![rows, channels],
        dtype,
        &device,
    );
    launch_forward(
        &xt.client,
        RowOperands {
            x: xt.handle.clone(),
            gamma: gt.handle.clone(),
            x_type: elem(dtype),
            gamma_type: elem(dtype),
        },
        out.handle.clone(),
        RowsProblem::dense(rows, channels),
        norm,
        activation,
        &knobs,
    )
    .unwrap_or_else(|e| panic!("{knobs:?}: {e}"));
    let got = download(out);
    assert_close(
        &got,
        &want,
        tol,
        tol,
        &format!("{knobs:?} T={rows} C={channels} {dtype:?}"),
    );
}

fn knobs(vector_size: usize, lanes: u32, rows: u32, vpl: usize, reduce: LaneReduce) -> Knobs {
    Knobs {
        vector_size,
        lanes_per_row: lanes,
        rows_per_cube: rows,
        rows_per_unit: 1,
        vectors_per_lane: vpl,
        lane_reduce: reduce,
        gamma: GammaIn::Registers,
        max_cubes: None,
        fast_math: false,
        prefetch: false,
        f32_cache: false,
        word_cache: false,
        groups_per_ticket: 0,
    }
}

/// `k` with `u` rows in flight per unit and gamma in `gamma`.
fn with(k: Knobs, u: u32, gamma: GammaIn) -> Knobs {
    Knobs {
        rows_per_unit: u,
        gamma,
        ..k
    }
}

/// `k` with prefetch on a persistent grid of `cubes` cubes.
fn prefetched(k: Knobs, cubes: u32) -> Knobs {
    Knobs {
        prefetch: true,
        max_cubes: Some(cubes),
        ..k
    }
}

/// Checks each `(knobs, rows, C)` case in bf16, f32 and f16 ([`check_knobs`]): every case in
/// every dtype on the CPU runtime, on CUDA a sample of the (case, dtype) runs covering every
/// knob value and dtype ([`sample_cases`]); the failures are reported together.
/// RMSNORM_KNOB_CASE=i runs case i only.
fn check_cases_in_every_dtype(cases: Vec<(Knobs, usize, usize)>) {
    let only: Option<usize> = std::env::var("RMSNORM_KNOB_CASE")
        .ok()
        .and_then(|v| v.parse().ok());
    let runs: Vec<_> = cases
        .into_iter()
        .enumerate()
        .filter(|(i, _)| only.is_none_or(|o| o == *i))
        .flat_map(|(i, (k, rows, channels))| {
            [DType::BF16, DType::F32, DType::F16].map(|dtype| (i, k, rows, channels, dtype))
        })
        .collect();
    // The dtype is one more knob of the sample.
    let runs = sample_cases(runs, |(_, k, rows, channels, dtype)| {
        format!("{k} r{rows} c{channels} {dtype:?}")
    });
    let failures = run_cases(
        &runs,
        |_, &(i, ..)| format!("case {i}: "),
        |&(_, k, rows, channels, dtype)| check_knobs(k, rows, channels, dtype, Activation::Silu),
    );
    assert_no_failures(&failures);
}
