//! The decoder's building blocks: the causal 3D convolution with its frame cache, the norm
//! sites (this crate's fused op, or composed Burn ops for comparison), the residual and
//! attention blocks, the resamplers and Wan2.2's `DupUp3D` shortcut.

use std::cell::Cell;
use std::time::{Duration, Instant};

use burn::module::{Module, Param};
use burn::tensor::activation::{silu, softmax};
use burn::tensor::module::{conv2d, conv3d};
use burn::tensor::ops::{ConvOptions, PadMode};
use burn::tensor::{DType, Device, Tensor, s};
use burn_rmsnorm_silu::{Activation, RmsNormSiluOptions, rms_norm_silu_dim};

use super::config::WanConfig;
use super::weights::Weights;

/// How a forward pass runs its norm sites, and the time they took.
pub struct Ctx {
    /// This crate's fused kernel (true) or composed Burn ops (false).
    pub fused: bool,
    /// Synchronise the device around every norm call to time it (costs a little).
    pub time_norms: bool,
    pub norm_time: Cell<Duration>,
    pub norm_calls: Cell<usize>,
}

impl Ctx {
    pub fn new(fused: bool, time_norms: bool) -> Self {
        Self {
            fused,
            time_norms,
            norm_time: Cell::new(Duration::ZERO),
            norm_calls: Cell::new(0),
        }
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
    pub fn param<const D: usize>(&mut self, key: &str, shape: [usize; D]) -> Param<Tensor<D>> {
        let t = self
            .weights
            .get(key, shape, self.config, self.device, self.dtype)
            .unwrap_or_else(|e| panic!("{e}"));
        Param::from_tensor(t)
    }
}

/// `CausalConv3d`: a 3D convolution whose temporal padding all goes in front, fed with the
/// last frames of the previous chunk's input instead of zeros when decoding frame by frame.
#[derive(Module, Debug)]
pub struct CausalConv3d {
    weight: Param<Tensor<5>>,
    bias: Param<Tensor<1>>,
    /// Frames of temporal context (kernel depth - 1).
    context: usize,
    /// Spatial padding on each side.
    pad: usize,
}

impl CausalConv3d {
    pub fn load(l: &mut Loader, key: &str, c_in: usize, c_out: usize, k: [usize; 3]) -> Self {
        Self {
            weight: l.param(&format!("{key}.weight"), [c_out, c_in, k[0], k[1], k[2]]),
            bias: l.param(&format!("{key}.bias"), [c_out]),
            context: k[0] - 1,
            pad: k[1] / 2,
        }
    }

