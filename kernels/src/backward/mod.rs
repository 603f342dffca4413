//! The fused backward over the last axis: `dx` in one pass over each row (x and dy read once,
//! held in registers), `dgamma` reduced deterministically in two stages.
//!
//! With `xhat = x r`, `u = xhat gamma`, `y = act(u)` and `du = dy act'(u)`:
//! - `dgamma_c = sum_rows du_c xhat_c`;
//! - `dx = r (du gamma - xhat mean_C(du gamma xhat))` while `ms + eps >= floor`, and
//!   `dx = r du gamma` where the clamp is active (`r` is then a constant).
//!
//! Each unit accumulates the `dgamma` contributions of its columns over the rows it visits in
//! registers; the unit rows of a cube add theirs in shared memory and write one row of a
//! `[cubes, C]` f32 scratch buffer; a second kernel (one cube per column vector) sums that
//! buffer's rows in a fixed order. No float atomics: the result depends only
//! on the device, the shape and the launch configuration, never on scheduling.
//!
//! The mapping is the forward row kernel's: `lanes_per_row` units per row (plane shuffles or a
//! shared-memory tree), `rows_per_cube` rows per cube, a persistent grid-stride loop. Rows are
//! held in registers (`vectors_per_lane` comptime), so very wide rows are refused and the
//! caller falls back to composed ops. Unlike the forward, sums of squares are not rescued
//! when they overflow fp32 (|x| above ~1e19).

use cubecl::ir::{AddressType, ElemType};
use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::activation::{LOG2_E, ptx_ex2_approx, ptx_rcp_approx};
use crate::device::{has_ptx_math, is_gpu, reduction_plane_width, threads_per_sm};
use crate::knobs::LaneReduce;
use crate::lanes::{horizontal_sum, tree_sum};
use crate::params::{Activation, NormParams};
use crate::problem::KernelError;
use crate::row_io::{RowLayout, stage_words};

mod knobs;
mod launch;

pub use knobs::{BackwardKnobs, GpuBackwardShape};
pub use launch::{BackwardOperands, launch_backward, launch_backward_with, launch_reduce_dgamma};

/// The comptime shape of a backward launch.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct BackwardConfig {
    pub lanes_per_row: u32,
    pub rows_per_cube: u32,
    pub vectors_per_lane: usize,
    pub lane_reduce: LaneReduce,
    pub activation: Activation,
    /// PTX sigmoid in SiLU' (CUDA only; see [`BackwardKnobs`]).
    pub fast_math: bool,
    /// The next row group's x and dy in flight while this one is computed (see
    /// [`BackwardKnobs::prefetch`]).
    pub prefetch: bool,
    /// Units per plane for the row sums of rows wider than a plane (the device's plane width
    /// on a GPU, 1 where there are no plane operations: the shared-memory tree then).
    pub plane_width: u32,
}

/// Sum of `v` over the lanes of a row; every lane gets it (the same bits). All units of the
/// cube must call it (uniformly), as it may use cube barriers. Rows wider than a plane: on a
/// GPU each plane adds its lanes by a shuffle butterfly and, after one barrier, every lane adds
/// its row's plane sums in plane order (two barriers, as the forward's `lane_sums`); without
/// plane operations a shared-memory tree (`log2(lanes) + 2` barriers).
#[allow(clippy::manual_is_multiple_of)] // `is_multiple_of` is not a cube operation
#[cube]
fn row_sum(v: f32, shared: &mut Shared<[f32]>, #[comptime] cfg: BackwardConfig) -> f32 {
    let lanes = cfg.lanes_per_row;
    let steps = comptime![lanes.trailing_zeros()];
    let mut total = v;
    if comptime![lanes > 1] {
        match comptime![cfg.lane_reduce] {
            LaneReduce::Plane => {
                total = butterfly_sum(total, lanes);
            }
            LaneReduce::Shared if comptime![cfg.plane_width > 1 && lanes > cfg.plane_width] => {
                let width = cfg.plane_width;
                let width_usize = comptime![width as usize];
                let planes = comptime![(lanes / width) as usize];
                total = butterfly_sum(total, width);
                let lane = UNIT_POS_X as usize;
                let first = UNIT_POS_Y as usize * planes;
                if lane % width_usize == 0 {
                    shared[first + lane / width_usize] = total;
                }
                sync_cube();
                total = 0.0f32;
                #[unroll]
                for q in 0..planes {
                    total += shared[first + q];
                }
                // Every lane has read its row's plane sums before the next sum overwrites them.
                sync_cube();
            }
            LaneReduce::Shared => {
                let lanes_usize = comptime![lanes as usize];
                let lane = UNIT_POS_X as usize;
                let first = UNIT_POS_Y as usize * lanes_usize;
                shared[first + lane] = v;
                sync_cube();
                #[unroll]
                for k in 0..steps {
                    let stride = ((lanes >> 1) >> k) as usize;
                    if lane < stride {
                        let other = shared[first + lane + stride];
                        shared[first + lane] += other;
                    }
                    sync_cube();
                }
                total = shared[first];
                sync_cube();
            }
        }
    }
    total
}

