//! The `RmsNormSilu` module: forward equals the function, gamma loads from a record.

use burn::module::{Module, Param};
use burn::tensor::DType;
use burn_rmsnorm_silu::{RmsNormSiluConfig, rms_norm_silu};
use rmsnorm_silu_kernels::{Activation, NormParams};

use crate::common::*;

#[test]
fn module_forward_and_record_round_trip() {
    let device = device();
    let mut rng = rng("module");
    let (rows, channels) = (4, 96);
    let x = round_to(&randn(&mut rng, rows * channels), DType::F32);
    let gamma = round_to(&uniform(&mut rng, channels, 0.5, 2.0), DType::F32);

    let mut module = RmsNormSiluConfig::new(channels)
        .with_epsilon(1e-6)
        .init(&device);
    module.gamma = Param::from_tensor(tensor(&gamma, [channels], DType::F32, &device));
    let want = reference(&x, &gamma, NormParams::rms(1e-6), Activation::Silu);
    let y = module.forward(tensor(&x, [2, 2, channels], DType::F32, &device));
    assert_close(&values(y), &want, 1e-6, 1e-5, "module forward");

    // Take the record and load it into a fresh module (gamma = ones).
    let record = module.clone().into_record();
    let fresh = RmsNormSiluConfig::new(channels)
        .with_epsilon(1e-6)
        .init(&device);
    let loaded = fresh.load_record(record);
    assert_close(
        &values(loaded.gamma.val()),
        &gamma,
        0.0,
        0.0,
        "loaded gamma",
    );
    let same = rms_norm_silu(
        tensor(&x, [rows, channels], DType::F32, &device),
        loaded.gamma.val(),
        1e-6,
    );
    assert_close(&values(same), &want, 1e-6, 1e-5, "loaded module");
}

/// The module over the channel axis of `[B, C, H, W]`, with a gamma that differs per channel
/// (a wrong channel-to-gamma mapping shows).
#[test]
fn module_over_the_channel_axis() {
    let device = device();
    let mut rng = rng("module dim");
    let x = round_to(&randn(&mut rng, 2 * 8 * 3 * 3), DType::F32);
    let gamma: Vec<f64> = (0..8).map(|c| 0.25 + 0.3 * c as f64).collect();
    let mut module = RmsNormSiluConfig::new(8)
        .with_dim(Some(1))
        .with_epsilon(1e-6)
        .init(&device);
    module.gamma = Param::from_tensor(tensor(&gamma, [8], DType::F32, &device));
    let y = module.forward(tensor::<4>(&x, [2, 8, 3, 3], DType::F32, &device));
    // Reference: move C last on the host.
    let mut rows = Vec::new();
    for b in 0..2 {
        for p in 0..9 {
            rows.extend((0..8).map(|c| x[(b * 8 + c) * 9 + p]));
        }
    }
    let want_rows = reference(&rows, &gamma, NormParams::rms(1e-6), Activation::Silu);
    let got = values(y);
    for b in 0..2 {
        for p in 0..9 {
            for c in 0..8 {
                let (g, w) = (got[(b * 8 + c) * 9 + p], want_rows[(b * 9 + p) * 8 + c]);
                assert!(
                    (g - w).abs() <= 1e-6 + 1e-5 * w.abs(),
                    "b{b} c{c} p{p}: {g} vs {w}"
                );
            }
        }
    }
}

/// The Wan norm site from the configuration (`RmsNormSiluConfig::wan`), with and without SiLU,
/// with a loaded gamma, against the function with the same options; written behind cached
/// frames through `forward_into`.
#[test]
fn wan_module_equals_the_wan_function() {
    use burn_rmsnorm_silu::{
        ActivationKind, RmsNormSiluOptions, rms_norm_silu_into, rms_norm_silu_with,
    };
    let device = device();
    let mut rng = rng("module wan");
    let (t, h, w, c) = (2, 3, 4, 24);
    let x = round_to(&randn(&mut rng, t * h * w * c), DType::F32);
    let gamma = round_to(&uniform(&mut rng, c, 0.5, 2.0), DType::F32);
    let xt = || tensor(&x, [1, t, h, w, c], DType::F32, &device);
    let gt = || tensor(&gamma, [c], DType::F32, &device);
    for (kind, activation) in [
        (ActivationKind::Silu, Activation::Silu),
        (ActivationKind::Identity, Activation::Identity),
    ] {
        let module = RmsNormSiluConfig::wan(c)
            .with_activation(kind)
            .init_with(Param::from_tensor(gt()));
        let options = RmsNormSiluOptions::wan().with_activation(activation);
        let want = values(rms_norm_silu_with(xt(), gt(), options));
        assert_eq!(values(module.forward(xt())), want, "{activation:?}");
        let into = || {
            tensor(
                &vec![-3.0; (t + 1) * h * w * c],
                [1, t + 1, h, w, c],
                DType::F32,
                &device,
            )
        };
        let want_into = values(rms_norm_silu_into(xt(), gt(), options, into(), 1, 1));
        assert_eq!(
            values(module.forward_into(xt(), into(), 1, 1)),
            want_into,
            "{activation:?} into"
        );
    }
}

#[test]
#[should_panic(expected = "`gamma` must have length d_model = 8, got 6")]
fn module_gamma_must_match_d_model() {
    let device = device();
    let gamma = tensor(&[1.0; 6], [6], DType::F32, &device);
    let _ = RmsNormSiluConfig::wan(8).init_with(Param::from_tensor(gamma));
}
