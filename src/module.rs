//! `RmsNormSilu`: a module in the style of `burn::nn::RmsNorm`, whose forward is the fused op:
//! the cuDNN norm or the Wan VAE's, with SiLU or without, over any axis.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::tensor::{Device, Tensor};

use crate::Activation;
use crate::api::{Norm, RmsNormSiluOptions, rms_norm_silu_into, rms_norm_silu_with};

/// How [`RmsNormSilu`] forms its per-row scale (the configuration's form of [`Norm`]; `epsilon`
/// is the config's).
#[derive(Config, Debug, PartialEq)]
pub enum NormKind {
    /// cuDNN / `burn::nn::RmsNorm`: `x * rsqrt(mean(x^2) + epsilon)`.
    Rms,
    /// The Wan VAE's `F.normalize(x) * sqrt(C)`: `x / max(||x||_2, epsilon) * sqrt(C)`.
    L2Clamp,
}

/// What [`RmsNormSilu`] applies after the scale by gamma (the configuration's form of
/// [`Activation`]).
#[derive(Config, Debug, PartialEq)]
pub enum ActivationKind {
    /// `v * sigmoid(v)`.
    Silu,
    /// None: a plain norm (the Wan VAE's attention-block norm).
    Identity,
}

/// Configuration of [`RmsNormSilu`].
#[derive(Config, Debug)]
pub struct RmsNormSiluConfig {
    /// Length of the normalised axis.
    pub d_model: usize,
    /// Added to the mean of squares under the root ([`NormKind::Rms`]), or the clamp of the L2
    /// norm ([`NormKind::L2Clamp`]). Default: 1e-5 (as `burn::nn::RmsNorm`).
    #[config(default = 1e-5)]
    pub epsilon: f64,
    /// The normalised axis; `None` (default) is the last one. `Some(1)` is the channel axis
    /// of `[B, C, T, H, W]` (see [`crate::rms_norm_silu_dim`]).
    #[config(default = "None")]
    pub dim: Option<usize>,
    /// The norm. Default: [`NormKind::Rms`].
    #[config(default = "NormKind::Rms")]
    pub norm: NormKind,
    /// The activation. Default: [`ActivationKind::Silu`].
    #[config(default = "ActivationKind::Silu")]
    pub activation: ActivationKind,
}

impl RmsNormSiluConfig {
    /// The Wan VAE's norm site over the last axis: `F.normalize(x) * sqrt(C) * gamma` with
    /// PyTorch's `eps = 1e-12`, then SiLU (`with_activation(ActivationKind::Identity)` for the
    /// attention block's plain norm).
    pub fn wan(d_model: usize) -> Self {
        Self::new(d_model)
            .with_norm(NormKind::L2Clamp)
            .with_epsilon(1e-12)
    }

    /// A module with `gamma` initialised to ones.
    ///
    /// # Panics
    /// If `epsilon` is negative, NaN or infinite.
    pub fn init(&self, device: &Device) -> RmsNormSilu {
        self.init_with(Param::from_tensor(Tensor::ones([self.d_model], device)))
    }

    /// A module with the given `gamma` (e.g. loaded from a checkpoint).
    ///
    /// # Panics
    /// If `epsilon` is negative, NaN or infinite, or `gamma` is not of length `d_model`.
    pub fn init_with(&self, gamma: Param<Tensor<1>>) -> RmsNormSilu {
        assert!(
            self.epsilon.is_finite() && self.epsilon >= 0.0,
            "RmsNormSiluConfig: `epsilon` must be finite and >= 0, got {}",
            self.epsilon
        );
        let [len] = gamma.val().dims();
        assert!(
            len == self.d_model,
            "RmsNormSiluConfig: `gamma` must have length d_model = {}, got {len}",
            self.d_model
        );
        let eps = self.epsilon as f32;
        let norm = match self.norm {
            NormKind::Rms => Norm::Rms { eps },
            NormKind::L2Clamp => Norm::L2Clamp { eps },
        };
        let activation = match self.activation {
            ActivationKind::Silu => Activation::Silu,
            ActivationKind::Identity => Activation::Identity,
        };
        RmsNormSilu {
            gamma,
            options: RmsNormSiluOptions {
                norm,
                activation,
                dim: self.dim,
            },
        }
    }
}

/// `act(norm(x) * gamma)` over one axis (by default the last): the fused op with its
/// configuration's norm, activation and axis.
#[derive(Module, Debug)]
pub struct RmsNormSilu {
    /// The learnable scale, `[d_model]`.
    pub gamma: Param<Tensor<1>>,
    /// The norm, activation and axis (not parameters).
    #[module(skip)]
    pub options: RmsNormSiluOptions,
}

impl RmsNormSilu {
    /// Applies the fused op; the output has the shape and dtype of the input.
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        rms_norm_silu_with(x, self.gamma.val(), self.options)
    }

    /// [`Self::forward`] written over positions `at..` of axis `dim` of `into` (in place where
    /// it can be; see [`crate::rms_norm_silu_into`]), which is returned.
    pub fn forward_into<const D: usize>(
        &self,
        x: Tensor<D>,
        into: Tensor<D>,
        dim: usize,
        at: usize,
    ) -> Tensor<D> {
        rms_norm_silu_into(x, self.gamma.val(), self.options, into, dim, at)
    }
}
