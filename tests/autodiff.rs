//! Gradients of x and gamma against Burn's autodiff of the composed reference (f32).

use burn::tensor::activation::silu;
use burn::tensor::{DType, Device, Tensor};
use burn_rmsnorm_silu::{Activation, Norm, RmsNormSiluOptions, rms_norm_silu_with};

use crate::common::*;

/// The op composed from Burn tensor ops (the definition), differentiated by Burn.
fn composed_reference(x: Tensor<2>, gamma: Tensor<1>, options: RmsNormSiluOptions) -> Tensor<2> {
    let channels = gamma.dims()[0];
    let params = options.norm.params(channels);
    let ms = x.clone().square().mean_dim(1) + params.eps as f64;
    let denom = if params.floor > 0.0 {
        ms.clamp_min(params.floor as f64)
    } else {
        ms
    };
    let v = x / denom.sqrt() * gamma.unsqueeze::<2>();
    match options.activation {
        Activation::Silu => silu(v),
        Activation::Identity => v,
    }
}

fn check_gradients(device: &Device, options: RmsNormSiluOptions, what: &str) {
    check_gradients_on(device, options, what, 7, 48);
}

fn check_gradients_on(
    device: &Device,
    options: RmsNormSiluOptions,
    what: &str,
    rows: usize,
    channels: usize,
) {
    let mut rng = rng(what);
    let mut x = round_to(&randn(&mut rng, rows * channels), DType::F32);
    x[..channels].iter_mut().for_each(|v| *v *= 1e-3);
    let gamma = round_to(&uniform(&mut rng, channels, 0.5, 2.0), DType::F32);
    let w = round_to(&randn(&mut rng, rows * channels), DType::F32);

    let run = |fused: bool| {
        let xt = tensor(&x, [rows, channels], DType::F32, device).require_grad();
        let gt = tensor(&gamma, [channels], DType::F32, device).require_grad();
        let wt = tensor(&w, [rows, channels], DType::F32, device);
        let y = if fused {
            rms_norm_silu_with(xt.clone(), gt.clone(), options)
        } else {
            composed_reference(xt.clone(), gt.clone(), options)
        };
        let grads = (y * wt).sum().backward();
        (
            values(xt.grad(&grads).expect("x has a gradient")),
            values(gt.grad(&grads).expect("gamma has a gradient")),
        )
    };
    let (dx, dgamma) = run(true);
    let (dx_ref, dgamma_ref) = run(false);
    // Both sides are f32 with different operation orders and cancellation in dx, so the
    // tolerance is relative to the gradient's scale: ||a - b|| / ||b|| <= 1e-5 and every
    // element within 1e-5 (|b| + max|b|).
    assert_close_to_scale(&dx, &dx_ref, 1e-5, &format!("{what}: dx"));
    assert_close_to_scale(&dgamma, &dgamma_ref, 1e-5, &format!("{what}: dgamma"));
}

#[test]
fn gradients_match_burn_autodiff_of_the_composition() {
    let device = device().autodiff();
    check_gradients(&device, RmsNormSiluOptions::rms(1e-5), "cube rms silu");
    check_gradients(
        &device,
        RmsNormSiluOptions::rms(1e-5).with_activation(Activation::Identity),
        "cube rms identity",
    );
    // Rows far above the floor: the clamp is inactive and the gradient is the RMS one.
    check_gradients(&device, RmsNormSiluOptions::wan(), "cube wan");
    // One row, many rows over several cubes, and a row too wide for the backward kernel's
    // register cache on the CPU runtime (composed backward there, the kernel on a GPU).
    check_gradients_on(
        &device,
        RmsNormSiluOptions::rms(1e-5),
        "cube one row",
        1,
        160,
    );
    check_gradients_on(
        &device,
        RmsNormSiluOptions::rms(1e-5),
        "cube many rows",
        257,
        96,
    );
    check_gradients_on(&device, RmsNormSiluOptions::rms(1e-5), "cube wide", 3, 4096);
}

#[test]
fn gradients_on_non_cubecl_backends() {
    check_gradients(
        &Device::flex().autodiff(),
        RmsNormSiluOptions::rms(1e-5),
        "flex rms silu",
    );
    #[allow(deprecated)]
    let ndarray = Device::ndarray().autodiff();
    check_gradients(&ndarray, RmsNormSiluOptions::wan(), "ndarray wan silu");
}

/// A row held at the Wan clamp: its scale does not depend on x, so dx = r * gamma * dv.
#[test]
fn gradient_through_the_clamp() {
    let device = device().autodiff();
    let options = RmsNormSiluOptions {
        norm: Norm::L2Clamp { eps: 1.0 },
        activation: Activation::Identity,
        dim: None,
    };
    let channels = 4;
    let x = [0.01, -0.02, 0.03, 0.0];
    let gamma = [1.0, 2.0, 3.0, 4.0];
    let xt = tensor(&x, [1, channels], DType::F32, &device).require_grad();
    let gt = tensor(&gamma, [channels], DType::F32, &device);
    let y = rms_norm_silu_with(xt.clone(), gt, options);
    let grads = y.sum().backward();
    // floor = 1 / C, r = sqrt(C) = 2.
    let want: Vec<f64> = gamma.iter().map(|g| 2.0 * g).collect();
    assert_close(
        &values(xt.grad(&grads).unwrap()),
        &want,
        1e-6,
        1e-6,
        "clamped row dx",
    );
}
