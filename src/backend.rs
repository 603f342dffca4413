// The macro-generated dispatch names the deprecated NdArray backend, which the crate supports.
#![allow(deprecated)]

//! The backend extension: the forward (last axis, any axis) and its backward, implemented by
//! the fused kernels on CubeCL backends (and, generated, under Fusion), by the composed Burn ops
//! elsewhere; under Autodiff the forward registers a backward node that calls the backward.

use burn::backend::{
    Backend, backend_extension,
    tensor::{FloatTensor, IntTensor, QuantizedTensor},
};
use rmsnorm_silu_kernels::nvfp4::{Fp4Recipe, ScaleLayout};
use rmsnorm_silu_kernels::{Activation, NormParams};

/// Backends that can run the fused RMSNorm (+ SiLU).
///
/// `r = 1 / sqrt(max(mean(x^2) + eps, floor))` per row of the last axis (`norm`), then
/// `y = act(x * r * gamma)` with `act` the `activation` (SiLU or the identity).
/// Inputs are validated by [`crate::rms_norm_silu_with`]; implementations may assume a float
/// `x` of rank >= 1 whose last axis has the length of the 1-D `gamma`, on the same device.
#[backend_extension(
    Cube: cfg(any(feature = "cuda", feature = "cpu")),
    Fusion,
    Autodiff,
    Flex,
    NdArray: cfg(feature = "ndarray")
)]
pub trait RmsNormSiluBackend: Backend {
    #[fusion(dtype = x, shape = x)]
    fn rms_norm_silu(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        norm: NormParams,
        activation: Activation,
    ) -> FloatTensor<Self> {
        crate::composed::forward::<Self>(x, gamma, norm, activation)
    }

    /// The same normalisation over axis `dim` of `x` (e.g. the channel axis 1 of
    /// `[B, C, T, H, W]`); the output has the shape and dtype of `x`.
    #[fusion(dtype = x, shape = x)]
    fn rms_norm_silu_dim(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        dim: usize,
        norm: NormParams,
        activation: Activation,
    ) -> FloatTensor<Self> {
        crate::composed::forward_dim::<Self>(x, gamma, dim, norm, activation)
    }

    /// [`Self::rms_norm_silu`] written into `into` instead of a new tensor: the output's
    /// elements (row-major) replace elements `offset..offset + numel(x)` of `into` (in its
    /// row-major order); the rest of `into` is unchanged, and `into` is returned. The caller
    /// ([`crate::rms_norm_silu_into`]) checks that this range is the slice it means. CubeCL
    /// backends write in place when `into` is dense and not shared (else into a copy).
    #[fusion(dtype = into, shape = into)]
    fn rms_norm_silu_into(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        norm: NormParams,
        activation: Activation,
        into: FloatTensor<Self>,
        offset: usize,
    ) -> FloatTensor<Self> {
        let y = Self::rms_norm_silu(x, gamma, norm, activation);
        crate::composed::write_into::<Self>(into, offset, y)
    }

    /// The op over the last axis written as FP8 E4M3 codes `q = sat_RN_e4m3(y * scale)`, returned
    /// as a quantised tensor (E4M3 values, per-tensor f32 scale `1 / scale`, so Burn's
    /// `dequantize()` gives `q / scale`). CubeCL backends quantise inside the fused kernel;
    /// other backends refuse with a clear error naming the missing path.
    #[fusion(dtype = burn::tensor::DType::QFloat(crate::formats::fp8_scheme()), shape = x)]
    fn rms_norm_silu_fp8(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        norm: NormParams,
        activation: Activation,
        scale: f32,
    ) -> QuantizedTensor<Self> {
        crate::formats::unsupported_fp8::<Self, _>(x, gamma, norm, activation, scale)
    }

    /// [`Self::rms_norm_silu_fp8`] that also returns `amax = max |y|` over the tensor (before
    /// scaling; NaN if any `y` is NaN) as a one-element f32 tensor, from the same kernel.
    #[fusion(meta = |x, _gamma, _norm, _activation, _scale| crate::formats::fp8_amax_specs(&x.shape))]
    fn rms_norm_silu_fp8_amax(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        norm: NormParams,
        activation: Activation,
        scale: f32,
    ) -> (QuantizedTensor<Self>, FloatTensor<Self>) {
        crate::formats::unsupported_fp8::<Self, _>(x, gamma, norm, activation, scale)
    }

