//! The norm in the `wgmma` convolution's load (`kernels::conv::prologue`, `NormPrologue`,
//! `conv3d_channels_last_normed`) and its second input source (`InputTail`): the positions'
//! inverse RMS against the host, the fused convolution against the f64 norm (rounded to bf16)
//! then the host convolution, both norm kinds, the first chunk's padding, steps of 32 and 64,
//! two sources at three split points, and the arguments' checks.

use burn_rmsnorm_silu::ConvPadding;
use rmsnorm_silu_kernels::conv::prologue::launch_positions_inv_rms;
use rmsnorm_silu_kernels::conv::wgmma::{NormPrologue, WgmmaKnobs, launch_wgmma};
use rmsnorm_silu_kernels::conv::{ConvOperands, ConvShape};
use rmsnorm_silu_kernels::cubecl::ir::{ElemType, FloatKind};
use rmsnorm_silu_kernels::cubecl::prelude::*;
use rmsnorm_silu_kernels::reference::rms_norm_silu_f64;
use rmsnorm_silu_kernels::{Activation, NormParams};

use crate::common::*;
use crate::conv::{binding, reference, shape_of};
use crate::conv_wgmma::{bf16_bytes, bf16_values};

/// Host inverse RMS of each `channels`-long row.
fn host_inv_rms(x: &[f64], channels: usize, norm: NormParams) -> Vec<f64> {
    x.chunks(channels)
        .map(|row| {
            let ms = row.iter().map(|v| v * v).sum::<f64>() / channels as f64;
            1.0 / (ms + norm.eps as f64).max(norm.floor as f64).sqrt()
        })
        .collect()
}

#[test]
fn norm_in_the_load_matches_norm_then_convolution() {
    let client = cube_client("the wgmma convolution with the norm in its load");
    let mut rng = rng("conv wgmma norm");
    let bf16 = ElemType::Float(FloatKind::BF16);
    let cases: [([usize; 5], [usize; 5], ConvPadding, &str); 3] = [
        // The first chunk (zero frames in front: zeros after the norm, as PyTorch pads).
        (
            [1, 1, 5, 6, 64],
            [24, 3, 3, 3, 64],
            ConvPadding::causal(2, 1),
            "wgmma.g1.n64.k64.s2",
        ),
        // A later chunk, 96 channels in steps of 32, Wan's L2 clamp.
        (
            [1, 3, 4, 5, 96],
            [16, 3, 3, 3, 96],
            ConvPadding::causal(0, 1),
            "wgmma.g1.n96.k32.s3",
        ),
        // Two batches, a 1x1x1.
        (
            [2, 2, 3, 7, 128],
            [40, 1, 1, 1, 128],
            ConvPadding::causal(0, 0),
            "wgmma.g2.n128.k64.s3",
        ),
    ];
    for (case, (xs, ws, padding, knobs)) in cases.into_iter().enumerate() {
        let c = xs[4];
        let norm = if case == 1 {
            NormParams::l2_clamp(1e-12, c)
        } else {
            NormParams::rms(1e-6)
        };
        let x = round_to(
            &randn(&mut rng, xs.iter().product())
                .iter()
                .map(|v| v * 3.0 + 1.0)
                .collect::<Vec<_>>(),
            burn::tensor::DType::BF16,
        );
        let gamma = round_to(&uniform(&mut rng, c, 0.5, 2.0), burn::tensor::DType::BF16);
        let w = round_to(
            &randn(&mut rng, ws.iter().product())
                .iter()
                .map(|v| v * 0.05)
                .collect::<Vec<_>>(),
            burn::tensor::DType::BF16,
        );
        let bias = round_to(
            &uniform(&mut rng, ws[0], -0.5, 0.5),
            burn::tensor::DType::BF16,
        );
        // The positions' inverse RMS on the device, against the host.
        let positions = x.len() / c;
        let x_handle = client.create_from_slice(&bf16_bytes(&x));
        let inv_rms = client.create_from_slice(f32::as_bytes(&vec![f32::NAN; positions]));
        launch_positions_inv_rms(
            &client,
            binding(&x_handle, &xs),
            binding(&inv_rms, &[positions]),
            bf16,
            norm,
        )
        .unwrap_or_else(|e| panic!("inv_rms {xs:?}: {e}"));
        let got_rms: Vec<f64> = f32::from_bytes(&client.read_one_unchecked(inv_rms.clone()))
            .iter()
            .map(|&v| v as f64)
            .collect();
        let want_rms = host_inv_rms(&x, c, norm);
        assert_close(&got_rms, &want_rms, 0.0, 1e-5, &format!("inv_rms {xs:?}"));
        // The fused convolution against the norm (rounded to bf16, as the separate op stores
        // it) then the host convolution.
        let normed = round_to(
            &rms_norm_silu_f64(&x, &gamma, c, norm, Activation::Silu),
            burn::tensor::DType::BF16,
        );
        let (want, out_shape) = reference(&normed, xs, &w, ws, &bias, padding);
        let shape = shape_of(xs, ws, padding, out_shape);
        let out =
            client.create_from_slice(&half::bf16::NAN.to_bits().to_le_bytes().repeat(want.len()));
        let operands = ConvOperands {
            input: binding(&x_handle, &xs),
            weight: binding(&client.create_from_slice(&bf16_bytes(&w)), &ws),
            bias: Some(binding(
                &client.create_from_slice(&bf16_bytes(&bias)),
                &[ws[0]],
            )),
            out: binding(&out, &out_shape),
            accumulate: false,
        };
        let prologue = NormPrologue {
            inv_rms: binding(&inv_rms, &[positions]),
            gamma: binding(&client.create_from_slice(&bf16_bytes(&gamma)), &[c]),
        };
        let knobs = WgmmaKnobs::parse(knobs).expect("knobs");
        match launch_wgmma(
            &client,
            operands,
            Some(prologue),
            None,
            bf16,
            &shape,
            &knobs,
        ) {
            Err(e) if e.to_string().contains("needs an sm_90") => {
                eprintln!("no wgmma on this device: {e}");
                return;
            }
            other => other.unwrap_or_else(|e| panic!("{knobs} {xs:?} * {ws:?}: {e}")),
        }
        let got = bf16_values(&client.read_one_unchecked(out));
        assert_close_to_scale(
            &got,
            &want,
            1e-2,
            &format!("normed {knobs} {xs:?} * {ws:?}"),
        );
    }
}

