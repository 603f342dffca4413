//! NVFP4 with TransformerEngine's global scale from a tensor amax on the device: the same
//! dequantised values (codes, block scales and decode scale) as the host amax, over the last
//! axis and the channel axis, raw and under autodiff; an amax that is 0 or not finite takes
//! `s_enc = 1`; a bad amax tensor is refused by name.

use super::*;
use burn_rmsnorm_silu::{
    Normalized, OutputFormat, rms_norm_silu_as, rms_norm_silu_nvfp4_device_amax,
    rms_norm_silu_nvfp4_with,
};

fn amax_tensor(value: f64, device: &burn::tensor::Device) -> burn::tensor::Tensor<1> {
    tensor(&[value], [1], DType::F32, device)
}

#[test]
fn device_amax_writes_what_the_host_amax_writes() {
    let mut rng = rng("nvfp4 device amax");
    for device in [device(), device().autodiff()] {
        for (rows, channels, amax) in [(6, 64, 3.0f32), (1, 16, 0.25), (9, 160, 40.0), (0, 32, 2.0)]
        {
            let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::BF16);
            let xt = || tensor(&x, [rows, channels], DType::BF16, &device);
            let gt = || tensor(&gamma, [channels], DType::BF16, &device);
            let options = RmsNormSiluOptions::rms(eps);
            let what = format!("{device:?} T={rows} C={channels} amax={amax}");
            let want =
                rms_norm_silu_nvfp4_with(xt(), gt(), options, Nvfp4Scaling::TensorAmax(amax));
            let got = rms_norm_silu_nvfp4_device_amax(
                xt(),
                gt(),
                options,
                amax_tensor(amax as f64, &device),
            );
            assert_eq!(got.dtype(), want.dtype(), "{what}");
            assert_eq!(got.dims(), [rows, channels], "{what}");
            assert_eq!(
                values(got.dequantize()),
                values(want.dequantize()),
                "{what}"
            );
        }
    }
}

/// An amax of 0, NaN or infinity gives `s_enc = 1`, as a host amax of 0 does.
#[test]
fn unusable_device_amax_takes_a_global_scale_of_one() {
    let device = device();
    let mut rng = rng("nvfp4 device amax unusable");
    let (rows, channels) = (4, 48);
    let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::BF16);
    let options = RmsNormSiluOptions::rms(eps);
    let run = |amax: f64| {
        let q = rms_norm_silu_nvfp4_device_amax(
            tensor(&x, [rows, channels], DType::BF16, &device),
            tensor(&gamma, [channels], DType::BF16, &device),
            options,
            amax_tensor(amax, &device),
        );
        values(q.dequantize())
    };
    let want = values(
        rms_norm_silu_nvfp4_with(
            tensor(&x, [rows, channels], DType::BF16, &device),
            tensor(&gamma, [channels], DType::BF16, &device),
            options,
            Nvfp4Scaling::GlobalScale(1.0),
        )
        .dequantize(),
    );
    for amax in [0.0, f64::NAN, f64::INFINITY, -2.0] {
        assert_eq!(run(amax), want, "amax {amax}");
    }
}

/// Over the channel axis of `[B, C, T, H, W]` and through the one entry point.
#[test]
fn device_amax_over_the_channel_axis_through_the_entry_point() {
    let device = device();
    let mut rng = rng("nvfp4 device amax channels");
    let shape = [2, 32, 3, 2, 5];
    let n: usize = shape.iter().product();
    let x = round_to(&randn(&mut rng, n), DType::BF16);
    let gamma = round_to(&uniform(&mut rng, shape[1], 0.5, 1.5), DType::BF16);
    let options = RmsNormSiluOptions::wan().along(1);
    let run = |format: OutputFormat| {
        let xt = tensor(&x, shape, DType::BF16, &device);
        let gt = tensor(&gamma, [shape[1]], DType::BF16, &device);
        let Normalized::Tensor(q) = rms_norm_silu_as(xt, gt, options, format) else {
            panic!("NVFP4 returns one tensor")
        };
        values(q.dequantize())
    };
    let host = run(OutputFormat::Nvfp4 {
        scaling: Nvfp4Scaling::TensorAmax(5.0),
    });
    let on_device = run(OutputFormat::Nvfp4DeviceAmax {
        amax: amax_tensor(5.0, &device),
    });
    assert_eq!(on_device, host);
}

#[test]
#[should_panic(expected = "`amax` must be one f32 element, got shape [1] of F16")]
fn device_amax_must_be_f32() {
    let device = device();
    let x = tensor(&[1.0; 32], [2, 16], DType::F32, &device);
    let gamma = tensor(&[1.0; 16], [16], DType::F32, &device);
    let amax = tensor(&[1.0], [1], DType::F16, &device);
    let _ = rms_norm_silu_nvfp4_device_amax(x, gamma, RmsNormSiluOptions::rms(1e-6), amax);
}
