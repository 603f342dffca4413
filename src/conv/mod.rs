//! Channels-last 3D convolutions for the Wan decoder's layers: on CUDA, cubek's
//! implicit-GEMM kernel on tensor cores with a configuration from the measured table
//! (`rmsnorm_silu_kernels::conv`); layers of at most four output channels on this crate's
//! direct kernel (CUDA and the CubeCL CPU runtime); elsewhere (the other shapes on the CPU
//! runtime, Flex, NdArray) Burn's own `conv3d` on the same memory, which costs no copy either: Burn's CubeCL convolutions
//! take channels-last memory presented as `[B, C, T, H, W]` through strides.

// The macro-generated dispatch names the deprecated NdArray backend.
#![allow(deprecated)]

use burn::backend::{Backend, Dispatch, backend_extension, tensor::FloatTensor};
use burn::tensor::Tensor;
use burn::tensor::ops::ConvOptions;
use rmsnorm_silu_kernels::{Activation, NormParams};

/// Zero padding `(before, after)` of the `T`, `H` and `W` axes. A causal convolution puts all
/// of its temporal padding before: `ConvPadding::causal(k_t - 1, pad)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConvPadding {
    pub t: (usize, usize),
    pub h: (usize, usize),
    pub w: (usize, usize),
}

impl ConvPadding {
    /// `frames` zero frames in front, `spatial` zeros on every side of H and W.
    pub fn causal(frames: usize, spatial: usize) -> Self {
        Self {
            t: (frames, 0),
            h: (spatial, spatial),
            w: (spatial, spatial),
        }
    }

    fn pairs(&self) -> [(usize, usize); 3] {
        [self.t, self.h, self.w]
    }
}

/// The most phases a [`Phases`] grid holds (2 x 2 pixels, or 2 frames).
pub const MAX_PHASES: usize = 4;

/// An output grid `factor` times finer than one convolution's output along T, H and W, filled
/// by `factor[0] * factor[1] * factor[2]` convolutions of the same input ("phases"), each with
/// its own weights, bias and padding: phase `(a_t, a_h, a_w)` (numbered row-major) writes
/// output position `(f_t t + a_t, f_h h + a_h, f_w w + a_w)` of the finer grid.
///
/// It is how the decoder's resamplers run without copies: nearest x2 upsampling followed by a
/// 3x3 convolution equals four 2x2 convolutions of the low-resolution input (a sub-pixel
/// decomposition: 16 multiply-adds per output and channel pair instead of 36, and no upsampled
/// tensor), and a time convolution whose two channel halves interleave into twice the frames is
/// two convolutions writing alternate frames (no interleaving copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phases {
    pub factor: [usize; 3],
    /// Each phase's zero padding; entries past the phase count are ignored.
    pub padding: [ConvPadding; MAX_PHASES],
}

impl Phases {
    /// The number of phases (convolutions).
    pub fn count(&self) -> usize {
        self.factor.iter().product()
    }

    /// Phase `p`'s offsets `(a_t, a_h, a_w)` in the finer grid.
    pub fn offsets(&self, p: usize) -> [usize; 3] {
        let [_, fh, fw] = self.factor;
        [p / (fh * fw), (p / fw) % fh, p % fw]
    }

    /// One phase: a plain convolution with `padding`.
    pub fn single(padding: ConvPadding) -> Self {
        Self {
            factor: [1, 1, 1],
            padding: [padding; MAX_PHASES],
        }
    }

    /// Nearest x2 upsampling of H and W followed by a 3x3 convolution with padding 1, as four
    /// 2x2 convolutions of the input (weights from [`fold_upsample2x_weights`]): phase `a` of an
    /// axis reads input rows `(i - 1, i)` when `a = 0` and `(i, i + 1)` when `a = 1`.
    pub fn upsample2x() -> Self {
        let side = |a: usize| if a == 0 { (1, 0) } else { (0, 1) };
        let mut padding = [ConvPadding::default(); MAX_PHASES];
        for (p, pad) in padding.iter_mut().enumerate() {
            pad.h = side(p / 2);
            pad.w = side(p % 2);
        }
        Self {
            factor: [1, 2, 2],
            padding,
        }
    }

    /// Two output frames per output frame of a convolution: phase `j`'s weights are the `j`-th
    /// half of the output channels, and both phases use `padding`.
    pub fn frames2x(padding: ConvPadding) -> Self {
        Self {
            factor: [2, 1, 1],
            padding: [padding; MAX_PHASES],
        }
    }
}

