//! The operation composed from Burn backend ops, generic over the backend: the implementation on
//! backends without a fused kernel, and the backward pass on every backend. fp32 math inside,
//! output in the input's dtype.

use burn::backend::{Backend, TensorMetadata, tensor::FloatTensor};
use burn::tensor::{DType, FloatDType, Shape};
use rmsnorm_silu_kernels::{Activation, NormParams};

/// The pieces of the forward pass kept for the backward: `[rows, C]` fp32 views.
pub struct ForwardParts<B: Backend> {
    /// `x` in fp32, `[rows, C]`.
    pub x: FloatTensor<B>,
    /// `gamma` in fp32, `[1, C]`.
    pub gamma: FloatTensor<B>,
    /// `mean(x^2) + eps` per row before the floor, `[rows, 1]`.
    pub mean_sq_eps: FloatTensor<B>,
    /// `1 / sqrt(denom)`, `[rows, 1]`.
    pub r: FloatTensor<B>,
}

fn rows_and_channels(shape: &Shape) -> (usize, usize) {
    let channels = shape[shape.num_dims() - 1];
    let rows = shape.num_elements().checked_div(channels).unwrap_or(0);
    (rows, channels)
}

/// fp32 `[rows, C]` views of `x` and `gamma`, and the row statistics.
pub fn forward_parts<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    NormParams { eps, floor }: NormParams,
) -> ForwardParts<B> {
    let (rows, channels) = rows_and_channels(&x.shape());
    let x = B::float_reshape(
        B::float_cast(x, FloatDType::F32),
        Shape::new([rows, channels]),
    );
    let gamma = B::float_reshape(
        B::float_cast(gamma, FloatDType::F32),
        Shape::new([1, channels]),
    );
    let sq = B::float_mul(x.clone(), x.clone());
    let mean_sq_eps = B::float_add_scalar(B::float_mean_dim(sq, 1), (eps as f64).into());
    let mut denom = mean_sq_eps.clone();
    if floor > 0.0 {
        denom = B::float_clamp_min(denom, (floor as f64).into());
    }
    let r = B::float_recip(B::float_sqrt(denom));
    ForwardParts {
        x,
        gamma,
        mean_sq_eps,
        r,
    }
}

/// `v = x * r * gamma` (fp32, `[rows, C]`).
fn affine<B: Backend>(parts: &ForwardParts<B>) -> FloatTensor<B> {
    let shape = parts.x.shape();
    let n = B::float_mul(
        parts.x.clone(),
        B::float_expand(parts.r.clone(), shape.clone()),
    );
    B::float_mul(n, B::float_expand(parts.gamma.clone(), shape))
}

/// The forward pass from Burn ops.
pub fn forward<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    norm: NormParams,
    activation: Activation,
) -> FloatTensor<B> {
    let shape = x.shape();
    let dtype: FloatDType = x.dtype().into();
    let parts = forward_parts::<B>(x, gamma, norm);
    let v = affine(&parts);
    let y = if activation == Activation::Silu {
        B::float_mul(v.clone(), B::sigmoid(v))
    } else {
        v
    };
    B::float_reshape(B::float_cast(y, dtype), shape)
}

/// [`forward`] over axis `dim`: the axis is swapped to the end, normalised, swapped back.
pub fn forward_dim<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    dim: usize,
    norm: NormParams,
    activation: Activation,
) -> FloatTensor<B> {
    let last = x.shape().num_dims() - 1;
    if dim == last {
        return forward::<B>(x, gamma, norm, activation);
    }
    let y = forward::<B>(B::float_swap_dims(x, dim, last), gamma, norm, activation);
    B::float_swap_dims(y, dim, last)
}

/// [`backward`] over axis `dim`.
pub fn backward_dim<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    dy: FloatTensor<B>,
    dim: usize,
    norm: NormParams,
    activation: Activation,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let last = x.shape().num_dims() - 1;
    if dim == last {
        return backward::<B>(x, gamma, dy, norm, activation);
    }
    let (dx, dgamma) = backward::<B>(
        B::float_swap_dims(x, dim, last),
        gamma,
        B::float_swap_dims(dy, dim, last),
        norm,
        activation,
    );
    (B::float_swap_dims(dx, dim, last), dgamma)
}

