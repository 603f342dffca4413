//! The channels-first backward: dx per tile as the forward's tiles, dgamma partials per cube
//! reduced in a fixed order (the row backward's dgamma kernel), the next tile's x and dy
//! prefetched as words; its launch and its shape heuristics.

use cubecl::ir::{AddressType, ElemType, FloatKind};
use cubecl::prelude::*;

use super::{
    ChannelsConfig, ChannelsLimits, ChannelsProblem, channel_groups_sum, group_sum_len, load_gamma,
    next_tile, plane_groups, shape_for_units, tiled_shape, vector_for,
};
use crate::backward::BackwardOperands;
use crate::device::{has_ptx_math, threads_per_sm};
use crate::params::{Activation, NormParams};
use crate::problem::KernelError;
use crate::row_io::words_to_f32;
use crate::select::widest_vector;

/// Where a tile's words lie (in vectors): tiles per batch, position vectors per channel, and the
/// batch and channel strides.
#[derive(CubeType, Clone, Copy)]
struct TileLayout {
    tiles_per_batch: usize,
    position_vectors: usize,
    batch_stride: usize,
    channel_stride: usize,
}

/// The backward's loads of one tile (this unit's position vector and channels) as 32-bit
/// words, as the unconditional loads of the plain path: an inactive position or a channel past
/// C reads a valid word vector that is not used.
#[cube]
fn load_tile_words<W: Size>(
    x_words: &[Vector<u32, W>],
    dy_words: &[Vector<u32, W>],
    next_x: &mut Array<Vector<u32, W>>,
    next_dy: &mut Array<Vector<u32, W>>,
    tile: usize,
    layout: TileLayout,
    #[comptime] cfg: ChannelsConfig,
) {
    let (tiles_per_batch, position_vectors) = (layout.tiles_per_batch, layout.position_vectors);
    let (batch_stride, channel_stride) = (layout.batch_stride, layout.channel_stride);
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
/// `dgamma_vector` channels as [`crate::backward::rms_norm_reduce_dgamma`](fn@crate::backward::rms_norm_reduce_dgamma) reads them
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
                TileLayout {
                    tiles_per_batch,
                    position_vectors,
                    batch_stride,
                    channel_stride,
                },
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
                    TileLayout {
                        tiles_per_batch,
                        position_vectors,
                        batch_stride,
                        channel_stride,
                    },
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

/// The channels-first backward's launch shape: `tiled_channels_config` with every channel of
/// a unit in registers; `None` when C is wider than that (the caller falls back to composed
/// ops).
///
/// On a GPU: the next tile's x and dy prefetched as words (`prefetch`), a unit caching about 48
/// values of each tensor (6 channels of 8 positions up to C = 128, else 12 of 4), at least 8
/// position units per channel group and 128 units per cube where the groups allow it. These
/// are the winners of the `channels` bench's sweep on the H200 (2026-12-01):
/// `[1, 96, 4, 480, 832]` `p8.g16.k6.v8.pf` 339 -> 265 us (1.13x the copy of its 6 bytes per
/// element), `[1, 192, 4, 240, 416]` `p8.g16.k12.v4.pf` 193 -> 170 us (1.40x),
/// `[1, 384, 1, 60, 104]` `p8.g32.k12.v4.pf` 23.0 -> 21.8 us. Narrow shapes (about one tile
/// per cube, `ChannelsLimits::narrow`) take the same cache without prefetch and down to 4
/// position units per cube (`[1, 384, 1, 60, 104]` `p4.g32.k12.v4` 17.7 us
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

/// Launches the channels-first backward on `operands`: dense `[B, C, S]` x, dy and dx of
/// `x_type` (`problem` must be [`ChannelsProblem::dense`]), `gamma` and `dgamma` `[C]` of
/// `gamma_type`; `config` `None` takes [`channels_backward_config`]. Refuses C too wide for the
/// register cache and shapes that do not fit the device.
pub fn launch_channels_backward(
    client: &Client,
    operands: BackwardOperands,
    problem: ChannelsProblem,
    norm: NormParams,
    activation: Activation,
    config: Option<ChannelsConfig>,
) -> Result<(), KernelError> {
    let ChannelsProblem {
        batches,
        channels,
        positions,
        ..
    } = problem;
    if problem != ChannelsProblem::dense(batches, channels, positions) {
        return Err(KernelError::InvalidProblem(format!(
            "channels backward: dense [B, C, S] tensors only, got {problem:?}"
        )));
    }
    let BackwardOperands {
        x,
        gamma,
        dy,
        dx,
        dgamma,
        x_type,
        gamma_type,
    } = operands;
    let refuse = |why: String| Err(KernelError::InvalidKnobs(why));
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
    let max_cubes = hw.num_streaming_multiprocessors.map_or(64, |sms| {
        sms as usize * (threads_per_sm(client) / units as usize).max(1)
    });
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
