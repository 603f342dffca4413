//! The decoder's building blocks on channels-last activations (`[B, T, H, W, C]`, channels
//! contiguous): the causal 3D convolution with its frame cache, the norm sites (the fused op,
//! or composed Burn ops for comparison), the residual and attention blocks, the resamplers and
//! Wan2.2's `DupUp3D` shortcut.
//!
//! Every convolution runs [`conv3d_channels_last`] (or its `_add` form, which takes a residual
//! connection into the convolution's store): on CUDA cubek's implicit GEMM on tensor cores with
//! a measured configuration, elsewhere Burn's `conv3d` on the same memory.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use burn::module::{Module, Param};
use burn::tensor::activation::silu;
use burn::tensor::{DType, Device, Tensor, s};
use burn_rmsnorm_silu::{
    Activation, ActivationKind, ConvPadding, Phases, RmsNormSilu, RmsNormSiluConfig,
    conv3d_channels_last, conv3d_channels_last_add, conv3d_channels_last_phases,
    fold_upsample2x_weights,
};

use crate::config::WanConfig;
use crate::weights::{WeightError, Weights};
use burn_rmsnorm_silu::{AttentionRoutine, single_head_attention_with};

mod blocks;
mod cache;
mod conv;
mod fp8;

pub use blocks::{AttentionBlock, DupUp3D, Norm, Resample, ResidualBlock};
pub use cache::FrameCache;
pub use conv::{CausalConv3d, PhasedConv};
pub use fp8::{FP8_MARGIN, Fp8Scales, Precision, e4m3_per_output_channel};

/// How a forward pass runs its norm sites, and (when profiling) where its time goes.
pub struct Ctx {
    /// This crate's fused kernel (true) or composed Burn ops (false).
    pub fused: bool,
    /// Synchronise the device around every norm, convolution and attention call and add up
    /// their wall times (costs the synchronisations; for the breakdown, not the total).
    pub profile: bool,
    /// Synchronise the device around every norm, convolution and attention call (off by
    /// default). Burn's fusion otherwise queues a latent frame's operations until the next
    /// synchronisation. Measured both ways with the same warm-up: on CUDA the queue is faster
    /// (H100, full-size decode of 21 latent frames: 1.36 s without, 1.61 s with, 2026-12-07,
    /// `results/2026-12-07-h100-wan-decode-conv/`); on the CubeCL CPU runtime the
    /// synchronisations are (the small decoder: 2.5 s with, 11.8 s without, 2026-12-06).
    pub sync_calls: bool,
    /// Give the memory pools' free pages back to the driver (cubecl's memory cleanup) after
    /// every this many latent frames; 0 (the default): never, beyond
    /// [`Self::release_memory_first`]. Without any cleanup the freed pages of pools that the
    /// growing chunk shapes outdate stay with the process: the full-size decode of 21 latent
    /// frames held 14.4 GB (nvidia-smi) for 2.7 GiB of live tensors (H100, 2026-12-07).
    pub release_memory_every: usize,
    /// Also give them back after each of the first this many latent frames (default 3): the
    /// chunk shapes change only over the first frames, after which the pools' pages are reused
    /// as they are. Full-size decode of 21 latent frames (H100, 2026-12-07,
    /// `results/2026-12-07-h100-conv-tune-decode/decode/`): after each of the first 3 frames
    /// 1.339-1.373 s (5 decodes), 6.2 GB peak in nvidia-smi; after every frame 1.475-1.506 s.
    pub release_memory_first: usize,
    pub norm_time: Cell<Duration>,
    pub conv_time: Cell<Duration>,
    pub attention_time: Cell<Duration>,
    /// The cached frames joined in front of a chunk.
    pub join_time: Cell<Duration>,
    /// Residual additions after their convolution (not with `residual_in_conv`).
    pub add_time: Cell<Duration>,
    pub norm_calls: Cell<usize>,
    /// When profiling: the memory pools' peak, sampled after each call.
    pub peak_memory: Cell<MemoryPeak>,
    /// When profiling: calls and wall time per call site kind and input shape (the norm sites
    /// and convolutions), for the per-shape breakdown.
    pub sites: RefCell<BTreeMap<SiteKey, (usize, Duration)>>,
    /// The FP8 norm sites' delayed scales ([`Precision::Fp8`]).
    pub fp8_scales: RefCell<Fp8Scales>,
    /// How the middle block's attention runs (default: cubek's flash attention).
    pub attention: AttentionRoutine,
    /// Residual connections added in the last convolution's store rather than by a separate
    /// add (off by default until measured on a GPU).
    pub residual_in_conv: bool,
}