/// Sum of `v` over aligned groups of `width` units of a plane (a power of two, at most the
/// plane): a shuffle butterfly, so every unit of a group gets the same bits.
#[cube]
fn butterfly_sum(v: f32, #[comptime] width: u32) -> f32 {
    let mut total = v;
    #[unroll]
    for k in 0..comptime![width.trailing_zeros()] {
        let mask = (width >> 1) >> k;
        total += plane_shuffle_xor(total, mask);
    }
    total
}

/// `dy * act'(u)`: SiLU' = `s (1 + u (1 - s))` with `s = sigmoid(u)`; with `fast_math` (CUDA
/// only) the sigmoid is PTX `rcp.approx(1 + ex2.approx(-u log2 e))`, as the forward's.
#[cube]
pub(crate) fn activation_grad<N: Size>(
    dy: Vector<f32, N>,
    u: Vector<f32, N>,
    #[comptime] activation: Activation,
    #[comptime] fast_math: bool,
) -> Vector<f32, N> {
    let mut du = dy;
    if comptime![activation == Activation::Silu] {
        let one = Vector::<f32, N>::new(1.0f32);
        let mut s = Vector::<f32, N>::new(0.0f32);
        if comptime![fast_math] {
            #[unroll]
            for k in 0..N::value() {
                let uk = u.extract(k);
                s.insert(k, ptx_rcp_approx(1.0f32 + ptx_ex2_approx(uk * -LOG2_E)));
            }
        } else {
            s = one / (one + Vector::exp(Vector::<f32, N>::new(0.0f32) - u));
        }
        du = dy * s * (one + u * (one - s));
    }
    du
}

