//! The forward row kernel: one fused pass that reads each row of `x` once (when it fits in
//! registers), reduces its sum of squares in fp32, and writes `act(x * r * gamma)`.
//!
//! Mapping: a cube is `lanes_per_row x rows_per_cube` units; lane `l` of a row owns the vectors
//! `l, l + lanes, l + 2 lanes, ...` of that row, so a plane's loads are contiguous. Cubes walk
//! the row groups with a grid stride or draw them in order from a ticket counter
//! ([`crate::tickets`], `Knobs::groups_per_ticket`), so a capped grid is persistent: gamma is
//! loaded into registers once per unit and reused for every row it handles. Every unit of a cube runs the
//! same number of iterations (rows past the end are masked, not skipped), which keeps cube
//! barriers of the shared-memory reduction uniform.

use cubecl::ir::{AddressType, ElemType};
use cubecl::prelude::*;
use cubecl::server::Handle;

pub use crate::activation::has_ptx_math;
use crate::activation::{LOG2_E, input_scale, inv_rms, output_value, silu_constant};
use crate::fp8_out::{e4m3_words, encode, nan_max, vector_amax};
use crate::knobs::{GammaIn, Knobs, LaneReduce, RowConfig};
pub use crate::lanes::reduction_plane_width;
use crate::lanes::{lane_sums, rows_seen, unit_lane, unit_row};
use crate::params::{Activation, NormParams, Output};
use crate::rescue::{prescale, small_eps};
use crate::row_io::{
    add_squares, cached, in_row, load_gamma_registers, load_index, load_rows, squares_total,
    stage_words, staged_to_f32, streamed_sum_sq, widen,
};
use crate::tickets::{WALK_WORDS, walk_advance, walk_draw, walk_finish, walk_next, walk_start};

/// The logical problem: `rows` rows of `channels` contiguous elements. Row `r` of `x` starts at
/// element `r * x_row_stride`, row `r` of the output at `r * out_row_stride` (both `>= channels`;
/// equal to `channels` for dense tensors, larger for pitched ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowsProblem {
    pub rows: usize,
    pub channels: usize,
    pub x_row_stride: usize,
    pub out_row_stride: usize,
}

impl RowsProblem {
    /// Dense rows: both row strides equal `channels`.
    pub fn dense(rows: usize, channels: usize) -> Self {
        Self {
            rows,
            channels,
            x_row_stride: channels,
            out_row_stride: channels,
        }
    }
}

/// Why a launch was refused. Every variant names the offending value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForwardError {
    /// The knobs cannot run this problem on this device.
    InvalidKnobs(String),
}

impl core::fmt::Display for ForwardError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ForwardError::InvalidKnobs(why) => write!(f, "invalid knobs: {why}"),
        }
    }
}

impl std::error::Error for ForwardError {}

/// A GPU for the launch shapes of the kernels without knobs: plane ops and planes of at least
/// 32 units (the CPU runtime has neither).
pub(crate) fn is_gpu(client: &Client) -> bool {
    let has_plane_ops = client
        .features()
        .plane
        .contains(cubecl::ir::features::Plane::Ops);
    has_plane_ops && client.properties().hardware.plane_size_min >= 32
}

