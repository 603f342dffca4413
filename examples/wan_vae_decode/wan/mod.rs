//! A Burn port of the Wan video VAE decoder (Wan2.1 and Wan2.2 layouts) whose 29 norm + SiLU
//! sites, and the attention block's plain norm, run on this crate's fused op.
//!
//! - [`config`]: hyper-parameters (published models, the cross-check fixtures, detection);
//! - [`weights`]: safetensors loading (diffusers or original names) or random weights;
//! - [`layers`]: causal conv + frame cache, norm sites, residual / attention / resample blocks;
//! - [`decoder`]: the decoder and its frame-by-frame causal decode.

pub mod config;
pub mod decoder;
pub mod layers;
pub mod weights;
