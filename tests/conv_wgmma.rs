//! The `wgmma` implicit-GEMM convolution (`kernels::conv::wgmma`) against the f64 host
//! convolution of the bf16 operands: causal temporal padding (the first chunk's zero frames),
//! later chunks, spatial padding, 3x3x3, 3x1x1 and 1x1x1 kernels, output channels and positions
//! that leave partial tiles, two batches, a residual added in the store (the norm in its load:
//! `conv_normed.rs`). On the CPU runtime the
//! staged tiles are multiplied as scalars; on an sm_90 GPU by `wgmma` for every launch shape
//! listed (one and two warpgroups, 64 to 256 channels a cube, 2 to 4 steps in flight).

use burn_rmsnorm_silu::ConvPadding;
use rmsnorm_silu_kernels::conv::wgmma::{WgmmaKnobs, launch_wgmma};
use rmsnorm_silu_kernels::conv::{ConvOperands, ConvShape};
use rmsnorm_silu_kernels::cubecl::ir::{ElemType, FloatKind};

use crate::common::*;
use crate::conv::{binding, reference, shape_of};

pub(crate) fn bf16_bytes(values: &[f64]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|&v| half::bf16::from_f64(v).to_bits().to_le_bytes())
        .collect()
}

pub(crate) fn bf16_values(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(2)
        .map(|b| half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64())
        .collect()
}

/// The launch shapes a GPU run checks; the CPU runtime checks one of each step (its scalar
/// products do not depend on the shape of the warpgroups).
fn knob_list(on_gpu: bool) -> Vec<WgmmaKnobs> {
    let all: &[&str] = if on_gpu {
        &[
            "wgmma.g1.n64.k64.s2",
            "wgmma.g2.n128.k64.s3",
            "wgmma.g2.n192.k64.s4",
            "wgmma.g1.n96.k32.s3",
            "wgmma.g2.n256.k32.s6",
        ]
    } else {
        &["wgmma.g1.n64.k64.s2", "wgmma.g1.n96.k32.s3"]
    };
    all.iter()
        .map(|k| WgmmaKnobs::parse(k).expect("knobs"))
        .collect()
}

#[test]
fn wgmma_convolution_matches_the_host() {
    let client = cube_client("the wgmma convolution");
    let mut rng = rng("conv wgmma");
    let elem = ElemType::Float(FloatKind::BF16);
    let cases: [([usize; 5], [usize; 5], ConvPadding, bool); 5] = [
        // First chunk: one frame, two zero frames in front.
        (
            [1, 1, 5, 6, 64],
            [16, 3, 3, 3, 64],
            ConvPadding::causal(2, 1),
            false,
        ),
        // Later chunk: cached frames in front, 72 channels (partial tiles), a residual.
        (
            [1, 4, 4, 5, 128],
            [72, 3, 3, 3, 128],
            ConvPadding::causal(0, 1),
            true,
        ),
        // The time convolution's 3x1x1, two batches.
        (
            [2, 3, 4, 5, 64],
            [80, 3, 1, 1, 64],
            ConvPadding::causal(0, 0),
            false,
        ),
        // 1x1x1: positions not a multiple of 64.
        (
            [1, 2, 7, 5, 64],
            [16, 1, 1, 1, 64],
            ConvPadding::causal(0, 0),
            false,
        ),
        // More positions than one tile of two warpgroups, 3x3x3 with a residual.
        (
            [1, 3, 9, 17, 64],
            [32, 3, 3, 3, 64],
            ConvPadding::causal(0, 1),
            true,
        ),
    ];
    let mut checked = 0;
    for knobs in knob_list(on_gpu()) {
        for (xs, ws, padding, residual) in cases {
            if !xs[4].is_multiple_of(knobs.k as usize) {
                continue;
            }
            let x = round_to(
                &randn(&mut rng, xs.iter().product()),
                burn::tensor::DType::BF16,
            );
            let w: Vec<f64> = round_to(
                &randn(&mut rng, ws.iter().product())
                    .iter()
                    .map(|v| v * 0.05)
                    .collect::<Vec<_>>(),
                burn::tensor::DType::BF16,
            );
            let c_out = ws[0];
            let bias = round_to(
                &uniform(&mut rng, c_out, -0.5, 0.5),
                burn::tensor::DType::BF16,
            );
            let (mut want, out_shape) = reference(&x, xs, &w, ws, &bias, padding);
            let shape = shape_of(xs, ws, padding, out_shape);
            // The output starts as poison, or as the residual the convolution adds to.
            let start: Vec<u8> = if residual {
                let r = round_to(&randn(&mut rng, want.len()), burn::tensor::DType::BF16);
                want.iter_mut().zip(&r).for_each(|(y, r)| *y += r);
                bf16_bytes(&r)
            } else {
                half::bf16::NAN.to_bits().to_le_bytes().repeat(want.len())
            };
            let out = client.create_from_slice(&start);
            let operands = ConvOperands {
                input: binding(&client.create_from_slice(&bf16_bytes(&x)), &xs),
                weight: binding(&client.create_from_slice(&bf16_bytes(&w)), &ws),
                bias: Some(binding(
                    &client.create_from_slice(&bf16_bytes(&bias)),
                    &[c_out],
                )),
                out: binding(&out, &out_shape),
                accumulate: residual,
            };
            match launch_wgmma(&client, operands, None, None, elem, &shape, &knobs) {
                Err(e) if e.to_string().contains("needs an sm_90") => {
                    eprintln!("no wgmma on this device: {e}");
                    return;
                }
                other => other.unwrap_or_else(|e| panic!("{knobs} {xs:?} * {ws:?}: {e}")),
            }
            let got = bf16_values(&client.read_one_unchecked(out));
            // f32 sums of exact bf16 products: the output's bf16 rounding.
            assert_close_to_scale(&got, &want, 1e-2, &format!("{knobs} {xs:?} * {ws:?}"));
            checked += 1;
        }
    }
    eprintln!("wgmma convolution: {checked} launches match the host");
}