/// The row kernel. `x`, `gamma`, `out` are viewed as vectors of `N` elements; the row length
/// `vecs_per_row = C / N`, the row count and the row strides (in vectors) are run-time values.
///
/// Each grid-stride step of a cube covers `rows_per_cube * rows_per_unit` rows; unit row `y`
/// handles rows `y, y + rows_per_cube, ...` of the step, issuing all their loads before the
/// reductions so that `rows_per_unit` rows are in flight per unit.
// `if comptime![..] { if runtime { .. } }` stays nested: the outer test is resolved when the
// kernel is expanded, the inner one at run time.
#[allow(clippy::too_many_arguments, clippy::collapsible_if)]
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn rms_norm_rows<E: Float, G: Float, O: Float, N: Size, W: Size, V: Size>(
    x: &[Vector<E, N>],
    x_words: &[Vector<u32, W>],
    gamma: &[Vector<G, N>],
    out: &mut [Vector<O, N>],
    out_words: &mut [Vector<u32, V>],
    amax_partial: &mut [f32],
    tickets: &mut [Atomic<u32>],
    rows: usize,
    vecs_per_row: usize,
    x_row_stride: usize,
    out_row_stride: usize,
    inv_channels: f32,
    eps: f32,
    floor: f32,
    out_scale: f32,
    silu_k: f32,
    #[comptime] cfg: RowConfig,
    #[define(E, G, O)] _types: [ElemType; 3],
) {
    let lanes = comptime![cfg.lanes_per_row as usize];
    let rows_per_cube = comptime![cfg.rows_per_cube as usize];
    let rows_per_unit = comptime![cfg.rows_per_unit as usize];
    let vpl = comptime![cfg.vectors_per_lane];
    let shared_len = comptime![match cfg.lane_reduce {
        LaneReduce::Shared => (cfg.lanes_per_row * cfg.rows_per_cube * cfg.rows_per_unit) as usize,
        LaneReduce::Plane => 1usize,
    }];
    let mut shared = Shared::<[f32]>::new_slice(shared_len);

    let lane = unit_lane(cfg);
    let y = unit_row(cfg);
    // Rows as this unit sees them (0 for a packed plane's idle units); `rows` itself sets the
    // cube's walk (every unit of a cube runs the same steps) and the loads' last row.
    let rows_here = rows_seen(rows, cfg);
    let rows_per_step = comptime![rows_per_cube * rows_per_unit];
    #[allow(clippy::manual_div_ceil)]
    let groups = (rows + rows_per_step - 1) / rows_per_step;
    // The walk over row groups: a fixed stride, or tickets drawn in order (`crate::tickets`).
    let per_ticket = comptime![cfg.groups_per_ticket];
    let walk_words = comptime![if per_ticket > 0 { WALK_WORDS } else { 1usize }];
    let mut drawn = Shared::<[u32]>::new_slice(walk_words);
    let mut walk = Array::<u32>::new(walk_words);
    let mut group = walk_start(tickets, &mut drawn, &mut walk, per_ticket);
    let mut sums = Array::<f32>::new(rows_per_unit);
    // Row totals and prescales of the rare rescue pass (see `crate::rescue`).
    let mut rescued = Array::<f32>::new(rows_per_unit);
    let mut pre = Array::<f32>::new(rows_per_unit);
    let small = small_eps(eps, floor);
    // max |y| over everything this unit writes (FP8 with amax only).
    let mut amax = 0.0f32;
    // Prefetching kernels compute `silu_k` themselves (the same correctly rounded quotient as
    // the host's): their loads sit in a loop, away from the kernel's start, and taken as a
    // parameter `silu_k` cost ptxas registers there (FP8 C = 96 with prefetch: 72 -> 80).
    let mut silu_k = silu_k;
    if comptime![cfg.prefetch && cfg.folds_out_scale()] {
        silu_k = -LOG2_E / out_scale;
    }

    if comptime![vpl > 0] {
        // The row fits in registers: x is read from memory once.
        let g_regs_len = comptime![if cfg.gamma == GammaIn::Registers {
            vpl
        } else {
            1
        }];
        let g_shared_len = comptime![if cfg.gamma == GammaIn::Shared {
            vpl * lanes
        } else {
            1
        }];
        let mut g_regs = Array::<Vector<f32, N>>::new(g_regs_len);
        let mut g_shared = Shared::<[Vector<f32, N>]>::new_slice(g_shared_len);
        match comptime![cfg.gamma] {
            GammaIn::Registers => {
                if comptime![!cfg.gamma_after_x] {
                    load_gamma_registers::<G, N, W>(gamma, &mut g_regs, lane, vecs_per_row, cfg);
                }
            }
            GammaIn::Shared => {
                let units = comptime![cfg.units_per_cube() as usize];
                let mut j = UNIT_POS as usize;
                while j < vecs_per_row {
                    g_shared[j] = widen::<G, N, W>(gamma[j], cfg.bf16_gamma);
                    j += units;
                }
                sync_cube();
            }
            GammaIn::Global => {}
        }

        // The register cache: the input dtype, f32 (`f32_cache`) or the loaded words
        // (`word_cache`); the others are stubs.
        let mut xs = Array::<Vector<E, N>>::new(comptime![if cfg.f32_cache || cfg.word_cache {
            1
        } else {
            vpl * rows_per_unit
        }]);
        let mut xw = Array::<Vector<u32, W>>::new(comptime![if cfg.word_cache {
            vpl * rows_per_unit
        } else {
            1
        }]);
        let mut xf = Array::<Vector<f32, N>>::new(comptime![if cfg.f32_cache {
            vpl * rows_per_unit
        } else {
            1
        }]);
        // Prefetch: the next group's rows arrive in registers while this group is computed,
        // then wait in this unit's own slots of shared memory (no other unit reads them, so no
        // barrier) until the next iteration. Staging them in shared memory instead of a second
        // register array keeps the loaded registers from being carried around the loop, which
        // made the compiler repack (and so wait for) them right after the loads.
        let slots = comptime![vpl * rows_per_unit];
        let units = comptime![cfg.units_per_cube() as usize];
        let mut next_regs =
            Array::<Vector<u32, W>>::new(comptime![if cfg.prefetch { slots } else { 1 }]);
        let mut staged = Shared::<[Vector<u32, W>]>::new_slice(comptime![if cfg.prefetch {
            slots * units
        } else {
            1
        }]);
        let unit = UNIT_POS as usize;
        if comptime![cfg.prefetch] {
            if group < groups {
                load_rows::<u32, W>(
                    x_words,
                    &mut next_regs,
                    lane,
                    group * rows_per_step + y,
                    rows,
                    x_row_stride,
                    vecs_per_row,
                    cfg,
                );
                stage_words::<W>(&next_regs, &mut staged, 0usize, slots, units);
            }
        }
        while group < groups {
            let step_first_row = group * rows_per_step;
            let first_row = step_first_row + y;
            let next = walk_next(&walk, group, per_ticket);
            walk_draw(tickets, &mut walk, per_ticket);
            if comptime![cfg.prefetch] {
                // The next group's loads go out before any arithmetic on this one.
                if next < groups {
                    load_rows::<u32, W>(
                        x_words,
                        &mut next_regs,
                        lane,
                        next * rows_per_step + y,
                        rows,
                        x_row_stride,
                        vecs_per_row,
                        cfg,
                    );
                }
                #[unroll]
                for k in 0..slots {
                    if comptime![cfg.f32_cache] {
                        xf[k] = staged_to_f32::<E, N, W>(staged[k * units + unit], cfg);
                    } else if comptime![cfg.word_cache] {
                        xw[k] = staged[k * units + unit];
                    } else {
                        xs[k] = Vector::<E, N>::reinterpret(staged[k * units + unit]);
                    }
                }
            } else {
                // Every load of the step first, none under a condition (as the prefetch's; the
                // sums skip the clamped slots): a load inside the row's `if`, with its square
                // right after it, made each load wait for the one before (one memory latency
                // per vector).
                if comptime![cfg.word_cache] {
                    load_rows::<u32, W>(
                        x_words,
                        &mut xw,
                        lane,
                        first_row,
                        rows,
                        x_row_stride,
                        vecs_per_row,
                        cfg,
                    );
                } else {
                    load_rows::<E, N>(
                        x,
                        &mut xs,
                        lane,
                        first_row,
                        rows,
                        x_row_stride,
                        vecs_per_row,
                        cfg,
                    );
                }
                if comptime![cfg.gamma_after_x] {
                    load_gamma_registers::<G, N, W>(gamma, &mut g_regs, lane, vecs_per_row, cfg);
                }
            }
            #[unroll]
            for r in 0..rows_per_unit {
                let active = first_row + r * rows_per_cube < rows_here;
                let mut acc = Vector::<f32, N>::new(0.0f32);
                #[unroll]
                for i in 0..vpl {
                    if active && in_row(lane + i * lanes, vecs_per_row, cfg) {
                        let f = cached::<E, N, W>(&xs, &xf, &xw, r * vpl + i, cfg);
                        add_squares::<N>(&mut acc, f, vpl);
                    }
                }
                sums[r] = squares_total::<N>(acc, vpl);
            }
            let rescue = lane_sums(
                &mut sums,
                &mut shared,
                lane,
                y,
                step_first_row,
                rows_here,
                small,
                cfg,
            );
            // Rare: a row total out of fp32 range is summed again from the registers with
            // exactly scaled values (see `rescue`); uniform across the reduction's units.
            if rescue {
                #[unroll]
                for r in 0..rows_per_unit {
                    let row = first_row + r * rows_per_cube;
                    let active = row < rows_here;
                    pre[r] = prescale(sums[r], active, small);
                    let p = Vector::<f32, N>::new(pre[r]);
                    let mut acc = Vector::<f32, N>::new(0.0f32);
                    #[unroll]
                    for i in 0..vpl {
                        let j = lane + i * lanes;
                        if active && in_row(j, vecs_per_row, cfg) {
                            let f = cached::<E, N, W>(&xs, &xf, &xw, r * vpl + i, cfg) * p;
                            add_squares::<N>(&mut acc, f, vpl);
                        }
                    }
                    rescued[r] = squares_total::<N>(acc, vpl);
                }
                lane_sums(
                    &mut rescued,
                    &mut shared,
                    lane,
                    y,
                    step_first_row,
                    rows_here,
                    small,
                    cfg,
                );
            }
            #[unroll]
            for r in 0..rows_per_unit {
                let row = first_row + r * rows_per_cube;
                let active = row < rows_here;
                let out_base = row * out_row_stride;
                let mut p = 1.0f32;
                if rescue {
                    p = pre[r];
                }
                if p == 1.0f32 {
                    let scale = inv_rms(sums[r], inv_channels, eps, floor);
                    amax = nan_max(
                        amax,
                        store_cached_row::<E, G, O, N, W, V>(
                            &xs,
                            &xf,
                            &xw,
                            &g_regs,
                            &g_shared,
                            gamma,
                            out,
                            out_words,
                            lane,
                            r,
                            active,
                            out_base,
                            vecs_per_row,
                            scale,
                            1.0f32,
                            out_scale,
                            silu_k,
                            cfg,
                            false,
                        ),
                    );
                } else {
                    let scale = inv_rms(rescued[r], inv_channels, eps * p * p, floor * p * p);
                    amax = nan_max(
                        amax,
                        store_cached_row::<E, G, O, N, W, V>(
                            &xs,
                            &xf,
                            &xw,
                            &g_regs,
                            &g_shared,
                            gamma,
                            out,
                            out_words,
                            lane,
                            r,
                            active,
                            out_base,
                            vecs_per_row,
                            scale,
                            p,
                            out_scale,
                            silu_k,
                            cfg,
                            true,
                        ),
                    );
                }
            }
            if comptime![cfg.prefetch] {
                if next < groups {
                    stage_words::<W>(&next_regs, &mut staged, 0usize, slots, units);
                }
            }
            walk_advance(&mut drawn, &mut walk, per_ticket);
            if comptime![cfg.gamma_after_x] {
                // One group per cube: the loop ends here, as the compilers can see (so gamma's
                // loads, which follow x's, stay in the loop's one pass).
                group = groups;
            } else {
                group = next;
            }
        }
    } else {
        // Rows too long for registers: one pass for the sums of squares, a second (mostly from
        // cache) for the output.
        while group < groups {
            let step_first_row = group * rows_per_step;
            let first_row = step_first_row + y;
            let next = walk_next(&walk, group, per_ticket);
            walk_draw(tickets, &mut walk, per_ticket);
            #[unroll]
            for r in 0..rows_per_unit {
                let row = first_row + r * rows_per_cube;
                sums[r] = streamed_sum_sq::<E, N>(
                    x,
                    lane,
                    row * x_row_stride,
                    vecs_per_row,
                    row < rows_here,
                    1.0f32,
                    cfg,
                );
            }
            let rescue = lane_sums(
                &mut sums,
                &mut shared,
                lane,
                y,
                step_first_row,
                rows_here,
                small,
                cfg,
            );
            if rescue {
                #[unroll]
                for r in 0..rows_per_unit {
                    let row = first_row + r * rows_per_cube;
                    pre[r] = prescale(sums[r], row < rows_here, small);
                    rescued[r] = streamed_sum_sq::<E, N>(
                        x,
                        lane,
                        row * x_row_stride,
                        vecs_per_row,
                        row < rows_here,
                        pre[r],
                        cfg,
                    );
                }
                lane_sums(
                    &mut rescued,
                    &mut shared,
                    lane,
                    y,
                    step_first_row,
                    rows_here,
                    small,
                    cfg,
                );
            }
            #[unroll]
            for r in 0..rows_per_unit {
                let row = first_row + r * rows_per_cube;
                let base = row * x_row_stride;
                let out_base = row * out_row_stride;
                let mut p = 1.0f32;
                if rescue {
                    p = pre[r];
                }
                if row < rows_here {
                    if p == 1.0f32 {
                        let scale = inv_rms(sums[r], inv_channels, eps, floor);
                        amax = nan_max(
                            amax,
                            store_streamed_row::<E, G, O, N, V>(
                                x,
                                gamma,
                                out,
                                out_words,
                                lane,
                                base,
                                out_base,
                                vecs_per_row,
                                scale,
                                1.0f32,
                                out_scale,
                                silu_k,
                                cfg,
                                false,
                            ),
                        );
                    } else {
                        let scale = inv_rms(rescued[r], inv_channels, eps * p * p, floor * p * p);
                        amax = nan_max(
                            amax,
                            store_streamed_row::<E, G, O, N, V>(
                                x,
                                gamma,
                                out,
                                out_words,
                                lane,
                                base,
                                out_base,
                                vecs_per_row,
                                scale,
                                p,
                                out_scale,
                                silu_k,
                                cfg,
                                true,
                            ),
                        );
                    }
                }
            }
            walk_advance(&mut drawn, &mut walk, per_ticket);
            group = next;
        }
    }
    walk_finish(tickets, &mut drawn, &walk, per_ticket);
    if comptime![cfg.output == Output::Fp8E4M3WithAmax] {
        let units = comptime![cfg.units_per_cube() as usize];
        amax_partial[CUBE_POS_X as usize * units + UNIT_POS as usize] = amax;
    }
}

