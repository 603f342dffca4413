//! FP8 E4M3 output of the row kernel, checked byte for byte against the host codec applied to
//! the same function, and with the cuDNN engine's tolerance after dequantisation.

use burn::tensor::DType;
use rmsnorm_silu_kernels::formats::{e4m3_decode, e4m3_encode};
use rmsnorm_silu_kernels::forward::launch_forward_fp8;
use rmsnorm_silu_kernels::{Activation, NormParams, RowsProblem, select_knobs};

use crate::common::*;
use crate::kernel_knobs::{cube_device, elem, upload};

#[test]
fn fp8_codes_match_the_host_quantiser() {
    let device = cube_device();
    let mut rng = rng("fp8");
    for (rows, channels, scale) in [
        (37, 96, 1.0f32),
        (5, 1000, 64.0),
        (9, 64, 300.0),
        (3, 7, 0.5),
    ] {
        let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::BF16);
        let norm = NormParams::rms(eps);
        let want = reference(&x, &gamma, norm, Activation::Silu);
        let xt = upload(&x, vec![rows, channels], DType::BF16, &device);
        let gt = upload(&gamma, vec![channels], DType::BF16, &device);
        let client = xt.client.clone();
        let n = rows * channels;
        // Poison: the NaN code everywhere.
        let out = client.create_from_slice(&vec![0x7Fu8; n]);
        let problem = RowsProblem::dense(rows, channels);
        let knobs = select_knobs(&client, problem, 2, 2, 256);
        launch_forward_fp8(
            &client,
            xt.handle.clone(),
            gt.handle.clone(),
            out.clone(),
            elem(DType::BF16),
            elem(DType::BF16),
            problem,
            norm,
            Activation::Silu,
            scale,
            &knobs,
        )
        .unwrap();
        let bytes = client.read_one_unchecked(out).to_vec();
        assert_eq!(bytes.len(), n);
        let mut differing = 0;
        for (i, (&got, &y)) in bytes.iter().zip(&want).enumerate() {
            let code = e4m3_encode((y * scale as f64) as f32);
            if got != code {
                differing += 1;
                // Only where the kernel's fp32 y sits next to a rounding boundary: one code away.
                let (a, b) = (e4m3_decode(got) as f64, e4m3_decode(code) as f64);
                assert!(
                    (got as i32 - code as i32).abs() == 1 && a.is_finite(),
                    "element {i}: kernel {got:#04x} ({a}) vs host {code:#04x} ({b}), y*scale = {}",
                    y * scale as f64
                );
            }
            // cuDNN's check: dequantised within atol = rtol = 0.125 of clamp(ref, +-448)/scale.
            let clamped = (y * scale as f64).clamp(-448.0, 448.0);
            let deq = e4m3_decode(got) as f64;
            assert!(
                (deq - clamped).abs() <= 0.125 + 0.125 * clamped.abs(),
                "element {i}: {deq} vs {clamped}"
            );
        }
        eprintln!("T={rows} C={channels} scale={scale}: {differing} of {n} codes differ by one");
        assert!(
            differing * 1000 <= n,
            "too many differing codes: {differing} of {n}"
        );
    }
}
