//! The quantised outputs as Burn sees them: the FP8 and NVFP4 quantisation schemes, the shapes
//! of the raw NVFP4 parts, and the refusal on backends without the fused kernels. The backend
//! extension's signatures need these; the entry points live in [`crate::fp8`] and
//! [`crate::nvfp4`].

use burn::backend::{Backend, tensor::FloatTensor};
use burn::tensor::quantization::{QuantScheme, QuantStore, QuantValue, ScaleDtype};
use rmsnorm_silu_kernels::nvfp4::{Fp4Recipe, ScaleLayout};
use rmsnorm_silu_kernels::{Activation, NormParams};

/// The quantisation scheme of the FP8 outputs: E4M3 values, one per byte, per-tensor f32
/// scale.
pub fn fp8_scheme() -> QuantScheme {
    QuantScheme::default()
        .with_value(QuantValue::E4M3)
        .with_store(QuantStore::Native)
        .per_tensor(ScaleDtype::F32)
}

/// What Fusion records for an FP8 op with amax: the codes (`shape`, FP8 `QFloat`) and one f32.
pub(crate) fn fp8_amax_specs(
    shape: &burn::tensor::Shape,
) -> (
    burn::backend::fusion::custom::TensorSpec,
    burn::backend::fusion::custom::TensorSpec,
) {
    use burn::backend::fusion::custom::TensorSpec;
    (
        TensorSpec::new(shape.clone(), burn::tensor::DType::QFloat(fp8_scheme())),
        TensorSpec::new(burn::tensor::Shape::new([1]), burn::tensor::DType::F32),
    )
}

/// Backends without the fused kernel: refused. Composing the op and Burn's `quantize` would be
/// the obvious fallback, but Burn's E4M3 quantisation on Flex rounds to the integer grid (0.2
/// becomes 0), a wrong answer; a clear error is better.
///
/// # Panics
/// Always.
pub fn unsupported_fp8<B: Backend, T>(
    _x: FloatTensor<B>,
    _gamma: FloatTensor<B>,
    _norm: NormParams,
    _activation: Activation,
    _scale: f32,
) -> T {
    panic!(
        "rms_norm_silu_fp8: FP8 output needs a CubeCL backend (CUDA or the CubeCL CPU runtime, \
         `Device::cuda(..)` / `Device::cpu()`); this backend has no fused FP8 path"
    )
}

/// Burn's NVFP4 scheme: E2M1 values packed eight per u32 word along the last axis (element `i`
/// of a word in bits `4i..4i+4`, the same bytes as two per byte, low nibble first; Burn's CubeCL
/// dequantiser reads E2M1 only from u32 words), UE4M3 scales per
/// block of 16, an f32 per-tensor scale.
pub fn nvfp4_scheme() -> QuantScheme {
    QuantScheme::default()
        .with_value(QuantValue::E2M1)
        .with_store(QuantStore::PackedU32(0))
        .per_block([16], ScaleDtype::UE4M3)
        .per_tensor(ScaleDtype::F32)
}

/// Non-CubeCL backends: refused (Burn's own E2M1 quantiser differs from NVIDIA's recipe, and a
/// composed fallback would hand back a different encoding).
///
/// # Panics
/// Always.
pub fn unsupported_nvfp4<B: Backend, T>(
    _x: FloatTensor<B>,
    _gamma: FloatTensor<B>,
    _norm: NormParams,
    _activation: Activation,
    _recipe: Fp4Recipe,
    _s_enc: f32,
) -> T {
    panic!(
        "rms_norm_silu_nvfp4: NVFP4 output needs a CubeCL backend (CUDA or the CubeCL CPU \
         runtime, `Device::cuda(..)` / `Device::cpu()`); this backend has no fused NVFP4 path"
    )
}

/// The shapes of the NVFP4 parts of `x_shape`: values `[rows, C / 2]`, scales as
/// [`crate::Nvfp4Parts`] says.
pub fn nvfp4_parts_shapes(x_shape: &[usize], layout: ScaleLayout) -> ([usize; 2], [usize; 1]) {
    let channels = x_shape.last().copied().unwrap_or(0);
    let rows = x_shape
        .iter()
        .product::<usize>()
        .checked_div(channels)
        .unwrap_or(0);
    let scales = if layout == ScaleLayout::Swizzled128x4 {
        rmsnorm_silu_kernels::formats::swizzled_scale_bytes(rows, channels)
    } else {
        rows * (channels / 16)
    };
    ([rows, channels / 2], [scales])
}
