//! The norm in a convolution's input load: `silu(x * inv_rms[position] * gamma[channel])`
//! applied to the raw activation as the convolution stages it, so that the normalised tensor is
//! never written (the `wgmma` convolution's prologue, [`super::wgmma::NormPrologue`]).
//!
//! [`positions_inv_rms`] is the reduction that feeds it: it reads the channels-last activation
//! once and writes one f32 per position (4 bytes where the separate norm writes the whole
//! row), with the crate's norm semantics ([`NormParams`]: cuDNN's `rsqrt(mean + eps)` or Wan's
//! L2 clamp) and the same rescue of rows whose sum of squares overflows or underflows f32 (the
//! values prescaled by a power of two and summed again).

use crate::activation::{activate, inv_rms};
use crate::params::{Activation, NormParams};
use crate::problem::KernelError;
use crate::rescue::{prescale, small_eps};
use cubecl::ir::{AddressType, ElemType};
use cubecl::prelude::*;

/// `silu(v * r * gamma)` in f32, rounded to the element type: one 16-byte chunk of a position's
/// channels (`r` that position's inverse RMS; `v` zeros in the padding give zeros).
#[cube]
pub(crate) fn normed_chunk<E: Float, V: Size>(
    v: Vector<E, V>,
    r: f32,
    gamma: Vector<E, V>,
    #[comptime] fast_math: bool,
) -> Vector<E, V> {
    let y = Vector::<f32, V>::cast_from(v) * Vector::new(r) * Vector::<f32, V>::cast_from(gamma);
    Vector::<E, V>::cast_from(activate::<V>(y, Activation::Silu, fast_math))
}

/// `sum_k (s v_k)^2` in f32.
#[cube]
fn squares<E: Float, V: Size>(v: Vector<E, V>, s: f32) -> f32 {
    let f = Vector::<f32, V>::cast_from(v) * Vector::new(s);
    let mut sum = 0.0f32;
    #[unroll]
    for k in 0..V::value() {
        sum += f.extract(k) * f.extract(k);
    }
    sum
}

/// Extents and strides of the reduction's input: positions `[B, T, H, W]`, their strides in
/// 16-byte vectors, vectors a position.
#[derive(CubeLaunch, CubeType)]
pub struct PositionsGeometry {
    pub positions: usize,
    pub t: usize,
    pub h: usize,
    pub w: usize,
    pub x_b: usize,
    pub x_t: usize,
    pub x_h: usize,
    pub x_w: usize,
    pub vectors: usize,
}

/// One position a `lanes`-unit group: each lane sums the squares of every `lanes`-th vector,
/// the group's first lane adds the partial sums (in shared memory: no plane operations, so the
/// CPU runtime runs it too) and writes the inverse RMS.
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn positions_inv_rms<E: Float, V: Size>(
    x: &[Vector<E, V>],
    out: &mut [f32],
    g: PositionsGeometry,
    inv_channels: f32,
    eps: f32,
    floor: f32,
    #[comptime] lanes: usize,
    #[define(E)] _elem: ElemType,
) {
    let mut partial = Shared::<[f32]>::new_slice(comptime![256usize]);
    let unit = UNIT_POS as usize;
    let lane = unit % lanes;
    let p = CUBE_POS * (CUBE_DIM as usize / lanes) + unit / lanes;
    let active = p < g.positions;
    let mut base = 0usize;
    if active {
        let w = p % g.w;
        let h = (p / g.w) % g.h;
        let t = (p / (g.w * g.h)) % g.t;
        let b = p / (g.w * g.h * g.t);
        base = b * g.x_b + t * g.x_t + h * g.x_h + w * g.x_w;
    }
    // (Inactive groups read nothing: their count is zero.)
    let count = select(active, (g.vectors + lanes - 1 - lane) / lanes, 0usize);
    let mut sum = 0.0f32;
    for k in 0..count {
        sum += squares::<E, V>(x[base + lane + k * lanes], 1.0f32);
    }
    partial[unit] = sum;
    sync_cube();
    let mut total = 0.0f32;
    #[unroll]
    for l in 0..lanes {
        total += partial[unit - lane + l];
    }
    // A total that overflowed (or, with a tiny eps, underflowed): the values times a power of
    // two `s`, summed again; inv_rms(x) = s inv_rms(s x) with eps and floor scaled by s^2.
    let s = prescale(total, active, small_eps(eps, floor));
    sync_cube();
    if s != 1.0f32 {
        let mut again = 0.0f32;
        for k in 0..count {
            again += squares::<E, V>(x[base + lane + k * lanes], s);
        }
        partial[unit] = again;
    }
    sync_cube();
    if s != 1.0f32 {
        total = 0.0f32;
        #[unroll]
        for l in 0..lanes {
            total += partial[unit - lane + l];
        }
    }
    if active && lane == 0 {
        out[p] = inv_rms(total, inv_channels, (eps * s) * s, (floor * s) * s) * s;
    }
}

/// Writes the inverse RMS of every position of `x` (channels-last `[B, T, H, W, C]`, channels
/// contiguous, 2-byte elements, `C` a multiple of 8) into `out`, dense f32 `[B, T, H, W]`.
///
/// # Errors
/// Strides or channel counts the 16-byte loads cannot take, or an element type other than bf16
/// / f16, in words.
pub fn launch_positions_inv_rms(
    client: &Client,
    x: TensorBinding,
    out: TensorBinding,
    elem: ElemType,
    norm: NormParams,
) -> Result<(), KernelError> {
    let bad = |why: String| Err(KernelError::InvalidProblem(format!("inv_rms: {why}")));
    if elem.size() != 2 {
        return bad(format!("bf16 or f16 input, got {elem:?}"));
    }
    let (dims, xs) = (x.shape.to_vec(), x.strides.to_vec());
    if dims.len() != 5
        || xs[4] != 1
        || !dims[4].is_multiple_of(8)
        || xs[..4].iter().any(|s| s % 8 != 0)
    {
        return bad(format!(
            "a 5-D channels-last input with contiguous channels, C and the strides multiples of \
             8, got shape {dims:?} strides {xs:?}"
        ));
    }
    let positions: usize = dims[..4].iter().product();
    if out.shape.iter().product::<usize>() != positions {
        return bad(format!(
            "{positions} outputs, got shape {:?}",
            out.shape.to_vec()
        ));
    }
    let hw = &client.properties().hardware;
    let lanes = if hw.plane_size_max >= 32 { 8 } else { 1 };
    let units = (hw.max_units_per_cube as usize).clamp(1, 256) / lanes * lanes;
    let per_cube = units / lanes;
    let x_len = (super::span(&dims[..4], &xs) + dims[4]) / 8;
    unsafe {
        positions_inv_rms::launch_unchecked(
            client,
            CubeCount::new_1d(positions.div_ceil(per_cube) as u32),
            CubeDim::new_1d(units as u32),
            AddressType::from_len((x_len * 8).max(positions)),
            8,
            BufferArg::from_raw_parts_binding(x.handle, x_len),
            BufferArg::from_raw_parts_binding(out.handle, positions),
            PositionsGeometryLaunch::new(
                positions,
                dims[1],
                dims[2],
                dims[3],
                xs[0] / 8,
                xs[1] / 8,
                xs[2] / 8,
                xs[3] / 8,
                dims[4] / 8,
            ),
            (1.0f64 / dims[4] as f64) as f32,
            norm.eps,
            norm.floor,
            lanes,
            elem,
        );
    }
    Ok(())
}
