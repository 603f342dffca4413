//! The channels-first kernel: `x` viewed as `[B, C, S]` with the positions `S` contiguous
//! (`[B, C, T, H, W]` in PyTorch's default layout), normalised over C at stride `S`.
//!
//! A cube covers a tile of positions x all channels: unit `(px, cy)` owns one vector of `N`
//! consecutive positions (so the loads of a plane are contiguous along S) and every
//! `groups`-th channel from `cy`, which it keeps in registers, so x is read once; the channel
//! groups add their sums of squares with plane shuffles and one shared-memory step. Splitting
//! C over units, and narrow vectors of 2 positions, keep enough loads in flight when S is small
//! (a 60x104 frame has only 780 vectors of 8 positions). Very wide C (more than 64 groups x 16
//! channels) walks C twice; on large S the second walk mostly misses the L2 (the form that
//! walked C twice for every C read x twice from memory: 1.46x the copy on the Wan shapes).
//! (Channels-last memory presented as `[B, C, ...]` through strides is served by the row
//! kernel in `forward.rs` without this kernel.)

use cubecl::ir::{AddressType, ElemType, FloatKind};
use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::activation::{LOG2_E, activate, has_ptx_math, silu_from_exponent};
use crate::forward::{ForwardError, is_gpu};
use crate::params::{Activation, NormParams};
use crate::rescue::{prescale_vector, small_eps};
use crate::row_io::words_to_f32;
use crate::select::widest_vector;

/// Channels whose gamma a unit of the forward keeps in registers; a longer cache reads gamma
/// from shared memory (the registers go to x).
const GAMMA_REGISTERS: usize = 16;

/// `batches x channels x positions`, positions contiguous. Strides are in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChannelsProblem {
    pub batches: usize,
    pub channels: usize,
    pub positions: usize,
    pub x_batch_stride: usize,
    pub x_channel_stride: usize,
    pub out_batch_stride: usize,
    pub out_channel_stride: usize,
}

impl ChannelsProblem {
    /// A dense `[B, C, S]` tensor (input and output).
    pub fn dense(batches: usize, channels: usize, positions: usize) -> Self {
        Self {
            batches,
            channels,
            positions,
            x_batch_stride: channels * positions,
            x_channel_stride: positions,
            out_batch_stride: channels * positions,
            out_channel_stride: positions,
        }
    }
}

/// The comptime shape of a channels-first launch: a cube is `position_units x channel_groups`
/// units; unit `(px, cy)` owns one vector of positions and the channels `cy, cy + groups, ...`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct ChannelsConfig {
    /// Units along the positions (each one vector of `N` positions).
    pub position_units: u32,
    /// Units along C (a power of two); their partial sums meet in a shared-memory tree.
    pub channel_groups: u32,
    /// Channels each unit keeps in registers (x read once); 0 walks C twice from memory.
    pub channels_per_unit: usize,
    /// At most this many positions per unit vector (a power of two; 0: the widest the layout
    /// allows). Narrow vectors let a unit keep many channels in registers: 96 channels of 2
    /// bf16 positions are 96 registers, of 8 positions 384.
    pub max_vector: usize,
    /// Channel groups summed with plane shuffles before the shared-memory step (set by the
    /// launch: `32 / position_units` groups share a plane of 32 units on a GPU; 1 elsewhere).
    pub plane_groups: u32,
    /// Backward only (the forward refuses it): a cube loads its next tile's x and dy (as 32-bit
    /// words, into registers) before computing the current one, so the loads wait behind the
    /// arithmetic instead of the arithmetic behind the loads. Needs vectors of at least 4 bytes.
    pub prefetch: bool,
    /// Set by the launch: the input is bf16 (the prefetched words become f32 by shifts).
    pub bf16_input: bool,
    /// Where the grid has a cube for every tile (a narrow shape's one wave; the launch clears
    /// the flag elsewhere): each cube visits its one tile without a loop and loads gamma after
    /// x (and dy). The SASS of the loop form converted gamma right after its loads, before x's
    /// loads went out: a second memory round trip in front of every cube's only tile.
    pub single_tile: bool,
    pub activation: Activation,
    /// PTX SiLU and SiLU' (CUDA only), as the row kernel's `fast_math` knob; the heuristics
    /// take it on CUDA (`cargo bench --bench rmsnorm -- channels` times both).
    pub fast_math: bool,
}

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

