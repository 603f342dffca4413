//! FP8 with the quantisation scale on the device (delayed scaling): the codes, decode scale and
//! amax equal those of the same scale given from the host, over the last axis and the channel
//! axis, raw and under autodiff; the next step's scale from amax on the device; bad scales
//! refused by name.

use burn::tensor::{DType, Tensor};
use burn_rmsnorm_silu::{
    Fp8Scale, Normalized, OutputFormat, RmsNormSiluOptions, fp8_scale_from_amax, rms_norm_silu_as,
    rms_norm_silu_fp8_amax, rms_norm_silu_fp8_delayed,
};

use crate::common::*;

fn scale_tensor(value: f32, device: &burn::tensor::Device) -> Tensor<1> {
    tensor(&[value as f64], [1], DType::F32, device)
}

#[test]
fn device_scale_writes_what_the_host_scale_writes() {
    let mut rng = rng("fp8 device scale");
    for device in [device(), device().autodiff()] {
        for (rows, channels, scale) in
            [(23, 96, 4.0f32), (1, 3, 64.0), (6, 1000, 0.37), (0, 8, 2.0)]
        {
            let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::BF16);
            let xt = || tensor(&x, [rows, channels], DType::BF16, &device);
            let gt = || tensor(&gamma, [channels], DType::BF16, &device);
            let options = RmsNormSiluOptions::rms(eps);
            let what = format!("{device:?} T={rows} C={channels} scale={scale}");
            let (want_q, want_amax) = rms_norm_silu_fp8_amax(xt(), gt(), options, scale);
            let (q, amax) =
                rms_norm_silu_fp8_delayed(xt(), gt(), options, scale_tensor(scale, &device));
            assert_eq!(q.dtype(), want_q.dtype(), "{what}");
            assert_eq!(q.dims(), [rows, channels], "{what}");
            // Equal dequantised values: equal codes and an equal decode scale `1 / scale`.
            assert_eq!(
                values(q.dequantize()),
                values(want_q.dequantize()),
                "{what}"
            );
            assert_eq!(values(amax), values(want_amax), "{what} amax");
        }
    }
}

/// Over the channel axis of `[B, C, T, H, W]` and through the one entry point.
#[test]
fn device_scale_over_the_channel_axis_through_the_entry_point() {
    let device = device();
    let mut rng = rng("fp8 device scale channels");
    let shape = [2, 12, 3, 2, 5];
    let n: usize = shape.iter().product();
    let x = round_to(&randn(&mut rng, n), DType::BF16);
    let gamma = round_to(&uniform(&mut rng, shape[1], 0.5, 1.5), DType::BF16);
    let options = RmsNormSiluOptions::wan().along(1);
    let run = |scale: Fp8Scale| {
        let format = OutputFormat::Fp8 { scale, amax: true };
        let xt = tensor(&x, shape, DType::BF16, &device);
        let gt = tensor(&gamma, [shape[1]], DType::BF16, &device);
        let Normalized::Fp8WithAmax { values: q, amax } = rms_norm_silu_as(xt, gt, options, format)
        else {
            panic!("FP8 with amax returns the codes and amax")
        };
        (values(q.dequantize()), values(amax))
    };
    let host = run(Fp8Scale::Host(3.0));
    let on_device = run(Fp8Scale::Device(scale_tensor(3.0, &device)));
    assert_eq!(on_device, host);
}

/// Three steps of delayed scaling with nothing read back in between: each step's scale is
/// `448 / amax` of the step before.
#[test]
fn delayed_scaling_steps_stay_on_the_device() {
    let device = device();
    let mut rng = rng("fp8 delayed steps");
    let (rows, channels) = (9, 64);
    let gamma = tensor(&vec![1.0; channels], [channels], DType::F32, &device);
    let mut scale = scale_tensor(1.0, &device);
    let mut scales = Vec::new();
    let mut amaxes = Vec::new();
    for step in 0..3 {
        let x = randn(&mut rng, rows * channels)
            .iter()
            .map(|v| v * (step + 1) as f64)
            .collect::<Vec<_>>();
        let xt = tensor(&x, [rows, channels], DType::F32, &device);
        scales.push(scale.clone());
        let (_, amax) = rms_norm_silu_fp8_delayed(
            xt,
            gamma.clone(),
            RmsNormSiluOptions::rms(1e-6),
            scale.clone(),
        );
        amaxes.push(amax.clone());
        scale = fp8_scale_from_amax(amax, scale, 0);
    }
    let scales: Vec<f64> = scales.into_iter().map(|s| values(s)[0]).collect();
    let amaxes: Vec<f64> = amaxes.into_iter().map(|a| values(a)[0]).collect();
    assert_eq!(scales[0], 1.0);
    for step in 1..3 {
        let want = (448.0f32 / amaxes[step - 1] as f32) as f64;
        assert!(
            (scales[step] - want).abs() <= 1e-6 * want,
            "step {step}: scale {} vs 448 / {}",
            scales[step],
            amaxes[step - 1]
        );
    }
}

#[test]
fn next_scale_keeps_the_previous_one_where_amax_is_unusable() {
    let device = device();
    let amax = [0.0, f64::NAN, f64::INFINITY, 2.0, 1e-30, 448.0];
    let previous = [5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
    for margin in [0u32, 2] {
        let got = values(fp8_scale_from_amax(
            tensor(&amax, [6], DType::F32, &device),
            tensor(&previous, [6], DType::F32, &device),
            margin,
        ));
        let target = 448.0 / 2f64.powi(margin as i32);
        let want = [5.0, 6.0, 7.0, target / 2.0, target / 1e-30, target / 448.0];
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-6 * w,
                "margin {margin}, amax {}: {g} vs {w}",
                amax[i]
            );
        }
    }
}

#[test]
#[should_panic(expected = "`scale` must be one f32 element, got shape [2] of F32")]
fn device_scale_must_be_one_element() {
    let device = device();
    let x = tensor(&[1.0; 8], [2, 4], DType::F32, &device);
    let gamma = tensor(&[1.0; 4], [4], DType::F32, &device);
    let scale = tensor(&[1.0, 2.0], [2], DType::F32, &device);
    let _ = rms_norm_silu_fp8_delayed(x, gamma, RmsNormSiluOptions::rms(1e-6), scale);
}

#[test]
#[should_panic(expected = "`scale` must be one f32 element, got shape [1] of BF16")]
fn device_scale_must_be_f32() {
    let device = device();
    let x = tensor(&[1.0; 8], [2, 4], DType::F32, &device);
    let gamma = tensor(&[1.0; 4], [4], DType::F32, &device);
    let scale = tensor(&[1.0], [1], DType::BF16, &device);
    let _ = rms_norm_silu_fp8_delayed(x, gamma, RmsNormSiluOptions::rms(1e-6), scale);
}

#[test]
#[should_panic(expected = "`margin` must be below 128 binades, got 128")]
fn next_scale_margin_must_stay_in_range() {
    let device = device();
    let one = scale_tensor(1.0, &device);
    let _ = fp8_scale_from_amax(one.clone(), one, 128);
}