/// Reduces the per-unit maxima to one value: every unit of one cube strides over them, then a
/// shared-memory tree (the cube size is a power of two).
#[cube(launch_unchecked)]
pub fn rms_norm_reduce_amax(partial: &[f32], amax: &mut [f32], len: usize, #[comptime] units: u32) {
    let mut shared = Shared::<[f32]>::new_slice(comptime![units as usize]);
    let unit = UNIT_POS as usize;
    let mut m = 0.0f32;
    let mut i = unit;
    while i < len {
        m = nan_max(m, partial[i]);
        i += comptime![units as usize];
    }
    shared[unit] = m;
    sync_cube();
    let steps = comptime![units.trailing_zeros()];
    #[unroll]
    for k in 0..steps {
        let stride = ((units >> 1) >> k) as usize;
        if unit < stride {
            let other = shared[unit + stride];
            shared[unit] = nan_max(shared[unit], other);
        }
        sync_cube();
    }
    if unit == 0 {
        amax[0] = shared[0];
    }
}

/// Stores `y` (from [`output_value`]) at vector `idx` of the output: cast to the output dtype,
/// or FP8 codes of `y * out_scale` (unless the scale is already folded in), packed into words
/// where the device converts pairs ([`e4m3_words`]).
#[cube]
fn write_vector<O: Float, N: Size, V: Size>(
    y: Vector<f32, N>,
    out: &mut [Vector<O, N>],
    out_words: &mut [Vector<u32, V>],
    idx: usize,
    out_scale: f32,
    #[comptime] cfg: RowConfig,
) {
    let mut z = y;
    if comptime![cfg.output.is_fp8() && !cfg.folds_out_scale()] {
        z = y * Vector::new(out_scale);
    }
    if comptime![cfg.packed_fp8] {
        out_words[idx] = e4m3_words::<N, V>(z);
    } else {
        out[idx] = encode::<O, N>(z, cfg.output, cfg.saturating_cast);
    }
}