/// The backward row kernel: writes `dx` and one scratch column of `dgamma` partial sums per
/// cube, stored column-major (`partial[j * CUBE_COUNT + CUBE_POS]`, see
/// [`rms_norm_reduce_dgamma`](fn@rms_norm_reduce_dgamma)).
#[allow(clippy::too_many_arguments)]
// `if comptime![..] { if runtime { .. } }` stays nested (expansion time, then run time).
#[allow(clippy::collapsible_if)]
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn rms_norm_backward_rows<E: Float, G: Float, N: Size, W: Size>(
    x: &[Vector<E, N>],
    x_words: &[Vector<u32, W>],
    gamma: &[Vector<G, N>],
    dy: &[Vector<E, N>],
    dy_words: &[Vector<u32, W>],
    dx: &mut [Vector<E, N>],
    partial: &mut [Vector<f32, N>],
    rows: usize,
    vecs_per_row: usize,
    inv_channels: f32,
    eps: f32,
    floor: f32,
    #[comptime] cfg: BackwardConfig,
    #[define(E, G)] _types: [ElemType; 2],
) {
    let lanes = comptime![cfg.lanes_per_row as usize];
    let rows_per_cube = comptime![cfg.rows_per_cube as usize];
    let vpl = comptime![cfg.vectors_per_lane];
    let shared_len = comptime![match cfg.lane_reduce {
        LaneReduce::Shared => (cfg.lanes_per_row * cfg.rows_per_cube) as usize,
        LaneReduce::Plane => 1usize,
    }];
    let mut shared = Shared::<[f32]>::new_slice(shared_len);
    let lane = UNIT_POS_X as usize;
    let y = UNIT_POS_Y as usize;

    let mut g = Array::<Vector<f32, N>>::new(vpl);
    let mut dg = Array::<Vector<f32, N>>::new(vpl);
    let mut xs = Array::<Vector<f32, N>>::new(vpl);
    let mut dus = Array::<Vector<f32, N>>::new(vpl);
    #[unroll]
    for i in 0..vpl {
        let j = lane + i * lanes;
        g[i] = Vector::<f32, N>::new(0.0f32);
        dg[i] = Vector::<f32, N>::new(0.0f32);
        if comptime![!cfg.prefetch] {
            // Unconditional loads (a vector past the row reads the last one, then 0: every
            // row's sums run over all `vpl` vectors), all in flight together: under
            // `if j < vecs_per_row` each waited for the one before. (With prefetch gamma is
            // loaded after the first group's x and dy, below.)
            let v =
                Vector::<f32, N>::cast_from(gamma[select(j < vecs_per_row, j, vecs_per_row - 1)]);
            if j < vecs_per_row {
                g[i] = v;
            }
        }
    }

    #[allow(clippy::manual_div_ceil)]
    let groups = (rows + rows_per_cube - 1) / rows_per_cube;
    let mut group = CUBE_POS;
    // Prefetch (as in the forward's `load_rows`): the next group's x and dy arrive as 32-bit
    // words while this group is computed, and wait in this unit's own shared-memory slots.
    let units = comptime![lanes * rows_per_cube];
    let unit = UNIT_POS as usize;
    let words_len = comptime![if cfg.prefetch { vpl } else { 1 }];
    let mut next_x = Array::<Vector<u32, W>>::new(words_len);
    let mut next_dy = Array::<Vector<u32, W>>::new(words_len);
    let mut staged = Shared::<[Vector<u32, W>]>::new_slice(comptime![if cfg.prefetch {
        2 * vpl * units
    } else {
        1
    }]);
    if comptime![cfg.prefetch] {
        if group < groups {
            load_row_words::<u32, W>(
                x_words,
                dy_words,
                &mut next_x,
                &mut next_dy,
                group * rows_per_cube + y,
                RowLayout {
                    rows,
                    row_stride: vecs_per_row,
                    vecs_per_row,
                },
                cfg,
            );
            // Gamma after the first group's loads: loaded (and converted) before them, as it
            // was, it held those loads back by one memory round trip (SASS), most of a small
            // shape's time per cube.
            #[unroll]
            for i in 0..vpl {
                let j = lane + i * lanes;
                if j < vecs_per_row {
                    g[i] = Vector::<f32, N>::cast_from(gamma[j]);
                }
            }
            stage_words::<W>(&next_x, &mut staged, 0usize, vpl, units);
            stage_words::<W>(&next_dy, &mut staged, vpl, vpl, units);
        }
    }
    while group < groups {
        let row = group * rows_per_cube + y;
        let active = row < rows;
        let base = row * vecs_per_row;
        let next = group + CUBE_COUNT;
        if comptime![cfg.prefetch] {
            if next < groups {
                load_row_words::<u32, W>(
                    x_words,
                    dy_words,
                    &mut next_x,
                    &mut next_dy,
                    next * rows_per_cube + y,
                    RowLayout {
                        rows,
                        row_stride: vecs_per_row,
                        vecs_per_row,
                    },
                    cfg,
                );
            }
        }
        // Without prefetch, every load of the row first (as the prefetch's): loaded inside
        // `if active && j < vecs_per_row` each pair waited for the one before.
        let raw_len = comptime![if cfg.prefetch { 1 } else { vpl }];
        let mut x_raw = Array::<Vector<E, N>>::new(raw_len);
        let mut dy_raw = Array::<Vector<E, N>>::new(raw_len);
        if comptime![!cfg.prefetch] {
            load_row_words::<E, N>(
                x,
                dy,
                &mut x_raw,
                &mut dy_raw,
                row,
                RowLayout {
                    rows,
                    row_stride: vecs_per_row,
                    vecs_per_row,
                },
                cfg,
            );
        }
        let mut acc = Vector::<f32, N>::new(0.0f32);
        #[unroll]
        for i in 0..vpl {
            let j = lane + i * lanes;
            xs[i] = Vector::<f32, N>::new(0.0f32);
            dus[i] = Vector::<f32, N>::new(0.0f32);
            if active && j < vecs_per_row {
                if comptime![cfg.prefetch] {
                    xs[i] = Vector::<f32, N>::cast_from(Vector::<E, N>::reinterpret(
                        staged[i * units + unit],
                    ));
                    dus[i] = Vector::<f32, N>::cast_from(Vector::<E, N>::reinterpret(
                        staged[(vpl + i) * units + unit],
                    ));
                } else {
                    xs[i] = Vector::<f32, N>::cast_from(x_raw[i]);
                    dus[i] = Vector::<f32, N>::cast_from(dy_raw[i]);
                }
                acc += xs[i] * xs[i];
            }
        }
        let sum_sq = row_sum(horizontal_sum::<N>(acc), &mut shared, cfg);
        let d = sum_sq * inv_channels + eps;
        let clamped = d < floor;
        let r = select(clamped, floor, d).inverse_sqrt();
        let rv = Vector::<f32, N>::new(r);

        // du = dy act'(u), and the row's mean of (du gamma xhat).
        let mut acc2 = Vector::<f32, N>::new(0.0f32);
        #[unroll]
        for i in 0..vpl {
            let xhat = xs[i] * rv;
            let du = activation_grad::<N>(dus[i], xhat * g[i], cfg.activation, cfg.fast_math);
            dus[i] = du;
            acc2 += du * g[i] * xhat;
        }
        let dot = row_sum(horizontal_sum::<N>(acc2), &mut shared, cfg);
        let mean = Vector::<f32, N>::new(select(clamped, 0.0f32, dot * inv_channels));

        #[unroll]
        for i in 0..vpl {
            let j = lane + i * lanes;
            if active && j < vecs_per_row {
                let xhat = xs[i] * rv;
                dx[base + j] = Vector::<E, N>::cast_from((dus[i] * g[i] - xhat * mean) * rv);
                dg[i] += dus[i] * xhat;
            }
        }
        if comptime![cfg.prefetch] {
            if next < groups {
                stage_words::<W>(&next_x, &mut staged, 0usize, vpl, units);
                stage_words::<W>(&next_dy, &mut staged, vpl, vpl, units);
            }
        }
        group = next;
    }

    // The cube's unit rows add their dgamma partials in shared memory (a fixed tree over the
    // rows, `rows_per_cube` a power of two), so the scratch buffer holds one partial per cube
    // and column.
    let mut red = Shared::<[Vector<f32, N>]>::new_slice(comptime![lanes * rows_per_cube]);
    #[unroll]
    for i in 0..vpl {
        let j = lane + i * lanes;
        let total = tree_sum::<N>(dg[i], &mut red, y * lanes + lane, y, lanes, rows_per_cube);
        if y == 0 && j < vecs_per_row {
            partial[j * CUBE_COUNT + CUBE_POS] = total;
        }
    }
}

