//! The numerical parameters of the operation (host values passed to the kernel at run time).

/// How the reciprocal root mean square is formed from the row's mean of squares `ms`:
/// `r = 1 / sqrt(max(ms + eps, floor))`.
///
/// - cuDNN / `burn::nn::RmsNorm` semantics: `eps > 0`, `floor = 0`.
/// - Wan VAE / `F.normalize(x) * sqrt(C)` semantics: `x / max(||x||_2, eps_l2) * sqrt(C)` is
///   `x / max(rms, eps_l2 / sqrt(C))`, i.e. `eps = 0`, `floor = eps_l2^2 / C`. Both are the same
///   kernel; only these two numbers differ.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormParams {
    /// Added to the mean of squares under the root.
    pub eps: f32,
    /// Lower clamp of `ms + eps` under the root.
    pub floor: f32,
}

impl NormParams {
    /// cuDNN / RMSNorm semantics: `rsqrt(mean(x^2) + eps)`.
    pub fn rms(eps: f32) -> Self {
        Self { eps, floor: 0.0 }
    }

    /// `F.normalize` semantics scaled by `sqrt(C)`: `1 / max(rms(x), eps_l2 / sqrt(C))`.
    pub fn l2_clamp(eps_l2: f32, channels: usize) -> Self {
        let eps_l2 = eps_l2 as f64;
        Self {
            eps: 0.0,
            floor: (eps_l2 * eps_l2 / channels as f64) as f32,
        }
    }
}

/// The elementwise function applied after the affine scale by gamma.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, Default)]
pub enum Activation {
    /// `v * sigmoid(v)`.
    #[default]
    Silu,
    /// No activation: a plain RMSNorm (the Wan VAE's attention-block norm).
    Identity,
}

/// What the kernel writes.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, Default)]
pub enum Output {
    /// `y` in the input's dtype.
    #[default]
    Input,
    /// FP8 E4M3 codes `q = sat_RN_e4m3(y * scale)` (TransformerEngine / cuDNN convention: the
    /// caller gives the quantisation scale; dequantise with `q / scale`). Saturates to ±448;
    /// NaN stays NaN.
    Fp8E4M3,
    /// [`Output::Fp8E4M3`], and the kernel also records `amax = max |y|` (before scaling; NaN
    /// if any `y` is NaN) for delayed scaling.
    Fp8E4M3WithAmax,
}

impl Output {
    /// Whether the kernel writes FP8 codes.
    pub fn is_fp8(self) -> bool {
        matches!(self, Output::Fp8E4M3 | Output::Fp8E4M3WithAmax)
    }
}