/// Writes this lane's share of one row from the register cache:
/// `act((p * x) * scale * gamma)`, with the multiplication by `p` compiled in only for rescued
/// rows (`prescaled`), so ordinary rows pay nothing for it.
#[allow(clippy::too_many_arguments)]
#[cube]
fn store_cached_row<E: Float, G: Float, O: Float, N: Size, W: Size, V: Size>(
    xs: &Array<Vector<E, N>>,
    xf: &Array<Vector<f32, N>>,
    xw: &Array<Vector<u32, W>>,
    g_regs: &Array<Vector<f32, N>>,
    g_shared: &Shared<[Vector<f32, N>]>,
    gamma: &[Vector<G, N>],
    out: &mut [Vector<O, N>],
    out_words: &mut [Vector<u32, V>],
    lane: usize,
    r: usize,
    active: bool,
    out_base: usize,
    vecs_per_row: usize,
    scale: f32,
    p: f32,
    out_scale: f32,
    silu_k: f32,
    #[comptime] cfg: RowConfig,
    #[comptime] prescaled: bool,
) -> f32 {
    let lanes = comptime![cfg.lanes_per_row as usize];
    let vpl = comptime![cfg.vectors_per_lane];
    let scale = Vector::<f32, N>::new(input_scale(scale, cfg));
    let pv = Vector::<f32, N>::new(p);
    let mut amax = 0.0f32;
    // Gamma from global memory: every load first, none under the row's condition (a vector past
    // the row reads the last one), so they do not wait for each other.
    let from_global = comptime![cfg.gamma == GammaIn::Global];
    let mut g_raw = Array::<Vector<G, N>>::new(comptime![if from_global { vpl } else { 1 }]);
    if comptime![from_global] {
        #[unroll]
        for i in 0..vpl {
            let j = lane + i * lanes;
            g_raw[i] = gamma[load_index(j, vecs_per_row, cfg)];
        }
    }
    #[unroll]
    for i in 0..vpl {
        let j = lane + i * lanes;
        if active && in_row(j, vecs_per_row, cfg) {
            #[allow(unused_assignments)]
            let mut g = Vector::<f32, N>::new(0.0f32);
            match comptime![cfg.gamma] {
                GammaIn::Registers => g = g_regs[i],
                GammaIn::Shared => g = g_shared[j],
                GammaIn::Global => g = widen::<G, N, W>(g_raw[i], cfg.bf16_gamma),
            }
            let mut v = cached::<E, N, W>(xs, xf, xw, r * vpl + i, cfg);
            if comptime![prescaled] {
                v *= pv;
            }
            let y = output_value::<N>(v * scale * g, silu_k, cfg);
            amax = nan_max(amax, vector_amax::<N>(y, cfg.output));
            write_vector::<O, N, V>(y, out, out_words, out_base + j, out_scale, cfg);
        }
    }
    amax
}

