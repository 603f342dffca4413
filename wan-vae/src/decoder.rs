//! The whole decoder and its frame-by-frame causal decode.

use burn::module::Module;
use burn::tensor::{DType, Device, Tensor, s};

use crate::config::WanConfig;
use crate::layers::{
    AttentionBlock, CausalConv3d, Ctx, DupUp3D, Fp8Scales, FrameCache, Loader, Norm, Precision,
    Resample, ResidualBlock,
};
use crate::weights::{WeightError, Weights};

/// An up stage: residual blocks, an optional upsampler, and (Wan2.2) the `DupUp3D` shortcut.
#[derive(Module, Debug)]
pub struct UpStage {
    resnets: Vec<ResidualBlock>,
    upsampler: Option<Resample>,
    shortcut: Option<DupUp3D>,
}

impl UpStage {
    fn forward(
        &self,
        x: Tensor<5>,
        cache: &mut FrameCache,
        ctx: &Ctx,
        first_chunk: bool,
    ) -> Tensor<5> {
        let input = self.shortcut.as_ref().map(|_| x.clone());
        let mut x = x;
        for block in &self.resnets {
            x = block.forward(x, cache, ctx);
        }
        if let Some(up) = &self.upsampler {
            x = up.forward(x, cache, ctx);
        }
        match (&self.shortcut, input) {
            (Some(dup), Some(input)) => x + dup.forward(input, first_chunk),
            _ => x,
        }
    }
}

/// The Wan VAE decoder (with `post_quant_conv`), Wan2.1 or Wan2.2 layout.
#[derive(Module, Debug)]
pub struct WanDecoder {
    post_quant_conv: CausalConv3d,
    conv_in: CausalConv3d,
    mid_resnets: Vec<ResidualBlock>,
    mid_attention: AttentionBlock,
    stages: Vec<UpStage>,
    norm_out: Norm,
    conv_out: CausalConv3d,
    patch_size: usize,
    z_dim: usize,
}

/// A latent the decoder cannot take; the message names what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatentError {
    /// The latent's shape `[B, z_dim, T, h, w]`.
    pub shape: [usize; 5],
    /// The decoder's latent channel count.
    pub z_dim: usize,
}

impl std::fmt::Display for LatentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [b, c, t, h, w] = self.shape;
        write!(
            f,
            "latent `z`: expected [B, {}, T, h, w] with B, T, h, w >= 1, got [{b}, {c}, {t}, {h}, {w}]",
            self.z_dim
        )
    }
}

impl std::error::Error for LatentError {}

impl WanDecoder {
    /// Builds the decoder for `config` from `weights` (diffusers names; see [`Weights`]).
    ///
    /// # Errors
    /// The weight source's error, naming the key, on a missing or mis-shaped tensor.
    pub fn load(
        config: &WanConfig,
        weights: &mut Weights,
        device: &Device,
        dtype: DType,
    ) -> Result<Self, WeightError> {
        Self::load_with(config, weights, device, dtype, Precision::Native)
    }

    /// [`WanDecoder::load`] with the norm -> convolution sites in `precision` (FP8 sites: E4M3
    /// weights per output channel, E4M3 norm outputs with delayed per-tensor scales; the
    /// convolutions still run in `dtype`).
    ///
    /// # Errors
    /// As [`WanDecoder::load`].
    pub fn load_with(
        config: &WanConfig,
        weights: &mut Weights,
        device: &Device,
        dtype: DType,
        precision: Precision,
    ) -> Result<Self, WeightError> {
        let mut l = Loader {
            weights,
            config,
            device,
            dtype,
            fp8_sites: precision.fp8_in(None),
        };
        let dims = config.dims();
        let nrb = config.num_res_blocks;
        let post_quant_conv = CausalConv3d::load(
            &mut l,
            "post_quant_conv",
            config.z_dim,
            config.z_dim,
            [1, 1, 1],
        )?;
        let conv_in = CausalConv3d::load(&mut l, "decoder.conv_in", config.z_dim, dims[0], [3; 3])?;
        let mid_resnets = (0..2)
            .map(|j| {
                let key = format!("decoder.mid_block.resnets.{j}");
                ResidualBlock::load(&mut l, &key, dims[0], dims[0])
            })
            .collect::<Result<_, _>>()?;
        let mid_attention =
            AttentionBlock::load(&mut l, "decoder.mid_block.attentions.0", dims[0])?;
        let mut stages = Vec::new();
        for i in 0..4 {
            l.fp8_sites = precision.fp8_in(Some(i));
            let (mut c_in, c_out) = (dims[i], dims[i + 1]);
            if i > 0 && !config.residual {
                // Wan2.1's upsamplers halve the width.
                c_in /= 2;
            }
            let stage_in = c_in;
            let resnets = (0..=nrb)
                .map(|j| {
                    let key = format!("decoder.up_blocks.{i}.resnets.{j}");
                    let block = ResidualBlock::load(&mut l, &key, c_in, c_out);
                    c_in = c_out;
                    block
                })
                .collect::<Result<_, _>>()?;
            let upsample = i != 3;
            let temporal = upsample && config.temporal_upsample[i];
            let upsampler = upsample
                .then(|| {
                    let (key, up_out) = if config.residual {
                        (format!("decoder.up_blocks.{i}.upsampler"), c_out)
                    } else {
                        (format!("decoder.up_blocks.{i}.upsamplers.0"), c_out / 2)
                    };
                    Resample::load(&mut l, &key, c_out, up_out, temporal)
                })
                .transpose()?;
            let shortcut = (config.residual && upsample)
                .then(|| DupUp3D::new(stage_in, c_out, if temporal { 2 } else { 1 }));
            stages.push(UpStage {
                resnets,
                upsampler,
                shortcut,
            });
        }
        let norm_out = Norm::load(&mut l, "decoder.norm_out", dims[4], true)?;
        let conv_out = CausalConv3d::load(
            &mut l,
            "decoder.conv_out",
            dims[4],
            config.out_channels,
            [3; 3],
        )?;
        Ok(Self {
            post_quant_conv,
            conv_in,
            mid_resnets,
            mid_attention,
            stages,
            norm_out,
            conv_out,
            patch_size: config.patch_size,
            z_dim: config.z_dim,
        })
    }

