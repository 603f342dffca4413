//! The causal 3D convolution (also the 2D and 1x1 ones) and the phase convolutions (the upsamplers' folded 3x3, the time convolution).

use super::*;

/// `CausalConv3d`: a 3D convolution whose temporal padding all goes in front, fed with the
/// last frames of the previous chunk's input instead of zeros when decoding frame by frame.
/// Also the decoder's 2D (`kT = 1`) and 1x1 convolutions.
#[derive(Module, Debug)]
pub struct CausalConv3d {
    /// `[C_out, kT, kH, kW, C_in]`.
    weight: Param<Tensor<5>>,
    bias: Param<Tensor<1>>,
    /// Frames of temporal context (kernel depth - 1).
    pub(crate) context: usize,
    /// Spatial padding on each side.
    pad: usize,
    /// Loaded for FP8 inputs (see [`Precision`]): E4M3 weights, and the norm before it writes
    /// E4M3 codes.
    pub(crate) fp8_input: bool,
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
        Self::load_stored(l, key, c_in, c_out, k, 5, false)
    }

    /// [`Self::load`] for a convolution that follows a norm site: where the loader's sites are
    /// FP8 its weights are rounded to E4M3 per output channel and its input comes as E4M3 codes.
    pub fn load_after_norm(
        l: &mut Loader,
        key: &str,
        c_in: usize,
        c_out: usize,
        k: [usize; 3],
    ) -> Result<Self, WeightError> {
        let fp8 = l.fp8_sites;
        Self::load_stored(l, key, c_in, c_out, k, 5, fp8)
    }

    /// [`Self::load_2d`] of a 1x1 convolution that follows a norm site (see
    /// [`Self::load_after_norm`]).
    pub fn load_2d_after_norm(
        l: &mut Loader,
        key: &str,
        c_in: usize,
        c_out: usize,
    ) -> Result<Self, WeightError> {
        let fp8 = l.fp8_sites;
        Self::load_stored(l, key, c_in, c_out, [1, 1, 1], 4, fp8)
    }

    /// A per-frame 2D convolution whose weight is stored `[C_out, C_in, kH, kW]`.
    pub fn load_2d(
        l: &mut Loader,
        key: &str,
        c_in: usize,
        c_out: usize,
        k: usize,
    ) -> Result<Self, WeightError> {
        Self::load_stored(l, key, c_in, c_out, [1, k, k], 4, false)
    }

    fn load_stored(
        l: &mut Loader,
        key: &str,
        c_in: usize,
        c_out: usize,
        k: [usize; 3],
        stored_rank: usize,
        fp8: bool,
    ) -> Result<Self, WeightError> {
        let mut values = l.conv_values(&format!("{key}.weight"), c_out, c_in, k, stored_rank)?;
        if fp8 {
            values = e4m3_per_output_channel(&values, c_out);
        }
        Ok(Self {
            weight: Param::from_tensor(l.tensor(values, [c_out, k[0], k[1], k[2], c_in])),
            bias: l.param(&format!("{key}.bias"), [c_out])?,
            context: k[0] - 1,
            pad: k[1] / 2,
            fp8_input: fp8,
        })
    }

    /// `x` is `[B, T, H, W, C]`; `cache` holds up to `context` frames preceding it. Frames the
    /// cache lacks are zero padding in front (no zero tensor, no copy).
    pub fn forward(&self, x: Tensor<5>, cache: Option<Tensor<5>>, ctx: &Ctx) -> Tensor<5> {
        self.forward_add(x, cache, None, ctx)
    }

    /// [`Self::forward`] plus `residual` (the output's shape): added in the convolution's
    /// store with `Ctx::residual_in_conv` (see `conv3d_channels_last_add`), else after it.
    pub fn forward_add(
        &self,
        x: Tensor<5>,
        cache: Option<Tensor<5>>,
        residual: Option<Tensor<5>>,
        ctx: &Ctx,
    ) -> Tensor<5> {
        let (x, front) = join(cache, x, self.context, ctx);
        self.forward_padded(x, front, residual, ctx)
    }

    /// The convolution of `x` (cached frames already in front) with `front` zero frames of
    /// temporal padding, plus `residual` if any.
    pub(crate) fn forward_padded(
        &self,
        x: Tensor<5>,
        front: usize,
        residual: Option<Tensor<5>>,
        ctx: &Ctx,
    ) -> Tensor<5> {
        let device = x.device();
        let shape = [x.dims().as_slice(), &[self.weight.dims()[0]]].concat();
        let padding = ConvPadding::causal(front, self.pad);
        // The residual in the convolution's store (`Ctx::residual_in_conv`), or added after it.
        let (in_store, after) = match residual {
            Some(r) if ctx.residual_in_conv => (Some(r), None),
            other => (None, other),
        };
        let y = ctx.timed_site(&ctx.conv_time, "conv", shape, &device, || match in_store {
            Some(r) => conv3d_channels_last_add(x, self.weight.val(), self.bias.val(), padding, r),
            None => conv3d_channels_last(x, self.weight.val(), self.bias.val(), padding),
        });
        match after {
            Some(r) => ctx.timed(&ctx.add_time, &device, || y + r),
            None => y,
        }
    }
}

/// The cached frames joined in front of the chunk along T (the one copy left around the causal
/// cache), and how many zero frames the padding still adds in front.
pub(crate) fn join(
    cache: Option<Tensor<5>>,
    x: Tensor<5>,
    context: usize,
    ctx: &Ctx,
) -> (Tensor<5>, usize) {
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
        let shape = [x.dims().as_slice(), &[self.weight.dims()[1]]].concat();
        ctx.timed_site(&ctx.conv_time, "phased conv", shape, &device, || {
            conv3d_channels_last_phases(x, self.weight.val(), self.bias.val(), phases)
        })
    }
}
