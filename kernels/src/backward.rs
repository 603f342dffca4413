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
use crate::problem::ForwardError;
use crate::row_io::stage_words;

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
                rows,
                vecs_per_row,
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
                    rows,
                    vecs_per_row,
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
            load_row_words::<E, N>(x, dy, &mut x_raw, &mut dy_raw, row, rows, vecs_per_row, cfg);
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
#[allow(clippy::too_many_arguments)]
#[cube]
fn load_row_words<T: Scalar, W: Size>(
    x_words: &[Vector<T, W>],
    dy_words: &[Vector<T, W>],
    next_x: &mut Array<Vector<T, W>>,
    next_dy: &mut Array<Vector<T, W>>,
    row: usize,
    rows: usize,
    vecs_per_row: usize,
    #[comptime] cfg: BackwardConfig,
) {
    let lanes = comptime![cfg.lanes_per_row as usize];
    let base = select(row < rows, row, rows - 1) * vecs_per_row;
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

/// The launch choices of the row backward, which the bench sweeps
/// (`cargo bench --bench rmsnorm -- backward`). Each lane keeps four arrays of
/// `max_vectors_per_lane` vectors in registers (x, dy, gamma and its dgamma sums, in f32), so
/// the cap trades registers (occupancy) against lanes per row (reduction steps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardKnobs {
    /// The sigmoid in SiLU' through PTX `ex2.approx` + `rcp.approx` (CUDA only).
    pub fast_math: bool,
    /// Most vectors of a row per lane; lanes per row are the next power of two that fits C.
    /// Raised for rows wider than a cube's lanes allow, up to the register cache's limit (8
    /// vectors per lane on a GPU, 64 on the CPU runtime); wider rows are refused.
    pub max_vectors_per_lane: usize,
    /// Units per cube on a GPU (a power of two); the CPU runtime takes its maximum.
    pub units_per_cube: usize,
    /// The next row group's x and dy loaded while the current one is computed, staged through
    /// shared memory as 32-bit words (the forward's prefetch). On by default on a GPU
    /// ([`Self::for_shape`]); needs vectors of whole words and the shared memory to stage them.
    pub prefetch: bool,
    /// Cubes of the persistent grid per SM: `None` as many as the SM's resident threads hold (`device::threads_per_sm`) (at
    /// most 16), `Some(0)` one cube per row group (no persistent grid), `Some(n)` n per SM (at
    /// most what `None` gives).
    /// Fewer cubes mean fewer dgamma partials; a grid larger than what is resident at once
    /// leaves a tail. Without an SM count (the CPU runtime) at most 64 cubes unless `Some(0)`.
    /// Written `.s<n>`.
    pub cubes_per_sm: Option<u32>,
    /// At most this many elements per vector (a power of two; 0: the widest the layout
    /// allows). Narrower vectors fill the lanes of rows whose vector count is not a power of
    /// two: C = 384 in bf16 is 48 vectors of 8 (32 lanes x 2, a quarter of the slots idle) or
    /// 96 of 4 (32 lanes x 3, none idle). Written `.v<n>` when set.
    pub max_vector: usize,
}

impl BackwardKnobs {
    /// The device defaults: the PTX SiLU' where the device has it (13-25% faster on the H200,
    /// 2026-11-30), one vector per lane and 256 units per cube on a GPU; 64 vectors per lane on
    /// the CPU runtime, where a row has two units at most. [`Self::for_shape`] refines them.
    pub fn for_device(client: &Client) -> Self {
        let gpu = is_gpu(client);
        Self {
            fast_math: has_ptx_math(client),
            max_vectors_per_lane: if gpu { 1 } else { 64 },
            units_per_cube: 256,
            prefetch: false,
            cubes_per_sm: None,
            max_vector: 0,
        }
    }