/// `conv3d_channels_last_normed` through Burn: bf16 with `C_in` a multiple of 32 runs the norm
/// in the wgmma convolution's load (on the CPU runtime its scalar path), f32 and other widths
/// the fused norm then the convolution; both against the f64 norm (rounded to the dtype) then
/// the host convolution.
#[test]
fn normed_convolution_through_burn() {
    use burn::tensor::DType;
    use burn_rmsnorm_silu::conv3d_channels_last_normed;
    let device = device();
    let cases: [(DType, [usize; 5], [usize; 5], ConvPadding); 3] = [
        (
            DType::BF16,
            [1, 1, 4, 5, 64],
            [16, 3, 3, 3, 64],
            ConvPadding::causal(2, 1),
        ),
        (
            DType::F32,
            [1, 3, 3, 4, 40],
            [8, 3, 3, 3, 40],
            ConvPadding::causal(0, 1),
        ),
        (
            DType::BF16,
            [1, 2, 3, 4, 24],
            [8, 1, 1, 1, 24],
            ConvPadding::causal(0, 0),
        ),
    ];
    for (dtype, xs, ws, padding) in cases {
        let mut rng = rng(&format!("conv3d_channels_last_normed {dtype:?} {xs:?}"));
        let c = xs[4];
        let norm = NormParams::l2_clamp(1e-12, c);
        let x = round_to(&randn(&mut rng, xs.iter().product()), dtype);
        let gamma = round_to(&uniform(&mut rng, c, 0.5, 2.0), dtype);
        let w = round_to(&uniform(&mut rng, ws.iter().product(), -0.1, 0.1), dtype);
        let b = round_to(&uniform(&mut rng, ws[0], -0.5, 0.5), dtype);
        let normed = round_to(
            &rms_norm_silu_f64(&x, &gamma, c, norm, Activation::Silu),
            dtype,
        );
        let (want, shape) = reference(&normed, xs, &w, ws, &b, padding);
        let got = conv3d_channels_last_normed(
            tensor::<5>(&x, xs, dtype, &device),
            tensor::<1>(&gamma, [c], dtype, &device),
            tensor::<5>(&w, ws, dtype, &device),
            tensor::<1>(&b, [ws[0]], dtype, &device),
            padding,
            norm,
        );
        assert_eq!(got.dims(), shape, "{dtype:?} {xs:?}");
        let rel = if dtype == DType::F32 { 1e-4 } else { 1e-2 };
        assert_close_to_scale(
            &values(got),
            &want,
            rel,
            &format!("{dtype:?} {xs:?} * {ws:?}"),
        );
    }
    let message = panic_message(|| {
        let t = |shape: [usize; 5]| {
            tensor::<5>(
                &vec![0.0; shape.iter().product()],
                shape,
                DType::F32,
                &device,
            )
        };
        conv3d_channels_last_normed(
            t([1, 1, 2, 2, 8]),
            tensor::<1>(&[1.0; 7], [7], DType::F32, &device),
            t([4, 1, 1, 1, 8]),
            tensor::<1>(&[0.0; 4], [4], DType::F32, &device),
            ConvPadding::causal(0, 0),
            NormParams::rms(1e-6),
        );
    });
    assert!(
        message.contains("conv3d_channels_last_normed: `gamma` must have C_in = 8 values, got [7]"),
        "{message}"
    );
}

