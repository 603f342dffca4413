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

use crate::activation::{LOG2_E, input_scale, inv_rms, output_value, silu_constant};
use crate::device::{has_ptx_math, reduction_plane_width};
use crate::fp8_out::{e4m3_words, encode, nan_max, vector_amax};
use crate::knobs::{GammaIn, Knobs, LaneReduce, RowConfig};
use crate::lanes::{RowStep, lane_sums, rows_seen, unit_lane, unit_row};
use crate::params::{Activation, NormParams, Output};
use crate::problem::{KernelError, RowOperands, RowsProblem};
use crate::rescue::{prescale, small_eps};
use crate::row_io::{
    RowLayout, add_squares, cached, in_row, load_gamma_registers, load_index, load_rows,
    squares_total, stage_words, staged_to_f32, streamed_sum_sq, widen,
};
use crate::tickets::{WALK_WORDS, walk_advance, walk_draw, walk_finish, walk_next, walk_start};
use crate::validate::{cube_dim, validate_knobs};

mod launch;
mod store;

pub use launch::{DeviceScale, OutputTarget, launch_forward, launch_forward_to};
use store::{store_cached_row, store_streamed_row};

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
    device_scale: ComptimeOption<&[f32]>,
    decode_scale: ComptimeOption<&mut [f32]>,
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
    // FP8 with its scale on the device (delayed scaling): `device_scale[0]` replaces the
    // parameter, and the first unit writes the quantised tensor's decode scale `1 / scale`
    // (no host round trip; the launch never folds such a scale).
    let read: ComptimeOption<f32> = device_scale.map(|s| s[0]);
    let out_scale = read.unwrap_or_else(|| out_scale);
    let _: ComptimeOption<()> = decode_scale.map(|word| {
        if ABSOLUTE_POS == 0 {
            word[0] = 1.0f32 / out_scale;
        }
    });
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
                    RowLayout {
                        rows,
                        row_stride: x_row_stride,
                        vecs_per_row,
                    },
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
                        RowLayout {
                            rows,
                            row_stride: x_row_stride,
                            vecs_per_row,
                        },
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
                        RowLayout {
                            rows,
                            row_stride: x_row_stride,
                            vecs_per_row,
                        },
                        cfg,
                    );
                } else {
                    load_rows::<E, N>(
                        x,
                        &mut xs,
                        lane,
                        first_row,
                        RowLayout {
                            rows,
                            row_stride: x_row_stride,
                            vecs_per_row,
                        },
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
                RowStep {
                    lane,
                    y,
                    step_first_row,
                    rows: rows_here,
                    small_eps: small,
                },
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
                    RowStep {
                        lane,
                        y,
                        step_first_row,
                        rows: rows_here,
                        small_eps: small,
                    },
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
                RowStep {
                    lane,
                    y,
                    step_first_row,
                    rows: rows_here,
                    small_eps: small,
                },
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
                    RowStep {
                        lane,
                        y,
                        step_first_row,
                        rows: rows_here,
                        small_eps: small,
                    },
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