/// This lane's vectors of row `row` of `x` and `dy` (dense rows of `vecs_per_row` vectors): as
/// 32-bit words for the prefetch, as they are without it. A row past the end or a column past
/// the row loads the last one instead (the readers mask those slots), so the loads carry no
/// predicate and are all in flight together.
#[cube]
fn load_row_words<T: Scalar, W: Size>(
    x_words: &[Vector<T, W>],
    dy_words: &[Vector<T, W>],
    next_x: &mut Array<Vector<T, W>>,
    next_dy: &mut Array<Vector<T, W>>,
    row: usize,
    layout: RowLayout,
    #[comptime] cfg: BackwardConfig,
) {
    let (rows, row_stride, vecs_per_row) = (layout.rows, layout.row_stride, layout.vecs_per_row);
    let lanes = comptime![cfg.lanes_per_row as usize];
    let base = select(row < rows, row, rows - 1) * row_stride;
    #[unroll]
    for i in 0..comptime![cfg.vectors_per_lane] {
        let j = UNIT_POS_X as usize + i * lanes;
        let j = select(j < vecs_per_row, j, vecs_per_row - 1);
        next_x[i] = x_words[base + j];
        next_dy[i] = dy_words[base + j];
    }
}

/// `dgamma[j] = sum_p partial[j * parts + p]`: one cube per vector column `j`; unit `t` adds
/// parts `t, t + units, ...` (four running sums, taking the parts in turn; the launch gives a
/// GPU enough units that there are at most about four each). The partials are column-major so
/// that a plane's loads are consecutive vectors (four 32-byte sectors per plane of vectors of
/// 4 f32, where a row-major layout put every unit's vector in its own sector: on the H200 the
/// kernel's SMs then spent half their stalls on those loads, 2026-12-02). Then the units' sums
/// meet in a fixed order: on a GPU (`plane` > 1) a shuffle butterfly per plane and one barrier,
/// after which the first unit adds the planes' sums in order (a shared-memory tree took
/// `log2(units)` barriers, a visible part of this kernel's few microseconds); without plane
/// operations a shared-memory tree. The result does not depend on scheduling.
#[allow(clippy::manual_is_multiple_of)] // `is_multiple_of` is not a cube operation
#[cube(launch_unchecked)]
pub fn rms_norm_reduce_dgamma<G: Float, N: Size>(
    partial: &[Vector<f32, N>],
    dgamma: &mut [Vector<G, N>],
    parts: usize,
    #[comptime] units: u32,
    #[comptime] plane: u32,
    #[define(G)] _gamma_type: ElemType,
) {
    let planes = comptime![if plane > 1 && units >= plane {
        (units / plane) as usize
    } else {
        units as usize
    }];
    let mut shared = Shared::<[Vector<f32, N>]>::new_slice(planes);
    let j = CUBE_POS;
    let column = j * parts;
    let t = UNIT_POS as usize;
    // Four independent sums (their loads in flight together), added in a fixed order.
    let step = comptime![units as usize];
    let mut acc = Array::<Vector<f32, N>>::new(4usize);
    #[unroll]
    for k in 0..4 {
        acc[k] = Vector::<f32, N>::new(0.0f32);
    }
    let mut p = t;
    while p + 3 * step < parts {
        #[unroll]
        for k in 0..4 {
            acc[k] += partial[column + p + k * step];
        }
        p += 4 * step;
    }
    // The last (at most three) parts of this unit: predicated but unrolled, so their loads are
    // in flight together (a loop here waited for each load in turn: the whole reduction when
    // there are fewer than four parts per unit, as at T = 24960).
    #[unroll]
    for k in 0..3 {
        let q = p + k * step;
        if q < parts {
            acc[k] += partial[column + q];
        }
    }
    let mine = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    if comptime![plane > 1 && units >= plane] {
        let mut total = mine;
        #[unroll]
        for k in 0..comptime![plane.trailing_zeros()] {
            total += plane_shuffle_xor(total, (plane >> 1) >> k);
        }
        let width = comptime![plane as usize];
        if t % width == 0 {
            shared[t / width] = total;
        }
        sync_cube();
        if t == 0 {
            let mut sum = shared[0];
            #[unroll]
            for w in 1..planes {
                sum += shared[w];
            }
            dgamma[j] = Vector::<G, N>::cast_from(sum);
        }
    } else {
        shared[t] = mine;
        sync_cube();
        let steps = comptime![units.trailing_zeros()];
        #[unroll]
        for k in 0..steps {
            let stride = ((units >> 1) >> k) as usize;
            if t < stride {
                let other = shared[t + stride];
                shared[t] += other;
            }
            sync_cube();
        }
        if t == 0 {
            dgamma[j] = Vector::<G, N>::cast_from(shared[0]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::GpuBackwardShape;

    const H200_SMS: usize = 132;

    /// The defaults are the measured winners (docs/performance.md), written as
    /// `c<cap>.u<units>[.s<cubes per SM>][.v<vector>]`.
    #[test]
    fn gpu_defaults_are_the_measured_table() {
        let label = |c, t| {
            let s = GpuBackwardShape::for_shape(c, t, H200_SMS);
            let mut label = format!("c{}.u{}", s.max_vectors_per_lane, s.units_per_cube);
            if let Some(n) = s.cubes_per_sm {
                label += &format!(".s{n}");
            }
            if s.max_vector > 0 {
                label += &format!(".v{}", s.max_vector);
            }
            label
        };
        let table = [
            (96, ["c1.u256.s2", "c1.u256.s3", "c1.u256.s4", "c2.u128.s4"]),
            (
                192,
                ["c1.u256.s2", "c4.u128.s6.v4", "c1.u256.s4", "c2.u128.s4"],
            ),
            (
                384,
                ["c4.u128.s4.v4", "c4.u128.s6.v4", "c4.u128.s2", "c4.u128"],
            ),
            (
                1024,
                ["c1.u128.s8", "c1.u128.s8", "c2.u128.s4", "c2.u128.s4"],
            ),
        ];
        for (c, want) in table {
            for (t, want) in [6240, 24960, 99840, 399360].into_iter().zip(want) {
                assert_eq!(label(c, t), want, "C = {c}, T = {t}");
            }
        }
        // The boundaries in rows per SM (just below T = 12480, 65536 and 200000 on the H200's
        // SMs), half the rows on a device with half as many.
        let (few, many, huge) = (94 * H200_SMS, 496 * H200_SMS, 1515 * H200_SMS);
        for (t, c, want) in [
            (few - 1, 96, "c1.u256.s2"),
            (few, 96, "c1.u256.s3"),
            (many - 1, 96, "c1.u256.s3"),
            (many, 96, "c1.u256.s4"),
            (huge - 1, 384, "c4.u128.s2"),
            (huge, 384, "c4.u128"),
        ] {
            assert_eq!(label(c, t), want, "C = {c}, T = {t}");
            let s = GpuBackwardShape::for_shape(c, t / 2, H200_SMS / 2);
            assert_eq!(
                s,
                GpuBackwardShape::for_shape(c, t, H200_SMS),
                "C = {c}, T = {t} on 66 SMs"
            );
        }
    }
}