/// The input's frames from two tensors (a causal convolution's cached frames and the new
/// chunk, read where they lie), with and without the norm in the load, against the host
/// convolution of the joined input.
#[test]
fn two_input_sources_match_the_joined_input() {
    use rmsnorm_silu_kernels::conv::InputTail;
    let client = cube_client("the wgmma convolution from two sources");
    let mut rng = rng("conv wgmma two sources");
    let bf16 = ElemType::Float(FloatKind::BF16);
    let (xs, ws, padding) = (
        [1, 4, 4, 5, 64],
        [24, 3, 3, 3, 64],
        ConvPadding::causal(0, 1),
    );
    let c = xs[4];
    let frame = xs[2] * xs[3] * c;
    let x = round_to(
        &randn(&mut rng, xs.iter().product()),
        burn::tensor::DType::BF16,
    );
    let gamma = round_to(&uniform(&mut rng, c, 0.5, 2.0), burn::tensor::DType::BF16);
    let w = round_to(
        &uniform(&mut rng, ws.iter().product(), -0.1, 0.1),
        burn::tensor::DType::BF16,
    );
    let bias = round_to(
        &uniform(&mut rng, ws[0], -0.5, 0.5),
        burn::tensor::DType::BF16,
    );
    let norm = NormParams::l2_clamp(1e-12, c);
    let knobs = WgmmaKnobs::parse("wgmma.g1.n64.k64.s2").expect("knobs");
    let positions = x.len() / c;
    let gamma_handle = client.create_from_slice(&bf16_bytes(&gamma));
    for normed in [false, true] {
        let input = if normed {
            round_to(
                &rms_norm_silu_f64(&x, &gamma, c, norm, Activation::Silu),
                burn::tensor::DType::BF16,
            )
        } else {
            x.clone()
        };
        let (want, out_shape) = reference(&input, xs, &w, ws, &bias, padding);
        let shape = shape_of(xs, ws, padding, out_shape);
        for first_frame in [0, 2, 4] {
            let head =
                client.create_from_slice(&bf16_bytes(&x[..first_frame * frame]).max_or_one());
            let tail =
                client.create_from_slice(&bf16_bytes(&x[first_frame * frame..]).max_or_one());
            let out = client
                .create_from_slice(&half::bf16::NAN.to_bits().to_le_bytes().repeat(want.len()));
            let operands = ConvOperands {
                input: binding(&head, &[1, first_frame, xs[2], xs[3], c]),
                weight: binding(&client.create_from_slice(&bf16_bytes(&w)), &ws),
                bias: Some(binding(
                    &client.create_from_slice(&bf16_bytes(&bias)),
                    &[ws[0]],
                )),
                out: binding(&out, &out_shape),
                accumulate: false,
            };
            let prologue = normed.then(|| {
                // The joined input's inverse RMS (the host's: the reduction is tested above).
                let r: Vec<f32> = host_inv_rms(&x, c, norm)
                    .iter()
                    .map(|&v| v as f32)
                    .collect();
                NormPrologue {
                    inv_rms: binding(&client.create_from_slice(f32::as_bytes(&r)), &[positions]),
                    gamma: binding(&gamma_handle, &[c]),
                }
            });
            let tail = InputTail {
                input: binding(&tail, &[1, xs[1] - first_frame, xs[2], xs[3], c]),
                first_frame,
            };
            match launch_wgmma(
                &client,
                operands,
                prologue,
                Some(tail),
                bf16,
                &shape,
                &knobs,
            ) {
                Err(e) if e.to_string().contains("needs an sm_90") => return,
                other => other.unwrap_or_else(|e| panic!("first frame {first_frame}: {e}")),
            }
            let got = bf16_values(&client.read_one_unchecked(out));
            let what = format!("normed {normed}, frames 0..{first_frame} + the rest");
            assert_close_to_scale(&got, &want, 1e-2, &what);
        }
    }
}

