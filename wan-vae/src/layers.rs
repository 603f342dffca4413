//! The decoder's building blocks on channels-last activations (`[B, T, H, W, C]`, channels
//! contiguous): the causal 3D convolution with its frame cache, the norm sites (the fused op,
//! or composed Burn ops for comparison), the residual and attention blocks, the resamplers and
//! Wan2.2's `DupUp3D` shortcut.
//!
//! Every convolution runs [`conv3d_channels_last`]: on CUDA cubek's implicit GEMM on tensor
//! cores with a measured configuration, elsewhere Burn's `conv3d` on the same memory.

use std::cell::Cell;
use std::time::{Duration, Instant};

use burn::module::{Module, Param};
use burn::tensor::activation::silu;
use burn::tensor::{DType, Device, Tensor, s};
use burn_rmsnorm_silu::{
    Activation, ConvPadding, Phases, RmsNormSiluOptions, conv3d_channels_last,
    conv3d_channels_last_phases, fold_upsample2x_weights, rms_norm_silu_into, rms_norm_silu_with,
};

use crate::config::WanConfig;
use crate::weights::{WeightError, Weights};
use burn_rmsnorm_silu::single_head_attention as attention;

/// How a forward pass runs its norm sites, and (when profiling) where its time goes.
pub struct Ctx {
    /// This crate's fused kernel (true) or composed Burn ops (false).
    pub fused: bool,
    /// Synchronise the device around every norm, convolution and attention call and add up
    /// their wall times (costs the synchronisations; for the breakdown, not the total).
    pub profile: bool,
    /// Synchronise the device around every norm, convolution and attention call (on by
    /// default). Burn's fusion otherwise queues a latent frame's operations until the next
    /// synchronisation, which was measured slower: the small decoder on the CubeCL CPU runtime
    /// 2.5 s synchronised against 11.8 s without (2026-12-06), and the full-size decode on an
    /// H200 1.501 s with a synchronisation around every call against 1.761 s without
    /// (2026-12-06, commit ad633e4, `results/2026-12-06-h200-wan-decode/wan-21.log`).
    pub sync_calls: bool,
    pub norm_time: Cell<Duration>,
    pub conv_time: Cell<Duration>,
    pub attention_time: Cell<Duration>,
    /// The cached frames joined in front of a chunk.
    pub join_time: Cell<Duration>,
    /// Residual additions.
    pub add_time: Cell<Duration>,
    pub norm_calls: Cell<usize>,
    /// When profiling: the most bytes in live tensors seen after a call (zero where the
    /// backend does not report its memory pools).
    pub peak_in_use: Cell<u64>,
}

impl Ctx {
    pub fn new(fused: bool, profile: bool) -> Self {
        Self {
            fused,
            profile,
            sync_calls: true,
            norm_time: Cell::new(Duration::ZERO),
            conv_time: Cell::new(Duration::ZERO),
            attention_time: Cell::new(Duration::ZERO),
            join_time: Cell::new(Duration::ZERO),
            add_time: Cell::new(Duration::ZERO),
            norm_calls: Cell::new(0),
            peak_in_use: Cell::new(0),
        }
    }

