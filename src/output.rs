//! One entry point over every output format: [`rms_norm_silu_as`] takes the options (norm,
//! activation, axis) and the [`OutputFormat`], and returns the matching [`Normalized`] value.

use burn::tensor::Tensor;

use crate::api::{RmsNormSiluOptions, rms_norm_silu_with};
use crate::fp8::{rms_norm_silu_fp8_amax, rms_norm_silu_fp8_delayed, rms_norm_silu_fp8_with};
use crate::nvfp4::{
    Nvfp4Parts, Nvfp4Scaling, ScaleLayout, rms_norm_silu_nvfp4_device_amax,
    rms_norm_silu_nvfp4_parts, rms_norm_silu_nvfp4_with,
};

/// Where an FP8 output's quantisation scale lives.
// The tensor handle is larger than an f32; boxing it would make every caller write `Box::new`
// for a value made once per call.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Fp8Scale {
    /// A host value (checked: finite and > 0).
    Host(f32),
    /// One f32 element on `x`'s device, read by the kernel (delayed scaling without a host
    /// round trip; see [`crate::rms_norm_silu_fp8_delayed`]).
    Device(Tensor<1>),
}

/// What [`rms_norm_silu_as`] writes.
#[allow(clippy::large_enum_variant)] // (as `Fp8Scale`)
#[derive(Clone, Debug)]
pub enum OutputFormat {
    /// `x`'s dtype.
    Input,
    /// FP8 E4M3 codes `sat_RN_e4m3(y * scale)` as a `QFloat` tensor whose `dequantize()` gives
    /// `q / scale`; with `amax`, also `max |y|` (delayed scaling).
    Fp8 { scale: Fp8Scale, amax: bool },
    /// NVFP4 as a `QFloat` tensor.
    Nvfp4 { scaling: Nvfp4Scaling },
    /// NVFP4 as a `QFloat` tensor, TransformerEngine's recipe with its global scale from a
    /// tensor amax on the device (see [`crate::rms_norm_silu_nvfp4_device_amax`]).
    Nvfp4DeviceAmax { amax: Tensor<1> },
    /// NVFP4 as raw parts for a block-scaled GEMM, the scales in `layout`.
    Nvfp4Parts {
        scaling: Nvfp4Scaling,
        layout: ScaleLayout,
    },
}

/// The result of [`rms_norm_silu_as`]: one variant per shape of result.
#[derive(Clone, Debug)]
pub enum Normalized<const D: usize> {
    /// [`OutputFormat::Input`], [`OutputFormat::Fp8`] without amax and
    /// [`OutputFormat::Nvfp4`] / [`OutputFormat::Nvfp4DeviceAmax`]: one tensor (`QFloat` for the
    /// quantised formats).
    Tensor(Tensor<D>),
    /// [`OutputFormat::Fp8`] with amax: the codes and `max |y|` (one f32 element).
    Fp8WithAmax { values: Tensor<D>, amax: Tensor<1> },
    /// [`OutputFormat::Nvfp4Parts`].
    Nvfp4Parts(Nvfp4Parts),
}

impl<const D: usize> Normalized<D> {
    /// The tensor of a [`Normalized::Tensor`] or the codes of a [`Normalized::Fp8WithAmax`];
    /// `None` for raw NVFP4 parts.
    pub fn tensor(self) -> Option<Tensor<D>> {
        match self {
            Normalized::Tensor(t) | Normalized::Fp8WithAmax { values: t, .. } => Some(t),
            Normalized::Nvfp4Parts(_) => None,
        }
    }
}

/// The op with `options` (norm, activation, axis) written in `format`: the one entry point
/// behind [`crate::rms_norm_silu_with`], [`crate::rms_norm_silu_fp8_with`],
/// [`crate::rms_norm_silu_fp8_amax`], [`crate::rms_norm_silu_fp8_delayed`],
/// [`crate::rms_norm_silu_nvfp4_with`], [`crate::rms_norm_silu_nvfp4_device_amax`] and
/// [`crate::rms_norm_silu_nvfp4_parts`], which it calls.
///
/// # Panics
/// As the function it calls; quantised formats on a backend without them (ask
/// [`crate::capabilities`] first).
pub fn rms_norm_silu_as<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    options: RmsNormSiluOptions,
    format: OutputFormat,
) -> Normalized<D> {
    match format {
        OutputFormat::Input => Normalized::Tensor(rms_norm_silu_with(x, gamma, options)),
        OutputFormat::Fp8 {
            scale: Fp8Scale::Host(scale),
            amax: false,
        } => Normalized::Tensor(rms_norm_silu_fp8_with(x, gamma, options, scale)),
        OutputFormat::Fp8 {
            scale: Fp8Scale::Host(scale),
            amax: true,
        } => {
            let (values, amax) = rms_norm_silu_fp8_amax(x, gamma, options, scale);
            Normalized::Fp8WithAmax { values, amax }
        }
        OutputFormat::Fp8 {
            scale: Fp8Scale::Device(scale),
            amax,
        } => {
            let (values, max) = rms_norm_silu_fp8_delayed(x, gamma, options, scale);
            if amax {
                Normalized::Fp8WithAmax { values, amax: max }
            } else {
                Normalized::Tensor(values)
            }
        }
        OutputFormat::Nvfp4 { scaling } => {
            Normalized::Tensor(rms_norm_silu_nvfp4_with(x, gamma, options, scaling))
        }
        OutputFormat::Nvfp4DeviceAmax { amax } => {
            Normalized::Tensor(rms_norm_silu_nvfp4_device_amax(x, gamma, options, amax))
        }
        OutputFormat::Nvfp4Parts { scaling, layout } => Normalized::Nvfp4Parts(
            rms_norm_silu_nvfp4_parts(x, gamma, options, scaling, layout),
        ),
    }
}
