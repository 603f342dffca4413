//! The channels-first forward: one cube per tile of positions x all channels (or a persistent
//! walk over the tiles), x kept in registers, the channel groups' sums of squares through
//! plane shuffles and one shared-memory step; its launch and its shape heuristics.

use cubecl::ir::{AddressType, ElemType};
use cubecl::prelude::*;
use cubecl::server::Handle;

use super::{
    ChannelsConfig, ChannelsLimits, ChannelsProblem, channel_groups_sum, group_sum_len, load_gamma,
    next_tile, plane_groups, tiled_shape, vector_for,
};
use crate::activation::{LOG2_E, activate, inv_rms_vector, silu_from_exponent};
use crate::device::{has_ptx_math, threads_per_sm};
use crate::params::{Activation, NormParams};
use crate::problem::{KernelError, RowOperands};
use crate::rescue::{prescale_vector, small_eps};
use crate::select::widest_vector;

/// Channels whose gamma a unit of the forward keeps in registers; a longer cache reads gamma
/// from shared memory (the registers go to x).
const GAMMA_REGISTERS: usize = 16;

#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn rms_norm_channels<E: Float, G: Float, N: Size>(
    x: &[Vector<E, N>],
    gamma: &[G],
    out: &mut [Vector<E, N>],
    tiles: usize,
    tiles_per_batch: usize,
    position_vectors: usize,
    channels: usize,
    x_batch_stride: usize,
    x_channel_stride: usize,
    out_batch_stride: usize,
    out_channel_stride: usize,
    inv_channels: f32,
    eps: f32,
    floor: f32,
    #[comptime] cfg: ChannelsConfig,
    #[define(E, G)] _types: [ElemType; 2],
) {
    let px = comptime![cfg.position_units as usize];
    let groups = comptime![cfg.channel_groups as usize];
    let cpu = comptime![cfg.channels_per_unit];
    let cache = comptime![if cpu > 0 { cpu } else { 1 }];
    let mut shared = Shared::<[Vector<f32, N>]>::new_slice(comptime![group_sum_len(cfg)]);
    let ux = UNIT_POS_X as usize;
    let cy = UNIT_POS_Y as usize;
    let small = small_eps(eps, floor);
    // This unit's gamma, kept for every tile it visits: in registers for a few channels, else
    // (a long register cache of x) in shared memory as f32, filled once per cube.
    let gamma_in_registers = comptime![cpu <= GAMMA_REGISTERS];
    let mut g = Array::<f32>::new(comptime![if gamma_in_registers { cache } else { 1 }]);
    let mut g_shared =
        Shared::<[f32]>::new_slice(comptime![if gamma_in_registers { 1 } else { cpu * groups }]);
    let mut xs = Array::<Vector<E, N>>::new(cache);
    if comptime![cpu > 0 && gamma_in_registers && !cfg.single_tile] {
        load_gamma::<G>(gamma, &mut g, cy, channels, cfg);
    }
    if comptime![!gamma_in_registers] {
        let units = comptime![px * groups];
        let mut c = cy * px + ux;
        while c < comptime![cpu * groups] {
            g_shared[c] = 0.0f32;
            if c < channels {
                g_shared[c] = f32::cast_from(gamma[c]);
            }
            c += units;
        }
        sync_cube();
    }
    let mut tile = CUBE_POS;
    let mut parity = 0usize;
    let mut more = tile < tiles;
    while more {
        let batch = tile / tiles_per_batch;
        let p = (tile % tiles_per_batch) * px + ux;
        let active = p < position_vectors;
        let x_base = batch * x_batch_stride + p;
        let out_base = batch * out_batch_stride + p;
        // This unit's share of the sum of squares (its channels cached when they fit).
        let mut acc = Vector::<f32, N>::new(0.0f32);
        if comptime![cpu > 0] {
            // Every load unconditional (an inactive position or a channel past C reads a valid
            // element that is not used), so that all `cpu` loads are in flight together:
            // predicated loads were issued six at a time (the SM's seven predicate registers).
            // The addresses are a chain from the tile's base (not a per-channel offset that the
            // compiler would hoist out of the tile loop into `cpu` registers).
            let p_load = if active { p } else { position_vectors - 1 };
            let mut at = batch * x_batch_stride + p_load + cy * x_channel_stride;
            let last = x.len() - 1;
            #[unroll]
            for i in 0..cpu {
                xs[i] = x[if at < last { at } else { last }];
                at += groups * x_channel_stride;
            }
            if comptime![gamma_in_registers && cfg.single_tile] {
                load_gamma::<G>(gamma, &mut g, cy, channels, cfg);
            }
            #[unroll]
            for i in 0..cpu {
                if cy + i * groups < channels {
                    let f = Vector::<f32, N>::cast_from(xs[i]);
                    acc += f * f;
                }
            }
            if comptime![gamma_in_registers && cfg.single_tile] {
                // Gamma's loads tied to the sum (under a condition false at run time, unknown
                // to the compilers; see the backward): the SASS had one of them sunk past the
                // sum's barrier, its channel's output then waiting for it.
                let mut tie = 0.0f32;
                #[unroll]
                for i in 0..cpu {
                    tie += g[i];
                }
                if CUBE_POS_Y > 0 {
                    acc += Vector::new(tie);
                }
            }
        } else if active {
            let mut c = cy;
            while c < channels {
                let f = Vector::<f32, N>::cast_from(x[x_base + c * x_channel_stride]);
                acc += f * f;
                c += groups;
            }
        }
        // The channel groups meet in a fixed tree; one group needs no shared memory.
        let total = channel_groups_sum::<N>(acc, &mut shared, parity, cfg);
        parity = 1 - parity;
        if active {
            // Rare: positions whose fp32 total left the normal range are summed again, by this
            // unit alone over all C, with exactly scaled values (see `crate::rescue`).
            let pre = prescale_vector::<N>(total, small);
            let mut rescue = false;
            #[unroll]
            for k in 0..N::value() {
                rescue = rescue || pre.extract(k) != 1.0f32;
            }
            if rescue {
                let acc = channel_sum_sq::<E, N>(x, x_base, channels, x_channel_stride, pre);
                let r = inv_rms_vector::<N>(
                    acc,
                    inv_channels,
                    Vector::new(eps) * pre * pre,
                    Vector::new(floor) * pre * pre,
                );
                let r = position_scale::<N>(r, cfg);
                let mut c = cy;
                while c < channels {
                    let v = Vector::<f32, N>::cast_from(x[x_base + c * x_channel_stride]) * pre;
                    let gv = Vector::<f32, N>::new(f32::cast_from(gamma[c]));
                    let y = channels_output::<N>(v * r * gv, cfg);
                    out[out_base + c * out_channel_stride] = Vector::<E, N>::cast_from(y);
                    c += groups;
                }
            } else {
                let r =
                    inv_rms_vector::<N>(total, inv_channels, Vector::new(eps), Vector::new(floor));
                let r = position_scale::<N>(r, cfg);
                if comptime![cpu > 0] {
                    #[unroll]
                    for i in 0..cpu {
                        let c = cy + i * groups;
                        if c < channels {
                            let v = Vector::<f32, N>::cast_from(xs[i]);
                            let gi = if comptime![gamma_in_registers] {
                                g[i]
                            } else {
                                g_shared[c]
                            };
                            let y = channels_output::<N>(v * r * Vector::new(gi), cfg);
                            out[out_base + c * out_channel_stride] = Vector::<E, N>::cast_from(y);
                        }
                    }
                } else {
                    let mut c = cy;
                    while c < channels {
                        let v = Vector::<f32, N>::cast_from(x[x_base + c * x_channel_stride]);
                        let gv = Vector::<f32, N>::new(f32::cast_from(gamma[c]));
                        let y = channels_output::<N>(v * r * gv, cfg);
                        out[out_base + c * out_channel_stride] = Vector::<E, N>::cast_from(y);
                        c += groups;
                    }
                }
            }
        }
        tile += CUBE_COUNT;
        more = next_tile(tile, tiles, cfg);
    }
}