/// Writes this lane's share of one row, re-reading `x` from global memory (the streaming
/// variant); `prescaled` as in [`store_cached_row`].
#[allow(clippy::too_many_arguments)]
#[cube]
fn store_streamed_row<E: Float, G: Float, O: Float, N: Size, V: Size>(
    x: &[Vector<E, N>],
    gamma: &[Vector<G, N>],
    out: &mut [Vector<O, N>],
    out_words: &mut [Vector<u32, V>],
    lane: usize,
    base: usize,
    out_base: usize,
    vecs_per_row: usize,
    scale: f32,
    p: f32,
    out_scale: f32,
    silu_k: f32,
    #[comptime] cfg: RowConfig,
    #[comptime] prescaled: bool,
) -> f32 {
    let lanes = comptime![cfg.lanes_per_row as usize];
    let scale = Vector::<f32, N>::new(input_scale(scale, cfg));
    let pv = Vector::<f32, N>::new(p);
    let mut amax = 0.0f32;
    let mut j = lane;
    while j < vecs_per_row {
        let mut v = Vector::<f32, N>::cast_from(x[base + j]);
        if comptime![prescaled] {
            v *= pv;
        }
        let g = Vector::<f32, N>::cast_from(gamma[j]);
        let y = output_value::<N>(v * scale * g, silu_k, cfg);
        amax = nan_max(amax, vector_amax::<N>(y, cfg.output));
        write_vector::<O, N, V>(y, out, out_words, out_base + j, out_scale, cfg);
        j += lanes;
    }
    amax
}

/// Why the lane layout of `cfg` (lanes per row, rows per cube, lane reduction; `plane_width`
/// set) cannot run on `client`'s device, if it cannot: the checks the row and NVFP4 kernels
/// share. A plane reduction needs plane operations and at most a plane of lanes; lane counts
/// that are not powers of two pack rows into planes there (rows per cube a multiple of the rows
/// per plane), and with the shared reduction need a multiple of the plane above a plane.
pub(crate) fn lane_layout_error(client: &Client, cfg: &RowConfig) -> Option<String> {
    let hw = &client.properties().hardware;
    let lanes = cfg.lanes_per_row;
    let plane_width = cfg.plane_width;
    if lanes == 0 || cfg.rows_per_cube == 0 {
        return Some(format!(
            "lanes_per_row {lanes} and rows_per_cube {} must be at least 1",
            cfg.rows_per_cube
        ));
    }
    if lanes > 1 && cfg.lane_reduce == LaneReduce::Plane {
        let has_plane_ops = client
            .features()
            .plane
            .contains(cubecl::ir::features::Plane::Ops);
        if !has_plane_ops || lanes > hw.plane_size_min {
            return Some(format!(
                "plane reduction over {lanes} lanes needs plane ops and a plane of at least that \
                 many units (this device: plane ops {has_plane_ops}, plane size {})",
                hw.plane_size_min
            ));
        }
    }
    // (Powers of two above a plane are multiples of it.)
    if cfg.lane_reduce == LaneReduce::Shared
        && plane_width > 1
        && lanes > plane_width
        && !lanes.is_multiple_of(plane_width)
    {
        return Some(format!(
            "lanes_per_row {lanes}: a shared-memory reduction over more lanes than a plane of \
             {plane_width} needs a power of two or a multiple of the plane"
        ));
    }
    // (Packing lays rows along planes of `plane_width` units; a device whose planes are not
    // used for reductions, `plane_width` 1, cannot pack.)
    if cfg.packs_rows() && plane_width < lanes {
        return Some(format!(
            "lanes_per_row {lanes} (not a power of two) packs rows into planes and needs planes \
             of at least {lanes} units used for reductions (this device: {plane_width})"
        ));
    }
    if cfg.packs_rows() && !cfg.rows_per_cube.is_multiple_of(cfg.rows_per_plane()) {
        let per_plane = cfg.rows_per_plane();
        return Some(format!(
            "lanes_per_row {lanes} packs {per_plane} rows into each plane of {plane_width}: \
             rows_per_cube {} must be a multiple of {per_plane}",
            cfg.rows_per_cube
        ));
    }
    if cfg.units_per_cube() > hw.max_units_per_cube {
        return Some(format!(
            "a cube of {lanes} lanes x {} rows exceeds the device's {} units per cube",
            cfg.rows_per_cube, hw.max_units_per_cube
        ));
    }
    None
}