    /// The same context with `sync_calls` set.
    pub fn with_sync_calls(self, sync_calls: bool) -> Self {
        Self { sync_calls, ..self }
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
            if let Some(usage) = device.memory_pool_usage() {
                self.peak_in_use
                    .set(self.peak_in_use.get().max(usage.bytes_in_use));
            }
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

    /// A convolution weight stored `[C_out, C_in, k...]` (PyTorch's layout), returned as
    /// `[C_out, kT, kH, kW, C_in]` (the channels-last convolution's), permuted on the host once.
    pub fn conv_weight(
        &mut self,
        key: &str,
        c_out: usize,
        c_in: usize,
        k: [usize; 3],
        stored_rank: usize,
    ) -> Result<Param<Tensor<5>>, WeightError> {
        let values = self.conv_values(key, c_out, c_in, k, stored_rank)?;
        Ok(Param::from_tensor(
            self.tensor(values, [c_out, k[0], k[1], k[2], c_in]),
        ))
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

/// `CausalConv3d`: a 3D convolution whose temporal padding all goes in front, fed with the
/// last frames of the previous chunk's input instead of zeros when decoding frame by frame.
/// Also the decoder's 2D (`kT = 1`) and 1x1 convolutions.
#[derive(Module, Debug)]
pub struct CausalConv3d {
    /// `[C_out, kT, kH, kW, C_in]`.
    weight: Param<Tensor<5>>,
    bias: Param<Tensor<1>>,
    /// Frames of temporal context (kernel depth - 1).
    context: usize,
    /// Spatial padding on each side.
    pad: usize,
}

impl CausalConv3d {
    /// A convolution whose weight is stored `[C_out, C_in, kT, kH, kW]`.
    pub fn load(
        l: &mut Loader,
        key: &str,
        c_in: usize,
        c_out: usize,
        k: [usize; 3],
    ) -> Result<Self, WeightError> {
        Self::load_stored(l, key, c_in, c_out, k, 5)
    }

    /// A per-frame 2D convolution whose weight is stored `[C_out, C_in, kH, kW]`.
    pub fn load_2d(
        l: &mut Loader,
        key: &str,
        c_in: usize,
        c_out: usize,
        k: usize,
    ) -> Result<Self, WeightError> {
        Self::load_stored(l, key, c_in, c_out, [1, k, k], 4)
    }

    fn load_stored(
        l: &mut Loader,
        key: &str,
        c_in: usize,
        c_out: usize,
        k: [usize; 3],
        stored_rank: usize,
    ) -> Result<Self, WeightError> {
        Ok(Self {
            weight: l.conv_weight(&format!("{key}.weight"), c_out, c_in, k, stored_rank)?,
            bias: l.param(&format!("{key}.bias"), [c_out])?,
            context: k[0] - 1,
            pad: k[1] / 2,
        })
    }

    /// `x` is `[B, T, H, W, C]`; `cache` holds up to `context` frames preceding it. Frames the
    /// cache lacks are zero padding in front (no zero tensor, no copy).
    pub fn forward(&self, x: Tensor<5>, cache: Option<Tensor<5>>, ctx: &Ctx) -> Tensor<5> {
        let (x, front) = join(cache, x, self.context, ctx);
        self.forward_padded(x, front, ctx)
    }

    /// The convolution of `x` (cached frames already in front) with `front` zero frames of
    /// temporal padding.
    fn forward_padded(&self, x: Tensor<5>, front: usize, ctx: &Ctx) -> Tensor<5> {
        let device = x.device();
        ctx.timed(&ctx.conv_time, &device, || {
            conv3d_channels_last(
                x,
                self.weight.val(),
                self.bias.val(),
                ConvPadding::causal(front, self.pad),
            )
        })
    }
}

/// The cached frames joined in front of the chunk along T (the one copy left around the causal
/// cache), and how many zero frames the padding still adds in front.
fn join(cache: Option<Tensor<5>>, x: Tensor<5>, context: usize, ctx: &Ctx) -> (Tensor<5>, usize) {
    match cache.filter(|_| context > 0) {
        Some(cache) => {
            let have = cache.dims()[1].min(context);
            let device = x.device();
            let joined = ctx.timed(&ctx.join_time, &device, || Tensor::cat(vec![cache, x], 1));
            (joined, context - have)
        }
        None => (x, context),
    }
}

/// Convolutions whose outputs interleave into a finer grid (see [`Phases`]): the upsamplers'
/// 3x3 convolution after nearest x2 upsampling, run as four 2x2 convolutions of the
/// low-resolution input, and the time convolution whose two channel halves become alternate
/// frames. Neither the upsampled input nor the interleaving is ever materialised.
#[derive(Module, Debug)]
pub struct PhasedConv {
    /// `[P, C_out, kT, kH, kW, C_in]`.
    weight: Param<Tensor<6>>,
    /// `[P, C_out]`.
    bias: Param<Tensor<2>>,
    /// Frames of temporal context (kernel depth - 1).
    context: usize,
    /// Two frames per frame (the time convolution) rather than 2 x 2 pixels per pixel.
    temporal: bool,
}

impl PhasedConv {
    /// The upsampler's 3x3 convolution (stored `[C_out, C_in, 3, 3]`), folded for
    /// [`Phases::upsample2x`].
    pub fn load_upsample(
        l: &mut Loader,
        key: &str,
        c_in: usize,
        c_out: usize,
    ) -> Result<Self, WeightError> {
        let values = l.conv_values(&format!("{key}.weight"), c_out, c_in, [1, 3, 3], 4)?;
        let folded = fold_upsample2x_weights(&values, c_out, c_in);
        Ok(Self {
            weight: Param::from_tensor(l.tensor(folded, [4, c_out, 1, 2, 2, c_in])),
            bias: l.phase_bias(&format!("{key}.bias"), c_out, 4)?,
            context: 0,
            temporal: false,
        })
    }

    /// The time convolution `C -> 2C` (stored `[2C, C, 3, 1, 1]`): output channel half `j` is
    /// output frame `2t + j`.
    pub fn load_time(l: &mut Loader, key: &str, c: usize) -> Result<Self, WeightError> {
        let values = l.conv_values(&format!("{key}.weight"), 2 * c, c, [3, 1, 1], 5)?;
        let bias = l
            .weights
            .values(&format!("{key}.bias"), &[2 * c], l.config)?;
        Ok(Self {
            weight: Param::from_tensor(l.tensor(values, [2, c, 3, 1, 1, c])),
            bias: Param::from_tensor(l.tensor(bias, [2, c])),
            context: 2,
            temporal: true,
        })
    }

    /// `x` is `[B, T, H, W, C]`, `cache` the frames preceding it (time convolution only).
    pub fn forward(&self, x: Tensor<5>, cache: Option<Tensor<5>>, ctx: &Ctx) -> Tensor<5> {
        let device = x.device();
        let (x, front) = join(cache, x, self.context, ctx);
        let phases = if self.temporal {
            Phases::frames2x(ConvPadding::causal(front, 0))
        } else {
            Phases::upsample2x()
        };
        ctx.timed(&ctx.conv_time, &device, || {
            conv3d_channels_last_phases(x, self.weight.val(), self.bias.val(), phases)
        })
    }
}

/// One decode call's frame caches, one slot per cached convolution in call order (the order
/// of diffusers' `feat_cache`, so the two can be compared slot by slot).
#[derive(Default)]
pub struct FrameCache {
    slots: Vec<Slot>,
    next: usize,
}

#[derive(Clone, Default)]
enum Slot {
    /// Not called yet.
    #[default]
    Empty,
    /// An upsampler's time convolution was skipped on the first chunk.
    SkippedFirst,
    /// The last (up to two) input frames of the previous call.
    Frames(Box<Tensor<5>>),
}

impl FrameCache {
    /// Starts a new chunk: slots are visited again from the first.
    pub fn rewind(&mut self) {
        self.next = 0;
    }

    fn take(&mut self) -> (usize, Slot) {
        let i = self.next;
        self.next += 1;
        if self.slots.len() <= i {
            self.slots.resize(i + 1, Slot::Empty);
        }
        (i, self.slots[i].clone())
    }

    /// The frames to keep for the next call: the last two of `x`, topped up with the last
    /// frame of the previous cache (or zeros) when `x` has only one. Always a tensor of its own
    /// (a view would keep all of `x`'s memory alive until the next chunk).
    fn keep(x: &Tensor<5>, previous: Option<&Tensor<5>>, zeros_if_short: bool) -> Tensor<5> {
        let t = x.dims()[1];
        let last = x.clone().slice(s![.., t.saturating_sub(2)..t]);
        if t >= 2 || (previous.is_none() && !zeros_if_short) {
            let device = last.device();
            let dims = last.dims();
            return Tensor::empty(dims, (&device, last.dtype())).slice_assign(
                s![0..dims[0], 0..dims[1], 0..dims[2], 0..dims[3], 0..dims[4]],
                last,
            );
        }
        match previous {
            Some(p) => {
                let pt = p.dims()[1];
                Tensor::cat(vec![p.clone().slice(s![.., pt - 1..pt]), last], 1)
            }
            None if zeros_if_short => Tensor::cat(vec![last.clone().zeros_like(), last], 1),
            None => last,
        }
    }

    /// A norm site followed by a cached causal convolution. With cached frames, the norm
    /// writes its output behind a copy of them in the convolution's input buffer (only the
    /// cached frames are copied, not the chunk); the buffer's last two frames are kept.
    pub fn norm_conv(
        &mut self,
        norm: &Norm,
        conv: &CausalConv3d,
        x: Tensor<5>,
        ctx: &Ctx,
    ) -> Tensor<5> {
        let (i, slot) = self.take();
        let previous = match slot {
            Slot::Frames(f) if conv.context > 0 => Some(*f),
            _ => None,
        };
        let (input, front) = match previous {
            Some(previous) => {
                let [b, t, h, w, c] = x.dims();
                let pt = previous.dims()[1];
                let have = pt.min(conv.context);
                let device = x.device();
                let buffer = ctx.timed(&ctx.join_time, &device, || {
                    Tensor::empty([b, have + t, h, w, c], (&device, x.dtype()))
                        .slice_assign(s![.., 0..have], previous.slice(s![.., pt - have..pt]))
                });
                (norm.forward_into(x, buffer, have, ctx), conv.context - have)
            }
            None => (norm.forward(x, ctx), conv.context),
        };
        self.slots[i] = Slot::Frames(Box::new(Self::keep(&input, None, false)));
        conv.forward_padded(input, front, ctx)
    }

    /// A cached causal convolution: uses and then replaces this slot's frames.
    pub fn conv(&mut self, conv: &CausalConv3d, x: Tensor<5>, ctx: &Ctx) -> Tensor<5> {
        let (i, slot) = self.take();
        let previous = match slot {
            Slot::Frames(f) => Some(*f),
            _ => None,
        };
        let keep = Self::keep(&x, previous.as_ref(), false);
        let y = conv.forward(x, previous, ctx);
        self.slots[i] = Slot::Frames(Box::new(keep));
        y
    }

    /// The upsampler's time convolution: skipped on the first chunk (returns `None`), then run
    /// with zeros and later with the cached frames.
    pub fn time_conv(&mut self, conv: &PhasedConv, x: Tensor<5>, ctx: &Ctx) -> Option<Tensor<5>> {
        let (i, slot) = self.take();
        match slot {
            Slot::Empty => {
                self.slots[i] = Slot::SkippedFirst;
                None
            }
            Slot::SkippedFirst => {
                let keep = Self::keep(&x, None, true);
                let y = conv.forward(x, None, ctx);
                self.slots[i] = Slot::Frames(Box::new(keep));
                Some(y)
            }
            Slot::Frames(previous) => {
                let keep = Self::keep(&x, Some(&previous), false);
                let y = conv.forward(x, Some(*previous), ctx);
                self.slots[i] = Slot::Frames(Box::new(keep));
                Some(y)
            }
        }
    }
}

/// A norm site over the channel (last) axis: `F.normalize(x, dim=C) * sqrt(C) * gamma`, then
/// SiLU (or not).
#[derive(Module, Debug)]
pub struct Norm {
    gamma: Param<Tensor<1>>,
    silu: bool,
}

impl Norm {
    pub fn load(
        l: &mut Loader,
        key: &str,
        channels: usize,
        silu: bool,
    ) -> Result<Self, WeightError> {
        Ok(Self {
            gamma: l.param(&format!("{key}.gamma"), [channels])?,
            silu,
        })
    }

    pub fn forward<const D: usize>(&self, x: Tensor<D>, ctx: &Ctx) -> Tensor<D> {
        ctx.norm_calls.set(ctx.norm_calls.get() + 1);
        let device = x.device();
        ctx.timed(&ctx.norm_time, &device, || self.apply(x, ctx.fused))
    }

    /// The norm site of `x` (`[B, T, H, W, C]`) written over frames `at..at + T` of `into`,
    /// which is returned (see `rms_norm_silu_into`).
    pub fn forward_into(&self, x: Tensor<5>, into: Tensor<5>, at: usize, ctx: &Ctx) -> Tensor<5> {
        ctx.norm_calls.set(ctx.norm_calls.get() + 1);
        let device = x.device();
        ctx.timed(&ctx.norm_time, &device, || {
            if ctx.fused {
                rms_norm_silu_into(x, self.gamma.val(), self.options(), into, 1, at)
            } else {
                let t = x.dims()[1];
                into.slice_assign(s![.., at..at + t], self.composed(x))
            }
        })
    }

    fn options(&self) -> RmsNormSiluOptions {
        let activation = if self.silu {
            Activation::Silu
        } else {
            Activation::Identity
        };
        RmsNormSiluOptions::wan().with_activation(activation)
    }

    fn apply<const D: usize>(&self, x: Tensor<D>, fused: bool) -> Tensor<D> {
        if fused {
            rms_norm_silu_with(x, self.gamma.val(), self.options())
        } else {
            self.composed(x)
        }
    }

    /// The same function from Burn ops, as PyTorch's eager code computes it.
    fn composed<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let channels = x.dims()[D - 1];
        let norm = x.clone().square().sum_dim(D - 1).sqrt().clamp_min(1e-12);
        let mut shape = [1usize; D];
        shape[D - 1] = channels;
        let y = x / norm * (channels as f64).sqrt() * self.gamma.val().reshape(shape);
        if self.silu { silu(y) } else { y }
    }
}

/// `norm1 -> SiLU -> conv1 -> norm2 -> SiLU -> conv2`, plus the (1x1x1 conv) shortcut.
#[derive(Module, Debug)]
pub struct ResidualBlock {
    norm1: Norm,
    conv1: CausalConv3d,
    norm2: Norm,
    conv2: CausalConv3d,
    shortcut: Option<CausalConv3d>,
}

impl ResidualBlock {
    pub fn load(l: &mut Loader, key: &str, c_in: usize, c_out: usize) -> Result<Self, WeightError> {
        Ok(Self {
            norm1: Norm::load(l, &format!("{key}.norm1"), c_in, true)?,
            conv1: CausalConv3d::load(l, &format!("{key}.conv1"), c_in, c_out, [3, 3, 3])?,
            norm2: Norm::load(l, &format!("{key}.norm2"), c_out, true)?,
            conv2: CausalConv3d::load(l, &format!("{key}.conv2"), c_out, c_out, [3, 3, 3])?,
            shortcut: match c_in != c_out {
                true => Some(CausalConv3d::load(
                    l,
                    &format!("{key}.conv_shortcut"),
                    c_in,
                    c_out,
                    [1, 1, 1],
                )?),
                false => None,
            },
        })
    }

    pub fn forward(&self, x: Tensor<5>, cache: &mut FrameCache, ctx: &Ctx) -> Tensor<5> {
        let h = match &self.shortcut {
            Some(conv) => conv.forward(x.clone(), None, ctx),
            None => x.clone(),
        };
        let y = cache.norm_conv(&self.norm1, &self.conv1, x, ctx);
        let y = cache.norm_conv(&self.norm2, &self.conv2, y, ctx);
        let device = y.device();
        ctx.timed(&ctx.add_time, &device, || y + h)
    }
}

/// Single-head self-attention over each frame's `H * W` positions, after a plain norm.
#[derive(Module, Debug)]
pub struct AttentionBlock {
    norm: Norm,
    to_qkv: CausalConv3d,
    proj: CausalConv3d,
}

impl AttentionBlock {
    pub fn load(l: &mut Loader, key: &str, c: usize) -> Result<Self, WeightError> {
        Ok(Self {
            norm: Norm::load(l, &format!("{key}.norm"), c, false)?,
            to_qkv: CausalConv3d::load_2d(l, &format!("{key}.to_qkv"), c, 3 * c, 1)?,
            proj: CausalConv3d::load_2d(l, &format!("{key}.proj"), c, c, 1)?,
        })
    }

    pub fn forward(&self, x: Tensor<5>, ctx: &Ctx) -> Tensor<5> {
        let [b, t, h, w, c] = x.dims();
        let qkv = self
            .to_qkv
            .forward(self.norm.forward(x.clone(), ctx), None, ctx);
        // [B, T, H, W, 3C] -> one sequence of H W tokens per frame, one head; q, k, v are
        // consecutive channel ranges.
        let qkv = qkv.reshape([b * t, 1, h * w, 3 * c]);
        let q = qkv.clone().slice(s![.., .., .., 0..c]);
        let k = qkv.clone().slice(s![.., .., .., c..2 * c]);
        let v = qkv.slice(s![.., .., .., 2 * c..3 * c]);
        let attended = ctx
            .timed(&ctx.attention_time, &x.device(), || attention(q, k, v))
            .reshape([b, t, h, w, c]);
        let y = self.proj.forward(attended, None, ctx);
        ctx.timed(&ctx.add_time, &x.device(), || y + x)
    }
}

/// Nearest-neighbour x2 per frame then a 3x3 conv; `upsample3d` first doubles the frames with
/// a causal time convolution whose two output halves interleave. Both run as [`PhasedConv`]s.
#[derive(Module, Debug)]
pub struct Resample {
    conv: PhasedConv,
    time_conv: Option<PhasedConv>,
}

impl Resample {
    pub fn load(
        l: &mut Loader,
        key: &str,
        c: usize,
        c_out: usize,
        temporal: bool,
    ) -> Result<Self, WeightError> {
        Ok(Self {
            conv: PhasedConv::load_upsample(l, &format!("{key}.resample.1"), c, c_out)?,
            time_conv: match temporal {
                true => Some(PhasedConv::load_time(l, &format!("{key}.time_conv"), c)?),
                false => None,
            },
        })
    }

    pub fn forward(&self, x: Tensor<5>, cache: &mut FrameCache, ctx: &Ctx) -> Tensor<5> {
        let mut x = x;
        if let Some(tc) = &self.time_conv
            && let Some(y) = cache.time_conv(tc, x.clone(), ctx)
        {
            x = y;
        }
        self.conv.forward(x, None, ctx)
    }
}

/// Wan2.2's parameter-free shortcut around an up stage: channels repeated and folded into
/// `factor_t` frames and `2 x 2` pixels.
#[derive(Module, Debug)]
pub struct DupUp3D {
    c_out: usize,
    factor_t: usize,
    repeats: usize,
}

impl DupUp3D {
    pub fn new(c_in: usize, c_out: usize, factor_t: usize) -> Self {
        let factor = factor_t * 4;
        assert!(
            (c_out * factor).is_multiple_of(c_in),
            "DupUp3D: {c_in} -> {c_out}"
        );
        Self {
            c_out,
            factor_t,
            repeats: c_out * factor / c_in,
        }
    }

    /// `x` is `[B, T, H, W, C_in]`; PyTorch repeats each input channel `repeats` times along
    /// the channel axis, then reads the channels as `(C_out, factor_t, 2, 2)`.
    pub fn forward(&self, x: Tensor<5>, first_chunk: bool) -> Tensor<5> {
        let [b, t, h, w, c] = x.dims();
        let (co, ft) = (self.c_out, self.factor_t);
        let x = x
            .unsqueeze_dim::<6>(5)
            .expand([b, t, h, w, c, self.repeats])
            .reshape([b, t, h, w, co, ft, 2, 2])
            // [b, t, h, w, co, ft, 2 (row), 2 (col)] -> [b, t, ft, h, 2, w, 2, co]
            .permute([0, 1, 5, 2, 6, 3, 7, 4])
            .reshape([b, t * ft, 2 * h, 2 * w, co]);
        if first_chunk {
            let frames = t * ft;
            x.slice(s![.., ft - 1..frames])
        } else {
            x
        }
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
