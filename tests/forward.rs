//! Forward results against the f64 reference, through the public API.

use burn::tensor::{DType, Device, Tensor};
use burn_rmsnorm_silu::{Activation, Norm, RmsNormSiluOptions, rms_norm_silu, rms_norm_silu_with};
use rmsnorm_silu_kernels::NormParams;

use crate::common::*;

/// The cuDNN engine's C values (Wan2.2 widths) and the Wan2.1 widths.
const CUDNN_CHANNELS: [usize; 8] = [64, 128, 160, 256, 320, 512, 640, 1024];
const WAN21_CHANNELS: [usize; 3] = [96, 192, 384];
/// Channel counts that divide no vector width, tiny to above the register cache (two tests, f32
/// and bf16, so that a parallel suite compiles their kernels side by side).
const ODD_CHANNEL_COUNTS: [usize; 10] = [1, 2, 3, 7, 33, 48, 100, 1000, 1027, 4100];
/// The cuDNN engine's token counts.
const CUDNN_TOKENS: [usize; 5] = [1560, 6240, 24960, 99840, 399360];

/// One bf16 case of the cuDNN recipe; asserts zero mismatches at atol = rtol = 2e-2.
fn check_cudnn_recipe(rows: usize, channels: usize, device: &Device, test: &str) {
    let mut rng = rng(test);
    let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::BF16);
    let want = reference(&x, &gamma, NormParams::rms(eps), Activation::Silu);
    let y = rms_norm_silu(
        tensor(&x, [rows, channels], DType::BF16, device),
        tensor(&gamma, [channels], DType::BF16, device),
        eps,
    );
    assert_eq!(y.dtype(), DType::BF16);
    assert_eq!(y.dims(), [rows, channels]);
    assert_close(
        &values(y),
        &want,
        2e-2,
        2e-2,
        &format!("bf16 T={rows} C={channels}"),
    );
}

#[test]
fn bf16_cudnn_recipe_on_cudnn_widths() {
    bf16_cudnn_recipe_on(&CUDNN_CHANNELS);
}

#[test]
fn bf16_cudnn_recipe_on_wan_widths() {
    bf16_cudnn_recipe_on(&WAN21_CHANNELS);
}

/// The cuDNN recipe in bf16 over `widths`, on three row counts (the two width sets are two
/// tests, so that a parallel suite compiles their kernels side by side).
fn bf16_cudnn_recipe_on(widths: &[usize]) {
    let device = device();
    let rows = if on_gpu() {
        [1560, 6240, 24960]
    } else {
        [1, 5, 64]
    };
    for &channels in widths {
        for rows in rows {
            check_cudnn_recipe(rows, channels, &device, "bf16_cudnn_recipe");
        }
    }
}

/// The engine's full sweep, 8 C x 5 T in bf16: too large for the CPU runtime in CI.
#[test]
#[ignore = "large: run on a GPU with --ignored"]
fn bf16_cudnn_full_sweep() {
    let device = device();
    for channels in CUDNN_CHANNELS {
        for rows in CUDNN_TOKENS {
            check_cudnn_recipe(rows, channels, &device, "bf16_cudnn_full_sweep");
        }
    }
}

/// f32 in and out: within 1e-5 relative of the f64 reference.
fn check_f32(rows: usize, channels: usize, device: &Device) {
    let mut rng = rng("f32");
    let x = round_to(&randn(&mut rng, rows * channels), DType::F32);
    let gamma = round_to(&uniform(&mut rng, channels, -2.0, 2.0), DType::F32);
    let eps = 1e-5;
    let want = reference(&x, &gamma, NormParams::rms(eps), Activation::Silu);
    let y = rms_norm_silu(
        tensor(&x, [rows, channels], DType::F32, device),
        tensor(&gamma, [channels], DType::F32, device),
        eps,
    );
    assert_eq!(y.dtype(), DType::F32);
    let c = assert_close(
        &values(y),
        &want,
        1e-7,
        1e-5,
        &format!("f32 T={rows} C={channels}"),
    );
    assert!(
        c.max_rel <= 1e-5,
        "f32 T={rows} C={channels}: max rel {}",
        c.max_rel
    );
}

#[test]
fn f32_within_1e5_relative() {
    let device = device();
    for channels in CUDNN_CHANNELS.into_iter().chain(WAN21_CHANNELS) {
        check_f32(9, channels, &device);
    }
}

#[test]
fn odd_channel_counts_in_f32() {
    let device = device();
    for channels in ODD_CHANNEL_COUNTS {
        check_f32(3, channels, &device);
    }
}

#[test]
fn odd_channel_counts_in_bf16() {
    let device = device();
    for channels in ODD_CHANNEL_COUNTS {
        check_cudnn_recipe(3, channels, &device, "odd_channel_counts");
    }
}