/// A call site of the profile: its kind and its input's shape.
pub type SiteKey = (&'static str, Vec<usize>);

/// The largest use of the backend's memory pools seen: bytes in live tensors and bytes the
/// pools hold from the driver (zero where the backend does not report them).
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryPeak {
    pub in_use: u64,
    pub reserved: u64,
}

impl MemoryPeak {
    /// This peak raised to `device`'s current use.
    pub fn sample(self, device: &Device) -> Self {
        match device.memory_pool_usage() {
            Some(usage) => Self {
                in_use: self.in_use.max(usage.bytes_in_use),
                reserved: self.reserved.max(usage.bytes_reserved),
            },
            None => self,
        }
    }

    /// `X GiB in live tensors, Y GiB held by the memory pools`.
    pub fn describe(&self) -> String {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        format!(
            "{:.2} GiB in live tensors, {:.2} GiB held by the memory pools",
            gib(self.in_use),
            gib(self.reserved)
        )
    }
}

impl Ctx {
    pub fn new(fused: bool, profile: bool) -> Self {
        Self {
            fused,
            profile,
            sync_calls: false,
            release_memory_every: 0,
            release_memory_first: 3,
            norm_time: Cell::new(Duration::ZERO),
            conv_time: Cell::new(Duration::ZERO),
            attention_time: Cell::new(Duration::ZERO),
            join_time: Cell::new(Duration::ZERO),
            add_time: Cell::new(Duration::ZERO),
            norm_calls: Cell::new(0),
            peak_memory: Cell::new(MemoryPeak::default()),
            sites: RefCell::new(BTreeMap::new()),
            fp8_scales: RefCell::new(Fp8Scales::default()),
            attention: AttentionRoutine::Flash,
            residual_in_conv: false,
        }
    }

    /// The same context with `residual_in_conv` set.
    pub fn with_residual_in_conv(self, residual_in_conv: bool) -> Self {
        Self {
            residual_in_conv,
            ..self
        }
    }

    /// The same context with `attention` set.
    pub fn with_attention(self, attention: AttentionRoutine) -> Self {
        Self { attention, ..self }
    }

    /// The same context with `sync_calls` set.
    pub fn with_sync_calls(self, sync_calls: bool) -> Self {
        Self { sync_calls, ..self }
    }

    /// The same context with `fused` set.
    pub fn with_fused(self, fused: bool) -> Self {
        Self { fused, ..self }
    }

    /// The same context with `release_memory_first` set.
    pub fn with_release_memory_first(self, release_memory_first: usize) -> Self {
        Self {
            release_memory_first,
            ..self
        }
    }

    /// The same context with `release_memory_every` set.
    pub fn with_release_memory_every(self, release_memory_every: usize) -> Self {
        Self {
            release_memory_every,
            ..self
        }
    }

    /// Runs `f` between two device synchronisations (unless `sync_calls` and `profile` are
    /// both off), adding its wall time to `into` when profiling.
    fn timed<const D: usize>(
        &self,
        into: &Cell<Duration>,
        device: &Device,
        f: impl FnOnce() -> Tensor<D>,
    ) -> Tensor<D> {
        if !self.profile && !self.sync_calls {
            return f();
        }
        device.sync().expect("device sync");
        let start = Instant::now();
        let y = f();
        device.sync().expect("device sync");
        if self.profile {
            into.set(into.get() + start.elapsed());
            self.peak_memory.set(self.peak_memory.get().sample(device));
        }
        y
    }
}

impl Ctx {
    /// [`Self::timed`] that also books the call under `(kind, shape)` in [`Self::sites`].
    fn timed_site<const D: usize>(
        &self,
        into: &Cell<Duration>,
        kind: &'static str,
        shape: Vec<usize>,
        device: &Device,
        f: impl FnOnce() -> Tensor<D>,
    ) -> Tensor<D> {
        let before = into.get();
        let y = self.timed(into, device, f);
        if self.profile {
            let spent = into.get().saturating_sub(before);
            let mut sites = self.sites.borrow_mut();
            let entry = sites.entry((kind, shape)).or_default();
            entry.0 += 1;
            entry.1 += spent;
        }
        y
    }
}

/// Builds modules from a weight source.
pub struct Loader<'a> {
    pub weights: &'a mut Weights,
    pub config: &'a WanConfig,
    pub device: &'a Device,
    pub dtype: DType,
    /// Whether the norm -> convolution sites loaded now are FP8 (see [`Precision::fp8_in`]).
    pub fp8_sites: bool,
}

