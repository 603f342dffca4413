//! Fused RMSNorm + SiLU for [Burn](https://burn.dev), as one CubeCL kernel.
//!
//! ```text
//! y = silu(x * rsqrt(mean(x^2) + eps) * gamma)      over the last axis, fp32 math inside
//! ```
//!
//! - [`rms_norm_silu_as`]: the one entry point: options (norm, activation, axis) and an
//!   [`OutputFormat`] (the input's dtype, FP8 E4M3 with or without amax, NVFP4 as a tensor or
//!   as raw parts); the functions below are its variants.
//! - [`rms_norm_silu`]: the op on any Burn device. On CubeCL devices (CUDA, the CubeCL CPU
//!   runtime; raw, under Fusion, under Autodiff) it runs the fused kernel of the
//!   `rmsnorm-silu-kernels` crate; on other backends (Flex, NdArray) a composed implementation
//!   with the same semantics.
//! - [`rms_norm_silu_dim`]: the same over any axis (the channel axis of `[B, C, T, H, W]`),
//!   reading channels-last and dense channels-first memory in place.
//! - [`rms_norm_silu_with`] and [`RmsNormSiluOptions`]: the Wan-VAE (`F.normalize`) variant,
//!   the plain norm without SiLU, and the axis ([`RmsNormSiluOptions::along`]), which every
//!   `_with` entry point honours.
//! - [`rms_norm_silu_fp8`], [`rms_norm_silu_nvfp4`]: quantised outputs (FP8 E4M3, NVFP4) as
//!   Burn `QFloat` tensors, over any axis, and [`rms_norm_silu_nvfp4_parts`] for block-scaled
//!   GEMMs; [`rms_norm_silu_fp8_delayed`] and [`rms_norm_silu_nvfp4_device_amax`] take their
//!   scale or amax as a device tensor (delayed scaling without a host round trip).
//! - [`RmsNormSilu`]: a module in the style of `burn::nn::RmsNorm`.
//!
//! Rooms (private modules, their items re-exported here): `api` validates arguments and routes
//! a `Tensor` to the backend extension (`backend`, [`RmsNormSiluBackend`]); `cube` turns
//! CubeCL tensors into a kernel launch; `composed` is the backend-generic implementation from
//! Burn ops (used by non-CubeCL backends and as the backward pass); `autodiff` registers the
//! backward; `formats` holds the quantisation schemes. [`fp8`], [`nvfp4`], [`conv`] and
//! [`attention`] are public for their types.

mod api;
pub mod attention;
mod autodiff;
mod backend;
mod composed;
pub mod conv;
/// Only with the CubeCL CPU runtime, whose JIT needs the symbol it exports.
#[cfg(feature = "cpu")]
#[doc(hidden)]
pub mod cpu_bf16_shim;
#[cfg(any(feature = "cuda", feature = "cpu"))]
mod cube;
mod formats;
pub mod fp8;
mod module;
pub mod nvfp4;
mod output;

pub use api::{
    Capabilities, Norm, RmsNormSiluOptions, capabilities, rms_norm_silu, rms_norm_silu_dim,
    rms_norm_silu_into, rms_norm_silu_with,
};
pub use attention::{
    AttentionBackend, AttentionRoutine, single_head_attention, single_head_attention_with,
};
pub use backend::RmsNormSiluBackend;
pub use conv::{
    ConvBackend, ConvPadding, MAX_PHASES, Phases, conv3d_channels_last, conv3d_channels_last_add,
    conv3d_channels_last_normed, conv3d_channels_last_phases, fold_upsample2x_weights,
};
pub use formats::{fp8_scheme, nvfp4_scheme};
pub use fp8::{
    E4M3_MAX, fp8_scale_from_amax, rms_norm_silu_fp8, rms_norm_silu_fp8_amax,
    rms_norm_silu_fp8_delayed, rms_norm_silu_fp8_with,
};
pub use module::{ActivationKind, NormKind, RmsNormSilu, RmsNormSiluConfig};
pub use nvfp4::{
    Nvfp4Parts, Nvfp4Scaling, ScaleLayout, rms_norm_silu_nvfp4, rms_norm_silu_nvfp4_device_amax,
    rms_norm_silu_nvfp4_parts, rms_norm_silu_nvfp4_with,
};
pub use output::{Fp8Scale, Normalized, OutputFormat, rms_norm_silu_as};
pub use rmsnorm_silu_kernels as kernels;
pub use rmsnorm_silu_kernels::Activation;

/// The README's examples, compiled and run by `cargo test` as doctests (on the CPU runtime).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