/// The four 2x2 kernels of [`Phases::upsample2x`] from a 3x3 kernel: `weight` holds
/// `[C_out, 1, 3, 3, C_in]` values (the channels-last weight layout); the result holds
/// `[4, C_out, 1, 2, 2, C_in]`. Each 2x2 tap sums the 3x3 taps that read the same input pixel
/// once the input is upsampled (in f32; round to the run's dtype afterwards).
pub fn fold_upsample2x_weights(weight: &[f32], c_out: usize, c_in: usize) -> Vec<f32> {
    assert_eq!(
        weight.len(),
        c_out * 9 * c_in,
        "fold_upsample2x_weights: `weight` must hold C_out * 3 * 3 * C_in values"
    );
    // For phase a of an axis, the 3x3 taps that fall on 2x2 tap 0 and tap 1.
    const TAPS: [[&[usize]; 2]; 2] = [[&[0], &[1, 2]], [&[0, 1], &[2]]];
    let mut out = vec![0.0f32; 4 * c_out * 4 * c_in];
    for p in 0..4 {
        let (ah, aw) = (p / 2, p % 2);
        for o in 0..c_out {
            for (ky, rows) in TAPS[ah].iter().enumerate() {
                for (kx, cols) in TAPS[aw].iter().enumerate() {
                    let dst = (((p * c_out + o) * 2 + ky) * 2 + kx) * c_in;
                    for &sy in rows.iter() {
                        for &sx in cols.iter() {
                            let src = ((o * 3 + sy) * 3 + sx) * c_in;
                            for i in 0..c_in {
                                out[dst + i] += weight[src + i];
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// The output shape `[B, f_t T', f_h H', f_w W', C_out]` of [`conv3d_channels_last_phases`],
/// or what is wrong.
pub fn phased_output_shape(
    x: &[usize],
    weights: &[usize],
    bias: &[usize],
    phases: &Phases,
) -> Result<[usize; 5], String> {
    let count = phases.count();
    if count == 0 || count > MAX_PHASES {
        return Err(format!(
            "`phases` must have 1 to {MAX_PHASES} phases, got factor {:?}",
            phases.factor
        ));
    }
    if weights.len() != 6 || weights[0] != count {
        return Err(format!(
            "`weights` must be [{count}, C_out, kT, kH, kW, C_in] (one kernel per phase), got \
             {weights:?}"
        ));
    }
    if bias != [count, weights[1]] {
        return Err(format!(
            "`bias` must be [{count}, {}] (one per phase and output channel), got {bias:?}",
            weights[1]
        ));
    }
    let first = conv_output_shape(x, &weights[1..], &phases.padding[0])?;
    for p in 1..count {
        let other = conv_output_shape(x, &weights[1..], &phases.padding[p])?;
        if other != first {
            return Err(format!(
                "phase {p}'s output {other:?} differs from phase 0's {first:?} (paddings {:?})",
                &phases.padding[..count]
            ));
        }
    }
    let [ft, fh, fw] = phases.factor;
    Ok([
        first[0],
        first[1] * ft,
        first[2] * fh,
        first[3] * fw,
        first[4],
    ])
}

/// The output shape `[B, T', H', W', C_out]` of a stride-1 convolution, or what is wrong.
pub fn conv_output_shape(
    x: &[usize],
    weight: &[usize],
    padding: &ConvPadding,
) -> Result<[usize; 5], String> {
    let [b, t, h, w, c_in] = x
        .try_into()
        .map_err(|_| format!("`x` must be 5-D, got {x:?}"))?;
    let [c_out, kt, kh, kw, wc] = weight
        .try_into()
        .map_err(|_| format!("`weight` must be 5-D, got {weight:?}"))?;
    if wc != c_in {
        return Err(format!(
            "`weight` [C_out, kT, kH, kW, C_in] = {weight:?} must have C_in = {c_in} (the last \
             axis of `x`, shape {x:?})"
        ));
    }
    let mut out = [b, 0, 0, 0, c_out];
    for (axis, ((size, k), (before, after))) in [(t, kt), (h, kh), (w, kw)]
        .into_iter()
        .zip(padding.pairs())
        .enumerate()
    {
        let padded = size + before + after;
        if k == 0 || padded < k || before >= k || after >= k {
            return Err(format!(
                "axis {} of `x` ({size} with padding ({before}, {after})) does not fit a kernel \
                 of {k} (padding must be below the kernel extent)",
                axis + 1
            ));
        }
        out[axis + 1] = padded - k + 1;
    }
    Ok(out)
}

/// Backends that run [`conv3d_channels_last`]. The default body is Burn's `conv3d` on the
/// same memory (a stride permutation, no copy on CubeCL backends).
#[backend_extension(
    Cube: cfg(any(feature = "cuda", feature = "cpu")),
    Fusion,
    Flex,
    NdArray: cfg(feature = "ndarray")
)]
pub trait ConvBackend: Backend {
    #[fusion(dtype = x, shape = {
        let out = conv_output_shape(x, weight, padding).expect("checked by conv3d_channels_last");
        burn::tensor::Shape::new(out)
    })]
    fn conv3d_channels_last(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        padding: ConvPadding,
    ) -> FloatTensor<Self> {
        burn_conv3d::<Self>(x, weight, bias, padding)
    }

    #[fusion(dtype = x, shape = {
        let out = phased_output_shape(x, weights, bias, phases)
            .expect("checked by conv3d_channels_last_phases");
        burn::tensor::Shape::new(out)
    })]
    fn conv3d_channels_last_phases(
        x: FloatTensor<Self>,
        weights: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        phases: Phases,
    ) -> FloatTensor<Self> {
        burn_conv3d_phases::<Self>(x, weights, bias, phases)
    }

    #[fusion(dtype = x, shape = {
        let out = conv_output_shape(x, weight, padding).expect("checked by conv3d_channels_last_add");
        burn::tensor::Shape::new(out)
    })]
    fn conv3d_channels_last_add(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        padding: ConvPadding,
        residual: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let y = burn_conv3d::<Self>(x, weight, bias, padding);
        Self::float_add(y, residual)
    }

    #[fusion(dtype = x, shape = {
        let out = conv_output_shape(x, weight, padding)
            .expect("checked by conv3d_channels_last_normed");
        burn::tensor::Shape::new(out)
    })]
    fn conv3d_channels_last_normed(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        padding: ConvPadding,
        norm: NormParams,
    ) -> FloatTensor<Self> {
        let y = crate::composed::forward::<Self>(x, gamma, norm, Activation::Silu);
        burn_conv3d::<Self>(y, weight, bias, padding)
    }
}