impl Loader<'_> {
    pub fn param<const D: usize>(
        &mut self,
        key: &str,
        shape: [usize; D],
    ) -> Result<Param<Tensor<D>>, WeightError> {
        let t = self
            .weights
            .get(key, shape, self.config, self.device, self.dtype)?;
        Ok(Param::from_tensor(t))
    }

    /// The values of a convolution weight stored `[C_out, C_in, k...]`, permuted to
    /// `[C_out, kT, kH, kW, C_in]`.
    pub fn conv_values(
        &mut self,
        key: &str,
        c_out: usize,
        c_in: usize,
        k: [usize; 3],
        stored_rank: usize,
    ) -> Result<Vec<f32>, WeightError> {
        let stored: Vec<usize> = if stored_rank == 4 {
            vec![c_out, c_in, k[1], k[2]]
        } else {
            vec![c_out, c_in, k[0], k[1], k[2]]
        };
        let values = self.weights.values(key, &stored, self.config)?;
        let taps = k[0] * k[1] * k[2];
        let mut permuted = vec![0.0f32; values.len()];
        for o in 0..c_out {
            for i in 0..c_in {
                for tap in 0..taps {
                    permuted[(o * taps + tap) * c_in + i] = values[(o * c_in + i) * taps + tap];
                }
            }
        }
        Ok(permuted)
    }

    /// A bias `[C_out]` repeated for each of `phases`: `[phases, C_out]`.
    pub fn phase_bias(
        &mut self,
        key: &str,
        c_out: usize,
        phases: usize,
    ) -> Result<Param<Tensor<2>>, WeightError> {
        let values = self.weights.values(key, &[c_out], self.config)?;
        let repeated: Vec<f32> = (0..phases).flat_map(|_| values.iter().copied()).collect();
        Ok(Param::from_tensor(self.tensor(repeated, [phases, c_out])))
    }

    /// Host values on the loader's device, in its dtype.
    pub fn tensor<const D: usize>(&self, values: Vec<f32>, shape: [usize; D]) -> Tensor<D> {
        let data = burn::tensor::TensorData::new(values, shape).convert_dtype(self.dtype);
        Tensor::from_data(data, (self.device, self.dtype))
    }
}

/// `z * std + mean` per latent channel (the step the original decode does first); `z` is
/// `[B, z_dim, T, h, w]`.
pub fn denormalize(z: Tensor<5>, config: &WanConfig) -> Tensor<5> {
    let device = z.device();
    let c = config.z_dim;
    let shape = [1, c, 1, 1, 1];
    let mean = Tensor::<1>::from_floats(config.latents_mean.as_slice(), &device).reshape(shape);
    let std = Tensor::<1>::from_floats(config.latents_std.as_slice(), &device).reshape(shape);
    let dtype = z.dtype();
    z * std.cast(dtype) + mean.cast(dtype)
}