/// Whether a cube has another tile after `tile` (never with [`ChannelsConfig::single_tile`]:
/// a constant `false` lets the compiler drop the loop).
#[cube]
fn next_tile(tile: usize, tiles: usize, #[comptime] cfg: ChannelsConfig) -> bool {
    let mut more = false;
    if comptime![!cfg.single_tile] {
        more = tile < tiles;
    }
    more
}

/// Gamma of this unit's cached channels (`cy, cy + groups, ...`) in registers as f32; 0 past C.
#[cube]
fn load_gamma<G: Float>(
    gamma: &[G],
    g: &mut Array<f32>,
    cy: usize,
    channels: usize,
    #[comptime] cfg: ChannelsConfig,
) {
    #[unroll]
    for i in 0..cfg.channels_per_unit {
        let c = cy + i * comptime![cfg.channel_groups as usize];
        g[i] = 0.0f32;
        if c < channels {
            g[i] = f32::cast_from(gamma[c]);
        }
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

/// `1 / sqrt(max(sum / C + eps, floor))` per position; a NaN mean stays NaN. (Callers scale
/// eps as `(eps * p) * p`: `p * p` alone overflows for the underflow prescale.)
#[cube]
fn inv_rms_vector<N: Size>(
    acc: Vector<f32, N>,
    inv_channels: f32,
    eps: Vector<f32, N>,
    floor: Vector<f32, N>,
) -> Vector<f32, N> {
    let d = acc * Vector::new(inv_channels) + eps;
    Vector::inverse_sqrt(select_many(d.less_than(&floor), floor, d))
}

/// Launches the channels-first kernel with [`channels_config`]'s shape; does nothing when
/// there is nothing to write.
#[allow(clippy::too_many_arguments)]
pub fn launch_channels(
    client: &Client,
    x: Handle,
    gamma: Handle,
    out: Handle,
    x_type: ElemType,
    gamma_type: ElemType,
    problem: ChannelsProblem,
    norm: NormParams,
    activation: Activation,
) -> Result<(), ForwardError> {
    launch_channels_with(
        client, x, gamma, out, x_type, gamma_type, problem, norm, activation, None,
    )
}

/// [`launch_channels`] with an explicit launch shape (`None`: [`channels_config`]); its
/// activation is replaced by `activation`.
#[allow(clippy::too_many_arguments)]
pub fn launch_channels_with(
    client: &Client,
    x: Handle,
    gamma: Handle,
    out: Handle,
    x_type: ElemType,
    gamma_type: ElemType,
    problem: ChannelsProblem,
    norm: NormParams,
    activation: Activation,
    config: Option<ChannelsConfig>,
) -> Result<(), ForwardError> {
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
        return Err(ForwardError::InvalidKnobs(format!(
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
        return Err(ForwardError::InvalidKnobs(format!(
            "channels config {cfg:?}: channel groups must be a power of two and the cube at \
             most {} units",
            hw.max_units_per_cube
        )));
    }
    if cfg.fast_math && !has_ptx_math(client) {
        return Err(ForwardError::InvalidKnobs(
            "channels: fast_math uses PTX instructions and needs a CUDA device".into(),
        ));
    }
    if cfg.prefetch {
        return Err(ForwardError::InvalidKnobs(
            "channels: prefetch is a knob of the channels-first backward, not the forward".into(),
        ));
    }
    let px = cfg.position_units as usize;
    let tiles_per_batch = position_vectors.div_ceil(px);
    let tiles = p.batches * tiles_per_batch;
    let max_cubes = hw.num_streaming_multiprocessors.map_or(65_535, |sms| {
        sms as usize * (2048 / (px * cfg.channel_groups as usize)).max(1)
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

/// How many channel groups of a position share a plane (see [`channel_groups_sum`]): units are
/// numbered `cy * position_units + ux`, so with planes of exactly 32 units and a power-of-two
/// `position_units` below 32, `32 / position_units` consecutive groups do; 1 without plane
/// operations (the CPU runtime).
fn plane_groups(client: &Client, position_units: u32, channel_groups: u32) -> u32 {
    let hw = &client.properties().hardware;
    let planes_of_32 = is_gpu(client) && hw.plane_size_min == 32 && hw.plane_size_max == 32;
    if planes_of_32 && position_units.is_power_of_two() && position_units < 32 {
        (32 / position_units).min(channel_groups)
    } else {
        1
    }
}

/// The positions per unit vector: the widest the layout allows (`widest`), at most the
/// config's `max_vector` (0: no limit), which must be a power of two.
fn vector_for(widest: usize, cfg: &ChannelsConfig) -> Result<usize, ForwardError> {
    match cfg.max_vector {
        0 => Ok(widest),
        v if v.is_power_of_two() => Ok(widest.min(v)),
        v => Err(ForwardError::InvalidKnobs(format!(
            "channels config: max_vector {v} must be 0 (the widest) or a power of two"
        ))),
    }
}

/// The channels-first launch shape for `channels` and `positions` positions in all (over the
/// batches), whose layout allows vectors of `widest` positions: [`tiled_channels_config`]; on
/// narrow shapes (fewer than 16 widest vectors per SM, GPU) vectors of at most 4 positions
/// and at most 8 channels per unit, down to 4 position units per cube (2026-12-01, tenth
/// session: `[1, 384, 1, 60, 104]` 9.22 -> 8.38 us with `p4.g64.k6.v4`, the sweep's best of 45
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

/// [`tiled_channels_config`] with at most `cap` channels cached per unit.
fn tiled_shape(
    limits: &ChannelsLimits,
    channels: usize,
    position_vectors: usize,
    cap: usize,
    activation: Activation,
) -> ChannelsConfig {
    shape_for_units(
        limits,
        channels,
        position_vectors,
        cap,
        |_| limits.max_units,
        4,
        activation,
    )
}

/// The tiled shape in cubes of `units(groups)` units (at most the device's): enough channel
/// groups that a unit caches at most `cap` channels, then position units (halved, down to
/// `min_px`, while the grid has fewer than about two tiles per SM).
fn shape_for_units(
    limits: &ChannelsLimits,
    channels: usize,
    position_vectors: usize,
    cap: usize,
    units: impl Fn(usize) -> usize,
    min_px: usize,
    activation: Activation,
) -> ChannelsConfig {
    let groups = channels
        .div_ceil(cap)
        .next_power_of_two()
        .clamp(1, 64.min(limits.max_units));
    let per_unit = channels.div_ceil(groups);
    let mut px = (units(groups).min(limits.max_units) / groups).max(1);
    while px > min_px && position_vectors.div_ceil(px) < 2 * limits.sms {
        px /= 2;
    }
    ChannelsConfig {
        position_units: px as u32,
        channel_groups: groups as u32,
        channels_per_unit: if per_unit <= cap { per_unit } else { 0 },
        max_vector: 0,
        plane_groups: 1,
        prefetch: false,
        bf16_input: false,
        single_tile: true,
        activation,
        fast_math: limits.ptx_math,
    }
}

/// What the channels launch shapes are sized by.
struct ChannelsLimits {
    /// A GPU with plane ops and planes of at least 32 units.
    gpu: bool,
    /// Channels a unit keeps in registers at most.
    cap: usize,
    /// Units per cube (a power of two).
    max_units: usize,
    sms: usize,
    /// The SiLU through PTX `ex2.approx` + `rcp.approx` (CUDA): 3-24% faster on the H200's
    /// channels-first shapes, forward and backward (2026-11-30).
    ptx_math: bool,
}

impl ChannelsLimits {
    /// A GPU shape of fewer than 16 vectors of `widest` positions per SM: about one wave of
    /// small tiles, where latency (not bandwidth) sets the time.
    fn narrow(&self, positions: usize, widest: usize) -> bool {
        self.gpu && positions / widest < 16 * self.sms
    }

    fn of(client: &Client) -> Self {
        let hw = &client.properties().hardware;
        let gpu = is_gpu(client);
        let (cap, max_units) = if gpu { (16, 256) } else { (64, 64) };
        Self {
            gpu,
            cap,
            max_units: 1 << max_units.min(hw.max_units_per_cube as usize).max(1).ilog2(),
            sms: hw.num_streaming_multiprocessors.unwrap_or(1) as usize,
            ptx_math: has_ptx_math(client),
        }
    }
}

/// Sum over the channel groups of a cube column; every unit gets its column's total, the same
/// value in every unit (a fixed order). All units of the cube must call it (uniformly).
///
/// The `plane_groups` groups of a plane first meet in a shuffle butterfly (no barrier); one
/// unit per plane and position then writes the plane's sum to shared memory, and after one
/// barrier every unit adds the planes' sums in order. The two halves of `shared` alternate
/// (`buffer` 0 or 1): a unit writes one half only after the barrier of the other half, which
/// every unit passes after reading this one, so one barrier per sum suffices (a tree took
/// `log2(groups) + 2`).
#[cube]
#[allow(clippy::manual_is_multiple_of)] // `is_multiple_of` is not a cube operation
fn channel_groups_sum<N: Size>(
    v: Vector<f32, N>,
    shared: &mut Shared<[Vector<f32, N>]>,
    buffer: usize,
    #[comptime] cfg: ChannelsConfig,
) -> Vector<f32, N> {
    let px = comptime![cfg.position_units as usize];
    let groups = comptime![cfg.channel_groups as usize];
    let in_plane = comptime![cfg.plane_groups as usize];
    let planes = comptime![groups / in_plane];
    let ux = UNIT_POS_X as usize;
    let cy = UNIT_POS_Y as usize;
    let mut total = v;
    if comptime![in_plane > 1] {
        let steps = comptime![(in_plane as u32).trailing_zeros()];
        #[unroll]
        for k in 0..steps {
            let other = plane_shuffle_xor(total, comptime![(px << k) as u32]);
            total += other;
        }
    }
    if comptime![planes > 1] {
        let half = buffer * comptime![planes * px];
        if cy % in_plane == 0 {
            shared[half + (cy / in_plane) * px + ux] = total;
        }
        sync_cube();
        total = shared[half + ux];
        #[unroll]
        for m in 1..planes {
            total += shared[half + m * px + ux];
        }
    }
    total
}

/// The backward's loads of one tile (this unit's position vector and channels) as 32-bit
/// words, as the unconditional loads of the plain path: an inactive position or a channel past
/// C reads a valid word vector that is not used.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_tile_words<W: Size>(
    x_words: &[Vector<u32, W>],
    dy_words: &[Vector<u32, W>],
    next_x: &mut Array<Vector<u32, W>>,
    next_dy: &mut Array<Vector<u32, W>>,
    tile: usize,
    tiles_per_batch: usize,
    position_vectors: usize,
    batch_stride: usize,
    channel_stride: usize,
    #[comptime] cfg: ChannelsConfig,
) {
    let px = comptime![cfg.position_units as usize];
    let groups = comptime![cfg.channel_groups as usize];
    let batch = tile / tiles_per_batch;
    let p = (tile % tiles_per_batch) * px + UNIT_POS_X as usize;
    let p_load = if p < position_vectors {
        p
    } else {
        position_vectors - 1
    };
    let mut at = batch * batch_stride + p_load + UNIT_POS_Y as usize * channel_stride;
    let last = x_words.len() - 1;
    #[unroll]
    for i in 0..cfg.channels_per_unit {
        let a = if at < last { at } else { last };
        next_x[i] = x_words[a];
        next_dy[i] = dy_words[a];
        at += groups * channel_stride;
    }
}

/// Shared-memory length of [`channel_groups_sum`]: two halves of one vector per plane and
/// position unit.
fn group_sum_len(cfg: ChannelsConfig) -> usize {
    2 * (cfg.channel_groups / cfg.plane_groups.max(1)) as usize * cfg.position_units as usize
}

/// Most f32 slots (16 KiB) the channels-first backward's final dgamma sum stages in shared
/// memory per round.
const DG_ROUND_SLOTS: usize = 4096;

/// Cached channels per unit that one round of the backward's final dgamma sum stages.
fn dg_round_channels(cfg: ChannelsConfig) -> usize {
    let units = (cfg.position_units * cfg.channel_groups) as usize;
    (DG_ROUND_SLOTS / units).clamp(1, cfg.channels_per_unit)
}

/// The channels-first backward (dense `[B, C, S]` x, dy, dx): the forward's tiling with the
/// unit's channels of x and dy in registers, two channel-group sums per tile (sum of squares,
/// then `sum_c du gamma xhat`), `dx = r (du gamma - xhat mean_C(du gamma xhat))` (`r du gamma`
/// where the floor clamps), and per-cube `dgamma` partials, column-major in vectors of
/// `dgamma_vector` channels as [`crate::backward::rms_norm_reduce_dgamma`] reads them
/// (channel `c` at `((c / dgamma_vector) * CUBE_COUNT + CUBE_POS) * dgamma_vector + c %
/// dgamma_vector`): each
/// unit adds its positions' `du xhat` in registers, the position units of a cube meet in a
/// shared-memory tree. No rescue of out-of-range sums of squares (as the row backward).
#[allow(clippy::too_many_arguments, clippy::collapsible_if)] // comptime branches hold runtime ones
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn rms_norm_channels_backward<E: Float, G: Float, N: Size, W: Size>(
    x: &[Vector<E, N>],
    gamma: &[G],
    dy: &[Vector<E, N>],
    x_words: &[Vector<u32, W>],
    dy_words: &[Vector<u32, W>],
    dx: &mut [Vector<E, N>],
    partial: &mut [f32],
    tiles: usize,
    tiles_per_batch: usize,
    position_vectors: usize,
    channels: usize,
    batch_stride: usize,
    channel_stride: usize,
    dgamma_vector: usize,
    inv_channels: f32,
    eps: f32,
    floor: f32,
    #[comptime] cfg: ChannelsConfig,
    #[define(E, G)] _types: [ElemType; 2],
) {
    let px = comptime![cfg.position_units as usize];
    let groups = comptime![cfg.channel_groups as usize];
    let cpu = comptime![cfg.channels_per_unit];
    let mut shared = Shared::<[Vector<f32, N>]>::new_slice(comptime![group_sum_len(cfg)]);
    let mut dg_shared = Shared::<[f32]>::new_slice(comptime![px * groups * dg_round_channels(cfg)]);
    let ux = UNIT_POS_X as usize;
    let cy = UNIT_POS_Y as usize;
    let mut g = Array::<f32>::new(cpu);
    let mut dg = Array::<f32>::new(cpu);
    let mut xs = Array::<Vector<f32, N>>::new(cpu);
    let mut dus = Array::<Vector<f32, N>>::new(cpu);
    // dy as loaded (without prefetch): converted after the first sum, which needs only x (fewer
    // registers while the loads are in flight).
    let mut dys = Array::<Vector<E, N>>::new(comptime![if cfg.prefetch { 1 } else { cpu }]);
    #[unroll]
    for i in 0..cpu {
        dg[i] = 0.0f32;
    }
    if comptime![!cfg.single_tile] {
        load_gamma::<G>(gamma, &mut g, cy, channels, cfg);
    }
    // The next tile's x and dy as words (prefetch): loaded one tile ahead.
    let ahead = comptime![if cfg.prefetch { cpu } else { 1 }];
    let mut next_x = Array::<Vector<u32, W>>::new(ahead);
    let mut next_dy = Array::<Vector<u32, W>>::new(ahead);
    let mut tile = CUBE_POS;
    if comptime![cfg.prefetch] {
        if tile < tiles {
            load_tile_words::<W>(
                x_words,
                dy_words,
                &mut next_x,
                &mut next_dy,
                tile,
                tiles_per_batch,
                position_vectors,
                batch_stride,
                channel_stride,
                cfg,
            );
        }
        if comptime![cfg.single_tile] {
            load_gamma::<G>(gamma, &mut g, cy, channels, cfg);
        }
    }
    let mut more = tile < tiles;
    while more {
        let batch = tile / tiles_per_batch;
        let p = (tile % tiles_per_batch) * px + ux;
        let active = p < position_vectors;
        let base = batch * batch_stride + p;
        let mut acc = Vector::<f32, N>::new(0.0f32);
        if comptime![cfg.prefetch] {
            // This tile's words arrived during the last tile's arithmetic; the next tile's
            // loads go out before any arithmetic on this one.
            #[unroll]
            for i in 0..cpu {
                xs[i] = words_to_f32::<E, N, W>(next_x[i], cfg.bf16_input);
                dus[i] = words_to_f32::<E, N, W>(next_dy[i], cfg.bf16_input);
            }
            let next = tile + CUBE_COUNT;
            if next_tile(next, tiles, cfg) {
                load_tile_words::<W>(
                    x_words,
                    dy_words,
                    &mut next_x,
                    &mut next_dy,
                    next,
                    tiles_per_batch,
                    position_vectors,
                    batch_stride,
                    channel_stride,
                    cfg,
                );
            }
        } else {
            // Unconditional loads (as the forward's: all in flight together, addresses
            // chained); an inactive position or a channel past C reads a valid element that is
            // not used (a channel past C is zeroed).
            let p_load = if active { p } else { position_vectors - 1 };
            let mut at = batch * batch_stride + p_load + cy * channel_stride;
            let last = x.len() - 1;
            #[unroll]
            for i in 0..cpu {
                let a = if at < last { at } else { last };
                xs[i] = Vector::<f32, N>::cast_from(x[a]);
                dys[i] = dy[a];
                at += groups * channel_stride;
            }
            if comptime![cfg.single_tile] {
                load_gamma::<G>(gamma, &mut g, cy, channels, cfg);
            }
        }
        #[unroll]
        for i in 0..cpu {
            if cy + i * groups >= channels {
                xs[i] = Vector::<f32, N>::new(0.0f32);
                if comptime![cfg.prefetch] {
                    dus[i] = Vector::<f32, N>::new(0.0f32);
                }
            }
            acc += xs[i] * xs[i];
        }
        if comptime![!cfg.prefetch] {
            // dy's loads are tied to the first sum, or the compiler sinks them (read-only loads)
            // past its barrier, to their first use: a second memory round trip per tile. The
            // tie adds the first value of each dy vector under a condition that is false at run
            // time (the grid is one-dimensional) but unknown to the compilers (the cube's shape
            // is comptime, cubecl folds `UNIT_POS_Z`; the grid's is not).
            let mut tie = 0.0f32;
            #[unroll]
            for i in 0..cpu {
                tie += f32::cast_from(dys[i].extract(0usize));
                if comptime![cfg.single_tile] {
                    // Gamma, loaded after x and dy on a single tile, likewise.
                    tie += g[i];
                }
            }
            if CUBE_POS_Y > 0 {
                acc += Vector::new(tie);
            }
        }
        let sum_sq = channel_groups_sum::<N>(acc, &mut shared, 0, cfg);
        if comptime![!cfg.prefetch] {
            // dy as loaded, 0 past C (with prefetch: zeroed with x above).
            #[unroll]
            for i in 0..cpu {
                dus[i] = Vector::<f32, N>::cast_from(dys[i]);
                if cy + i * groups >= channels {
                    dus[i] = Vector::<f32, N>::new(0.0f32);
                }
            }
        }
        let d = sum_sq * Vector::new(inv_channels) + Vector::new(eps);
        let fl = Vector::<f32, N>::new(floor);
        let clamped = d.less_than(&fl);
        let r = Vector::inverse_sqrt(select_many(clamped, fl, d));
        let mut acc2 = Vector::<f32, N>::new(0.0f32);
        #[unroll]
        for i in 0..cpu {
            let gv = Vector::<f32, N>::new(g[i]);
            let xhat = xs[i] * r;
            let du = crate::backward::activation_grad::<N>(
                dus[i],
                xhat * gv,
                cfg.activation,
                cfg.fast_math,
            );
            dus[i] = du;
            acc2 += du * gv * xhat;
        }
        let dot = channel_groups_sum::<N>(acc2, &mut shared, 1, cfg);
        let zero = Vector::<f32, N>::new(0.0f32);
        let mean = select_many(clamped, zero, dot * Vector::new(inv_channels));
        #[unroll]
        for i in 0..cpu {
            let c = cy + i * groups;
            if active && c < channels {
                let gv = Vector::<f32, N>::new(g[i]);
                let xhat = xs[i] * r;
                dx[base + c * channel_stride] =
                    Vector::<E, N>::cast_from((dus[i] * gv - xhat * mean) * r);
                let contribution = dus[i] * xhat;
                #[unroll]
                for k in 0..N::value() {
                    dg[i] += contribution.extract(k);
                }
            }
        }
        tile += CUBE_COUNT;
        more = next_tile(tile, tiles, cfg);
    }
    // The cube's position units add their dgamma partials: each unit's channels go to shared
    // memory (channel `c`'s `px` partials side by side), then after one barrier unit `u` adds
    // channels `u, u + units, ...` over the positions in order (a fixed order). Channels are
    // taken [`DG_ROUND_SLOTS`] / units per unit at a time, which bounds the shared memory.
    let units = comptime![px * groups];
    let chunk = comptime![dg_round_channels(cfg)];
    let rounds = comptime![cpu.div_ceil(chunk)];
    let unit = UNIT_POS as usize;
    #[unroll]
    for round in 0..rounds {
        let first = comptime![round * chunk];
        let count = comptime![(cpu - round * chunk).min(chunk)];
        #[unroll]
        for i in 0..count {
            dg_shared[((i * groups) + cy) * px + ux] = dg[first + i];
        }
        sync_cube();
        let mut local = unit;
        while local < comptime![count * groups] {
            let c = first * groups + local;
            if c < channels {
                let mut total = 0.0f32;
                #[unroll]
                for q in 0..px {
                    total += dg_shared[local * px + q];
                }
                let column = c / dgamma_vector;
                partial[(column * CUBE_COUNT + CUBE_POS) * dgamma_vector + c
                    - column * dgamma_vector] = total;
            }
            local += units;
        }
        if comptime![round + 1 < rounds] {
            sync_cube();
        }
    }
}

/// The channels-first backward's launch shape: [`tiled_channels_config`] with every channel of
/// a unit in registers; `None` when C is wider than that (the caller falls back to composed
/// ops).
///
/// On a GPU: the next tile's x and dy prefetched as words (`prefetch`), a unit caching about 48
/// values of each tensor (6 channels of 8 positions up to C = 128, else 12 of 4), at least 8
/// position units per channel group and 128 units per cube where the groups allow it. These
/// are the winners of the `channels` bench's sweep on the H200 (2026-12-01, ninth session):
/// `[1, 96, 4, 480, 832]` `p8.g16.k6.v8.pf` 339 -> 265 us (1.13x the copy of its 6 bytes per
/// element), `[1, 192, 4, 240, 416]` `p8.g16.k12.v4.pf` 193 -> 170 us (1.40x),
/// `[1, 384, 1, 60, 104]` `p8.g32.k12.v4.pf` 23.0 -> 21.8 us. Narrow shapes (about one tile
/// per cube, [`ChannelsLimits::narrow`]) take the same cache without prefetch and down to 4
/// position units per cube (tenth session: `[1, 384, 1, 60, 104]` `p4.g32.k12.v4` 17.7 us
/// against 19.4 us with prefetch, the sweep's best; 14.3 us once it ran as one tile per cube,
/// 2026-12-03). Without prefetch (2-byte inputs
/// with vectors of one position, C above 768, and the CPU runtime) the unit caches 6 channels
/// of at most 4 positions up to C = 192, else up to 16 channels.
pub fn channels_backward_config(
    client: &Client,
    channels: usize,
    positions: usize,
    widest: usize,
    activation: Activation,
) -> Option<ChannelsConfig> {
    /// Values of x (and of dy) a unit caches with prefetch: 6 x 8 or 12 x 4.
    const PREFETCH_VALUES: usize = 48;
    const NARROW_CAP: usize = 6;
    let limits = ChannelsLimits::of(client);
    if limits.gpu && widest >= 2 {
        // About one tile per cube on narrow shapes: nothing to prefetch; more, smaller cubes.
        let narrow = limits.narrow(positions, widest);
        // Narrow shapes run one tile per cube (`single_tile`), which issues x, dy and gamma
        // together but holds every load's registers at once: `[1, 384, 1, 60, 104]`
        // `p4.g32.k12.v4` (168 registers, 3 cubes per SM: one wave) 14.3 us, the sweep's best,
        // against `p2.g64.k6.v8` 16.6 us (226 registers: two waves) or 15.1 us as a loop
        // (H200, 2026-12-03).
        let vector = widest.min(if channels <= 128 { 8 } else { 4 });
        let min_position_units = if narrow { 4 } else { 8 };
        let cfg = shape_for_units(
            &limits,
            channels,
            positions / vector,
            PREFETCH_VALUES / vector,
            |groups| (8 * groups).max(128),
            min_position_units,
            activation,
        );
        if cfg.channels_per_unit > 0 {
            return Some(ChannelsConfig {
                max_vector: vector,
                prefetch: !narrow,
                ..cfg
            });
        }
    }
    let cfg = if limits.gpu && channels.div_ceil(NARROW_CAP).next_power_of_two() <= 32 {
        let vector = widest.min(4);
        ChannelsConfig {
            max_vector: vector,
            ..tiled_shape(
                &limits,
                channels,
                positions / vector,
                NARROW_CAP,
                activation,
            )
        }
    } else {
        tiled_shape(
            &limits,
            channels,
            positions / widest,
            limits.cap,
            activation,
        )
    };
    (cfg.channels_per_unit > 0).then_some(cfg)
}

/// Launches the channels-first backward on dense `[B, C, S]` x, dy and dx (`dgamma` `[C]` of
/// `gamma_type`); `config` `None` takes [`channels_backward_config`]. Refuses C too wide for
/// the register cache and shapes that do not fit the device.
#[allow(clippy::too_many_arguments)]
pub fn launch_channels_backward(
    client: &Client,
    x: Handle,
    gamma: Handle,
    dy: Handle,
    dx: Handle,
    dgamma: Handle,
    x_type: ElemType,
    gamma_type: ElemType,
    batches: usize,
    channels: usize,
    positions: usize,
    norm: NormParams,
    activation: Activation,
    config: Option<ChannelsConfig>,
) -> Result<(), ForwardError> {
    let refuse = |why: String| Err(ForwardError::InvalidKnobs(why));
    if channels == 0 {
        return Ok(());
    }
    let hw = &client.properties().hardware;
    let offsets = [&x, &dy, &dx].map(|h| (h.offset_start.unwrap_or(0), x_type.size()));
    let widest = widest_vector(client, x_type.size(), &[positions], &offsets);
    let cfg = match config {
        Some(cfg) => ChannelsConfig { activation, ..cfg },
        None => match channels_backward_config(
            client,
            channels,
            batches * positions,
            widest,
            activation,
        ) {
            Some(cfg) => cfg,
            None => {
                return refuse(format!(
                    "channels backward: C = {channels} is too wide for the register cache"
                ));
            }
        },
    };
    let vector_size = vector_for(widest, &cfg)?;
    let position_vectors = positions / vector_size;
    if cfg.fast_math && !has_ptx_math(client) {
        return refuse(
            "channels backward: fast_math uses PTX instructions and needs a CUDA device".into(),
        );
    }
    let units = cfg.position_units * cfg.channel_groups;
    if !cfg.position_units.is_power_of_two()
        || !cfg.channel_groups.is_power_of_two()
        || units > hw.max_units_per_cube
        || cfg.channels_per_unit * (cfg.channel_groups as usize) < channels
    {
        return refuse(format!(
            "channels backward config {cfg:?}: position units and channel groups must be powers \
             of two, the cube at most {} units, and every channel cached",
            hw.max_units_per_cube
        ));
    }
    let vector_bytes = vector_size * x_type.size();
    if cfg.prefetch && !vector_bytes.is_multiple_of(4) {
        return refuse(format!(
            "channels backward: prefetch loads 32-bit words, but the vectors here are \
             {vector_bytes} bytes ({vector_size} positions of {} bytes)",
            x_type.size()
        ));
    }
    let px = cfg.position_units as usize;
    let tiles_per_batch = position_vectors.div_ceil(px);
    let tiles = batches * tiles_per_batch;
    // Without a known SM count (the CPU runtime) at most 64 cubes, as the row backward: a cube
    // then walks several tiles (the prefetch's steady state is tested there too).
    let max_cubes = hw
        .num_streaming_multiprocessors
        .map_or(64, |sms| sms as usize * (2048 / units as usize).max(1));
    let cubes = tiles.clamp(1, max_cubes.min(hw.max_cube_count.0 as usize));
    let cfg = ChannelsConfig {
        plane_groups: plane_groups(client, cfg.position_units, cfg.channel_groups),
        bf16_input: x_type == ElemType::Float(FloatKind::BF16),
        single_tile: cfg.single_tile && cubes >= tiles,
        ..cfg
    };
    let len = batches * channels * position_vectors;
    // x and dy seen as vectors of 32-bit words, one per vector (prefetch; else a placeholder).
    let (words_per_vector, words_len) = if cfg.prefetch {
        (vector_bytes / 4, len.max(1))
    } else {
        (1, 1)
    };
    let partial = client.empty(cubes * channels * 4);
    // dgamma's columns in vectors of f32 partials (at most 16 bytes: 4) where C and dgamma's
    // offset allow (fewer, wider cubes in the reduction); the partials are laid out for them.
    let dgamma_offset = [(dgamma.offset_start.unwrap_or(0), gamma_type.size())];
    let dgamma_vector = widest_vector(client, 4, &[channels], &dgamma_offset);
    log::debug!(
        "rms_norm_channels_backward: B={batches} C={channels} S={positions} vector \
         {vector_size} {cfg:?} cubes {cubes}"
    );
    unsafe {
        rms_norm_channels_backward::launch_unchecked(
            client,
            CubeCount::new_1d(cubes as u32),
            CubeDim::new_2d(cfg.position_units, cfg.channel_groups),
            AddressType::from_len((len * vector_size).max(cubes * channels)),
            vector_size,
            words_per_vector,
            BufferArg::from_raw_parts(x.clone(), len.max(1)),
            BufferArg::from_raw_parts(gamma, channels),
            BufferArg::from_raw_parts(dy.clone(), len.max(1)),
            BufferArg::from_raw_parts(x, words_len),
            BufferArg::from_raw_parts(dy, words_len),
            BufferArg::from_raw_parts(dx, len.max(1)),
            BufferArg::from_raw_parts(partial.clone(), cubes * channels),
            tiles,
            tiles_per_batch,
            position_vectors,
            channels,
            channels * position_vectors,
            position_vectors,
            dgamma_vector,
            (1.0f64 / channels as f64) as f32,
            norm.eps,
            norm.floor,
            cfg,
            [x_type, gamma_type],
        );
    }
    crate::backward::launch_reduce_dgamma(
        client,
        partial,
        dgamma,
        gamma_type,
        cubes,
        channels / dgamma_vector,
        dgamma_vector,
    );
    Ok(())
}
