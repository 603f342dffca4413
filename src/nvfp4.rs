//! NVFP4 output: E2M1 values in blocks of 16 along C, one E4M3 scale per block, one f32 scale
//! per tensor; as a Burn quantised tensor or as the raw parts a block-scaled GEMM reads.
//!
//! Two recipes (see `../shared/docs/FORMATS.md`):
//! - [`Nvfp4Scaling::GlobalScale`] / [`Nvfp4Scaling::TensorAmax`] (TransformerEngine, vLLM,
//!   FlashInfer): a global encode scale `s_enc` (given, or `448 * 6 / amax` from a tensor amax
//!   the caller has, e.g. from the previous step's FP8 amax); block scale
//!   `s_b = e4m3(amax_b * s_enc / 6)`; values `e2m1(y * (s_enc / s_b))` (the rounded scale);
//!   dequantise `q * s_b / s_enc`.
//! - [`Nvfp4Scaling::Cudnn`] (the cuDNN engine): no global scale, `sf = max(amax_b / 6,
//!   FLT_MIN)` kept in fp32 for the encode, stored as E4M3; dequantise `q * e4m3(sf)`.
//!
//! The Burn tensor's per-tensor scale is the *decode* scale (`1 / s_enc`, or 1 for cuDNN's
//! recipe), Burn's convention, so its `dequantize()` gives `q * s_b * global`.

use burn::tensor::{Int, Tensor};

use crate::api::{
    RmsNormSiluOptions, check_arguments, check_device_value, over_last_axis, restore_axis,
};
use crate::backend::RmsNormSiluBackend;
pub use crate::formats::nvfp4_scheme;
use burn::backend::Dispatch;
pub use rmsnorm_silu_kernels::formats::te_global_scale;
use rmsnorm_silu_kernels::nvfp4::Fp4Recipe;
pub use rmsnorm_silu_kernels::nvfp4::ScaleLayout;
use rmsnorm_silu_kernels::{Activation, NormParams};

/// How the NVFP4 block scales are formed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Nvfp4Scaling {
    /// TransformerEngine recipe with this global encode scale `s_enc` (finite, > 0).
    GlobalScale(f32),
    /// TransformerEngine recipe with `s_enc = 448 * 6 / amax` from this tensor amax of `y`
    /// (`>= 0`; 0 gives `s_enc = 1`).
    TensorAmax(f32),
    /// The cuDNN engine's recipe: no global scale.
    Cudnn,
}

impl Nvfp4Scaling {
    /// `(recipe, s_enc)` for the kernel; panics naming the argument when the value is invalid.
    fn kernel_arguments(self) -> (Fp4Recipe, f32) {
        match self {
            Nvfp4Scaling::GlobalScale(s) => {
                assert!(
                    s.is_finite() && s > 0.0,
                    "rms_norm_silu_nvfp4: `scaling` GlobalScale must be finite and > 0, got {s}"
                );
                (Fp4Recipe::TransformerEngine, s)
            }
            Nvfp4Scaling::TensorAmax(amax) => {
                assert!(
                    amax.is_finite() && amax >= 0.0,
                    "rms_norm_silu_nvfp4: `scaling` TensorAmax must be finite and >= 0, got {amax}"
                );
                (Fp4Recipe::TransformerEngine, te_global_scale(amax))
            }
            Nvfp4Scaling::Cudnn => (Fp4Recipe::Cudnn, 1.0),
        }
    }

    /// The per-tensor decode scale a GEMM (or Burn's `dequantize`) multiplies by.
    pub fn decode_scale(self) -> f32 {
        match self.kernel_arguments() {
            (Fp4Recipe::Cudnn, _) => 1.0,
            (Fp4Recipe::TransformerEngine, s_enc) => 1.0 / s_enc,
        }
    }
}

/// The raw NVFP4 parts of a `[.., C]` tensor viewed as `rows x C`.
#[derive(Clone, Debug)]
pub struct Nvfp4Parts {
    /// `[rows, C / 2]` bytes (dtype u8): element `2i` in the low nibble of byte `i`.
    pub values: Tensor<2, Int>,
    /// The E4M3 scale bytes (dtype u8): `[rows, C / 16]` row-major, or for
    /// [`ScaleLayout::Swizzled128x4`] `[ceil(rows / 128) * 128 * ceil(C / 64) * 4]` in the
    /// cuBLASLt layout, padding zero.
    pub scales: Tensor<1, Int>,
    /// The per-tensor decode scale (`1 / s_enc`; 1 for [`Nvfp4Scaling::Cudnn`]).
    pub global_scale: f32,
    pub layout: ScaleLayout,
}

