//! Bad input: a panic whose message names the argument and what was expected.

use burn::tensor::{DType, Device, Tensor};
use burn_rmsnorm_silu::{
    Norm, RmsNormSiluConfig, RmsNormSiluOptions, rms_norm_silu, rms_norm_silu_with,
};

use crate::common::*;

fn x() -> Tensor<2> {
    tensor(&[1.0; 12], [3, 4], DType::F32, &device())
}

fn gamma(n: usize) -> Tensor<1> {
    tensor(&vec![1.0; n], [n], DType::F32, &device())
}

#[test]
#[should_panic(
    expected = "`gamma` must have length C = 4 (the last axis of `x`, shape [3, 4]), got 5"
)]
fn gamma_length_must_equal_c() {
    let _ = rms_norm_silu(x(), gamma(5), 1e-6);
}

#[test]
#[should_panic(expected = "`eps` must be finite and >= 0, got -0.001")]
fn negative_eps() {
    let _ = rms_norm_silu(x(), gamma(4), -1e-3);
}

#[test]
#[should_panic(expected = "`eps` must be finite and >= 0, got NaN")]
fn nan_eps() {
    let _ = rms_norm_silu(x(), gamma(4), f32::NAN);
}

#[test]
#[should_panic(expected = "`eps` must be finite and >= 0, got inf")]
fn infinite_wan_eps() {
    let options = RmsNormSiluOptions {
        norm: Norm::L2Clamp { eps: f32::INFINITY },
        ..RmsNormSiluOptions::wan()
    };
    let _ = rms_norm_silu_with(x(), gamma(4), options);
}

#[test]
#[should_panic(expected = "`x` and `gamma` must be on the same device")]
fn tensors_on_different_devices() {
    let other = tensor(&[1.0; 4], [4], DType::F32, &Device::flex());
    let _ = rms_norm_silu(x(), other, 1e-6);
}

#[test]
#[should_panic(expected = "`epsilon` must be finite and >= 0, got -1")]
fn module_rejects_negative_epsilon() {
    let _ = RmsNormSiluConfig::new(4).with_epsilon(-1.0).init(&device());
}

#[test]
#[should_panic(expected = "`x` must be a float tensor (f64, f32, f16 or bf16), got QFloat")]
fn quantized_x_is_rejected() {
    use burn::tensor::quantization::QuantScheme;
    let q = x().quantize_dynamic(&QuantScheme::default());
    let _ = rms_norm_silu(q, gamma(4), 1e-6);
}

#[test]
#[should_panic(expected = "`gamma` must be a float tensor (f64, f32, f16 or bf16), got QFloat")]
fn quantized_gamma_is_rejected() {
    use burn::tensor::quantization::QuantScheme;
    let q = gamma(4).quantize_dynamic(&QuantScheme::default());
    let _ = rms_norm_silu(x(), q, 1e-6);
}

#[test]
#[should_panic(
    expected = "`gamma` must have length C = 4 (the last axis of `x`, shape [3, 4]), got 6"
)]
fn module_width_must_match_the_input() {
    let module = RmsNormSiluConfig::new(6).init(&device());
    let _ = module.forward(x());
}

#[test]
#[should_panic(expected = "`dim` must be an axis of `x` (rank 2), got 2")]
fn module_dim_must_be_an_axis() {
    let module = RmsNormSiluConfig::new(4).with_dim(Some(2)).init(&device());
    let _ = module.forward(x());
}
