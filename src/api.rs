//! The public functions: argument checks, then one call of the backend extension.

use burn::backend::Dispatch;
use burn::tensor::{DType, Device, Tensor};

use crate::backend::RmsNormSiluBackend;
use crate::composed::is_supported_float;
pub use rmsnorm_silu_kernels::Activation;
use rmsnorm_silu_kernels::NormParams;

/// How the per-row scale is formed from the row's mean of squares `ms`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Norm {
    /// cuDNN / `burn::nn::RmsNorm`: `x * rsqrt(ms + eps)`.
    Rms { eps: f32 },
    /// `F.normalize(x) * sqrt(C)` (the Wan VAE's `RMS_norm`): `x / max(||x||_2, eps) * sqrt(C)`,
    /// i.e. `x / max(rms(x), eps / sqrt(C))`: a clamp, not an epsilon under the root.
    /// For non-degenerate rows this equals [`Norm::Rms`] with `eps_rms = eps^2 / C` up to
    /// rounding (cuDNN's documentation maps it with `eps_rms = eps_l2 / C`); rows whose norm is
    /// below `eps` (all-zero rows) differ.
    L2Clamp { eps: f32 },
}

impl Norm {
    /// The Wan VAE's norm: `F.normalize` with PyTorch's default `eps = 1e-12`.
    pub const WAN: Norm = Norm::L2Clamp { eps: 1e-12 };

    fn eps(&self) -> f32 {
        match *self {
            Norm::Rms { eps } | Norm::L2Clamp { eps } => eps,
        }
    }

    /// Kernel parameters for rows of `channels` elements.
    pub fn params(&self, channels: usize) -> NormParams {
        match *self {
            Norm::Rms { eps } => NormParams::rms(eps),
            Norm::L2Clamp { eps } => NormParams::l2_clamp(eps, channels.max(1)),
        }
    }
}

/// Options of [`rms_norm_silu_with`] and of the quantised entry points: the norm, the
/// activation and the normalised axis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsNormSiluOptions {
    pub norm: Norm,
    pub activation: Activation,
    /// The normalised axis; `None` (the default) is the last one.
    pub dim: Option<usize>,
}

impl RmsNormSiluOptions {
    /// RMSNorm with `eps` under the root, then SiLU (the cuDNN engine's op).
    pub fn rms(eps: f32) -> Self {
        Self {
            norm: Norm::Rms { eps },
            activation: Activation::Silu,
            dim: None,
        }
    }

    /// The Wan VAE's `RMS_norm` then SiLU.
    pub fn wan() -> Self {
        Self {
            norm: Norm::WAN,
            activation: Activation::Silu,
            dim: None,
        }
    }

    /// The same options with another activation (`Activation::Identity` for a plain norm).
    pub fn with_activation(self, activation: Activation) -> Self {
        Self { activation, ..self }
    }

    /// The same options over axis `dim` (e.g. 1, the channel axis of `[B, C, T, H, W]`).
    pub fn along(self, dim: usize) -> Self {
        Self {
            dim: Some(dim),
            ..self
        }
    }

    /// The normalised axis of a rank-`D` input.
    ///
    /// # Panics
    /// When [`Self::dim`] is not an axis of a rank-`D` tensor.
    pub(crate) fn axis<const D: usize>(&self) -> usize {
        let dim = self.dim.unwrap_or(D.saturating_sub(1));
        assert!(
            dim < D.max(1),
            "rms_norm_silu: `dim` must be an axis of `x` (rank {D}), got {dim}"
        );
        dim
    }
}

/// For the entry points that run over the last axis: `x` with the options' axis moved last
/// (the other axes in their order; a view, no copy), the options over that last axis, and the
/// axes that move a result back (`None` when the axis already was the last).
pub(crate) fn over_last_axis<const D: usize>(
    x: Tensor<D>,
    options: RmsNormSiluOptions,
) -> (Tensor<D>, RmsNormSiluOptions, Option<[usize; D]>) {
    let dim = options.axis::<D>();
    let options = RmsNormSiluOptions {
        dim: None,
        ..options
    };
    if dim + 1 == D {
        return (x, options, None);
    }
    let (order, back) = axis_last_permutation(D, dim);
    let array = |v: Vec<usize>| <[usize; D]>::try_from(v).expect("a permutation of D axes");
    (x.permute(array(order)), options, Some(array(back)))
}

/// The axis order that moves `dim` last (the other axes in their order) and its inverse.
pub(crate) fn axis_last_permutation(rank: usize, dim: usize) -> (Vec<usize>, Vec<usize>) {
    let order: Vec<usize> = (0..rank).filter(|&d| d != dim).chain([dim]).collect();
    let mut back = vec![0; rank];
    for (i, &d) in order.iter().enumerate() {
        back[d] = i;
    }
    (order, back)
}