    /// [`Self::rms_norm_silu_fp8_amax`] with the quantisation scale on the device: `scale` is
    /// a one-element f32 tensor the kernel reads, and the quantised tensor's decode scale
    /// `1 / scale` is written on the device too, so a delayed-scaling loop (this step's scale
    /// from earlier steps' amax) never waits for the host.
    #[fusion(meta = |x, _gamma, _scale, _norm, _activation| crate::formats::fp8_amax_specs(&x.shape))]
    fn rms_norm_silu_fp8_device_scale(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        scale: FloatTensor<Self>,
        norm: NormParams,
        activation: Activation,
    ) -> (QuantizedTensor<Self>, FloatTensor<Self>) {
        let _ = scale;
        crate::formats::unsupported_fp8::<Self, _>(x, gamma, norm, activation, 1.0)
    }

    /// The op over the last axis written as NVFP4 (`crate::nvfp4`): E2M1 values, E4M3 scales
    /// per block of 16, per-tensor decode scale `1 / s_enc` (1 with the cuDNN recipe), as a quantised
    /// tensor. CubeCL backends quantise inside the fused kernel; others refuse.
    #[fusion(dtype = burn::tensor::DType::QFloat(crate::formats::nvfp4_scheme()), shape = x)]
    fn rms_norm_silu_nvfp4(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        norm: NormParams,
        activation: Activation,
        recipe: Fp4Recipe,
        s_enc: f32,
    ) -> QuantizedTensor<Self> {
        crate::formats::unsupported_nvfp4::<Self, _>(x, gamma, norm, activation, recipe, s_enc)
    }

    /// [`Self::rms_norm_silu_nvfp4`] with TransformerEngine's recipe and its global encode scale
    /// `s_enc = 448 * 6 / amax` (1 where amax is 0 or not finite) from a tensor amax on the
    /// device (one f32 element): the kernel computes `s_enc` and writes the decode scale
    /// `1 / s_enc` itself, so no host round trip.
    #[fusion(dtype = burn::tensor::DType::QFloat(crate::formats::nvfp4_scheme()), shape = x)]
    fn rms_norm_silu_nvfp4_device_amax(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        amax: FloatTensor<Self>,
        norm: NormParams,
        activation: Activation,
    ) -> QuantizedTensor<Self> {
        let _ = amax;
        let recipe = Fp4Recipe::TransformerEngine;
        crate::formats::unsupported_nvfp4::<Self, _>(x, gamma, norm, activation, recipe, 1.0)
    }

    /// [`Self::rms_norm_silu_nvfp4`] as raw parts: the values `[rows, C / 2]` and the scales
    /// (row-major `[rows * C / 16]`, or the cuBLASLt 128x4 swizzled layout, as `layout` says),
    /// both u8.
    #[fusion(meta = |x, _gamma, _norm, _activation, _recipe, _s_enc, layout| {
        let (values, scales) = crate::formats::nvfp4_parts_shapes(&x.shape, *layout);
        (
            burn::backend::fusion::custom::TensorSpec::new(
                burn::tensor::Shape::new(values),
                burn::tensor::DType::U8,
            ),
            burn::backend::fusion::custom::TensorSpec::new(
                burn::tensor::Shape::new(scales),
                burn::tensor::DType::U8,
            ),
        )
    })]
    fn rms_norm_silu_nvfp4_parts(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        norm: NormParams,
        activation: Activation,
        recipe: Fp4Recipe,
        s_enc: f32,
        layout: ScaleLayout,
    ) -> (IntTensor<Self>, IntTensor<Self>) {
        let _ = layout;
        crate::formats::unsupported_nvfp4::<Self, _>(x, gamma, norm, activation, recipe, s_enc)
    }

    /// The gradients `(dx, dgamma)` of [`Self::rms_norm_silu_dim`] for the output gradient
    /// `dy`: `dx` with `x`'s shape and dtype, `dgamma` with `gamma`'s. The Autodiff backend's
    /// backward node calls it; CubeCL backends run the fused backward kernels over the last
    /// axis (dgamma reduced deterministically), everything else the composed ops.
    #[fusion(meta = |x, gamma, _dy, _dim, _norm, _activation| (x.clone(), gamma.clone()))]
    fn rms_norm_silu_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        dim: usize,
        norm: NormParams,
        activation: Activation,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        crate::composed::backward_dim::<Self>(x, gamma, dy, dim, norm, activation)
    }
}

impl RmsNormSiluBackend for burn::backend::Flex {}

#[cfg(feature = "ndarray")]
#[allow(deprecated)]
impl RmsNormSiluBackend for burn::backend::NdArray {}