/// The per-position scale the outputs multiply by: times `-log2(e)` for the PTX SiLU, which
/// then works on `t = -y log2(e)` as the row kernel's (`activation::output_value`).
#[cube]
fn position_scale<N: Size>(r: Vector<f32, N>, #[comptime] cfg: ChannelsConfig) -> Vector<f32, N> {
    let mut s = r;
    if comptime![cfg.fast_math && cfg.activation == Activation::Silu] {
        s = r * Vector::new(-LOG2_E);
    }
    s
}

/// `act(y)` for `u = x * position_scale * gamma` (`u = -y log2(e)` for the PTX SiLU).
#[cube]
fn channels_output<N: Size>(u: Vector<f32, N>, #[comptime] cfg: ChannelsConfig) -> Vector<f32, N> {
    if comptime![cfg.fast_math && cfg.activation == Activation::Silu] {
        silu_from_exponent::<N>(u, f32::new(-LOG2_E))
    } else {
        activate::<N>(u, cfg.activation, cfg.fast_math)
    }
}

/// `sum_c (p * x[c])^2` over all channels for the `N` positions of one unit.
#[cube]
fn channel_sum_sq<E: Float, N: Size>(
    x: &[Vector<E, N>],
    x_base: usize,
    channels: usize,
    x_channel_stride: usize,
    p: Vector<f32, N>,
) -> Vector<f32, N> {
    let mut acc = Vector::<f32, N>::new(0.0f32);
    for c in 0..channels {
        let v = Vector::<f32, N>::cast_from(x[x_base + c * x_channel_stride]) * p;
        acc += v * v;
    }
    acc
}

