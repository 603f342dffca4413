//! The Wan video VAE decoder (Wan2.1 and Wan2.2 layouts) in Burn.
//!
//! Activations stay channels-last (`[B, T, H, W, C]`) from the latent to the video; every
//! convolution runs `burn_rmsnorm_silu::conv3d_channels_last` (cubek's implicit GEMM on
//! tensor cores on CUDA, configured from a measured table), the 29 norm + SiLU sites and the
//! attention block's plain norm run the fused RMSNorm + SiLU op, and the middle block's
//! attention runs cubek's flash attention.
//!
//! - [`config`]: hyper-parameters (published models, the cross-check fixtures, detection);
//! - [`weights`]: safetensors loading (diffusers or original names) or random weights;
//! - [`layers`]: causal conv + frame cache, norm sites, residual / attention / resample blocks;
//! - [`decoder`]: the decoder and its frame-by-frame causal decode;
//! - [`video`]: the decoded frames as an H.264 MP4.

pub mod config;
pub mod decoder;
pub mod layers;
pub mod video;
pub mod weights;

pub use config::WanConfig;
pub use decoder::{LatentError, WanDecoder};
pub use layers::{Ctx, MemoryPeak, Precision, denormalize};
pub use video::{Mp4Options, VideoError, write_mp4};
pub use weights::{WeightError, Weights};