/// [`rms_norm_silu_nvfp4_with`] with cuDNN semantics: `rsqrt(mean(x^2) + eps)`, then SiLU.
///
/// # Panics
/// As [`rms_norm_silu_nvfp4_with`].
pub fn rms_norm_silu_nvfp4<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    eps: f32,
    scaling: Nvfp4Scaling,
) -> Tensor<D> {
    rms_norm_silu_nvfp4_with(x, gamma, RmsNormSiluOptions::rms(eps), scaling)
}

/// The op over the options' axis (by default the last) written as NVFP4, returned as a
/// quantised (`QFloat`, [`nvfp4_scheme`]) tensor: one fused kernel on CubeCL backends (0.5 +
/// 1/16 bytes written per element). Over another axis the blocks run along that axis, laid out
/// innermost (a view presents them in `x`'s axis order).
///
/// # Panics
/// As [`crate::rms_norm_silu_with`]; when C is not a multiple of 16; when `scaling` holds an
/// invalid value; on backends other than CubeCL ones.
pub fn rms_norm_silu_nvfp4_with<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    options: RmsNormSiluOptions,
    scaling: Nvfp4Scaling,
) -> Tensor<D> {
    let (x, options, back) = over_last_axis(x, options);
    let (params, activation) = nvfp4_arguments(&x, &gamma, &options);
    let (recipe, s_enc) = scaling.kernel_arguments();
    let out = <Dispatch as RmsNormSiluBackend>::rms_norm_silu_nvfp4(
        x.into_dispatch(),
        gamma.into_dispatch(),
        params,
        activation,
        recipe,
        s_enc,
    );
    restore_axis(Tensor::from_dispatch(out), back)
}

/// [`rms_norm_silu_nvfp4_with`] with TransformerEngine's recipe and `s_enc = 448 * 6 / amax`
/// from a tensor amax kept on the device (one f32 element on `x`'s device, e.g. the `max |y|`
/// of an earlier step from [`crate::rms_norm_silu_fp8_amax`], or a Burn reduction): the kernel
/// computes `s_enc` (1 where amax is 0 or not finite, as [`Nvfp4Scaling::TensorAmax`]) and
/// writes the decode scale itself, so nothing waits for the host.
///
/// # Panics
/// As [`rms_norm_silu_nvfp4_with`], and when `amax` is not one f32 element on `x`'s device.
pub fn rms_norm_silu_nvfp4_device_amax<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    options: RmsNormSiluOptions,
    amax: Tensor<1>,
) -> Tensor<D> {
    let (x, options, back) = over_last_axis(x, options);
    let (params, activation) = nvfp4_arguments(&x, &gamma, &options);
    check_device_value(
        "rms_norm_silu_nvfp4_device_amax",
        "amax",
        &amax,
        &x.device(),
    );
    let out = <Dispatch as RmsNormSiluBackend>::rms_norm_silu_nvfp4_device_amax(
        x.into_dispatch(),
        gamma.into_dispatch(),
        amax.into_dispatch(),
        params,
        activation,
    );
    restore_axis(Tensor::from_dispatch(out), back)
}

/// The op over the options' axis (by default the last) as raw NVFP4 parts for a block-scaled
/// GEMM, with the scales in `layout`. Over another axis the rows are the positions of `x` with
/// that axis removed, in their order (`[B, C, T, H, W]` along C: rows `B x T x H x W`).
///
/// # Panics
/// As [`rms_norm_silu_nvfp4_with`].
pub fn rms_norm_silu_nvfp4_parts<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    options: RmsNormSiluOptions,
    scaling: Nvfp4Scaling,
    layout: ScaleLayout,
) -> Nvfp4Parts {
    // The parts are rows of the moved view: nothing to move back.
    let (x, options, _) = over_last_axis(x, options);
    let (params, activation) = nvfp4_arguments(&x, &gamma, &options);
    let (recipe, s_enc) = scaling.kernel_arguments();
    let (values, scales) = <Dispatch as RmsNormSiluBackend>::rms_norm_silu_nvfp4_parts(
        x.into_dispatch(),
        gamma.into_dispatch(),
        params,
        activation,
        recipe,
        s_enc,
        layout,
    );
    Nvfp4Parts {
        values: Tensor::from_dispatch(values),
        scales: Tensor::from_dispatch(scales),
        global_scale: scaling.decode_scale(),
        layout,
    }
}

/// Checks the NVFP4 arguments but the scaling (panicking with a message naming the bad one)
/// and returns the kernel's norm parameters and the activation.
fn nvfp4_arguments<const D: usize>(
    x: &Tensor<D>,
    gamma: &Tensor<1>,
    options: &RmsNormSiluOptions,
) -> (NormParams, Activation) {
    let channels = check_arguments(x, gamma, D.saturating_sub(1), options);
    assert!(
        channels.is_multiple_of(16),
        "rms_norm_silu_nvfp4: `x`'s last axis must be a multiple of 16 (NVFP4 blocks), got C = \
         {channels}"
    );
    (options.norm.params(channels), options.activation)
}