    /// The defaults for a `[rows, channels]` backward: on a GPU the winners of the `backward`
    /// bench's sweep on the H200 (C = 96, 192, 384, 1024 x T = 6240, 24960, 99840, 399360):
    /// prefetch everywhere (dropped by [`launch_backward`] where it cannot run); one vector per
    /// lane and 256 units per cube for rows up to C = 256 (3 cubes per SM from T = 12480, their
    /// prefetch kernel taking 72-74 registers, 2 below; 4 from T = 65536), 128 units above.
    /// C = 257..512: 2 vectors per lane on 4 cubes per SM below T = 65536, 4 vectors per lane
    /// above (2 cubes per SM below T = 200000, then the full grid). Wider rows: one vector per
    /// lane on 8 cubes per SM below T = 65536, 2 vectors per lane on 4 cubes per SM above.
    /// C = 129..256 at T = 12480..65536: 4 vectors per lane on 3 cubes per SM. From
    /// T = 200000 (except C = 257..512) 2 vectors per lane on 4 cubes per SM.
    ///
    /// Vectors of 4 elements (`max_vector`), 4 per lane, for C = 257..512 below T = 65536 (4 cubes
    /// per SM below T = 12480, else 6) and C = 129..256 at T = 12480..65536 (6 per SM): C = 384
    /// is then 32 lanes x 3 vectors of 4 (no idle slot; 94 registers) rather than 32 x 2 of 8.
    ///
    /// Changes measured on 2026-12-01 (the dgamma kernel then loading its partial
    /// rows in one round): C = 1024 T = 6240 22.2 -> 20.4 us and T = 24960 54.4 -> 49.9 us (8
    /// cubes per SM), T = 399360 636 -> 616 us; C = 96 T = 399360 78.7 -> 75.0 us (two calls
    /// each); vectors of 4: C = 384 T = 6240 14.6 -> 12.9 us, T = 24960 27.8 -> 25.0 us, C = 192
    /// T = 24960 18.2 -> 16.8 us. What was tried: docs/performance.md.
    pub fn for_shape(client: &Client, channels: usize, rows: usize) -> Self {
        let knobs = Self::for_device(client);
        if !is_gpu(client) {
            return knobs;
        }
        let shape = GpuBackwardShape::for_shape(channels, rows);
        Self {
            prefetch: true,
            max_vectors_per_lane: shape.max_vectors_per_lane,
            units_per_cube: shape.units_per_cube,
            cubes_per_sm: shape.cubes_per_sm,
            max_vector: shape.max_vector,
            ..knobs
        }
    }
}

/// The shape part of [`BackwardKnobs::for_shape`] on a GPU, a pure function of C and T (so that
/// the table it encodes is unit-tested without a GPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuBackwardShape {
    pub max_vectors_per_lane: usize,
    pub units_per_cube: usize,
    pub cubes_per_sm: Option<u32>,
    pub max_vector: usize,
}

impl GpuBackwardShape {
    /// See [`BackwardKnobs::for_shape`] for the measurements behind each case.
    pub fn for_shape(channels: usize, rows: usize) -> Self {
        let shape = |cap, units, cubes_per_sm, max_vector| Self {
            max_vectors_per_lane: cap,
            units_per_cube: units,
            cubes_per_sm,
            max_vector,
        };
        let mid_width = channels > 256 && channels <= 512;
        if mid_width && rows < 65_536 {
            // Vectors of 4: C = 384 is 32 lanes x 3 (of 8: 32 x 2, a quarter idle).
            shape(4, 128, Some(if rows < 12_480 { 4 } else { 6 }), 4)
        } else if mid_width {
            shape(4, 128, (rows < 200_000).then_some(2), 0)
        } else if rows >= 200_000 || (channels > 512 && rows >= 65_536) {
            shape(2, 128, Some(4), 0)
        } else if channels > 512 {
            shape(1, 128, Some(8), 0)
        } else if channels > 128 && (12_480..65_536).contains(&rows) {
            shape(4, 128, Some(6), 4)
        } else {
            // 256-unit cubes of one vector per lane: 2 per SM below T = 12480, 3 below 65536.
            let per_sm = if rows < 12_480 {
                2
            } else if rows < 65_536 {
                3
            } else {
                4
            };
            shape(1, 256, Some(per_sm), 0)
        }
    }
}

impl core::fmt::Display for BackwardKnobs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "c{}.u{}{}{}",
            self.max_vectors_per_lane,
            self.units_per_cube,
            if self.fast_math { ".fast" } else { "" },
            if self.prefetch { ".pf" } else { "" }
        )?;
        if let Some(n) = self.cubes_per_sm {
            write!(f, ".s{n}")?;
        }
        match self.max_vector {
            0 => Ok(()),
            v => write!(f, ".v{v}"),
        }
    }
}

