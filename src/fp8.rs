//! FP8 E4M3 output as a Burn quantised tensor.
//!
//! `q = sat_RN_e4m3(y * scale)` (the TransformerEngine / cuDNN convention: the caller gives the
//! quantisation scale, the codes saturate at ±448 and NaN stays NaN), returned as a `QFloat`
//! tensor with E4M3 values stored one per byte and a per-tensor f32 scale of `1 / scale`, which
//! is Burn's convention (`dequantize()` multiplies by it), so `dequantize()` gives `q / scale`.

use burn::tensor::Tensor;

use crate::api::{
    RmsNormSiluOptions, check_arguments, check_device_value, over_last_axis, restore_axis,
};
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
    let (params, activation) = fp8_arguments(&x, &gamma, &options, Some(scale));
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
    let (params, activation) = fp8_arguments(&x, &gamma, &options, Some(scale));
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

/// [`rms_norm_silu_fp8_amax`] with the scale as a one-element f32 tensor on `x`'s device:
/// TransformerEngine's delayed scaling without a host round trip. The kernel reads the scale,
/// writes the codes `sat_RN_e4m3(y * scale)` and the quantised tensor's decode scale
/// `1 / scale` on the device, and returns `amax = max |y|` for the next step's scale
/// ([`fp8_scale_from_amax`]). The scale's value is not checked (that would need the host): a
/// scale that is not finite and positive gives the codes the formula gives.
///
/// ```
/// use burn::tensor::{Device, Distribution, Tensor};
/// use burn_rmsnorm_silu::{RmsNormSiluOptions, fp8_scale_from_amax, rms_norm_silu_fp8_delayed};
///
/// let device = Device::cpu();
/// let gamma = Tensor::<1>::ones([64], &device);
/// let mut scale = Tensor::<1>::from_floats([1.0], &device);
/// for _step in 0..3 {
///     let x = Tensor::<2>::random([8, 64], Distribution::Normal(0.0, 1.0), &device);
///     let (codes, amax) = rms_norm_silu_fp8_delayed(x, gamma.clone(), RmsNormSiluOptions::rms(1e-6), scale.clone());
///     // ... codes feed an FP8 consumer; the next step's scale stays on the device:
///     scale = fp8_scale_from_amax(amax, scale, 0);
///     assert_eq!(codes.dims(), [8, 64]);
/// }
/// ```
///
/// # Panics
/// As [`rms_norm_silu_fp8_with`], and when `scale` is not one f32 element on `x`'s device.
pub fn rms_norm_silu_fp8_delayed<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    options: RmsNormSiluOptions,
    scale: Tensor<1>,
) -> (Tensor<D>, Tensor<1>) {
    let (x, options, back) = over_last_axis(x, options);
    let (params, activation) = fp8_arguments(&x, &gamma, &options, None);
    check_device_value("rms_norm_silu_fp8_delayed", "scale", &scale, &x.device());
    let (q, amax) = <Dispatch as RmsNormSiluBackend>::rms_norm_silu_fp8_device_scale(
        x.into_dispatch(),
        gamma.into_dispatch(),
        scale.into_dispatch(),
        params,
        activation,
    );
    (
        restore_axis(Tensor::from_dispatch(q), back),
        Tensor::from_dispatch(amax),
    )
}

/// The largest finite E4M3 value.
pub const E4M3_MAX: f32 = 448.0;

/// The next delayed-scaling scale from a step's `amax`: `E4M3_MAX / amax / 2^margin`, so the
/// largest `|y|` lands `margin` binades below E4M3's largest value; where `amax` is 0 or not
/// finite (an all-zero or overflowing step) the `previous` scale is kept. Burn ops on the
/// device: no host round trip.
///
/// # Panics
/// When `margin` is 128 or more (the target `448 / 2^margin` would leave f32's normal range).
pub fn fp8_scale_from_amax(amax: Tensor<1>, previous: Tensor<1>, margin: u32) -> Tensor<1> {
    assert!(
        margin < 128,
        "fp8_scale_from_amax: `margin` must be below 128 binades, got {margin}"
    );
    let target = E4M3_MAX / 2f32.powi(margin as i32);
    let usable = amax
        .clone()
        .greater_elem(0.0)
        .bool_and(amax.clone().is_finite());
    (amax.recip() * target).mask_where(usable.bool_not(), previous)
}

/// Checks the arguments of the FP8 entry points (panicking with a message naming the bad one)
/// and returns the kernel's norm parameters and the activation.
/// A host `scale` must be finite and > 0 (a device scale is the caller's to check).
fn fp8_arguments<const D: usize>(
    x: &Tensor<D>,
    gamma: &Tensor<1>,
    options: &RmsNormSiluOptions,
    host_scale: Option<f32>,
) -> (NormParams, Activation) {
    let channels = check_arguments(x, gamma, D.saturating_sub(1), options);
    if let Some(scale) = host_scale {
        assert!(
            scale.is_finite() && scale > 0.0,
            "rms_norm_silu_fp8: `scale` must be finite and > 0, got {scale}"
        );
    }
    let params = options.norm.params(channels);
    (params, options.activation)
}