    /// `x` is `[B, C, T, H, W]`; `cache` holds up to `context` frames preceding it.
    pub fn forward(&self, x: Tensor<5>, cache: Option<Tensor<5>>) -> Tensor<5> {
        let mut x = x;
        let mut zeros = self.context;
        if let Some(cache) = cache.filter(|_| self.context > 0) {
            zeros -= cache.dims()[2].min(zeros);
            x = Tensor::cat(vec![cache, x], 2);
        }
        if zeros > 0 {
            let [b, c, _, h, w] = x.dims();
            let pad = Tensor::zeros([b, c, zeros, h, w], (&x.device(), x.dtype()));
            x = Tensor::cat(vec![pad, x], 2);
        }
        let options = ConvOptions::new([1, 1, 1], [0, self.pad, self.pad], [1, 1, 1], 1);
        traced(
            "conv3d",
            x.dims().to_vec(),
            self.weight.dims().to_vec(),
            || {
                if conv_by_matmul() {
                    conv3d_by_matmul(x, self.weight.val(), self.bias.val(), self.pad)
                } else {
                    conv3d(x, self.weight.val(), Some(self.bias.val()), options)
                }
            },
        )
    }
}

/// Whether convolutions run as sums of matmuls ([`conv3d_by_matmul`]) instead of Burn's
/// `conv3d` (`--conv matmul`, or `WAN_CONV=matmul`).
pub fn conv_by_matmul() -> bool {
    *CONV_BY_MATMUL.get_or_init(|| std::env::var("WAN_CONV").is_ok_and(|v| v == "matmul"))
}

static CONV_BY_MATMUL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Makes every convolution of this process run as matmuls (before the first one runs).
pub fn use_conv_by_matmul() {
    let _ = CONV_BY_MATMUL.set(true);
}

/// A stride-1 3D convolution (no temporal padding: the caller pads causally; `pad` zeros on
/// each side of H and W) as a sum of one matmul per kernel tap over channels-last rows:
/// `y[n, :] = bias + sum_tap x_tap[n, :] W_tap` with `x_tap` the input shifted by the tap.
/// An alternative to Burn's autotuned `conv3d`, whose first use of a full-size Wan shape on
/// CUDA did not finish within minutes (see README). The output is a channels-last view
/// `[B, C_out, T, H, W]`, which the norm sites read in place.
pub fn conv3d_by_matmul(x: Tensor<5>, weight: Tensor<5>, bias: Tensor<1>, pad: usize) -> Tensor<5> {
    let [b, _, t_in, h, w] = x.dims();
    let [c_out, c_in, kt, kh, kw] = weight.dims();
    let (t, h_out, w_out) = (t_in + 1 - kt, h + 2 * pad + 1 - kh, w + 2 * pad + 1 - kw);
    let x = if pad > 0 {
        x.pad([(pad, pad), (pad, pad)], PadMode::Constant(0.0))
    } else {
        x
    };
    // [B, T, H, W, C]: every tap is then a window whose rows are C contiguous values.
    let x = x.permute([0, 2, 3, 4, 1]);
    let rows = b * t * h_out * w_out;
    let mut acc: Option<Tensor<2>> = None;
    for dt in 0..kt {
        for dh in 0..kh {
            for dw in 0..kw {
                let tap = x
                    .clone()
                    .slice(s![.., dt..dt + t, dh..dh + h_out, dw..dw + w_out, ..])
                    .reshape([rows, c_in]);
                let w_tap = weight
                    .clone()
                    .slice(s![.., .., dt..dt + 1, dh..dh + 1, dw..dw + 1])
                    .reshape([c_out, c_in])
                    .transpose();
                let y = tap.matmul(w_tap);
                acc = Some(match acc {
                    Some(a) => a + y,
                    None => y,
                });
            }
        }
    }
    let y = acc.expect("a kernel has at least one tap") + bias.reshape([1, c_out]);
    y.reshape([b, t, h_out, w_out, c_out])
        .permute([0, 4, 1, 2, 3])
}

/// A 2D convolution applied to each frame (`[N, C, H, W]`).
#[derive(Module, Debug)]
pub struct Conv2d {
    weight: Param<Tensor<4>>,
    bias: Param<Tensor<1>>,
    pad: usize,
}

impl Conv2d {
    pub fn load(l: &mut Loader, key: &str, c_in: usize, c_out: usize, k: usize) -> Self {
        Self {
            weight: l.param(&format!("{key}.weight"), [c_out, c_in, k, k]),
            bias: l.param(&format!("{key}.bias"), [c_out]),
            pad: k / 2,
        }
    }

    pub fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let options = ConvOptions::new([1, 1], [self.pad, self.pad], [1, 1], 1);
        traced(
            "conv2d",
            x.dims().to_vec(),
            self.weight.dims().to_vec(),
            || conv2d(x, self.weight.val(), Some(self.bias.val()), options),
        )
    }
}

/// With `WAN_TRACE` set, every convolution is bracketed by device syncs and printed with its
/// input and weight shapes and wall time (to find where a slow first run spends its time:
/// Burn compiles and autotunes each new convolution shape on first use).
fn traced<const D: usize>(
    what: &str,
    input: Vec<usize>,
    weight: Vec<usize>,
    conv: impl FnOnce() -> Tensor<D>,
) -> Tensor<D> {
    if std::env::var_os("WAN_TRACE").is_none() {
        return conv();
    }
    eprintln!("[trace] {what} in {input:?} weight {weight:?} ...");
    let start = Instant::now();
    let y = conv();
    y.device().sync().expect("device sync");
    eprintln!(
        "[trace] {what} in {input:?} weight {weight:?}: {:.3} s",
        start.elapsed().as_secs_f64()
    );
    y
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
    /// frame of the previous cache (or zeros) when `x` has only one.
    fn keep(x: &Tensor<5>, previous: Option<&Tensor<5>>, zeros_if_short: bool) -> Tensor<5> {
        let t = x.dims()[2];
        let last = x.clone().slice(s![.., .., t.saturating_sub(2)..t]);
        if t >= 2 {
            return last;
        }
        match previous {
            Some(p) => {
                let pt = p.dims()[2];
                Tensor::cat(vec![p.clone().slice(s![.., .., pt - 1..pt]), last], 2)
            }
            None if zeros_if_short => Tensor::cat(vec![last.clone().zeros_like(), last], 2),
            None => last,
        }
    }

    /// A cached causal convolution: uses and then replaces this slot's frames.
    pub fn conv(&mut self, conv: &CausalConv3d, x: Tensor<5>) -> Tensor<5> {
        let (i, slot) = self.take();
        let previous = match slot {
            Slot::Frames(f) => Some(*f),
            _ => None,
        };
        let keep = Self::keep(&x, previous.as_ref(), false);
        let y = conv.forward(x, previous);
        self.slots[i] = Slot::Frames(Box::new(keep));
        y
    }

    /// The upsampler's time convolution: skipped on the first chunk (returns `None`), then run
    /// with zeros and later with the cached frames.
    pub fn time_conv(&mut self, conv: &CausalConv3d, x: Tensor<5>) -> Option<Tensor<5>> {
        let (i, slot) = self.take();
        match slot {
            Slot::Empty => {
                self.slots[i] = Slot::SkippedFirst;
                None
            }
            Slot::SkippedFirst => {
                let keep = Self::keep(&x, None, true);
                let y = conv.forward(x, None);
                self.slots[i] = Slot::Frames(Box::new(keep));
                Some(y)
            }
            Slot::Frames(previous) => {
                let keep = Self::keep(&x, Some(&previous), false);
                let y = conv.forward(x, Some(*previous));
                self.slots[i] = Slot::Frames(Box::new(keep));
                Some(y)
            }
        }
    }
}