/// The cube of `cfg`: `lanes x rows_per_cube` units, or with rows packed into planes
/// ([`RowConfig::packs_rows`]) one plane along x and the planes along y.
pub(crate) fn cube_dim(cfg: &RowConfig) -> CubeDim {
    if cfg.packs_rows() {
        CubeDim::new_2d(cfg.plane_width, cfg.units_per_cube() / cfg.plane_width)
    } else {
        CubeDim::new_2d(cfg.lanes_per_row, cfg.rows_per_cube)
    }
}

/// Checks that `knobs` can run `problem` on `client`'s device with buffers at these offsets.
pub fn validate_knobs(
    client: &Client,
    knobs: &Knobs,
    problem: RowsProblem,
    byte_offsets: &[u64],
    elem_sizes: &[usize],
) -> Result<(), ForwardError> {
    let bad = |why: String| Err(ForwardError::InvalidKnobs(why));
    let props = client.properties();
    let hw = &props.hardware;
    if knobs.vector_size == 0 || !problem.channels.is_multiple_of(knobs.vector_size) {
        return bad(format!(
            "vector_size {} must divide C = {}",
            knobs.vector_size, problem.channels
        ));
    }
    for (name, stride) in [
        ("x row stride", problem.x_row_stride),
        ("output row stride", problem.out_row_stride),
    ] {
        if stride < problem.channels || !stride.is_multiple_of(knobs.vector_size) {
            return bad(format!(
                "the {name} {stride} must be >= C = {} and a multiple of vector_size {}",
                problem.channels, knobs.vector_size
            ));
        }
    }
    for (&offset, &size) in byte_offsets.iter().zip(elem_sizes) {
        if !offset.is_multiple_of((knobs.vector_size * size) as u64) {
            return bad(format!(
                "vector_size {} is not aligned with a buffer offset of {offset} bytes",
                knobs.vector_size
            ));
        }
    }
    if knobs.vector_size > hw.max_vector_size {
        return bad(format!(
            "vector_size {} exceeds the device maximum {}",
            knobs.vector_size, hw.max_vector_size
        ));
    }
    let mut cfg = knobs.row_config(problem.channels, Activation::Silu);
    cfg.plane_width = reduction_plane_width(client);
    if let Some(why) = lane_layout_error(client, &cfg) {
        return bad(why);
    }
    if knobs.rows_per_unit == 0 || knobs.rows_per_unit > 8 {
        return bad(format!(
            "rows_per_unit {} must be in 1..=8",
            knobs.rows_per_unit
        ));
    }
    if knobs.fast_math && !has_ptx_math(client) {
        return bad(format!(
            "fast_math uses PTX instructions and needs a CUDA device (this one: {})",
            props.identity.fingerprint
        ));
    }
    let shared_bytes = match cfg.lane_reduce {
        LaneReduce::Shared => knobs.units_per_cube() as usize * knobs.rows_per_unit as usize * 4,
        LaneReduce::Plane => 0,
    } + match cfg.gamma {
        GammaIn::Shared => {
            knobs.lanes_per_row as usize * knobs.vectors_per_lane * knobs.vector_size * 4
        }
        _ => 0,
    };
    if shared_bytes > hw.max_shared_memory_size {
        return bad(format!(
            "the knobs need {shared_bytes} bytes of shared memory, the device has {}",
            hw.max_shared_memory_size
        ));
    }
    if knobs.max_cubes == Some(0) {
        return bad("max_cubes must be at least 1".into());
    }
    // A ticketed walk draws a ticket per `groups_per_ticket` groups and then at most two more
    // per cube (u32 tickets).
    let (groups, cubes) = knobs.groups_and_cubes(problem.rows, hw.max_cube_count.0 as usize);
    let per_ticket = knobs.groups_per_ticket as usize;
    if per_ticket > 0 && groups.div_ceil(per_ticket) + 2 * cubes >= u32::MAX as usize {
        return bad(format!(
            "the ticketed walk (`.tk{per_ticket}`) counts tickets in 32 bits: {groups} groups \
             of {} rows are too many; use more groups per ticket or a fixed stride",
            knobs.rows_per_step()
        ));
    }
    if knobs.f32_cache && !knobs.prefetch {
        return bad(
            "f32_cache (`.f32`) converts the words staged by prefetch: it needs prefetch (`.pf`)"
                .into(),
        );
    }
    if knobs.word_cache && knobs.f32_cache {
        return bad(
            "word_cache (`.wd`) and f32_cache (`.f32`) are two forms of the register cache: \
             choose one"
                .into(),
        );
    }
    let x_bytes = elem_sizes.first().copied().unwrap_or(0) * knobs.vector_size;
    if knobs.word_cache && (!knobs.caches_row(problem.channels) || !x_bytes.is_multiple_of(4)) {
        return bad(format!(
            "word_cache (`.wd`) needs the register cache (vectors_per_lane {} x lanes_per_row {} \
             x vector_size {} >= C = {}) and vectors of whole 32-bit words (this x: {x_bytes} \
             bytes)",
            knobs.vectors_per_lane, knobs.lanes_per_row, knobs.vector_size, problem.channels
        ));
    }
    if knobs.prefetch {
        if !knobs.caches_row(problem.channels) || !x_bytes.is_multiple_of(4) {
            return bad(format!(
                "prefetch needs the register cache (vectors_per_lane {} x lanes_per_row {} x \
                 vector_size {} >= C = {}) and vectors of whole 32-bit words (this x: {x_bytes} \
                 bytes)",
                knobs.vectors_per_lane, knobs.lanes_per_row, knobs.vector_size, problem.channels
            ));
        }
        let staged = cfg.units_per_cube() as usize
            * knobs.rows_per_unit as usize
            * knobs.vectors_per_lane
            * x_bytes;
        if shared_bytes + staged > hw.max_shared_memory_size {
            return bad(format!(
                "prefetch stages {staged} bytes per cube in shared memory (plus {shared_bytes}); \
                 the device has {}",
                hw.max_shared_memory_size
            ));
        }
    }
    Ok(())
}

