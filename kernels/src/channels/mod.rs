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
//! kernel in `crate::forward` without this kernel.)
//!
//! Here: the problem and the comptime shape, what the forward (`forward`) and the backward
//! (`backward`) kernels share (the tile walk, gamma's loads, the channel groups' sums, the
//! launch limits and shapes).

use cubecl::prelude::*;

use crate::device::{has_ptx_math, is_gpu};
use crate::params::Activation;
use crate::problem::KernelError;

mod backward;
mod forward;

pub use backward::{
    channels_backward_config, launch_channels_backward, rms_norm_channels_backward,
};
pub use forward::{
    channels_config, launch_channels, launch_channels_with, rms_norm_channels,
    tiled_channels_config,
};

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
fn vector_for(widest: usize, cfg: &ChannelsConfig) -> Result<usize, KernelError> {
    match cfg.max_vector {
        0 => Ok(widest),
        v if v.is_power_of_two() => Ok(widest.min(v)),
        v => Err(KernelError::InvalidKnobs(format!(
            "channels config: max_vector {v} must be 0 (the widest) or a power of two"
        ))),
    }
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

/// Shared-memory length of [`channel_groups_sum`]: two halves of one vector per plane and
/// position unit.
fn group_sum_len(cfg: ChannelsConfig) -> usize {
    2 * (cfg.channel_groups / cfg.plane_groups.max(1)) as usize * cfg.position_units as usize
}
