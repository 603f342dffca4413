//! `RmsNormSilu`: a module in the style of `burn::nn::RmsNorm`, whose forward is the fused op.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::tensor::{Device, Tensor};

use crate::Activation;
use crate::api::{Norm, RmsNormSiluOptions, rms_norm_silu_with};

/// Configuration of [`RmsNormSilu`].
#[derive(Config, Debug)]
pub struct RmsNormSiluConfig {
    /// Length of the normalised (last) axis.
    pub d_model: usize,
    /// Added to the mean of squares under the root. Default: 1e-5 (as `burn::nn::RmsNorm`).
    #[config(default = 1e-5)]
    pub epsilon: f64,
    /// The normalised axis; `None` (default) is the last one. `Some(1)` is the channel axis
    /// of `[B, C, T, H, W]` (see [`crate::rms_norm_silu_dim`]).
    #[config(default = "None")]
    pub dim: Option<usize>,
}

impl RmsNormSiluConfig {
    /// A module with `gamma` initialised to ones.
    ///
    /// # Panics
    /// If `epsilon` is negative, NaN or infinite.
    pub fn init(&self, device: &Device) -> RmsNormSilu {
        assert!(
            self.epsilon.is_finite() && self.epsilon >= 0.0,
            "RmsNormSiluConfig: `epsilon` must be finite and >= 0, got {}",
            self.epsilon
        );
        RmsNormSilu {
            gamma: Param::from_tensor(Tensor::ones([self.d_model], device)),
            epsilon: self.epsilon,
            dim: self.dim,
        }
    }
}

/// `silu(x * rsqrt(mean(x^2) + epsilon) * gamma)` over the last axis.
#[derive(Module, Debug)]
pub struct RmsNormSilu {
    /// The learnable scale, `[d_model]`.
    pub gamma: Param<Tensor<1>>,
    /// Added to the mean of squares under the root.
    pub epsilon: f64,
    /// The normalised axis; `None` is the last one.
    pub dim: Option<usize>,
}

impl RmsNormSilu {
    /// Applies the fused op over `dim` (default: the last axis, `[..., d_model]`); the output
    /// has the shape and dtype of the input.
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let options = RmsNormSiluOptions {
            norm: Norm::Rms {
                eps: self.epsilon as f32,
            },
            activation: Activation::Silu,
            dim: self.dim,
        };
        rms_norm_silu_with(x, self.gamma.val(), options)
    }
}