#[test]
fn wgmma_convolution_refuses_what_it_cannot_run() {
    let client = cube_client("the wgmma convolution");
    let h = client.create_from_slice(&[0u8; 1 << 14]);
    let shape = ConvShape {
        batch: 1,
        input: [1, 4, 4],
        c_in: 96,
        c_out: 8,
        kernel: [1, 1, 1],
        padding: [0, 0, 0],
        output: [1, 4, 4],
    };
    let operands = || ConvOperands {
        input: binding(&h, &[1, 1, 4, 4, 96]),
        weight: binding(&h, &[8, 1, 1, 1, 96]),
        bias: Some(binding(&h, &[8])),
        out: binding(&h, &[1, 1, 4, 4, 8]),
        accumulate: false,
    };
    let bf16 = ElemType::Float(FloatKind::BF16);
    let knobs = WgmmaKnobs::default();
    let e =
        launch_wgmma(&client, operands(), None, None, bf16, &shape, &knobs).expect_err("C_in = 96");
    assert!(
        e.to_string()
            .contains("C_in must be a multiple of the step k = 64, got 96"),
        "{e}"
    );
    let shape = ConvShape { c_in: 64, ..shape };
    let f32_elem = ElemType::Float(FloatKind::F32);
    let e =
        launch_wgmma(&client, operands(), None, None, f32_elem, &shape, &knobs).expect_err("f32");
    assert!(e.to_string().contains("bf16 or f16 operands"), "{e}");
    let e = WgmmaKnobs::parse("wgmma.g3.n128.k64.s3")
        .expect("parses")
        .validate()
        .expect_err("three warpgroups");
    assert!(e.contains("1 or 2 warpgroups, got 3"), "{e}");
    let e = WgmmaKnobs::parse("wgmma.g1.n72.k64.s3")
        .expect("parses")
        .validate()
        .expect_err("n = 72");
    assert!(e.contains("one of 64, 96, 128, 192, 256, got 72"), "{e}");
    let e = WgmmaKnobs::parse("wgmma.g1.n64.k16.s3")
        .expect("parses")
        .validate()
        .expect_err("k = 16");
    assert!(e.contains("k must be 32 or 64, got 16"), "{e}");
    let e = WgmmaKnobs::parse("wgmma.g1.n64.s3").expect_err("no step");
    assert!(
        e.contains("expected wgmma.g<groups>.n<channels>.k<channels>.s<stages>"),
        "{e}"
    );
    assert_eq!(
        WgmmaKnobs::parse("wgmma.g2.n192.k32.s4").map(|k| k.to_string()),
        Ok("wgmma.g2.n192.k32.s4".into())
    );
}