/// Device buffers cannot be empty: a zero-frame source gets one element it never reads.
trait MaxOrOne {
    fn max_or_one(self) -> Vec<u8>;
}

impl MaxOrOne for Vec<u8> {
    fn max_or_one(self) -> Vec<u8> {
        if self.is_empty() { vec![0; 16] } else { self }
    }
}

#[test]
fn prologue_and_second_source_arguments_are_checked() {
    use rmsnorm_silu_kernels::conv::InputTail;
    let client = cube_client("the wgmma convolution");
    let h = client.create_from_slice(&[0u8; 1 << 14]);
    let bf16 = ElemType::Float(FloatKind::BF16);
    let shape = ConvShape {
        batch: 1,
        input: [2, 4, 4],
        c_in: 64,
        c_out: 8,
        kernel: [1, 1, 1],
        padding: [0, 0, 0],
        output: [2, 4, 4],
    };
    let operands = |frames: usize| ConvOperands {
        input: binding(&h, &[1, frames, 4, 4, 64]),
        weight: binding(&h, &[8, 1, 1, 1, 64]),
        bias: Some(binding(&h, &[8])),
        out: binding(&h, &[1, 2, 4, 4, 8]),
        accumulate: false,
    };
    let knobs = WgmmaKnobs::parse("wgmma.g1.n64.k64.s2").expect("knobs");
    let prologue = |positions: usize, c: usize| NormPrologue {
        inv_rms: binding(&h, &[positions]),
        gamma: binding(&h, &[c]),
    };
    let launch = |frames, p, t| launch_wgmma(&client, operands(frames), p, t, bf16, &shape, &knobs);
    let e = launch(2, Some(prologue(31, 64)), None).expect_err("31 positions");
    assert!(
        e.to_string().contains(
            "the norm prologue wants 32 inverse RMS values and gamma [64], got 31 and [64]"
        ),
        "{e}"
    );
    let e = launch(2, Some(prologue(32, 32)), None).expect_err("gamma of 32");
    assert!(e.to_string().contains("got 32 and [32]"), "{e}");
    let tail = |frames: usize, first_frame| InputTail {
        input: binding(&h, &[1, frames, 4, 4, 64]),
        first_frame,
    };
    let e = launch(1, None, Some(tail(2, 1))).expect_err("tail of 2 frames from frame 1");
    assert!(
        e.to_string()
            .contains("the input's frames 0..1 and a second source of shape [1, 1, 4, 4, 64]"),
        "{e}"
    );
    let e = launch(2, None, Some(tail(1, 1))).expect_err("head of 2 frames before frame 1");
    assert!(
        e.to_string()
            .contains("got [1, 2, 4, 4, 64] and [1, 1, 4, 4, 64]"),
        "{e}"
    );
    // The inverse RMS: its output's size and the input's element type.
    let e = launch_positions_inv_rms(
        &client,
        binding(&h, &[1, 2, 4, 4, 64]),
        binding(&h, &[31]),
        bf16,
        NormParams::rms(1e-6),
    )
    .expect_err("31 outputs");
    assert!(e.to_string().contains("32 outputs, got shape [31]"), "{e}");
    let e = launch_positions_inv_rms(
        &client,
        binding(&h, &[1, 2, 4, 4, 64]),
        binding(&h, &[32]),
        ElemType::Float(FloatKind::F32),
        NormParams::rms(1e-6),
    )
    .expect_err("f32");
    assert!(e.to_string().contains("bf16 or f16 input"), "{e}");
}