/// A result of [`over_last_axis`]'s view presented in the input's axis order again.
pub(crate) fn restore_axis<const D: usize>(t: Tensor<D>, back: Option<[usize; D]>) -> Tensor<D> {
    match back {
        Some(back) => t.permute(back),
        None => t,
    }
}

/// `silu(x * rsqrt(mean(x^2) + eps) * gamma)` over the last axis of `x`, in one fused kernel on
/// CubeCL devices. fp32 math inside; the output has the shape and float dtype of `x`.
///
/// # Panics
/// With a message naming the argument when `gamma` is not of length `C` (the last axis of
/// `x`), `eps` is negative, NaN or infinite, a tensor is not f64/f32/f16/bf16 (quantized
/// tensors included; integer and bool tensors are rejected by the type system), or `x` and
/// `gamma` are on different devices.
pub fn rms_norm_silu<const D: usize>(x: Tensor<D>, gamma: Tensor<1>, eps: f32) -> Tensor<D> {
    rms_norm_silu_with(x, gamma, RmsNormSiluOptions::rms(eps))
}

/// [`rms_norm_silu`] with a choice of norm semantics, activation and axis
/// ([`RmsNormSiluOptions::along`]; see [`rms_norm_silu_dim`] for the layouts read in place).
pub fn rms_norm_silu_with<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    options: RmsNormSiluOptions,
) -> Tensor<D> {
    let dim = options.axis::<D>();
    if dim + 1 != D {
        return rms_norm_silu_dim(x, gamma, dim, options);
    }
    let channels = check_arguments(&x, &gamma, dim, &options);
    let norm = options.norm.params(channels);
    let out = <Dispatch as RmsNormSiluBackend>::rms_norm_silu(
        x.into_dispatch(),
        gamma.into_dispatch(),
        norm,
        options.activation,
    );
    Tensor::from_dispatch(out)
}

/// [`rms_norm_silu_with`] written into a slice of an existing tensor: the output replaces
/// `into[.., at..at + x.dims()[dim], ..]` (positions `at..` along axis `dim`) and `into` is
/// returned with its other elements unchanged, as `into.slice_assign(.., op(x))` would. The
/// normalised axis is the last one, as in [`rms_norm_silu_with`]; `dim` must be another axis.
///
/// Where the slice is one contiguous block of `into` (every axis before `dim` has length 1,
/// e.g. frames of a `[1, T, H, W, C]` video), CubeCL backends write it in place when `into` is
/// not shared and its rows are dense or at a fixed pitch (as CUDA allocates them): a causal
/// convolution's input buffer gets its new frames behind the cached ones without a
/// concatenation. Otherwise the result is the same, through a slice assignment.
///
/// # Panics
/// As [`rms_norm_silu`], and when `dim` is the last axis or not an axis, `into` differs from
/// `x` in dtype, device or any length but axis `dim`'s, or `at + x.dims()[dim]` exceeds it.
pub fn rms_norm_silu_into<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    options: RmsNormSiluOptions,
    into: Tensor<D>,
    dim: usize,
    at: usize,
) -> Tensor<D> {
    assert!(
        dim + 1 < D,
        "rms_norm_silu_into: `dim` must be an axis of `x` before the last (rank {D}), got {dim}"
    );
    assert!(
        options.dim.is_none_or(|d| d + 1 == D),
        "rms_norm_silu_into: normalises the last axis; `options.dim` must be None, got {:?}",
        options.dim
    );
    let channels = check_arguments(&x, &gamma, D - 1, &options);
    let (x_dims, into_dims) = (x.dims(), into.dims());
    let fits = (0..D).all(|d| {
        if d == dim {
            at + x_dims[d] <= into_dims[d]
        } else {
            x_dims[d] == into_dims[d]
        }
    });
    assert!(
        fits,
        "rms_norm_silu_into: `into` must have the shape of `x` ({x_dims:?}) except along axis \
         {dim}, where positions {at}..{} must exist; got {into_dims:?}",
        at + x_dims[dim]
    );
    assert!(
        into.dtype() == x.dtype(),
        "rms_norm_silu_into: `into` must have the dtype of `x` ({:?}), got {:?}",
        x.dtype(),
        into.dtype()
    );
    let (x_device, into_device) = (x.device(), into.device());
    assert!(
        x_device == into_device,
        "rms_norm_silu_into: `into` must be on the device of `x` ({x_device:?}), got \
         {into_device:?}"
    );
    if into_dims[..dim].iter().any(|&n| n != 1) {
        let mut ranges: [std::ops::Range<usize>; D] = std::array::from_fn(|d| 0..into_dims[d]);
        ranges[dim] = at..at + x_dims[dim];
        return into.slice_assign(ranges, rms_norm_silu_with(x, gamma, options));
    }
    let offset = at * into_dims[dim + 1..].iter().product::<usize>();
    let norm = options.norm.params(channels);
    let out = <Dispatch as RmsNormSiluBackend>::rms_norm_silu_into(
        x.into_dispatch(),
        gamma.into_dispatch(),
        norm,
        options.activation,
        into.into_dispatch(),
        offset,
    );
    Tensor::from_dispatch(out)
}