impl ConvBackend for burn::backend::Flex {}

#[cfg(feature = "ndarray")]
impl ConvBackend for burn::backend::NdArray {}

/// Burn's own `conv3d` on channels-last tensors (permuted views in, a permuted view out).
pub(crate) fn burn_conv3d<B: Backend>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    bias: FloatTensor<B>,
    padding: ConvPadding,
) -> FloatTensor<B> {
    let x = B::float_permute(x, &[0, 4, 1, 2, 3]);
    let weight = B::float_permute(weight, &[0, 4, 1, 2, 3]);
    let options = ConvOptions::new_with_padding([1; 3], padding.pairs(), [1; 3], 1);
    let y = B::conv3d(x, weight, Some(bias), options);
    B::float_permute(y, &[0, 2, 3, 4, 1])
}

/// [`Phases`] with Burn ops: one convolution per phase, then the phases interleaved (a copy;
/// the CUDA path writes each phase in place instead).
pub(crate) fn burn_conv3d_phases<B: Backend>(
    x: FloatTensor<B>,
    weights: FloatTensor<B>,
    bias: FloatTensor<B>,
    phases: Phases,
) -> FloatTensor<B> {
    phases_with::<B>(x, weights, bias, phases, burn_conv3d::<B>)
}

/// [`Phases`] through `conv` (one call per phase), then the phases interleaved (a copy).
pub(crate) fn phases_with<B: Backend>(
    x: FloatTensor<B>,
    weights: FloatTensor<B>,
    bias: FloatTensor<B>,
    phases: Phases,
    conv: impl Fn(FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, ConvPadding) -> FloatTensor<B>,
) -> FloatTensor<B> {
    use burn::backend::TensorMetadata;
    use burn::tensor::{Shape, Slice};
    let w = weights.shape().dims::<6>();
    let count = phases.count();
    let outs: Vec<FloatTensor<B>> = (0..count)
        .map(|p| {
            let mut slices = [Slice::full(); 6];
            slices[0] = Slice::from(p..p + 1);
            let weight = B::float_reshape(
                B::float_slice(weights.clone(), &slices),
                Shape::new([w[1], w[2], w[3], w[4], w[5]]),
            );
            let b = B::float_reshape(
                B::float_slice(bias.clone(), &slices[..2]),
                Shape::new([w[1]]),
            );
            let y = conv(x.clone(), weight, b, phases.padding[p]);
            let [n, t, h, wd, c] = y.shape().dims::<5>();
            B::float_reshape(y, Shape::new([1, n, t, h, wd, c]))
        })
        .collect();
    let [n, t, h, wd, c] = {
        let s = outs[0].shape().dims::<6>();
        [s[1], s[2], s[3], s[4], s[5]]
    };
    let [ft, fh, fw] = phases.factor;
    let stacked = B::float_reshape(
        B::float_cat(outs, 0),
        Shape::new([ft, fh, fw, n, t, h, wd, c]),
    );
    let grid = B::float_permute(stacked, &[3, 4, 0, 5, 1, 6, 2, 7]);
    B::float_reshape(grid, Shape::new([n, t * ft, h * fh, wd * fw, c]))
}