/// Launches the row kernel on `client`. `x` and `out` hold `rows * channels` elements of
/// `x_type`, `gamma` holds `channels` elements of `gamma_type`. Does nothing for zero rows.
#[allow(clippy::too_many_arguments)]
pub fn launch_forward(
    client: &Client,
    x: Handle,
    gamma: Handle,
    out: Handle,
    x_type: ElemType,
    gamma_type: ElemType,
    problem: RowsProblem,
    norm: NormParams,
    activation: Activation,
    knobs: &Knobs,
) -> Result<(), ForwardError> {
    let target = OutputTarget {
        handle: out,
        kind: Output::Input,
        elem: x_type,
        scale: 1.0,
        amax: None,
    };
    launch_forward_to(
        client, x, gamma, target, x_type, gamma_type, problem, norm, activation, knobs,
    )
}

/// Where and how the row kernel writes.
#[derive(Clone, Debug)]
pub struct OutputTarget {
    pub handle: Handle,
    pub kind: Output,
    /// The output element type (`x`'s for [`Output::Input`], `e4m3` for FP8).
    pub elem: ElemType,
    /// The FP8 quantisation scale (`q = sat(y * scale)`); ignored for [`Output::Input`].
    pub scale: f32,
    /// Where [`Output::Fp8E4M3WithAmax`] writes `max |y|` (one f32).
    pub amax: Option<Handle>,
}

impl OutputTarget {
    /// FP8 E4M3 codes `sat_RN_e4m3(y * scale)` into `handle`, and `max |y|` into `amax` if
    /// given.
    pub fn fp8(handle: Handle, scale: f32, amax: Option<Handle>) -> Self {
        Self {
            handle,
            kind: if amax.is_some() {
                Output::Fp8E4M3WithAmax
            } else {
                Output::Fp8E4M3
            },
            elem: ElemType::Float(cubecl::ir::FloatKind::E4M3),
            scale,
            amax,
        }
    }
}

/// [`launch_forward`] with an FP8 E4M3 output: `out` receives `rows * channels` bytes
/// `q = sat_RN_e4m3(y * scale)`.
#[allow(clippy::too_many_arguments)]
pub fn launch_forward_fp8(
    client: &Client,
    x: Handle,
    gamma: Handle,
    out: Handle,
    x_type: ElemType,
    gamma_type: ElemType,
    problem: RowsProblem,
    norm: NormParams,
    activation: Activation,
    scale: f32,
    knobs: &Knobs,
) -> Result<(), ForwardError> {
    let target = OutputTarget::fp8(out, scale, None);
    launch_forward_to(
        client, x, gamma, target, x_type, gamma_type, problem, norm, activation, knobs,
    )
}

/// [`launch_forward_fp8`] that also writes `amax = max |y|` over the whole tensor (before
/// scaling; NaN if any `y` is NaN) to the first f32 of `amax`: each unit keeps its maximum in a
/// register, a second small kernel reduces them (no atomics).
#[allow(clippy::too_many_arguments)]
pub fn launch_forward_fp8_amax(
    client: &Client,
    x: Handle,
    gamma: Handle,
    out: Handle,
    amax: Handle,
    x_type: ElemType,
    gamma_type: ElemType,
    problem: RowsProblem,
    norm: NormParams,
    activation: Activation,
    scale: f32,
    knobs: &Knobs,
) -> Result<(), ForwardError> {
    let target = OutputTarget::fp8(out, scale, Some(amax));
    launch_forward_to(
        client, x, gamma, target, x_type, gamma_type, problem, norm, activation, knobs,
    )
}