/// The op over axis `dim` of `x` instead of the last one (`options.dim` is not read): e.g.
/// `dim = 1`, the channel axis of `[B, C, T, H, W]` (the Wan VAE's norm with
/// [`RmsNormSiluOptions::wan`]). Reads in place channels-last memory presented as `[B, C, ...]`
/// (what burn-cubecl convolutions return; the output keeps that layout) and channels-first
/// tensors, dense or with the rows CUDA pads (the output dense channels-first); any other layout
/// is copied first.
///
/// # Panics
/// As [`rms_norm_silu`], and when `dim >= D`.
pub fn rms_norm_silu_dim<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    dim: usize,
    options: RmsNormSiluOptions,
) -> Tensor<D> {
    assert!(
        dim < D,
        "rms_norm_silu: `dim` must be an axis of `x` (rank {D}), got {dim}"
    );
    let channels = check_arguments(&x, &gamma, dim, &options);
    let norm = options.norm.params(channels);
    let out = <Dispatch as RmsNormSiluBackend>::rms_norm_silu_dim(
        x.into_dispatch(),
        gamma.into_dispatch(),
        dim,
        norm,
        options.activation,
    );
    Tensor::from_dispatch(out)
}

/// Panics with a message naming the argument on bad input; returns C (the length of `dim`).
pub(crate) fn check_arguments<const D: usize>(
    x: &Tensor<D>,
    gamma: &Tensor<1>,
    dim: usize,
    options: &RmsNormSiluOptions,
) -> usize {
    assert!(D >= 1, "rms_norm_silu: `x` must have rank >= 1");
    let dims = x.dims();
    let channels = dims[dim];
    let [gamma_len] = gamma.dims();
    let axis = if dim + 1 == D {
        "the last axis".to_string()
    } else {
        format!("axis {dim}")
    };
    assert!(
        gamma_len == channels,
        "rms_norm_silu: `gamma` must have length C = {channels} ({axis} of `x`, shape \
         {dims:?}), got {gamma_len}"
    );
    let eps = options.norm.eps();
    assert!(
        eps.is_finite() && eps >= 0.0,
        "rms_norm_silu: `eps` must be finite and >= 0, got {eps}"
    );
    for (name, dtype) in [("x", x.dtype()), ("gamma", gamma.dtype())] {
        assert!(
            is_supported_float(dtype),
            "rms_norm_silu: `{name}` must be a float tensor (f64, f32, f16 or bf16), got {dtype:?}"
        );
    }
    let (x_device, gamma_device) = (x.device(), gamma.device());
    assert!(
        x_device == gamma_device,
        "rms_norm_silu: `x` and `gamma` must be on the same device, got x on {x_device:?} and \
         gamma on {gamma_device:?}"
    );
    channels
}

/// Panics unless `value` (argument `arg` of `op`) is one f32 element on `device`: the
/// quantised outputs' device-side scales and amaxes.
pub(crate) fn check_device_value(op: &str, arg: &str, value: &Tensor<1>, device: &Device) {
    let (dims, dtype, on) = (value.dims(), value.dtype(), value.device());
    assert!(
        dims == [1] && dtype == DType::F32,
        "{op}: `{arg}` must be one f32 element, got shape {dims:?} of {dtype:?}"
    );
    assert!(
        &on == device,
        "{op}: `{arg}` must be on the device of `x` ({device:?}), got {on:?}"
    );
}

/// What the op can do on a device: ask before calling instead of meeting the quantised entry
/// points' panic on a backend without them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// The fused kernels run (CubeCL devices: CUDA, the CubeCL CPU runtime); elsewhere
    /// composed Burn ops with the same semantics.
    pub fused: bool,
    /// FP8 E4M3 outputs (`rms_norm_silu_fp8*`).
    pub fp8: bool,
    /// NVFP4 outputs (`rms_norm_silu_nvfp4*`).
    pub nvfp4: bool,
}

/// The [`Capabilities`] of `device` (an autodiff device answers for the device it wraps).
pub fn capabilities(device: &burn::tensor::Device) -> Capabilities {
    #[cfg(any(feature = "cuda", feature = "cpu"))]
    let fused = matches!(
        device.clone().inner().as_dispatch(),
        burn::backend::DispatchDevice::Cube(_)
    );
    #[cfg(not(any(feature = "cuda", feature = "cpu")))]
    let fused = {
        let _ = device;
        false
    };
    Capabilities {
        fused,
        fp8: fused,
        nvfp4: fused,
    }
}