/// Launches the channels-first kernel with [`channels_config`]'s shape; does nothing when
/// there is nothing to write. `out` is written at `problem`'s output strides.
pub fn launch_channels(
    client: &Client,
    operands: RowOperands,
    out: Handle,
    problem: ChannelsProblem,
    norm: NormParams,
    activation: Activation,
) -> Result<(), KernelError> {
    launch_channels_with(client, operands, out, problem, norm, activation, None)
}

/// [`launch_channels`] with an explicit launch shape (`None`: [`channels_config`]); its
/// activation is replaced by `activation`.
pub fn launch_channels_with(
    client: &Client,
    operands: RowOperands,
    out: Handle,
    problem: ChannelsProblem,
    norm: NormParams,
    activation: Activation,
    config: Option<ChannelsConfig>,
) -> Result<(), KernelError> {
    let RowOperands {
        x,
        gamma,
        x_type,
        gamma_type,
    } = operands;
    let p = problem;
    if p.batches == 0 || p.channels == 0 || p.positions == 0 {
        return Ok(());
    }
    let hw = &client.properties().hardware;
    let strides = [
        p.positions,
        p.x_batch_stride,
        p.x_channel_stride,
        p.out_batch_stride,
        p.out_channel_stride,
    ];
    let offsets = [&x, &out].map(|h| (h.offset_start.unwrap_or(0), x_type.size()));
    let widest = widest_vector(client, x_type.size(), &strides, &offsets);
    if p.x_channel_stride < p.positions || p.out_channel_stride < p.positions {
        return Err(KernelError::InvalidKnobs(format!(
            "channel strides ({}, {}) must be >= the positions per channel {}",
            p.x_channel_stride, p.out_channel_stride, p.positions
        )));
    }
    let cfg = match config {
        Some(cfg) => cfg,
        None => channels_config(
            client,
            p.channels,
            p.batches * p.positions,
            widest,
            activation,
        ),
    };
    let vector_size = vector_for(widest, &cfg)?;
    let position_vectors = p.positions / vector_size;
    let units = cfg.position_units * cfg.channel_groups;
    if !cfg.channel_groups.is_power_of_two()
        || cfg.position_units == 0
        || units > hw.max_units_per_cube
    {
        return Err(KernelError::InvalidKnobs(format!(
            "channels config {cfg:?}: channel groups must be a power of two and the cube at \
             most {} units",
            hw.max_units_per_cube
        )));
    }
    if cfg.fast_math && !has_ptx_math(client) {
        return Err(KernelError::InvalidKnobs(
            "channels: fast_math uses PTX instructions and needs a CUDA device".into(),
        ));
    }
    if cfg.prefetch {
        return Err(KernelError::InvalidKnobs(
            "channels: prefetch is a knob of the channels-first backward, not the forward".into(),
        ));
    }
    let px = cfg.position_units as usize;
    let tiles_per_batch = position_vectors.div_ceil(px);
    let tiles = p.batches * tiles_per_batch;
    let max_cubes = hw.num_streaming_multiprocessors.map_or(65_535, |sms| {
        sms as usize * (threads_per_sm(client) / (px * cfg.channel_groups as usize)).max(1)
    });
    let cubes = tiles.clamp(1, max_cubes.min(hw.max_cube_count.0 as usize));
    let cached = cfg.channels_per_unit * cfg.channel_groups as usize >= p.channels;
    let cfg = ChannelsConfig {
        channels_per_unit: if cached { cfg.channels_per_unit } else { 0 },
        activation,
        fast_math: cfg.fast_math && activation == Activation::Silu,
        plane_groups: plane_groups(client, cfg.position_units, cfg.channel_groups),
        single_tile: cfg.single_tile && cubes >= tiles,
        ..cfg
    };
    let x_len = (p.batches - 1) * p.x_batch_stride / vector_size
        + (p.channels - 1) * p.x_channel_stride / vector_size
        + position_vectors;
    let out_len = (p.batches - 1) * p.out_batch_stride / vector_size
        + (p.channels - 1) * p.out_channel_stride / vector_size
        + position_vectors;
    log::debug!("rms_norm_channels: {p:?} vector {vector_size} {cfg:?} cubes {cubes}");
    unsafe {
        rms_norm_channels::launch_unchecked(
            client,
            CubeCount::new_1d(cubes as u32),
            CubeDim::new_2d(cfg.position_units, cfg.channel_groups),
            AddressType::from_len(x_len.max(out_len) * vector_size),
            vector_size,
            BufferArg::from_raw_parts(x, x_len),
            BufferArg::from_raw_parts(gamma, p.channels),
            BufferArg::from_raw_parts(out, out_len),
            tiles,
            tiles_per_batch,
            position_vectors,
            p.channels,
            p.x_batch_stride / vector_size,
            p.x_channel_stride / vector_size,
            p.out_batch_stride / vector_size,
            p.out_channel_stride / vector_size,
            (1.0f64 / p.channels as f64) as f32,
            norm.eps,
            norm.floor,
            cfg,
            [x_type, gamma_type],
        );
    }
    Ok(())
}

