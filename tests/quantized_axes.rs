//! Quantised outputs over another axis than the last (`RmsNormSiluOptions::along`): FP8 and
//! NVFP4 over the channel axis of `[B, C, T, H, W]`, from channels-first memory (copied) and
//! from channels-last memory presented through strides (read in place); and the one entry point
//! over every output format, `rms_norm_silu_as`.

use burn::tensor::{DType, Tensor};
use burn_rmsnorm_silu::{
    Activation, Fp8Scale, Normalized, Nvfp4Scaling, OutputFormat, RmsNormSiluOptions, ScaleLayout,
    rms_norm_silu_as, rms_norm_silu_fp8_amax, rms_norm_silu_fp8_with, rms_norm_silu_nvfp4_parts,
    rms_norm_silu_nvfp4_with, rms_norm_silu_with,
};
use rmsnorm_silu_kernels::NormParams;
use rmsnorm_silu_kernels::formats::{e4m3_decode, e4m3_encode};

use crate::channels::reference_dim;
use crate::common::*;

const SHAPE: [usize; 5] = [2, 32, 3, 2, 5];
const EPS: f32 = 1e-6;

/// Channels-first index `(b, c, p)` of `[B, C, P]` to channels-last `(b, p, c)`.
fn to_channels_last(values: &[f64]) -> Vec<f64> {
    let [b, c, t, h, w] = SHAPE;
    let p = t * h * w;
    let mut out = vec![0.0; values.len()];
    for bi in 0..b {
        for ci in 0..c {
            for pi in 0..p {
                out[(bi * p + pi) * c + ci] = values[(bi * c + ci) * p + pi];
            }
        }
    }
    out
}

/// `x` (channels-first values) on the device as a dense channels-first tensor and as
/// channels-last memory presented `[B, C, T, H, W]`.
fn layouts(x: &[f64], dtype: DType) -> Vec<(&'static str, Tensor<5>)> {
    let device = device();
    let [b, c, t, h, w] = SHAPE;
    let last = tensor(&to_channels_last(x), [b, t, h, w, c], dtype, &device);
    vec![
        ("channels-first", tensor(x, SHAPE, dtype, &device)),
        ("channels-last memory", last.permute([0, 4, 1, 2, 3])),
    ]
}

fn inputs(test: &str) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut rng = rng(test);
    let n: usize = SHAPE.iter().product();
    let x = round_to(&randn(&mut rng, n), DType::BF16);
    let gamma = round_to(&uniform(&mut rng, SHAPE[1], 0.5, 1.5), DType::BF16);
    let want = reference_dim(
        &x,
        &SHAPE,
        1,
        &gamma,
        NormParams::rms(EPS),
        Activation::Silu,
    );
    (x, gamma, want)
}

/// The codes are the host quantiser's of the f64 reference, up to one E4M3 step where the
/// kernel's fp32 value rounds the other way; amax is the reference's.
#[test]
fn fp8_over_the_channel_axis() {
    let (x, gamma, want) = inputs("fp8 channel axis");
    let options = RmsNormSiluOptions::rms(EPS).along(1);
    let scale = 8.0f32;
    for (layout, xt) in layouts(&x, DType::BF16) {
        let gt = tensor(&gamma, [SHAPE[1]], DType::BF16, &xt.device());
        let q = rms_norm_silu_fp8_with(xt.clone(), gt.clone(), options, scale);
        assert_eq!(q.dims(), SHAPE, "{layout}");
        let got = values(q.dequantize());
        for (i, (&g, &y)) in got.iter().zip(&want).enumerate() {
            let code = e4m3_decode(e4m3_encode((y * scale as f64) as f32)) as f64;
            let deq = g * scale as f64;
            assert!(
                (deq - code).abs() <= 0.0625 * code.abs() + 1.0 / 512.0,
                "{layout} element {i}: {deq} vs the host code {code}"
            );
        }
        let (q, amax) = rms_norm_silu_fp8_amax(xt, gt, options, scale);
        assert_eq!(values(q.dequantize()), got, "{layout}: amax variant");
        let want_amax = want.iter().fold(0f64, |m, v| m.max(v.abs()));
        let [amax] = values(amax)[..] else {
            panic!("amax has one element")
        };
        assert!(
            (amax - want_amax).abs() <= 1e-2 * want_amax,
            "{layout}: amax {amax} vs {want_amax}"
        );
    }
}