/// A norm site: `F.normalize(x, dim=1) * sqrt(C) * gamma`, then SiLU (or not).
#[derive(Module, Debug)]
pub struct Norm {
    gamma: Param<Tensor<1>>,
    silu: bool,
}

impl Norm {
    pub fn load(l: &mut Loader, key: &str, channels: usize, silu: bool) -> Self {
        Self {
            gamma: l.param(&format!("{key}.gamma"), [channels]),
            silu,
        }
    }

    pub fn forward<const D: usize>(&self, x: Tensor<D>, ctx: &Ctx) -> Tensor<D> {
        let start = ctx.time_norms.then(|| {
            x.device().sync().expect("device sync");
            Instant::now()
        });
        let y = if ctx.fused {
            let activation = if self.silu {
                Activation::Silu
            } else {
                Activation::Identity
            };
            let options = RmsNormSiluOptions::wan().with_activation(activation);
            rms_norm_silu_dim(x, self.gamma.val(), 1, options)
        } else {
            self.composed(x)
        };
        if let Some(start) = start {
            y.device().sync().expect("device sync");
            ctx.norm_time.set(ctx.norm_time.get() + start.elapsed());
        }
        ctx.norm_calls.set(ctx.norm_calls.get() + 1);
        y
    }

    /// The same function from Burn ops, as PyTorch's eager code computes it.
    fn composed<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let channels = x.dims()[1];
        let norm = x.clone().square().sum_dim(1).sqrt().clamp_min(1e-12);
        let mut shape = [1usize; D];
        shape[1] = channels;
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
    pub fn load(l: &mut Loader, key: &str, c_in: usize, c_out: usize) -> Self {
        Self {
            norm1: Norm::load(l, &format!("{key}.norm1"), c_in, true),
            conv1: CausalConv3d::load(l, &format!("{key}.conv1"), c_in, c_out, [3, 3, 3]),
            norm2: Norm::load(l, &format!("{key}.norm2"), c_out, true),
            conv2: CausalConv3d::load(l, &format!("{key}.conv2"), c_out, c_out, [3, 3, 3]),
            shortcut: (c_in != c_out).then(|| {
                CausalConv3d::load(l, &format!("{key}.conv_shortcut"), c_in, c_out, [1, 1, 1])
            }),
        }
    }

    pub fn forward(&self, x: Tensor<5>, cache: &mut FrameCache, ctx: &Ctx) -> Tensor<5> {
        let h = match &self.shortcut {
            Some(conv) => conv.forward(x.clone(), None),
            None => x.clone(),
        };
        let y = self.norm1.forward(x, ctx);
        let y = cache.conv(&self.conv1, y);
        let y = self.norm2.forward(y, ctx);
        let y = cache.conv(&self.conv2, y);
        y + h
    }
}

/// Single-head self-attention over each frame's `H * W` positions, after a plain norm.
#[derive(Module, Debug)]
pub struct AttentionBlock {
    norm: Norm,
    to_qkv: Conv2d,
    proj: Conv2d,
}

impl AttentionBlock {
    pub fn load(l: &mut Loader, key: &str, c: usize) -> Self {
        Self {
            norm: Norm::load(l, &format!("{key}.norm"), c, false),
            to_qkv: Conv2d::load(l, &format!("{key}.to_qkv"), c, 3 * c, 1),
            proj: Conv2d::load(l, &format!("{key}.proj"), c, c, 1),
        }
    }

