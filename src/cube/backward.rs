//! The fused backward on CubeCL backends: the row kernels over the last axis, other axes through a permuted copy.

use super::*;

/// The fused backward: over the last axis the row kernels (`kernels::backward`) on dense rows
/// (other layouts are copied); over another axis see [`backward_dim`]; composed Burn ops for no
/// rows, other layouts of another axis, or rows too wide for the kernels' register caches.
pub fn backward(
    x: CubeTensor,
    gamma: CubeTensor,
    dy: CubeTensor,
    dim: usize,
    norm: NormParams,
    activation: Activation,
) -> (CubeTensor, CubeTensor) {
    let shape = x.shape();
    let rank = shape.num_dims();
    let channels = shape[rank - 1];
    let rows = shape.num_elements().checked_div(channels).unwrap_or(0);
    let composed = |x, gamma, dy| {
        crate::composed::backward_dim::<CubeBackend>(x, gamma, dy, dim, norm, activation)
    };
    if rows == 0 {
        return composed(x, gamma, dy);
    }
    if dim + 1 != rank {
        return backward_dim(&x, &gamma, &dy, dim, norm, activation)
            .unwrap_or_else(|| composed(x, gamma, dy));
    }
    let dense = |t: CubeTensor| {
        let t = if row_pitch(t.meta.shape(), t.meta.strides()) == Some(channels)
            && !t.meta.is_tiled()
        {
            t
        } else {
            into_contiguous(t)
        };
        (row_pitch(t.meta.shape(), t.meta.strides()) == Some(channels)).then_some(t)
    };
    let (Some(xd), Some(dyd)) = (dense(x.clone()), dense(dy.clone())) else {
        return composed(x, gamma, dy);
    };
    // Rows too wide for the register cache on this device: composed ops.
    rows_backward(&xd, &gamma, &dyd, norm, activation).unwrap_or_else(|| composed(x, gamma, dy))
}

/// The row backward kernels on `x` and `dy` whose last axis is dense rows (`dx` in the same
/// logical shape, dense); `None` when the rows are too wide for the register cache.
pub(crate) fn rows_backward(
    x: &CubeTensor,
    gamma: &CubeTensor,
    dy: &CubeTensor,
    norm: NormParams,
    activation: Activation,
) -> Option<(CubeTensor, CubeTensor)> {
    let shape = x.shape();
    let channels = shape[shape.num_dims() - 1];
    let rows = shape.num_elements() / channels;
    let (operands, dx, dgamma) = gradient_operands(x, gamma, dy);
    launch_backward(&x.client, operands, rows, channels, norm, activation)
        .ok()
        .map(|()| (dx, dgamma))
}

/// The backward over an axis other than the last, without moving data where the layout
/// allows: channels-last memory (the axis contiguous, the other axes dense rows, in both `x` and
/// `dy`) goes to the row backward with the output in the same order; dense channels-first
/// tensors to the channels backward kernel; `None` for any other layout or a C too wide for
/// the kernels' register caches.
pub(crate) fn backward_dim(
    x: &CubeTensor,
    gamma: &CubeTensor,
    dy: &CubeTensor,
    dim: usize,
    norm: NormParams,
    activation: Activation,
) -> Option<(CubeTensor, CubeTensor)> {
    let shape = x.shape();
    let rank = shape.num_dims();
    let channels = shape[dim];
    let moved = DimLast::new(rank, dim);
    let dense_rows = |t: &CubeTensor| {
        moved
            .rows(t)
            .filter(|r| row_pitch(r.meta.shape(), r.meta.strides()) == Some(channels))
    };
    if let (Some(xr), Some(dyr)) = (dense_rows(x), dense_rows(dy)) {
        let (dx, dgamma) = rows_backward(&xr, gamma, &dyr, norm, activation)?;
        return Some((moved.restore(dx), dgamma));
    }
    let dense = |t: &CubeTensor| t.is_contiguous() && !t.meta.is_tiled();
    if !(dense(x) && dense(dy)) {
        return None;
    }
    let (operands, dx, dgamma) = gradient_operands(x, gamma, dy);
    let batches: usize = (0..dim).map(|d| shape[d]).product();
    let positions: usize = (dim + 1..rank).map(|d| shape[d]).product();
    launch_channels_backward(
        &x.client,
        operands,
        ChannelsProblem::dense(batches, channels, positions),
        norm,
        activation,
        None,
    )
    .ok()
    .map(|()| (dx, dgamma))
}

/// The backward kernels' view of `x`, `gamma` (made contiguous), `dy` and of new dense `dx` (in
/// `x`'s shape) and `dgamma` (in `gamma`'s), which it returns as well.
fn gradient_operands(
    x: &CubeTensor,
    gamma: &CubeTensor,
    dy: &CubeTensor,
) -> (BackwardOperands, CubeTensor, CubeTensor) {
    let x_type = elem_type(x.dtype, "rms_norm_silu: `x`");
    let gamma_type = elem_type(gamma.dtype, "rms_norm_silu: `gamma`");
    let gd = into_contiguous(gamma.clone());
    let dx = empty_device_contiguous_dtype(x.client.clone(), x.device.clone(), x.shape(), x.dtype);
    let dgamma = empty_device_contiguous_dtype(
        gamma.client.clone(),
        gamma.device.clone(),
        gamma.shape(),
        gamma.dtype,
    );
    let operands = BackwardOperands {
        x: x.handle.clone(),
        gamma: gd.handle.clone(),
        dy: dy.handle.clone(),
        dx: dx.handle.clone(),
        dgamma: dgamma.handle.clone(),
        x_type,
        gamma_type,
    };
    (operands, dx, dgamma)
}