/// NVFP4 over the channel axis equals NVFP4 over the last axis of the same values laid out
/// channels-last: the dequantised tensor (presented in `x`'s axis order) and the raw parts.
#[test]
fn nvfp4_over_the_channel_axis() {
    let (x, gamma, _) = inputs("nvfp4 channel axis");
    let device = device();
    let [b, c, t, h, w] = SHAPE;
    let options = RmsNormSiluOptions::rms(EPS);
    let gt = || tensor(&gamma, [c], DType::BF16, &device);
    let last = || tensor(&to_channels_last(&x), [b, t, h, w, c], DType::BF16, &device);
    let scaling = Nvfp4Scaling::Cudnn;
    let want = to_channels_last(&values(
        rms_norm_silu_nvfp4_with(last(), gt(), options, scaling)
            .dequantize()
            .permute([0, 4, 1, 2, 3]),
    ));
    let want_parts =
        rms_norm_silu_nvfp4_parts(last(), gt(), options, scaling, ScaleLayout::RowMajor);
    for (layout, xt) in layouts(&x, DType::BF16) {
        let q = rms_norm_silu_nvfp4_with(xt.clone(), gt(), options.along(1), scaling);
        assert_eq!(q.dims(), SHAPE, "{layout}");
        assert_eq!(to_channels_last(&values(q.dequantize())), want, "{layout}");
        let parts =
            rms_norm_silu_nvfp4_parts(xt, gt(), options.along(1), scaling, ScaleLayout::RowMajor);
        assert_eq!(parts.values.dims(), [b * t * h * w, c / 2], "{layout}");
        assert_eq!(
            parts.values.into_data(),
            want_parts.values.clone().into_data(),
            "{layout}: codes"
        );
        assert_eq!(
            parts.scales.into_data(),
            want_parts.scales.clone().into_data(),
            "{layout}: scales"
        );
    }
}

/// `rms_norm_silu_as` returns, for each format, what the format's own entry point returns.
#[test]
fn one_entry_point_for_every_format() {
    let (x, gamma, _) = inputs("one entry point");
    let device = device();
    let options = RmsNormSiluOptions::wan().along(1);
    let xt = || tensor(&x, SHAPE, DType::BF16, &device);
    let gt = || tensor(&gamma, [SHAPE[1]], DType::BF16, &device);
    let run = |format| rms_norm_silu_as(xt(), gt(), options, format);
    let dequantized = |n: Normalized<5>| values(n.tensor().expect("a tensor").dequantize());

    let got = run(OutputFormat::Input).tensor().expect("a tensor");
    assert_eq!(
        values(got),
        values(rms_norm_silu_with(xt(), gt(), options)),
        "input dtype"
    );

    let fp8 = OutputFormat::Fp8 {
        scale: Fp8Scale::Host(2.0),
        amax: false,
    };
    let want = values(rms_norm_silu_fp8_with(xt(), gt(), options, 2.0).dequantize());
    assert_eq!(dequantized(run(fp8)), want, "FP8");
    let Normalized::Fp8WithAmax { values: q, amax } = run(OutputFormat::Fp8 {
        scale: Fp8Scale::Host(2.0),
        amax: true,
    }) else {
        panic!("FP8 with amax returns the codes and amax")
    };
    let (want_q, want_amax) = rms_norm_silu_fp8_amax(xt(), gt(), options, 2.0);
    assert_eq!(
        values(q.dequantize()),
        values(want_q.dequantize()),
        "FP8 codes"
    );
    assert_eq!(values(amax), values(want_amax), "FP8 amax");

    let scaling = Nvfp4Scaling::GlobalScale(100.0);
    let want = values(rms_norm_silu_nvfp4_with(xt(), gt(), options, scaling).dequantize());
    assert_eq!(
        dequantized(run(OutputFormat::Nvfp4 { scaling })),
        want,
        "NVFP4"
    );
    let layout = ScaleLayout::Swizzled128x4;
    let Normalized::Nvfp4Parts(parts) = run(OutputFormat::Nvfp4Parts { scaling, layout }) else {
        panic!("NVFP4 parts")
    };
    let want = rms_norm_silu_nvfp4_parts(xt(), gt(), options, scaling, layout);
    assert_eq!(
        parts.values.into_data(),
        want.values.into_data(),
        "NVFP4 codes"
    );
    assert_eq!(
        parts.scales.into_data(),
        want.scales.into_data(),
        "NVFP4 scales"
    );
    assert_eq!(parts.global_scale, want.global_scale, "NVFP4 global scale");
}
