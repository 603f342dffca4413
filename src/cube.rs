//! CubeCL backends: turn Burn's `CubeTensor`s into one launch of the fused row kernel.

use burn::backend::TensorMetadata;
use burn::tensor::DType;
use burn_cubecl::{
    CubeBackend, kernel::into_contiguous, ops::numeric::empty_device_contiguous_dtype,
    tensor::CubeTensor,
};
use rmsnorm_silu_kernels::cubecl::ir::{ElemType, FloatKind};
use rmsnorm_silu_kernels::{Activation, NormParams, RowsProblem, launch_forward, select_knobs};

use crate::backend::RmsNormSiluBackend;

impl RmsNormSiluBackend for CubeBackend {
    fn rms_norm_silu(
        x: CubeTensor,
        gamma: CubeTensor,
        eps: f32,
        floor: f32,
        silu: bool,
    ) -> CubeTensor {
        let activation = if silu {
            Activation::Silu
        } else {
            Activation::Identity
        };
        forward(x, gamma, NormParams { eps, floor }, activation)
    }
}

/// The cubecl element type of a float dtype the kernel accepts.
fn elem_type(dtype: DType, argument: &str) -> ElemType {
    match dtype {
        DType::F64 => ElemType::Float(FloatKind::F64),
        DType::F32 => ElemType::Float(FloatKind::F32),
        DType::F16 => ElemType::Float(FloatKind::F16),
        DType::BF16 => ElemType::Float(FloatKind::BF16),
        other => panic!("rms_norm_silu: `{argument}` must be f64, f32, f16 or bf16, got {other:?}"),
    }
}

/// Largest power of two (capped at 256) dividing every byte offset: the alignment that the
/// vector width must respect.
fn common_alignment(tensors: &[&CubeTensor]) -> u64 {
    tensors
        .iter()
        .map(|t| t.handle.offset_start.unwrap_or(0))
        .fold(256u64, |align, offset: u64| match offset {
            0 => align,
            o => align.min(1 << o.trailing_zeros()),
        })
}

/// Runs the fused kernel. Non-contiguous inputs are first copied to row-major order; the
/// output is a new contiguous tensor with the shape and dtype of `x`.
pub fn forward(
    x: CubeTensor,
    gamma: CubeTensor,
    norm: NormParams,
    activation: Activation,
) -> CubeTensor {
    let shape = x.shape();
    let channels = shape[shape.num_dims() - 1];
    let rows = if channels == 0 {
        0
    } else {
        shape.num_elements() / channels
    };
    let x_type = elem_type(x.dtype, "x");
    let gamma_type = elem_type(gamma.dtype, "gamma");
    let x = into_contiguous(x);
    let gamma = into_contiguous(gamma);
    let out = empty_device_contiguous_dtype(x.client.clone(), x.device.clone(), shape, x.dtype);
    if rows == 0 {
        return out;
    }
    let problem = RowsProblem { rows, channels };
    let knobs = select_knobs(
        &x.client,
        problem,
        x_type.size(),
        gamma_type.size(),
        common_alignment(&[&x, &gamma, &out]),
    );
    launch_forward(
        &x.client,
        x.handle.clone(),
        gamma.handle.clone(),
        out.handle.clone(),
        x_type,
        gamma_type,
        problem,
        norm,
        activation,
        &knobs,
    )
    .unwrap_or_else(|e| panic!("rms_norm_silu: {e} (rows {rows}, C {channels})"));
    out
}
