//! The decoder's hyper-parameters: the two published models, the small cross-check models of
//! `tests/fixtures/`, and detection from a weight file.

use crate::weights::WeightError;

/// What the decoder looks like. Channel widths are `base_dim * [4, 4, 4, 2, 1]` from the
/// middle block to the head (`dim_mult = [1, 2, 4, 4]` read backwards).
#[derive(Clone, Debug, PartialEq)]
pub struct WanConfig {
    /// Latent channels.
    pub z_dim: usize,
    /// The decoder's base width (the head's width).
    pub base_dim: usize,
    /// Residual blocks per up stage minus one (each stage has `num_res_blocks + 1`).
    pub num_res_blocks: usize,
    /// Which of the three upsampling stages also doubles the frame count.
    pub temporal_upsample: [bool; 3],
    /// Channels the head writes (`3 * patch_size^2`).
    pub out_channels: usize,
    /// Spatial patch size folded into the output channels (Wan2.2: 2).
    pub patch_size: usize,
    /// Wan2.2: up stages keep their width through the upsampler and add a parameter-free
    /// `DupUp3D` shortcut.
    pub residual: bool,
    /// Per-channel latent statistics: the decoder input is `z * std + mean`.
    pub latents_mean: Vec<f32>,
    pub latents_std: Vec<f32>,
}

const WAN21_MEAN: [f32; 16] = [
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508, 0.4134, -0.0715, 0.5517,
    -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
];
const WAN21_STD: [f32; 16] = [
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743, 3.2687, 2.1526, 2.8652, 1.5579,
    1.6382, 1.1253, 2.8251, 1.9160,
];

/// Wan2.2 (TI2V-5B) latent statistics, as the original `Wan2_2_VAE` and diffusers' config
/// publish them.
const WAN22_MEAN: [f32; 48] = [
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557, -0.1382, 0.0542, 0.2813,
    0.0891, 0.1570, -0.0098, 0.0375, -0.1825, -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108,
    -0.2158, 0.2502, -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230, -0.0313,
    -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748, 0.0152, 0.1957, 0.1433, -0.2944,
    0.3573, -0.0548, -0.1681, -0.0667,
];
const WAN22_STD: [f32; 48] = [
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901,
    0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944,
    0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
];

impl WanConfig {
    /// Whether the latent statistics are a published model's (Wan2.1: z 16; Wan2.2: z 48), as
    /// opposed to the identity (mean 0, std 1) of the test-sized decoders.
    pub fn has_published_statistics(&self) -> bool {
        matches!((self.residual, self.z_dim), (false, 16) | (true, 48))
    }

    /// The Wan2.1 decoder (z 16, widths 384/384/384/192/96).
    pub fn wan21() -> Self {
        Self {
            z_dim: 16,
            base_dim: 96,
            num_res_blocks: 2,
            temporal_upsample: [true, true, false],
            out_channels: 3,
            patch_size: 1,
            residual: false,
            latents_mean: WAN21_MEAN.to_vec(),
            latents_std: WAN21_STD.to_vec(),
        }
    }

    /// The Wan2.2 (TI2V-5B) decoder (z 48, widths 1024/1024/1024/512/256, patch 2). Its latent
    /// statistics are not built in: give latents already de-normalised.
    pub fn wan22() -> Self {
        Self {
            z_dim: 48,
            base_dim: 256,
            out_channels: 12,
            patch_size: 2,
            residual: true,
            latents_mean: WAN22_MEAN.to_vec(),
            latents_std: WAN22_STD.to_vec(),
            ..Self::wan21()
        }
    }

    /// The fixtures' small Wan2.1-layout decoder (z 4, base 16).
    pub fn small21() -> Self {
        Self {
            z_dim: 4,
            base_dim: 16,
            latents_mean: vec![0.0; 4],
            latents_std: vec![1.0; 4],
            ..Self::wan21()
        }
    }

    /// The fixtures' small Wan2.2-layout decoder (z 8, base 16, patch 2).
    pub fn small22() -> Self {
        Self {
            z_dim: 8,
            base_dim: 16,
            latents_mean: vec![0.0; 8],
            latents_std: vec![1.0; 8],
            ..Self::wan22()
        }
    }

    /// Widths from the middle block (index 0) to the head (index 4).
    pub fn dims(&self) -> [usize; 5] {
        let b = self.base_dim;
        [4 * b, 4 * b, 4 * b, 2 * b, b]
    }

    /// Output frames for `latent_frames` latent frames (the first is not upsampled in time).
    pub fn output_frames(&self, latent_frames: usize) -> usize {
        let factor: usize = self
            .temporal_upsample
            .iter()
            .map(|&t| if t { 2 } else { 1 })
            .product();
        1 + factor * latent_frames.saturating_sub(1)
    }

    /// Spatial upsampling factor from latent to pixels.
    pub fn spatial_factor(&self) -> usize {
        8 * self.patch_size
    }

    /// Reads the configuration from the shapes in a weight file (diffusers names):
    /// `z_dim` from `post_quant_conv`, widths from `conv_out`, Wan2.2 from its `upsampler` keys.
    pub fn detect(shape: impl Fn(&str) -> Option<Vec<usize>>) -> Result<Self, WeightError> {
        let need = |key: &str| {
            shape(key).ok_or_else(|| {
                WeightError::Config(format!("missing tensor `{key}` (cannot detect the model)"))
            })
        };
        let z_dim = need("post_quant_conv.weight")?[0];
        let conv_out = need("decoder.conv_out.weight")?;
        let residual = shape("decoder.up_blocks.0.upsampler.resample.1.weight").is_some();
        let mut num_res_blocks = 0;
        while shape(&format!(
            "decoder.up_blocks.0.resnets.{}.conv1.weight",
            num_res_blocks + 1
        ))
        .is_some()
        {
            num_res_blocks += 1;
        }
        let base = if residual {
            Self::wan22()
        } else {
            Self::wan21()
        };
        let (latents_mean, latents_std) = if !residual && z_dim == 16 {
            (WAN21_MEAN.to_vec(), WAN21_STD.to_vec())
        } else if residual && z_dim == 48 {
            (WAN22_MEAN.to_vec(), WAN22_STD.to_vec())
        } else {
            (vec![0.0; z_dim], vec![1.0; z_dim])
        };
        Ok(Self {
            z_dim,
            base_dim: conv_out[1],
            num_res_blocks,
            out_channels: conv_out[0],
            patch_size: if conv_out[0] == 12 { 2 } else { 1 },
            latents_mean,
            latents_std,
            ..base
        })
    }
}
