//! The op inside a chain of Burn ops on the default (Fusion-wrapped) CubeCL backend.

use burn::tensor::DType;
use burn_rmsnorm_silu::rms_norm_silu;
use rmsnorm_silu_kernels::{Activation, NormParams};

use crate::common::*;

#[test]
fn inside_a_chain_of_fused_ops() {
    let device = device();
    let mut rng = rng("fusion_chain");
    let (rows, channels) = (12, 192);
    let x = round_to(&randn(&mut rng, rows * channels), DType::F32);
    let gamma = round_to(&uniform(&mut rng, channels, 0.5, 2.0), DType::F32);
    let eps = 1e-5;

    // Reference: a = 0.5 x + 1; y = op(a); z = 2 y - 0.25, then the sum over the last axis.
    let a: Vec<f64> = x.iter().map(|v| (0.5 * v + 1.0) as f32 as f64).collect();
    let y = reference(&a, &gamma, NormParams::rms(eps), Activation::Silu);
    let z: Vec<f64> = y.iter().map(|v| 2.0 * v - 0.25).collect();
    let sums: Vec<f64> = z.chunks(channels).map(|r| r.iter().sum()).collect();

    let xt = tensor(&x, [rows, channels], DType::F32, &device);
    let gt = tensor(&gamma, [channels], DType::F32, &device);
    let a_t = xt * 0.5 + 1.0;
    let z_t = rms_norm_silu(a_t, gt, eps) * 2.0 - 0.25;
    let sum_t = z_t.clone().sum_dim(1);
    assert_close(&values(z_t), &z, 1e-5, 1e-5, "fused chain");
    assert_close(&values(sum_t), &sums, 1e-3, 1e-5, "fused chain sums");

    // bf16 through the same chain: the op's output dtype follows its input, and the values
    // are the f64 reference on the bf16-rounded inputs within bf16 rounding (the op's output and
    // the sum are each rounded to bf16: 2^-8 relative, twice).
    let (xr, gr) = (round_to(&x, DType::BF16), round_to(&gamma, DType::BF16));
    let yr = reference(&xr, &gr, NormParams::rms(eps), Activation::Silu);
    let want: Vec<f64> = yr.iter().zip(&xr).map(|(y, x)| y + x).collect();
    let xb = tensor(&x, [rows, channels], DType::BF16, &device);
    let gb = tensor(&gamma, [channels], DType::BF16, &device);
    let zb = rms_norm_silu(xb.clone() * 1.0, gb, eps) + xb;
    assert_eq!(zb.dtype(), DType::BF16);
    assert_close(&values(zb), &want, 2e-2, 8e-3, "bf16 chain");
}
