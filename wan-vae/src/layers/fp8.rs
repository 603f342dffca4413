//! FP8 numerics at the norm -> convolution sites: the norm's output as E4M3 codes with a
//! per-tensor scale delayed from the previous latent frame's amax (kept on the device), and
//! the following convolution's weights as E4M3 with one scale per output channel.
//!
//! The convolution itself still runs in the working dtype on the dequantised values: this is
//! the numerics an FP8 tensor-core convolution with f32 accumulation would have (every product
//! of two E4M3 values is exact in f32), measured against the native decode, not its speed.

use burn::tensor::{DType, Tensor, TensorData};
use burn_rmsnorm_silu::kernels::formats::{e4m3_decode, e4m3_encode};
use burn_rmsnorm_silu::{E4M3_MAX, fp8_scale_from_amax, rms_norm_silu_fp8_delayed};

use super::{Ctx, Norm};

/// Binades of headroom between a site's delayed amax and E4M3's largest value: the next latent
/// frame's values may exceed the previous frame's amax by up to 2x before they saturate
/// (E4M3's relative precision is the same over its normal range, so the headroom costs nothing
/// there).
pub const FP8_MARGIN: u32 = 1;

/// What the norm -> convolution sites compute in. FP8 there means E4M3 norm outputs
/// (per-tensor scale, delayed) and E4M3 weights (per output channel); `conv_out` (three output
/// channels) always stays in the working dtype.
///
/// PSNR of a decode with FP8 sites against the same decode without (CPU runtime, 2026-12-07;
/// 3 latent frames): the cross-check fixtures' small models in f32, `Fp8` 36.9 dB (Wan2.1
/// layout) / 40.9 dB (Wan2.2), `Fp8All` 33.2 / 37.8 dB (only the middle block and the first
/// two up stages: 35.7 / 41.2 dB); the full-size Wan2.1 decoder with random weights (seed 0)
/// on a `[1, 16, 3, 8, 8]` latent, `Fp8` 36.4 dB in f32 and 35.1 dB in bf16 (against the bf16
/// decode, itself 37.6 dB from the f32 one at this size), `Fp8All` 31.5 / 30.0 dB. The error
/// is E4M3's 3-bit mantissa (the same PSNR with current instead of delayed scaling, and with
/// 0 to 3 binades of margin); on the small Wan2.1 model weights alone cost 36.0 dB, norm
/// outputs alone 36.1 dB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// The working dtype throughout (the default).
    #[default]
    Native,
    /// FP8 sites in the last two up stages (the full-resolution ones: 240x416 and 480x832 at
    /// 480p, about 70% of the decode's convolution time).
    Fp8,
    /// FP8 at every norm -> convolution site but `conv_out`.
    Fp8All,
}

impl Precision {
    /// Whether the norm -> convolution sites of up stage `stage` (0 to 3; `None`: the middle
    /// block) are FP8.
    pub fn fp8_in(self, stage: Option<usize>) -> bool {
        match self {
            Precision::Native => false,
            Precision::Fp8 => stage.is_some_and(|i| i >= 2),
            Precision::Fp8All => true,
        }
    }
}

/// `values` (`[C_out, ...]`, `C_out` rows) rounded to E4M3 with one scale per output channel,
/// `448 / max |w|` of its row (1 for an all-zero row), and scaled back.
pub fn e4m3_per_output_channel(values: &[f32], c_out: usize) -> Vec<f32> {
    let per_row = values.len() / c_out.max(1);
    values
        .chunks(per_row.max(1))
        .flat_map(|row| {
            let amax = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let scale = if amax > 0.0 && amax.is_finite() {
                E4M3_MAX / amax
            } else {
                1.0
            };
            row.iter()
                .map(move |&w| e4m3_decode(e4m3_encode(w * scale)) / scale)
        })
        .collect()
}

/// The delayed scales of one decode: per norm site, in visiting order, the scale its last
/// latent frame used and that frame's amax.
#[derive(Default)]
pub struct Fp8Scales {
    sites: Vec<(Tensor<1>, Tensor<1>)>,
    next: usize,
}

impl Fp8Scales {
    /// A new latent frame: sites are visited again from the first.
    pub fn rewind(&mut self) {
        self.next = 0;
    }
}

impl Norm {
    /// The norm site of `x` as E4M3 codes, returned dequantised in `x`'s dtype. The scale is
    /// the site's delayed one (`448 / amax / 2^FP8_MARGIN` of the previous latent frame, on the
    /// device); on the first frame the site's own amax, from one extra pass.
    pub fn forward_fp8(&self, x: Tensor<5>, ctx: &Ctx) -> Tensor<5> {
        ctx.norm_calls.set(ctx.norm_calls.get() + 1);
        let device = x.device();
        let shape = x.dims().to_vec();
        ctx.timed_site(&ctx.norm_time, "norm fp8", shape, &device, || {
            let dtype = x.dtype();
            let gamma = self.inner.gamma.val();
            let options = self.inner.options;
            let mut scales = ctx.fp8_scales.borrow_mut();
            let site = scales.next;
            scales.next += 1;
            let scale = match scales.sites.get(site) {
                Some((scale, amax)) => fp8_scale_from_amax(amax.clone(), scale.clone(), FP8_MARGIN),
                None => {
                    let one = Tensor::<1>::from_data(
                        TensorData::new(vec![1.0f32], [1]),
                        (&device, DType::F32),
                    );
                    let (_, amax) =
                        rms_norm_silu_fp8_delayed(x.clone(), gamma.clone(), options, one.clone());
                    fp8_scale_from_amax(amax, one, FP8_MARGIN)
                }
            };
            let (codes, amax) = rms_norm_silu_fp8_delayed(x, gamma, options, scale.clone());
            if site < scales.sites.len() {
                scales.sites[site] = (scale, amax);
            } else {
                scales.sites.push((scale, amax));
            }
            codes.dequantize().cast(dtype)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_round_to_e4m3_per_output_channel() {
        // Row 0: amax 2 (scale 224); row 1: all zero; row 2: amax 1e-3.
        let w = [2.0, -1.0, 0.3, 0.0, 0.0, 0.0, 1e-3, -5e-4, 1e-4];
        let q = e4m3_per_output_channel(&w, 3);
        assert_eq!(q[0], 2.0, "a row's amax is exact");
        assert_eq!(q[1], -1.0, "a power of two within the row's range is exact");
        assert_eq!(&q[3..6], &[0.0, 0.0, 0.0], "an all-zero row stays zero");
        for (got, want) in q.iter().zip(w) {
            let err = (got - want).abs();
            assert!(
                err <= want.abs() / 16.0 + 1e-12,
                "{got} vs {want}: E4M3 keeps 3 mantissa bits"
            );
        }
    }
}