#[test]
fn one_row_and_zero_rows() {
    let device = device();
    check_cudnn_recipe(1, 96, &device, "one_row");
    check_f32(1, 1000, &device);

    let gamma = tensor(&[1.0; 64], [64], DType::BF16, &device);
    let empty = Tensor::<2>::zeros([0, 64], (&device, DType::BF16));
    let y = rms_norm_silu(empty, gamma.clone(), 1e-6);
    assert_eq!(y.dims(), [0, 64]);
    assert_eq!(y.dtype(), DType::BF16);
    assert!(values(y).is_empty());
    let empty = Tensor::<4>::zeros([2, 0, 3, 64], (&device, DType::BF16));
    assert_eq!(rms_norm_silu(empty, gamma, 1e-6).dims(), [2, 0, 3, 64]);
}

#[test]
fn ranks_one_to_five_normalise_the_last_axis() {
    let device = device();
    let mut rng = rng("ranks");
    let channels = 40;
    let x = round_to(&randn(&mut rng, 2 * 3 * 2 * 5 * channels), DType::F32);
    let gamma = round_to(&uniform(&mut rng, channels, 0.5, 2.0), DType::F32);
    let want = reference(&x, &gamma, NormParams::rms(1e-5), Activation::Silu);
    let g = || tensor(&gamma, [channels], DType::F32, &device);

    let y1 = rms_norm_silu(
        tensor(&x[..channels], [channels], DType::F32, &device),
        g(),
        1e-5,
    );
    assert_close(&values(y1), &want[..channels], 1e-7, 1e-5, "rank 1");
    let y3 = rms_norm_silu(
        tensor(&x, [6, 10, channels], DType::F32, &device),
        g(),
        1e-5,
    );
    assert_close(&values(y3), &want, 1e-7, 1e-5, "rank 3");
    let y5 = rms_norm_silu(
        tensor(&x, [2, 3, 2, 5, channels], DType::F32, &device),
        g(),
        1e-5,
    );
    assert_eq!(y5.dims(), [2, 3, 2, 5, channels]);
    assert_close(&values(y5), &want, 1e-7, 1e-5, "rank 5");
}

#[test]
fn f16_input_with_f32_gamma() {
    let device = device();
    let mut rng = rng("f16");
    let (rows, channels) = (17, 192);
    let x = round_to(&randn(&mut rng, rows * channels), DType::F16);
    let gamma = round_to(&uniform(&mut rng, channels, 0.5, 2.0), DType::F32);
    let want = reference(&x, &gamma, NormParams::rms(1e-6), Activation::Silu);
    let y = rms_norm_silu(
        tensor(&x, [rows, channels], DType::F16, &device),
        tensor(&gamma, [channels], DType::F32, &device),
        1e-6,
    );
    assert_eq!(y.dtype(), DType::F16);
    assert_close(&values(y), &want, 2e-3, 2e-3, "f16");
}

#[test]
fn wan_l2_clamp_norm_and_plain_norm() {
    let device = device();
    let mut rng = rng("wan");
    let (rows, channels) = (6, 96);
    let mut x = round_to(&randn(&mut rng, rows * channels), DType::F32);
    // Row 2 all zeros, row 4 tiny: the clamp (not an epsilon) decides their scale.
    x[2 * channels..3 * channels].fill(0.0);
    for v in &mut x[4 * channels..5 * channels] {
        *v *= 1e-20;
    }
    let gamma = round_to(&uniform(&mut rng, channels, 0.5, 2.0), DType::F32);
    for activation in [Activation::Silu, Activation::Identity] {
        let options = RmsNormSiluOptions::wan().with_activation(activation);
        let want = reference(&x, &gamma, Norm::WAN.params(channels), activation);
        let y = rms_norm_silu_with(
            tensor(&x, [rows, channels], DType::F32, &device),
            tensor(&gamma, [channels], DType::F32, &device),
            options,
        );
        let got = values(y);
        assert_close(&got, &want, 1e-6, 1e-5, &format!("wan {activation:?}"));
        assert!(got[2 * channels..3 * channels].iter().all(|&v| v == 0.0));
    }
}

/// Backends without the fused kernel (Flex, NdArray) get the composed implementation.
#[test]
fn flex_and_ndarray_backends_match_reference() {
    check_composed_backend(Device::flex());
    #[allow(deprecated)]
    check_composed_backend(Device::ndarray());
}

fn check_composed_backend(device: Device) {
    let mut rng = rng("composed backend");
    let (rows, channels) = (5, 100);
    let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::F32);
    let want = reference(&x, &gamma, NormParams::rms(eps), Activation::Silu);
    let y = rms_norm_silu(
        tensor(&x, [rows, channels], DType::F32, &device),
        tensor(&gamma, [channels], DType::F32, &device),
        eps,
    );
    assert_close(&values(y), &want, 1e-6, 1e-5, &format!("{device:?} f32"));

    let options = RmsNormSiluOptions::wan().with_activation(Activation::Identity);
    let want = reference(&x, &gamma, Norm::WAN.params(channels), Activation::Identity);
    let y = rms_norm_silu_with(
        tensor(&x, [rows, channels], DType::F32, &device),
        tensor(&gamma, [channels], DType::F32, &device),
        options,
    );
    assert_close(
        &values(y),
        &want,
        1e-6,
        1e-5,
        &format!("{device:?} wan identity"),
    );
}