    /// One latent frame `[B, 1, h, w, z]` (after `post_quant_conv`) through the decoder.
    fn decode_chunk(
        &self,
        x: Tensor<5>,
        cache: &mut FrameCache,
        ctx: &Ctx,
        first_chunk: bool,
    ) -> Tensor<5> {
        cache.rewind();
        let mut x = cache.conv(&self.conv_in, x, ctx);
        x = self.mid_resnets[0].forward(x, cache, ctx);
        x = self.mid_attention.forward(x, ctx);
        x = self.mid_resnets[1].forward(x, cache, ctx);
        for stage in &self.stages {
            x = stage.forward(x, cache, ctx, first_chunk);
        }
        cache.norm_conv(&self.norm_out, &self.conv_out, x, None, ctx)
    }

    /// Decodes `z` (`[B, z_dim, T, h, w]`, already de-normalised) frame by frame with the causal
    /// cache, handing latent frame `i`'s decoded frames to `on_frame(i, frames)` (channels-last
    /// `[B, F, H, W, C p^2]`, before un-patchifying; [`WanDecoder::assemble`] makes the video
    /// of them). A caller that streams frames out never holds the whole video.
    ///
    /// # Errors
    /// [`LatentError`] (before any work) when `z` has another channel count than the decoder's
    /// `z_dim` or an empty axis.
    pub fn decode_frames(
        &self,
        z: Tensor<5>,
        ctx: &Ctx,
        mut on_frame: impl FnMut(usize, Tensor<5>),
    ) -> Result<(), LatentError> {
        let shape = z.dims();
        if shape[1] != self.z_dim || shape.contains(&0) {
            return Err(LatentError {
                shape,
                z_dim: self.z_dim,
            });
        }
        let t = shape[2];
        let x = self
            .post_quant_conv
            .forward(z.permute([0, 2, 3, 4, 1]), None, ctx);
        let device = x.device();
        let mut cache = FrameCache::default();
        ctx.fp8_scales.replace(Fp8Scales::default());
        for i in 0..t {
            ctx.fp8_scales.borrow_mut().rewind();
            let chunk = x.clone().slice(s![.., i..i + 1]);
            let out = self.decode_chunk(chunk, &mut cache, ctx, i == 0);
            on_frame(i, out);
            let periodic = ctx.release_memory_every > 0 && (i + 1) % ctx.release_memory_every == 0;
            if periodic || i < ctx.release_memory_first {
                device.memory_cleanup();
            }
        }
        Ok(())
    }

    /// The video of [`WanDecoder::decode_frames`]' chunks, in order: `[B, 3, F, H, W]` as a view
    /// of channels-last memory (`permute([0, 2, 3, 4, 1])` of it is contiguous).
    pub fn assemble(&self, chunks: Vec<Tensor<5>>) -> Tensor<5> {
        unpatchify(Tensor::cat(chunks, 1), self.patch_size).permute([0, 4, 1, 2, 3])
    }

    /// [`WanDecoder::decode_frames`] and [`WanDecoder::assemble`]: the video
    /// `[B, 3, 1 + 4 (T - 1), 8h, 8w]` (16h, 16w for Wan2.2) before the final clamp, calling
    /// `on_frame(i, frames)` after latent frame `i`.
    ///
    /// # Errors
    /// [`LatentError`], as [`WanDecoder::decode_frames`].
    pub fn decode(
        &self,
        z: Tensor<5>,
        ctx: &Ctx,
        mut on_frame: impl FnMut(usize, &Tensor<5>),
    ) -> Result<Tensor<5>, LatentError> {
        let mut chunks = Vec::with_capacity(z.dims()[2]);
        self.decode_frames(z, ctx, |i, out| {
            on_frame(i, &out);
            chunks.push(out);
        })?;
        Ok(self.assemble(chunks))
    }
}

/// `[B, F, H, W, C p^2] -> [B, F, H p, W p, C]`: channel `c p^2 + a p + b` is pixel `(b, a)`
/// of each `p x p` patch (row offset `b`, column offset `a`).
pub fn unpatchify(x: Tensor<5>, p: usize) -> Tensor<5> {
    if p == 1 {
        return x;
    }
    let [b, f, h, w, cp] = x.dims();
    let c = cp / (p * p);
    x.reshape([b, f, h, w, c, p, p])
        .permute([0, 1, 2, 6, 3, 5, 4])
        .reshape([b, f, h * p, w * p, c])
}
