//! The E4M3 implicit-GEMM convolution (`kernels::conv::fp8`) against the f64 host convolution of
//! the codes' values: `bias + s_x s_w[o] sum x w`. Causal temporal padding (the first chunk's
//! zero frames), later chunks, spatial padding, 3x3x3, 3x1x1 and 1x1x1 kernels, output channels
//! and positions that leave partial tiles, f32 and bf16 outputs. On the CPU runtime the staged
//! tiles are multiplied as scalars; on CUDA (sm_89+) by `mma.sync` m16n8k32.

use burn_rmsnorm_silu::ConvPadding;
use rmsnorm_silu_kernels::conv::ConvShape;
use rmsnorm_silu_kernels::conv::fp8::{Fp8ConvKnobs, Fp8ConvOperands, launch_conv_e4m3};
use rmsnorm_silu_kernels::cubecl::e4m3;
use rmsnorm_silu_kernels::cubecl::ir::{ElemType, FloatKind};
use rmsnorm_silu_kernels::cubecl::prelude::*;

use crate::common::*;
use crate::conv::{binding, reference, shape_of};

/// Random E4M3 codes (of normal values in about ±4) and their values.
fn codes(rng: &mut rand::rngs::StdRng, n: usize) -> (Vec<u8>, Vec<f64>) {
    let values = randn(rng, n);
    let bytes: Vec<u8> = values
        .iter()
        .map(|&v| e4m3::from_f64(v).to_bits())
        .collect();
    let exact = bytes.iter().map(|&b| e4m3::from_bits(b).to_f64()).collect();
    (bytes, exact)
}

#[test]
fn e4m3_convolution_matches_the_host() {
    let client = cube_client("the E4M3 convolution");
    let mut rng = rng("conv e4m3");
    let cases: [([usize; 5], [usize; 5], ConvPadding); 4] = [
        // First chunk: one frame, two zero frames in front.
        (
            [1, 1, 5, 6, 32],
            [16, 3, 3, 3, 32],
            ConvPadding::causal(2, 1),
        ),
        // Later chunk: cached frames in front, 24 channels (a partial tile of 64).
        (
            [1, 4, 4, 5, 64],
            [24, 3, 3, 3, 64],
            ConvPadding::causal(0, 1),
        ),
        // The time convolution's 3x1x1, two batches.
        (
            [2, 3, 4, 5, 32],
            [72, 3, 1, 1, 32],
            ConvPadding::causal(0, 0),
        ),
        // 1x1x1 over 96 channels: positions not a multiple of 64.
        (
            [1, 2, 7, 5, 96],
            [8, 1, 1, 1, 96],
            ConvPadding::causal(0, 0),
        ),
    ];
    for out_kind in [FloatKind::F32, FloatKind::BF16] {
        for (xs, ws, padding) in cases {
            let (x_codes, x) = codes(&mut rng, xs.iter().product());
            let (w_codes, w) = codes(&mut rng, ws.iter().product());
            let c_out = ws[0];
            let x_scale = 0.25f32;
            let w_scale: Vec<f32> = (0..c_out).map(|o| 0.01 * (1 + o % 5) as f32).collect();
            let bias: Vec<f64> = uniform(&mut rng, c_out, -0.5, 0.5);
            // The reference: the codes' values with their scales folded into the weights.
            let w_scaled: Vec<f64> = w
                .iter()
                .enumerate()
                .map(|(i, v)| v * x_scale as f64 * w_scale[i / (w.len() / c_out)] as f64)
                .collect();
            // The bias as the kernel reads it (rounded to the output type) and its bytes; a NaN
            // of the output type for the poison.
            let (elem, bias_rounded, bias_bytes, nan): (_, Vec<f64>, Vec<u8>, Vec<u8>) =
                match out_kind {
                    FloatKind::F32 => {
                        let b: Vec<f32> = bias.iter().map(|&v| v as f32).collect();
                        (
                            ElemType::Float(FloatKind::F32),
                            b.iter().map(|&v| v as f64).collect(),
                            f32::as_bytes(&b).to_vec(),
                            f32::NAN.to_le_bytes().to_vec(),
                        )
                    }
                    _ => {
                        let b: Vec<half::bf16> =
                            bias.iter().map(|&v| half::bf16::from_f64(v)).collect();
                        (
                            ElemType::Float(FloatKind::BF16),
                            b.iter().map(|v| v.to_f64()).collect(),
                            b.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect(),
                            half::bf16::NAN.to_bits().to_le_bytes().to_vec(),
                        )
                    }
                };
            let (want, out_shape) = reference(&x, xs, &w_scaled, ws, &bias_rounded, padding);
            let shape = shape_of(xs, ws, padding, out_shape);
            let poison = nan.repeat(want.len());
            let out = client.create_from_slice(&poison);
            let operands = Fp8ConvOperands {
                input: binding(&client.create_from_slice(&x_codes), &xs),
                weight: binding(&client.create_from_slice(&w_codes), &ws),
                input_scale: binding(&client.create_from_slice(f32::as_bytes(&[x_scale])), &[1]),
                weight_scale: binding(&client.create_from_slice(f32::as_bytes(&w_scale)), &[c_out]),
                bias: binding(&client.create_from_slice(&bias_bytes), &[c_out]),
                out: binding(&out, &out_shape),
            };
            match launch_conv_e4m3(&client, operands, elem, &shape, &Fp8ConvKnobs::default()) {
                Err(e) if e.to_string().contains("needs sm_89") => {
                    eprintln!("no E4M3 tensor cores on this device: {e}");
                    return;
                }
                other => other.unwrap_or_else(|e| panic!("{xs:?} * {ws:?}: {e}")),
            }
            let bytes = client.read_one_unchecked(out);
            let got: Vec<f64> = match out_kind {
                FloatKind::F32 => f32::from_bytes(&bytes).iter().map(|&v| v as f64).collect(),
                _ => bytes
                    .chunks_exact(2)
                    .map(|b| half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64())
                    .collect(),
            };
            // f32 sums of exact products: f32 rounding only; bf16: the output's rounding.
            let rel = if out_kind == FloatKind::F32 {
                1e-5
            } else {
                1e-2
            };
            assert_close_to_scale(&got, &want, rel, &format!("{out_kind:?} {xs:?} * {ws:?}"));
        }
    }
}

#[test]
fn e4m3_convolution_refuses_channels_off_32() {
    let client = cube_client("the E4M3 convolution");
    let shape = ConvShape {
        batch: 1,
        input: [1, 4, 4],
        c_in: 48,
        c_out: 8,
        kernel: [1, 1, 1],
        padding: [0, 0, 0],
        output: [1, 4, 4],
    };
    let h = client.create_from_slice(&[0u8; 4096]);
    let operands = Fp8ConvOperands {
        input: binding(&h, &[1, 1, 4, 4, 48]),
        weight: binding(&h, &[8, 1, 1, 1, 48]),
        input_scale: binding(&h, &[1]),
        weight_scale: binding(&h, &[8]),
        bias: binding(&h, &[8]),
        out: binding(&h, &[1, 1, 4, 4, 8]),
    };
    let e = launch_conv_e4m3(
        &client,
        operands,
        ElemType::Float(FloatKind::F32),
        &shape,
        &Fp8ConvKnobs::default(),
    )
    .expect_err("C_in = 48");
    assert!(
        e.to_string()
            .contains("C_in must be a multiple of 32, got 48"),
        "{e}"
    );
}
