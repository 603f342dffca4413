//! The channels-first kernel: `x` viewed as `[B, C, S]` with the positions `S` contiguous
//! (`[B, C, T, H, W]` in PyTorch's default layout), normalised over C at stride `S`.
//!
//! Each unit owns a vector of `N` consecutive positions of one batch, so the loads of a plane
//! are contiguous along S; it walks the C channels twice (sum of squares, then output), with
//! no cross-unit reduction at all. The second walk re-reads x, mostly from cache: this is the
//! simple, correct form; an H200-tuned tiling that reads x once is future work (issue 5).
//! (Channels-last memory presented as `[B, C, ...]` through strides is served by the row
//! kernel in `forward.rs` without this kernel.)

use cubecl::ir::{AddressType, ElemType};
use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::forward::{ForwardError, activate};
use crate::params::{Activation, NormParams};
use crate::rescue::{prescale_vector, small_eps};

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

#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn rms_norm_channels<E: Float, G: Float, N: Size>(
    x: &[Vector<E, N>],
    gamma: &[G],
    out: &mut [Vector<E, N>],
    units: usize,
    position_vectors: usize,
    channels: usize,
    x_batch_stride: usize,
    x_channel_stride: usize,
    out_batch_stride: usize,
    out_channel_stride: usize,
    inv_channels: f32,
    eps: f32,
    floor: f32,
    #[comptime] activation: Activation,
    #[define(E, G)] _types: [ElemType; 2],
) {
    let mut i = ABSOLUTE_POS;
    let step = CUBE_COUNT * CUBE_DIM as usize;
    let small = small_eps(eps, floor);
    while i < units {
        let batch = i / position_vectors;
        let p = i % position_vectors;
        let x_base = batch * x_batch_stride + p;
        let out_base = batch * out_batch_stride + p;
        let one = Vector::<f32, N>::new(1.0f32);
        let acc = channel_sum_sq::<E, N>(x, x_base, channels, x_channel_stride, one);
        // Rare: positions whose fp32 total left the normal range are summed again with exactly
        // scaled values (see `crate::rescue`); no other unit takes part, so no uniformity
        // concern.
        let pre = prescale_vector::<N>(acc, small);
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
            store_channels::<E, G, N>(
                x,
                gamma,
                out,
                x_base,
                out_base,
                channels,
                x_channel_stride,
                out_channel_stride,
                r,
                pre,
                activation,
                true,
            );
        } else {
            let r = inv_rms_vector::<N>(acc, inv_channels, Vector::new(eps), Vector::new(floor));
            store_channels::<E, G, N>(
                x,
                gamma,
                out,
                x_base,
                out_base,
                channels,
                x_channel_stride,
                out_channel_stride,
                r,
                one,
                activation,
                false,
            );
        }
        i += step;
    }
}

/// `sum_c (p * x[c])^2` for the `N` positions of one unit.
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

/// The second walk over C: `act((p * x) * r * gamma)`, with `p` compiled in only for rescued
/// positions.
#[allow(clippy::too_many_arguments)]
#[cube]
fn store_channels<E: Float, G: Float, N: Size>(
    x: &[Vector<E, N>],
    gamma: &[G],
    out: &mut [Vector<E, N>],
    x_base: usize,
    out_base: usize,
    channels: usize,
    x_channel_stride: usize,
    out_channel_stride: usize,
    r: Vector<f32, N>,
    p: Vector<f32, N>,
    #[comptime] activation: Activation,
    #[comptime] prescaled: bool,
) {
    for c in 0..channels {
        let mut v = Vector::<f32, N>::cast_from(x[x_base + c * x_channel_stride]);
        if comptime![prescaled] {
            v *= p;
        }
        let g = Vector::<f32, N>::new(f32::cast_from(gamma[c]));
        let y = activate::<N>(v * r * g, activation, false);
        out[out_base + c * out_channel_stride] = Vector::<E, N>::cast_from(y);
    }
}

/// Launches the channels-first kernel; does nothing when there is nothing to write.
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
    let p = problem;
    if p.batches == 0 || p.channels == 0 || p.positions == 0 {
        return Ok(());
    }
    let hw = &client.properties().hardware;
    let offsets = [x.offset_start.unwrap_or(0), out.offset_start.unwrap_or(0)];
    let strides = [
        p.positions,
        p.x_batch_stride,
        p.x_channel_stride,
        p.out_batch_stride,
        p.out_channel_stride,
    ];
    let vector_size = [8usize, 4, 2, 1]
        .into_iter()
        .find(|&v| {
            v * x_type.size() <= 16
                && v <= hw.max_vector_size
                && strides.iter().all(|s| s.is_multiple_of(v))
                && offsets
                    .iter()
                    .all(|o| o.is_multiple_of((v * x_type.size()) as u64))
        })
        .unwrap_or(1);
    if p.x_channel_stride < p.positions || p.out_channel_stride < p.positions {
        return Err(ForwardError::InvalidKnobs(format!(
            "channel strides ({}, {}) must be >= the positions per channel {}",
            p.x_channel_stride, p.out_channel_stride, p.positions
        )));
    }
    let position_vectors = p.positions / vector_size;
    let units = p.batches * position_vectors;
    let cube = 256.min(hw.max_units_per_cube.max(1));
    let max_cubes = hw
        .num_streaming_multiprocessors
        .map_or(65_535, |sms| (sms * 8) as usize);
    let cubes = units.div_ceil(cube as usize).clamp(1, max_cubes);
    let x_len = (p.batches - 1) * p.x_batch_stride / vector_size
        + (p.channels - 1) * p.x_channel_stride / vector_size
        + position_vectors;
    let out_len = (p.batches - 1) * p.out_batch_stride / vector_size
        + (p.channels - 1) * p.out_channel_stride / vector_size
        + position_vectors;
    log::debug!("rms_norm_channels: {p:?} vector {vector_size} cubes {cubes}x{cube}");
    unsafe {
        rms_norm_channels::launch_unchecked(
            client,
            CubeCount::new_1d(cubes as u32),
            CubeDim::new_1d(cube),
            AddressType::from_len(x_len.max(out_len) * vector_size),
            vector_size,
            BufferArg::from_raw_parts(x, x_len),
            BufferArg::from_raw_parts(gamma, p.channels),
            BufferArg::from_raw_parts(out, out_len),
            units,
            position_vectors,
            p.channels,
            p.x_batch_stride / vector_size,
            p.x_channel_stride / vector_size,
            p.out_batch_stride / vector_size,
            p.out_channel_stride / vector_size,
            (1.0f64 / p.channels as f64) as f32,
            norm.eps,
            norm.floor,
            activation,
            [x_type, gamma_type],
        );
    }
    Ok(())
}
