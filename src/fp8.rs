//! FP8 E4M3 output as a Burn quantised tensor.
//!
//! `q = sat_RN_e4m3(y * scale)` (the TransformerEngine / cuDNN convention: the caller gives the
//! quantisation scale, the codes saturate at ±448 and NaN stays NaN), returned as a `QFloat`
//! tensor with E4M3 values stored one per byte and a per-tensor f32 scale of `1 / scale`, which
//! is Burn's convention (`dequantize()` multiplies by it), so `dequantize()` gives `q / scale`.

use burn::tensor::Tensor;

use crate::api::{RmsNormSiluOptions, check_arguments, over_last_axis, restore_axis};
use crate::backend::RmsNormSiluBackend;
pub use crate::formats::fp8_scheme;
use burn::backend::Dispatch;
use rmsnorm_silu_kernels::{Activation, NormParams};

/// [`rms_norm_silu_fp8_with`] with cuDNN semantics: `rsqrt(mean(x^2) + eps)`, then SiLU.
///
/// # Panics
/// As [`crate::rms_norm_silu`], and when `scale` is not finite and positive.
pub fn rms_norm_silu_fp8<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    eps: f32,
    scale: f32,
) -> Tensor<D> {
    rms_norm_silu_fp8_with(x, gamma, RmsNormSiluOptions::rms(eps), scale)
}

/// The op over the options' axis (by default the last) written as FP8 E4M3 codes
/// `q = sat_RN_e4m3(y * scale)`, returned as a quantised (`QFloat`) tensor whose `dequantize()`
/// gives `q / scale`. One fused kernel on CubeCL backends (the quantisation happens in
/// registers: 1 byte written per element). Over another axis the codes are laid out with that
/// axis innermost (a view presents them in `x`'s axis order): read in place from channels-last
/// memory, other layouts copied first.
///
/// # Panics
/// As [`crate::rms_norm_silu_with`], when `scale` is not finite and positive, and on backends
/// other than CubeCL ones (ask [`crate::capabilities`] first).
pub fn rms_norm_silu_fp8_with<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    options: RmsNormSiluOptions,
    scale: f32,
) -> Tensor<D> {
    let (x, options, back) = over_last_axis(x, options);
    let (params, activation) = fp8_arguments(&x, &gamma, &options, scale);
    let out = <Dispatch as RmsNormSiluBackend>::rms_norm_silu_fp8(
        x.into_dispatch(),
        gamma.into_dispatch(),
        params,
        activation,
        scale,
    );
    restore_axis(Tensor::from_dispatch(out), back)
}

/// [`rms_norm_silu_fp8_with`] that also returns `amax = max |y|` (before scaling; NaN if any
/// `y` is NaN) as a one-element f32 tensor, computed in the same kernel (for delayed scaling).
///
/// # Panics
/// As [`rms_norm_silu_fp8_with`].
pub fn rms_norm_silu_fp8_amax<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    options: RmsNormSiluOptions,
    scale: f32,
) -> (Tensor<D>, Tensor<1>) {
    let (x, options, back) = over_last_axis(x, options);
    let (params, activation) = fp8_arguments(&x, &gamma, &options, scale);
    let (q, amax) = <Dispatch as RmsNormSiluBackend>::rms_norm_silu_fp8_amax(
        x.into_dispatch(),
        gamma.into_dispatch(),
        params,
        activation,
        scale,
    );
    (
        restore_axis(Tensor::from_dispatch(q), back),
        Tensor::from_dispatch(amax),
    )
}

/// Checks the arguments of the FP8 entry points (panicking with a message naming the bad one)
/// and returns the kernel's norm parameters and the activation.
fn fp8_arguments<const D: usize>(
    x: &Tensor<D>,
    gamma: &Tensor<1>,
    options: &RmsNormSiluOptions,
    scale: f32,
) -> (NormParams, Activation) {
    let channels = check_arguments(x, gamma, D.saturating_sub(1), options);
    assert!(
        scale.is_finite() && scale > 0.0,
        "rms_norm_silu_fp8: `scale` must be finite and > 0, got {scale}"
    );
    let params = options.norm.params(channels);
    (params, options.activation)
}