/// [`Phases`] convolutions of channels-last `x` (`[B, T, H, W, C_in]`): `weights` is
/// `[P, C_out, kT, kH, kW, C_in]` and `bias` `[P, C_out]`, one of each per phase; the result
/// is `[B, f_t T', f_h H', f_w W', C_out]`, each phase's output interleaved into it. On CUDA
/// each phase is one implicit-GEMM launch writing its positions of the result in place.
///
/// # Panics
/// With a message naming the argument when the shapes do not fit together (see
/// [`phased_output_shape`]) or the dtypes or devices differ.
pub fn conv3d_channels_last_phases(
    x: Tensor<5>,
    weights: Tensor<6>,
    bias: Tensor<2>,
    phases: Phases,
) -> Tensor<5> {
    phased_output_shape(&x.dims(), &weights.dims(), &bias.dims(), &phases)
        .unwrap_or_else(|e| panic!("conv3d_channels_last_phases: {e}"));
    same_dtype_and_device(
        "conv3d_channels_last_phases",
        &x,
        [
            ("weights", weights.dtype(), weights.device()),
            ("bias", bias.dtype(), bias.device()),
        ],
    );
    Tensor::from_dispatch(<Dispatch as ConvBackend>::conv3d_channels_last_phases(
        x.into_dispatch(),
        weights.into_dispatch(),
        bias.into_dispatch(),
        phases,
    ))
}

/// The output shape of the convolution `op` of `x` with `weight` and `padding`, after checking
/// `bias`'s length and that `weight` and `bias` have `x`'s dtype and device.
///
/// # Panics
/// With a message naming `op` and the argument.
fn checked_output_shape(
    op: &str,
    x: &Tensor<5>,
    weight: &Tensor<5>,
    bias: &Tensor<1>,
    padding: &ConvPadding,
) -> [usize; 5] {
    let out = conv_output_shape(&x.dims(), &weight.dims(), padding)
        .unwrap_or_else(|e| panic!("{op}: {e}"));
    let [bias_len] = bias.dims();
    assert!(
        bias_len == out[4],
        "{op}: `bias` must have length C_out = {}, got {bias_len}",
        out[4]
    );
    same_dtype_and_device(
        op,
        x,
        [
            ("weight", weight.dtype(), weight.device()),
            ("bias", bias.dtype(), bias.device()),
        ],
    );
    out
}

fn same_dtype_and_device<const N: usize>(
    op: &str,
    x: &Tensor<5>,
    others: [(&str, burn::tensor::DType, burn::tensor::Device); N],
) {
    let device = x.device();
    for (name, dtype, d) in others {
        assert!(
            dtype == x.dtype(),
            "{op}: `{name}` must have the dtype of `x` ({:?}), got {dtype:?}",
            x.dtype()
        );
        assert!(
            d == device,
            "{op}: `{name}` must be on the device of `x` ({device:?}), got {d:?}"
        );
    }
}