/// Launches the row kernel writing to `target` (what the other `launch_forward*` functions
/// call).
#[allow(clippy::too_many_arguments)]
pub fn launch_forward_to(
    client: &Client,
    x: Handle,
    gamma: Handle,
    target: OutputTarget,
    x_type: ElemType,
    gamma_type: ElemType,
    problem: RowsProblem,
    norm: NormParams,
    activation: Activation,
    knobs: &Knobs,
) -> Result<(), ForwardError> {
    let out = target.handle;
    let RowsProblem {
        rows,
        channels,
        x_row_stride,
        out_row_stride,
    } = problem;
    if rows == 0 || channels == 0 {
        if let Some(amax) = target.amax {
            crate::quant::write_f32(client, amax, 0.0);
        }
        return Ok(());
    }
    let offsets = [
        x.offset_start.unwrap_or(0),
        gamma.offset_start.unwrap_or(0),
        out.offset_start.unwrap_or(0),
    ];
    let sizes = [x_type.size(), gamma_type.size(), target.elem.size()];
    validate_knobs(client, knobs, problem, &offsets, &sizes)?;

    let vector_size = knobs.vector_size;
    let mut cfg = knobs.row_config_for(channels, activation, target.kind);
    cfg.saturating_cast = target.kind.is_fp8() && has_ptx_math(client);
    cfg.bf16_input = x_type == ElemType::Float(cubecl::ir::FloatKind::BF16);
    cfg.bf16_gamma = cfg.bf16_input
        && gamma_type == ElemType::Float(cubecl::ir::FloatKind::BF16)
        && vector_size.is_multiple_of(2);
    cfg.scale_foldable = target.scale <= RowConfig::MAX_FOLDED_SCALE;
    cfg.plane_width = reduction_plane_width(client);
    cfg.packed_fp8 = cfg.saturating_cast
        && vector_size.is_multiple_of(4)
        && crate::select::device_sm(client).is_some_and(|sm| sm >= 89);
    let vecs_per_row = channels / vector_size;
    let max_grid = client.properties().hardware.max_cube_count.0 as usize;
    let (groups, cubes) = knobs.groups_and_cubes(rows, max_grid);
    cfg.gamma_after_x = cfg.loads_gamma_after_x(cubes >= groups);
    let x_len = (rows - 1) * x_row_stride / vector_size + vecs_per_row;
    let out_len = (rows - 1) * out_row_stride / vector_size + vecs_per_row;
    let address_type = AddressType::from_len(x_len.max(out_len) * vector_size);
    // The output seen as 32-bit words, one vector of words per output vector (packed FP8 only;
    // the unused view is a 1-element placeholder of the same buffer).
    let (out_words_per_vector, out_words_len, out_len_typed) = if cfg.packed_fp8 {
        (vector_size / 4, out_len, 1)
    } else {
        (1, 1, out_len)
    };

    // `x` seen as vectors of 32-bit words, one per vector of `x` (prefetch and `word_cache`
    // only; validated).
    // (The word type is also gamma's with `bf16_gamma`; the buffer stays a placeholder then.)
    let (words_per_vector, words_len) = if cfg.prefetch || cfg.word_cache {
        (vector_size * x_type.size() / 4, x_len)
    } else if cfg.bf16_gamma {
        (vector_size / 2, 1)
    } else {
        (1, 1)
    };
    log::debug!(
        "rms_norm_rows: rows={rows} C={channels} {x_type:?}/{gamma_type:?} knobs={knobs:?} \
         cubes={cubes}"
    );
    // One max per unit for amax; a 1-word placeholder otherwise (never written).
    let units = cfg.units_per_cube() as usize;
    let partial_len = if target.amax.is_some() {
        cubes * units
    } else {
        1
    };
    let partial = client.empty(partial_len * 4);
    // The ticket counters (a 1-word placeholder when the walk has a fixed stride; never read).
    let (tickets, tickets_len) = if cfg.groups_per_ticket > 0 {
        (crate::tickets::ticket_counters(client), 2)
    } else {
        (partial.clone(), 1)
    };
    unsafe {
        rms_norm_rows::launch_unchecked(
            client,
            CubeCount::new_1d(cubes as u32),
            cube_dim(&cfg),
            address_type,
            vector_size,
            words_per_vector,
            out_words_per_vector,
            BufferArg::from_raw_parts(x.clone(), x_len),
            BufferArg::from_raw_parts(x, words_len),
            BufferArg::from_raw_parts(gamma, vecs_per_row),
            BufferArg::from_raw_parts(out.clone(), out_len_typed),
            BufferArg::from_raw_parts(out, out_words_len),
            BufferArg::from_raw_parts(partial.clone(), partial_len),
            BufferArg::from_raw_parts(tickets, tickets_len),
            rows,
            vecs_per_row,
            x_row_stride / vector_size,
            out_row_stride / vector_size,
            (1.0f64 / channels as f64) as f32,
            norm.eps,
            norm.floor,
            target.scale,
            silu_constant(target.scale, &cfg),
            cfg,
            [x_type, gamma_type, target.elem],
        );
        if let Some(amax) = target.amax {
            let max_units = client.properties().hardware.max_units_per_cube.max(1);
            let threads = if max_units >= 256 {
                256
            } else {
                1 << max_units.ilog2()
            };
            rms_norm_reduce_amax::launch_unchecked(
                client,
                CubeCount::new_1d(1),
                CubeDim::new_1d(threads),
                BufferArg::from_raw_parts(partial, partial_len),
                BufferArg::from_raw_parts(amax, 1),
                partial_len,
                threads,
            );
        }
    }
    Ok(())
}