/// Gradients of the op with respect to `x` (shape and dtype of `x`) and `gamma` (shape and dtype
/// of `gamma`), given the output gradient `dy`.
///
/// With `n = x r`, `v = n g`, `dv = dy * silu'(v)`:
/// `dgamma = sum_rows(dv * n)`, `dn = dv * g`,
/// `dx = r * (dn - n * mean(dn * n))` on rows where `mean(x^2) + eps >= floor`, and `r * dn`
/// on rows held at the floor (there `r` does not depend on `x`).
pub fn backward<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    dy: FloatTensor<B>,
    norm: NormParams,
    activation: Activation,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let x_shape = x.shape();
    let x_dtype: FloatDType = x.dtype().into();
    let g_shape = gamma.shape();
    let g_dtype: FloatDType = gamma.dtype().into();
    let parts = forward_parts::<B>(x, gamma, norm);
    let (rows, channels) = rows_and_channels(&x_shape);
    let full = Shape::new([rows, channels]);
    let dy = B::float_reshape(B::float_cast(dy, FloatDType::F32), full.clone());

    let r_full = B::float_expand(parts.r.clone(), full.clone());
    let n = B::float_mul(parts.x.clone(), r_full.clone());
    let v = B::float_mul(
        n.clone(),
        B::float_expand(parts.gamma.clone(), full.clone()),
    );
    let dv = if activation == Activation::Silu {
        // silu'(v) = s (1 + v (1 - s)), s = sigmoid(v)
        let s = B::sigmoid(v.clone());
        let one_minus_s = B::float_add_scalar(B::float_neg(s.clone()), 1.0f64.into());
        let inner = B::float_add_scalar(B::float_mul(v, one_minus_s), 1.0f64.into());
        B::float_mul(dy, B::float_mul(s, inner))
    } else {
        dy
    };
    let dgamma = B::float_sum_dim(B::float_mul(dv.clone(), n.clone()), 0);
    let dn = B::float_mul(dv, B::float_expand(parts.gamma, full.clone()));
    let mut proj = B::float_mean_dim(B::float_mul(dn.clone(), n.clone()), 1);
    let floor = norm.floor;
    if floor > 0.0 {
        // 1 where the floor is not active, 0 where it is: (sign(mean_sq_eps - floor) + 1) / 2;
        // at the kink itself this picks the subgradient 1/2.
        let active = B::float_sign(B::float_add_scalar(
            parts.mean_sq_eps,
            (-(floor as f64)).into(),
        ));
        let active = B::float_mul_scalar(B::float_add_scalar(active, 1.0f64.into()), 0.5f64.into());
        proj = B::float_mul(proj, active);
    }
    let dx = B::float_mul(
        r_full,
        B::float_sub(dn, B::float_mul(n, B::float_expand(proj, full))),
    );
    let dx = B::float_reshape(B::float_cast(dx, x_dtype), x_shape);
    let dgamma = B::float_reshape(B::float_cast(dgamma, g_dtype), g_shape);
    (dx, dgamma)
}

/// Float dtypes the op accepts for `x` and `gamma`.
pub fn is_supported_float(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::F32 | DType::F16 | DType::BF16 | DType::F64 | DType::Flex32
    )
}

/// `into` with elements `offset..offset + numel(y)` (row-major) replaced by `y`'s, through a
/// slice assignment of the flattened tensors: the composed form of
/// [`RmsNormSiluBackend::rms_norm_silu_into`](crate::RmsNormSiluBackend::rms_norm_silu_into).
pub fn write_into<B: Backend>(
    into: FloatTensor<B>,
    offset: usize,
    y: FloatTensor<B>,
) -> FloatTensor<B> {
    let n = y.shape().num_elements();
    let shape = into.shape();
    let flat = B::float_reshape(into, Shape::new([shape.num_elements()]));
    let values = B::float_reshape(y, Shape::new([n]));
    let range = burn::tensor::Slice::new(offset as isize, Some((offset + n) as isize), 1);
    B::float_reshape(B::float_slice_assign(flat, &[range], values), shape)
}