/// The channels-first launch shape for `channels` and `positions` positions in all (over the
/// batches), whose layout allows vectors of `widest` positions: [`tiled_channels_config`]; on
/// narrow shapes (fewer than 16 widest vectors per SM, GPU) vectors of at most 4 positions
/// and at most 8 channels per unit, down to 4 position units per cube (2026-12-01:
/// `[1, 384, 1, 60, 104]` 9.22 -> 8.38 us with `p4.g64.k6.v4`, the sweep's best of 45
/// once it tried 4 position units; before that 2-position vectors had won there).
///
/// Measured on the H200 (2026-12-01, `cargo bench --bench rmsnorm -- channels`, whose sweep
/// covers vectors of 2-8 positions, 8-256 position units and 1-64 channel groups): once its
/// loads were unconditional, the tiled form is within 1% of the sweep's best on
/// `[1, 96, 4, 480, 832]` (167 us, 1.06x copy) and `[1, 192, 4, 240, 416]` (88 us, 1.06x),
/// where the walked form (one unit per position vector, C read twice from memory) took 1.46x;
/// `[1, 384, 1, 60, 104]` (780 vectors of 8 positions) is fastest with 2-position vectors
/// (9.3 us, 4x the units, vs 10.5 us).
pub fn channels_config(
    client: &Client,
    channels: usize,
    positions: usize,
    widest: usize,
    activation: Activation,
) -> ChannelsConfig {
    let limits = ChannelsLimits::of(client);
    let narrow = limits.narrow(positions, widest);
    let (vector, cap) = if narrow {
        (widest.min(NARROW_VECTOR), NARROW_FORWARD_CAP)
    } else {
        (widest, limits.cap)
    };
    ChannelsConfig {
        max_vector: if narrow { vector } else { 0 },
        ..tiled_shape(&limits, channels, positions / vector, cap, activation)
    }
}

/// Positions per vector at most on [`ChannelsLimits::narrow`] shapes.
const NARROW_VECTOR: usize = 4;

/// Channels a unit caches at most on narrow shapes (forward): more channel groups, fewer
/// position units per cube, more cubes.
const NARROW_FORWARD_CAP: usize = 8;

/// The tiled launch shape: enough channel groups that a unit caches at most 16 channels (64 on
/// the CPU runtime, where a cube's units run one after another), at most 64 groups (beyond
/// that `channels_per_unit` is 0: C is walked twice from memory), and as many position units
/// as keep a cube at 256 units while the grid still has about two tiles per SM.
pub fn tiled_channels_config(
    client: &Client,
    channels: usize,
    position_vectors: usize,
    activation: Activation,
) -> ChannelsConfig {
    let limits = ChannelsLimits::of(client);
    tiled_shape(&limits, channels, position_vectors, limits.cap, activation)
}