/// Launches the backward on dense `[rows, C]` tensors: `x`, `dy` and `dx` of `x_type`, `gamma`
/// and `dgamma` (`[C]`) of `gamma_type`. Refuses (so the caller can use composed ops) rows
/// too wide for the register cache of this device.
#[allow(clippy::too_many_arguments)]
pub fn launch_backward(
    client: &Client,
    x: Handle,
    gamma: Handle,
    dy: Handle,
    dx: Handle,
    dgamma: Handle,
    x_type: ElemType,
    gamma_type: ElemType,
    rows: usize,
    channels: usize,
    norm: NormParams,
    activation: Activation,
) -> Result<(), ForwardError> {
    let knobs = BackwardKnobs::for_shape(client, channels, rows);
    let launch = |knobs| {
        launch_backward_with(
            client,
            x.clone(),
            gamma.clone(),
            dy.clone(),
            dx.clone(),
            dgamma.clone(),
            x_type,
            gamma_type,
            rows,
            channels,
            norm,
            activation,
            knobs,
        )
    };
    // Prefetch needs whole-word vectors (not odd C in 2-byte types) and the shared memory to
    // stage them; where the launch refuses it, the same knobs run without it.
    match launch(knobs) {
        Err(_) if knobs.prefetch => launch(BackwardKnobs {
            prefetch: false,
            ..knobs
        }),
        result => result,
    }
}

/// [`launch_backward`] with given [`BackwardKnobs`]; `fast_math` off CUDA, a zero cap or a
/// units count that is not a power of two are refused.
#[allow(clippy::too_many_arguments)]
pub fn launch_backward_with(
    client: &Client,
    x: Handle,
    gamma: Handle,
    dy: Handle,
    dx: Handle,
    dgamma: Handle,
    x_type: ElemType,
    gamma_type: ElemType,
    rows: usize,
    channels: usize,
    norm: NormParams,
    activation: Activation,
    knobs: BackwardKnobs,
) -> Result<(), ForwardError> {
    let refuse = |why: String| Err(ForwardError::InvalidKnobs(why));
    if knobs.fast_math && !has_ptx_math(client) {
        return refuse("backward: fast_math uses PTX instructions and needs a CUDA device".into());
    }
    if knobs.max_vectors_per_lane == 0
        || !knobs.units_per_cube.is_power_of_two()
        || !(knobs.max_vector == 0 || knobs.max_vector.is_power_of_two())
    {
        return refuse(format!(
            "backward knobs {knobs}: max_vectors_per_lane must be at least 1, units_per_cube \
             a power of two and max_vector 0 or a power of two"
        ));
    }
    if channels == 0 {
        return Ok(());
    }
    let props = client.properties();
    let hw = &props.hardware;
    let offsets = [
        (&x, x_type),
        (&dy, x_type),
        (&dx, x_type),
        (&gamma, gamma_type),
        (&dgamma, gamma_type),
    ]
    .map(|(h, t)| (h.offset_start.unwrap_or(0), t.size()));
    let widest = crate::select::widest_vector(client, x_type.size(), &[channels], &offsets);
    let vector_size = match knobs.max_vector {
        0 => widest,
        v => widest.min(v),
    };
    let vecs = channels / vector_size;
    let gpu = is_gpu(client);
    let plane = if gpu { hw.plane_size_min as usize } else { 1 };
    let max_units = hw.max_units_per_cube as usize;
    // Lanes per row: what the cap asks for, at most a cube's worth; the cap is raised (up to
    // the register cache's limit) for rows wider than that.
    let max_lanes = 1usize
        << (if gpu { max_units.min(1024) } else { max_units })
            .max(1)
            .ilog2();
    let lanes = vecs
        .div_ceil(knobs.max_vectors_per_lane)
        .next_power_of_two()
        .clamp(1, max_lanes);
    let cache_limit = if gpu { 8 } else { 64 };
    if vecs.div_ceil(lanes) > cache_limit {
        return refuse(format!(
            "backward: C = {channels} needs {} vectors per lane at {lanes} lanes per row (this \
             device's most); the register cache holds {cache_limit}",
            vecs.div_ceil(lanes)
        ));
    }
    let lane_reduce = if lanes <= plane {
        LaneReduce::Plane
    } else {
        LaneReduce::Shared
    };
    // A power of two (the dgamma tree over a cube's rows needs one).
    let rows_per_cube = if gpu {
        (knobs.units_per_cube.min(max_units) / lanes).max(1)
    } else {
        1usize << (max_units / lanes).max(1).ilog2()
    };
    let cfg = BackwardConfig {
        lanes_per_row: lanes as u32,
        rows_per_cube: rows_per_cube as u32,
        vectors_per_lane: vecs.div_ceil(lanes),
        lane_reduce,
        activation,
        fast_math: knobs.fast_math && activation == Activation::Silu,
        prefetch: knobs.prefetch,
        plane_width: reduction_plane_width(client),
    };
    let vector_bytes = vector_size * x_type.size();
    if knobs.prefetch {
        if !vector_bytes.is_multiple_of(4) {
            return refuse(format!(
                "backward knobs {knobs}: prefetch stages whole 32-bit words; C = {channels} \
                 gives vectors of {vector_bytes} bytes"
            ));
        }
        let staged = 2 * cfg.vectors_per_lane * lanes * rows_per_cube * vector_bytes;
        if staged + lanes * rows_per_cube * 4 * (1 + vector_size) > hw.max_shared_memory_size {
            return refuse(format!(
                "backward knobs {knobs}: prefetch stages {staged} bytes per cube in shared \
                 memory; the device has {}",
                hw.max_shared_memory_size
            ));
        }
    }
    let groups = rows.div_ceil(rows_per_cube).max(1);
    let resident = (threads_per_sm(client) / (lanes * rows_per_cube)).clamp(1, 16);
    let cubes = match (knobs.cubes_per_sm, hw.num_streaming_multiprocessors) {
        (Some(0), _) => groups.min(hw.max_cube_count.0 as usize),
        (per_sm, Some(sms)) if gpu => {
            groups.min(sms as usize * per_sm.map_or(resident, |n| resident.min(n as usize)))
        }
        _ => groups.min(64),
    };
    let parts = cubes;
    let partial = client.empty(parts * channels * 4);
    let len = rows * vecs;
    // `x` and `dy` seen as vectors of 32-bit words, one per vector (prefetch only).
    let (words_per_vector, words_len) = if knobs.prefetch {
        (vector_bytes / 4, len.max(1))
    } else {
        (1, 1)
    };
    log::debug!("rms_norm_backward_rows: rows={rows} C={channels} {cfg:?} cubes={cubes}");
    unsafe {
        rms_norm_backward_rows::launch_unchecked(
            client,
            CubeCount::new_1d(cubes as u32),
            CubeDim::new_2d(lanes as u32, rows_per_cube as u32),
            AddressType::from_len((len * vector_size).max(parts * channels)),
            vector_size,
            words_per_vector,
            BufferArg::from_raw_parts(x.clone(), len.max(1)),
            BufferArg::from_raw_parts(x, words_len),
            BufferArg::from_raw_parts(gamma, vecs),
            BufferArg::from_raw_parts(dy.clone(), len.max(1)),
            BufferArg::from_raw_parts(dy, words_len),
            BufferArg::from_raw_parts(dx, len.max(1)),
            BufferArg::from_raw_parts(partial.clone(), parts * vecs),
            rows,
            vecs,
            (1.0f64 / channels as f64) as f32,
            norm.eps,
            norm.floor,
            cfg,
            [x_type, gamma_type],
        );
    }
    launch_reduce_dgamma(
        client,
        partial,
        dgamma,
        gamma_type,
        parts,
        vecs,
        vector_size,
    );
    Ok(())
}