/// A stride-1 3D convolution of channels-last `x` (`[B, T, H, W, C_in]`) with `weight`
/// (`[C_out, kT, kH, kW, C_in]`, the layout cubek reads; PyTorch's `[C_out, C_in, kT, kH, kW]`
/// permuted once at load time) and `bias` (`[C_out]`): `[B, T', H', W', C_out]`, channels
/// contiguous. 2D and 1x1 convolutions are the cases `kT = 1` (and `kH = kW = 1`).
///
/// On CUDA it runs cubek's implicit GEMM on tensor cores (bf16 / f16 via `mma.sync` or wmma,
/// f32 through tf32) in the configuration the measured table gives for the shape
/// (`kernels/lut/sm90_conv.txt`), else cubek's own selection; padded positions read zero by
/// predication. At most four output channels (the decoder's `conv_out`) run this crate's direct
/// kernel on CUDA cores, on every CubeCL runtime. An `x` whose channels are not contiguous (a
/// channels-first tensor permuted to channels-last) is copied once first. Elsewhere Burn's
/// `conv3d`.
///
/// # Panics
/// With a message naming the argument when the shapes do not fit together (see
/// [`conv_output_shape`]), the dtypes differ, or the tensors are on different devices.
pub fn conv3d_channels_last(
    x: Tensor<5>,
    weight: Tensor<5>,
    bias: Tensor<1>,
    padding: ConvPadding,
) -> Tensor<5> {
    checked_output_shape("conv3d_channels_last", &x, &weight, &bias, &padding);
    Tensor::from_dispatch(<Dispatch as ConvBackend>::conv3d_channels_last(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
        padding,
    ))
}

/// [`conv3d_channels_last`] with a residual connection: `conv(x) + bias + residual`, where
/// `residual` has the output's shape.
///
/// On CUDA, where cubek's implicit GEMM runs the shape in a table configuration and `residual`
/// is a dense tensor that no other tensor shares (its last use), the convolution stores into
/// `residual`'s memory, adding what it holds: one pass over the output instead of a separate
/// add's three. Otherwise the convolution, then Burn's add.
///
/// # Panics
/// As [`conv3d_channels_last`], and when `residual`'s shape, dtype or device differ from the
/// output's.
pub fn conv3d_channels_last_add(
    x: Tensor<5>,
    weight: Tensor<5>,
    bias: Tensor<1>,
    padding: ConvPadding,
    residual: Tensor<5>,
) -> Tensor<5> {
    let op = "conv3d_channels_last_add";
    let out = checked_output_shape(op, &x, &weight, &bias, &padding);
    assert!(
        residual.dims() == out,
        "{op}: `residual` must have the output's shape {out:?}, got {:?}",
        residual.dims()
    );
    same_dtype_and_device(op, &x, [("residual", residual.dtype(), residual.device())]);
    Tensor::from_dispatch(<Dispatch as ConvBackend>::conv3d_channels_last_add(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
        padding,
        residual.into_dispatch(),
    ))
}

/// `conv3d_channels_last(silu(rms_norm(x) * gamma), weight, bias, padding)`: the norm (over the
/// channel axis, `norm`'s semantics: [`NormParams::rms`] or Wan's [`NormParams::l2_clamp`]) and
/// SiLU applied to the convolution's input, the padding zero after them (as PyTorch pads the
/// normalised tensor).
///
/// On an sm_90 GPU (and the CubeCL CPU runtime), for bf16 / f16 with `C_in` a multiple of 32,
/// the normalised tensor is never written: a reduction writes each position's inverse RMS (4
/// bytes) and this crate's `wgmma` convolution applies the norm as it loads its input.
/// Elsewhere the fused norm, then the convolution.
///
/// # Panics
/// As [`conv3d_channels_last`], and when `gamma` is not of length `C_in` or differs in dtype or
/// device.
pub fn conv3d_channels_last_normed(
    x: Tensor<5>,
    gamma: Tensor<1>,
    weight: Tensor<5>,
    bias: Tensor<1>,
    padding: ConvPadding,
    norm: NormParams,
) -> Tensor<5> {
    let op = "conv3d_channels_last_normed";
    checked_output_shape(op, &x, &weight, &bias, &padding);
    let c_in = x.dims()[4];
    assert!(
        gamma.dims() == [c_in],
        "{op}: `gamma` must have C_in = {c_in} values, got {:?}",
        gamma.dims()
    );
    same_dtype_and_device(op, &x, [("gamma", gamma.dtype(), gamma.device())]);
    Tensor::from_dispatch(<Dispatch as ConvBackend>::conv3d_channels_last_normed(
        x.into_dispatch(),
        gamma.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
        padding,
        norm,
    ))
}

#[cfg(any(feature = "cuda", feature = "cpu"))]
mod cube;
