//! The norm sites and the blocks built of them: residual, attention, resample, Wan2.2's `DupUp3D` shortcut.

use super::*;

/// A norm site over the channel (last) axis: `F.normalize(x, dim=C) * sqrt(C) * gamma`, then
/// SiLU (or not): the crate's `RmsNormSilu` module with the Wan norm, timed and with the
/// composed form for cross-checks.
#[derive(Module, Debug)]
pub struct Norm {
    pub(super) inner: RmsNormSilu,
}

impl Norm {
    pub fn load(
        l: &mut Loader,
        key: &str,
        channels: usize,
        silu: bool,
    ) -> Result<Self, WeightError> {
        let activation = if silu {
            ActivationKind::Silu
        } else {
            ActivationKind::Identity
        };
        let gamma = l.param(&format!("{key}.gamma"), [channels])?;
        let config = RmsNormSiluConfig::wan(channels).with_activation(activation);
        Ok(Self {
            inner: config.init_with(gamma),
        })
    }

    pub fn forward<const D: usize>(&self, x: Tensor<D>, ctx: &Ctx) -> Tensor<D> {
        ctx.norm_calls.set(ctx.norm_calls.get() + 1);
        let device = x.device();
        let shape = x.dims().to_vec();
        ctx.timed_site(&ctx.norm_time, "norm", shape, &device, || {
            self.apply(x, ctx.fused)
        })
    }

    /// The norm site of `x` (`[B, T, H, W, C]`) written over frames `at..at + T` of `into`,
    /// which is returned (see `rms_norm_silu_into`).
    pub fn forward_into(&self, x: Tensor<5>, into: Tensor<5>, at: usize, ctx: &Ctx) -> Tensor<5> {
        ctx.norm_calls.set(ctx.norm_calls.get() + 1);
        let device = x.device();
        let shape = x.dims().to_vec();
        ctx.timed_site(&ctx.norm_time, "norm", shape, &device, || {
            if ctx.fused {
                self.inner.forward_into(x, into, 1, at)
            } else {
                let t = x.dims()[1];
                into.slice_assign(s![.., at..at + t], self.composed(x))
            }
        })
    }

    fn apply<const D: usize>(&self, x: Tensor<D>, fused: bool) -> Tensor<D> {
        if fused {
            self.inner.forward(x)
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
        let y = x / norm * (channels as f64).sqrt() * self.inner.gamma.val().reshape(shape);
        if self.inner.options.activation == Activation::Silu {
            silu(y)
        } else {
            y
        }
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
            conv1: CausalConv3d::load_after_norm(
                l,
                &format!("{key}.conv1"),
                c_in,
                c_out,
                [3, 3, 3],
            )?,
            norm2: Norm::load(l, &format!("{key}.norm2"), c_out, true)?,
            conv2: CausalConv3d::load_after_norm(
                l,
                &format!("{key}.conv2"),
                c_out,
                c_out,
                [3, 3, 3],
            )?,
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
        let y = cache.norm_conv(&self.norm1, &self.conv1, x, None, ctx);
        cache.norm_conv(&self.norm2, &self.conv2, y, Some(h), ctx)
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
            to_qkv: CausalConv3d::load_2d_after_norm(l, &format!("{key}.to_qkv"), c, 3 * c)?,
            proj: CausalConv3d::load_2d(l, &format!("{key}.proj"), c, c, 1)?,
        })
    }

    pub fn forward(&self, x: Tensor<5>, ctx: &Ctx) -> Tensor<5> {
        let [b, t, h, w, c] = x.dims();
        let normed = match self.to_qkv.fp8_input {
            true => self.norm.forward_fp8(x.clone(), ctx),
            false => self.norm.forward(x.clone(), ctx),
        };
        let qkv = self.to_qkv.forward(normed, None, ctx);
        // [B, T, H, W, 3C] -> one sequence of H W tokens per frame, one head; q, k, v are
        // consecutive channel ranges.
        let qkv = qkv.reshape([b * t, 1, h * w, 3 * c]);
        let q = qkv.clone().slice(s![.., .., .., 0..c]);
        let k = qkv.clone().slice(s![.., .., .., c..2 * c]);
        let v = qkv.slice(s![.., .., .., 2 * c..3 * c]);
        let attended = ctx
            .timed(&ctx.attention_time, &x.device(), || {
                single_head_attention_with(q, k, v, ctx.attention)
            })
            .reshape([b, t, h, w, c]);
        self.proj.forward_add(attended, None, Some(x), ctx)
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