/// `dgamma = sum_p partial[p]` over `parts` partials of `vecs` vectors of `vector_size` f32,
/// stored column-major (vector column `j`'s partials at `j * parts ..`; one cube per column
/// vector, a fixed order), cast to `gamma_type`. (Public for the bench, which
/// times it alone.)
pub fn launch_reduce_dgamma(
    client: &Client,
    partial: Handle,
    dgamma: Handle,
    gamma_type: ElemType,
    parts: usize,
    vecs: usize,
    vector_size: usize,
) {
    let max_units = client.properties().hardware.max_units_per_cube as usize;
    // On a GPU enough units that each loads at most about four parts (all in flight at once:
    // a second round of loads showed at 2112 parts, C = 1024's full grid), 256 to 1024.
    let wanted = if is_gpu(client) {
        parts.div_ceil(4).next_power_of_two().clamp(256, 1024)
    } else {
        256
    };
    let threads = 1u32 << wanted.min(max_units.max(1)).ilog2();
    // The units' sums meet by plane shuffles where the row kernels' lane sums do (the kernel
    // falls back to its shared-memory tree for a plane wider than the cube).
    let plane = reduction_plane_width(client);
    unsafe {
        rms_norm_reduce_dgamma::launch_unchecked(
            client,
            CubeCount::new_1d(vecs as u32),
            CubeDim::new_1d(threads),
            vector_size,
            BufferArg::from_raw_parts(partial, parts * vecs),
            BufferArg::from_raw_parts(dgamma, vecs),
            parts,
            threads,
            plane,
            gamma_type,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::GpuBackwardShape;

    /// The defaults are the measured winners (docs/performance.md), written as
    /// `c<cap>.u<units>[.s<cubes per SM>][.v<vector>]`.
    #[test]
    fn gpu_defaults_are_the_measured_table() {
        let label = |c, t| {
            let s = GpuBackwardShape::for_shape(c, t);
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
    }
}