    pub fn forward(&self, x: Tensor<5>, ctx: &Ctx) -> Tensor<5> {
        let [b, c, t, h, w] = x.dims();
        let frames = x.clone().permute([0, 2, 1, 3, 4]).reshape([b * t, c, h, w]);
        let qkv = self.to_qkv.forward(self.norm.forward(frames, ctx));
        // [N, 3C, HW] -> [N, HW, 3C]: q, k, v are consecutive channel ranges.
        let qkv = qkv.reshape([b * t, 3 * c, h * w]).swap_dims(1, 2);
        let q = qkv.clone().slice(s![.., .., 0..c]);
        let k = qkv.clone().slice(s![.., .., c..2 * c]);
        let v = qkv.slice(s![.., .., 2 * c..3 * c]);
        let scores = q.matmul(k.swap_dims(1, 2)) * (1.0 / (c as f64).sqrt());
        let attended = softmax(scores, 2).matmul(v); // [N, HW, C]
        let attended = attended.swap_dims(1, 2).reshape([b * t, c, h, w]);
        let out = self.proj.forward(attended);
        out.reshape([b, t, c, h, w]).permute([0, 2, 1, 3, 4]) + x
    }
}

/// Nearest-neighbour x2 per frame then a 3x3 conv; `upsample3d` first doubles the frames with
/// a causal time convolution whose two output halves interleave.
#[derive(Module, Debug)]
pub struct Resample {
    conv: Conv2d,
    time_conv: Option<CausalConv3d>,
}

impl Resample {
    pub fn load(l: &mut Loader, key: &str, c: usize, c_out: usize, temporal: bool) -> Self {
        Self {
            conv: Conv2d::load(l, &format!("{key}.resample.1"), c, c_out, 3),
            time_conv: temporal
                .then(|| CausalConv3d::load(l, &format!("{key}.time_conv"), c, 2 * c, [3, 1, 1])),
        }
    }

    pub fn forward(&self, x: Tensor<5>, cache: &mut FrameCache) -> Tensor<5> {
        let mut x = x;
        if let Some(tc) = &self.time_conv
            && let Some(y) = cache.time_conv(tc, x.clone())
        {
            let [b, c, t, h, w] = x.dims();
            // [B, 2C, T] -> [B, 2, C, T] -> [B, C, T, 2]: output frame 2i + j is half j of i.
            x = y
                .reshape([b, 2, c, t, h, w])
                .permute([0, 2, 3, 1, 4, 5])
                .reshape([b, c, 2 * t, h, w]);
        }
        let [b, c, t, h, w] = x.dims();
        let frames = x.permute([0, 2, 1, 3, 4]).reshape([b * t, c, h, w]);
        let up = frames
            .reshape([b * t, c, h, 1, w, 1])
            .expand([b * t, c, h, 2, w, 2])
            .reshape([b * t, c, 2 * h, 2 * w]);
        let y = self.conv.forward(up);
        let c_out = y.dims()[1];
        y.reshape([b, t, c_out, 2 * h, 2 * w])
            .permute([0, 2, 1, 3, 4])
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

    pub fn forward(&self, x: Tensor<5>, first_chunk: bool) -> Tensor<5> {
        let [b, c, t, h, w] = x.dims();
        let (co, ft) = (self.c_out, self.factor_t);
        let x = x
            .unsqueeze_dim::<6>(2)
            .expand([b, c, self.repeats, t, h, w])
            .reshape([b, co, ft, 2, 2, t, h, w])
            .permute([0, 1, 5, 2, 6, 3, 7, 4])
            .reshape([b, co, t * ft, 2 * h, 2 * w]);
        if first_chunk {
            let frames = t * ft;
            x.slice(s![.., .., ft - 1..frames])
        } else {
            x
        }
    }
}

/// `z * std + mean` per latent channel (the step the original decode does first).
pub fn denormalize(z: Tensor<5>, config: &WanConfig) -> Tensor<5> {
    let device = z.device();
    let c = config.z_dim;
    let shape = [1, c, 1, 1, 1];
    let mean = Tensor::<1>::from_floats(config.latents_mean.as_slice(), &device).reshape(shape);
    let std = Tensor::<1>::from_floats(config.latents_std.as_slice(), &device).reshape(shape);
    let dtype = z.dtype();
    z * std.cast(dtype) + mean.cast(dtype)
}
