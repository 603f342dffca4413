//! FP8 E4M3 output of the row kernel, checked byte for byte against the host codec applied to
//! the same function, and with the cuDNN engine's tolerance after dequantisation.

use burn::tensor::DType;
use rmsnorm_silu_kernels::formats::{e4m3_decode, e4m3_encode};
use rmsnorm_silu_kernels::forward::{OutputTarget, launch_forward_to};
use rmsnorm_silu_kernels::{Activation, Knobs, NormParams, RowOperands, RowsProblem, select_knobs};

use crate::common::*;
use crate::kernel_knobs::{cube_device, elem, upload};

/// The FP8 codes the row kernel writes (with `knobs`, or the device's selected knobs) for bf16
/// `x` and `gamma` of `[rows, C]`, into an output poisoned with the NaN code.
fn fp8_codes(
    x: &[f64],
    gamma: &[f64],
    rows: usize,
    channels: usize,
    norm: NormParams,
    scale: f32,
    knobs: Option<Knobs>,
) -> Vec<u8> {
    let device = cube_device();
    let xt = upload(x, vec![rows, channels], DType::BF16, &device);
    let gt = upload(gamma, vec![channels], DType::BF16, &device);
    let client = xt.client.clone();
    let out = client.create_from_slice(&vec![0x7Fu8; rows * channels]);
    let problem = RowsProblem::dense(rows, channels);
    let knobs = knobs.unwrap_or_else(|| select_knobs(&client, problem, 2, 2, 256));
    launch_forward_to(
        &client,
        RowOperands {
            x: xt.handle.clone(),
            gamma: gt.handle.clone(),
            x_type: elem(DType::BF16),
            gamma_type: elem(DType::BF16),
        },
        OutputTarget::fp8(out.clone(), scale, None),
        problem,
        norm,
        Activation::Silu,
        &knobs,
    )
    .unwrap_or_else(|e| panic!("{knobs}: {e}"));
    client.read_one_unchecked(out).to_vec()
}

#[test]
fn fp8_codes_match_the_host_quantiser() {
    let mut rng = rng("fp8");
    for (rows, channels, scale) in [
        (37, 96, 1.0f32),
        (5, 1000, 64.0),
        (9, 64, 300.0),
        (3, 7, 0.5),
    ] {
        check_fp8_codes(&mut rng, rows, channels, scale, None);
    }
}

/// Lane counts that are not powers of two (rows packed into planes) with FP8 out, also the
/// packed E4M3 pairs of the PTX path, and amax from the packed cube's unit slots (CUDA: the
/// CPU runtime has no plane operations).
#[test]
fn fp8_packed_lane_counts() {
    if !on_gpu() {
        return;
    }
    let mut rng = rng("fp8 packed");
    let packed = |lanes: u32, rows_per_cube: u32, vpl: usize, fast_math: bool| Knobs {
        fast_math,
        ..Knobs::parse(&format!(
            "v8.l{lanes}.r{rows_per_cube}.u1.c{vpl}.plane.greg.m-"
        ))
        .unwrap()
    };
    for (rows, channels, scale, knobs) in [
        (1001, 96, 1.0f32, packed(6, 20, 2, false)),
        (1001, 96, 64.0, packed(6, 20, 2, true)),
        (777, 160, 2.0, packed(10, 12, 2, true)),
        (333, 192, 0.5, packed(12, 8, 2, true)),
    ] {
        check_fp8_codes(&mut rng, rows, channels, scale, Some(knobs));
        check_fp8_amax(&mut rng, rows, channels, scale, false, Some(knobs));
    }
}

/// Every distinct layout of the FP8 table entries writes the host quantiser's codes (and its
/// amax where it holds vectors of 4, whose 4-byte stores only the FP8 entries use): the
/// bf16 table test runs these layouts with bf16 out only. Entries whose knobs this device
/// cannot run (plane reductions on the CPU runtime) are skipped, as in the bf16 table test.
#[test]
fn fp8_table_entries_match_the_host_quantiser() {
    use rand::{Rng, SeedableRng};
    use rmsnorm_silu_kernels::lut::tables;
    use rmsnorm_silu_kernels::validate::validate_knobs;
    let device = cube_device();
    let client = device.client();
    let sms = client.properties().hardware.num_streaming_multiprocessors;
    // (index, C, knobs): the index seeds the case's own generator.
    let mut cases: Vec<(u64, usize, Knobs)> = Vec::new();
    let mut seen = Vec::new();
    for e in tables()
        .iter()
        .flat_map(|t| t.entries.iter())
        .filter(|e| e.out == "fp8")
    {
        // One run per layout: the entry's knobs leave the cube cap to `knobs_for`.
        if seen.contains(&(e.channels, e.knobs)) {
            continue;
        }
        seen.push((e.channels, e.knobs));
        let k = e.knobs_for(sms);
        let problem = RowsProblem::dense(777, e.channels);
        if validate_knobs(&client, &k, problem, &[0; 3], &[2; 3]).is_ok() {
            cases.push((cases.len() as u64, e.channels, k));
        }
    }
    // The cases run on several threads on CUDA (their time is NVRTC's), each drawing its inputs
    // from its own generator seeded from this test's seed.
    let seed: u64 = rng("fp8 table").random();
    let failures = run_cases(
        &cases,
        |_, (i, c, k)| format!("case {i} (C = {c}, {k}): "),
        |&(index, channels, k)| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ index);
            check_fp8_codes(&mut rng, 777, channels, 2.0, Some(k));
            if k.vector_size == 4 {
                check_fp8_amax(&mut rng, 777, channels, 2.0, false, Some(k));
            }
        },
    );
    eprintln!("ran {} FP8 table layouts", cases.len());
    assert_no_failures(&failures);
}

/// The kernel's codes against the host quantiser on fresh cuDNN-style inputs.
fn check_fp8_codes(
    rng: &mut rand::rngs::StdRng,
    rows: usize,
    channels: usize,
    scale: f32,
    knobs: Option<Knobs>,
) {
    let (x, gamma, eps) = cudnn_inputs(rng, rows, channels, DType::BF16);
    let norm = NormParams::rms(eps);
    let want = reference(&x, &gamma, norm, Activation::Silu);
    let n = rows * channels;
    let bytes = fp8_codes(&x, &gamma, rows, channels, norm, scale, knobs);
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
        "too many differing codes: {differing} of {n} ({knobs:?})"
    );
}

/// Scales at both ends of the f32 range: 2^-100, 2^100 (the largest the PTX SiLU folds into
/// its constant) and 3e38 (not folded); gamma holds zeros, so some `y` are exactly 0 and must
/// give code 0 (not NaN from `0 * inf`), and every other code follows the host quantiser
/// (saturated at +-448 for the large scales).
#[test]
fn fp8_extreme_scales_keep_zeros_and_saturate() {
    let mut rng = rng("fp8 extreme scales");
    let (rows, channels) = (23, 64);
    let x = round_to(&randn(&mut rng, rows * channels), DType::BF16);
    let mut gamma = round_to(&uniform(&mut rng, channels, 0.5, 2.0), DType::BF16);
    for c in [0, 9, 33] {
        gamma[c] = 0.0;
    }
    let norm = NormParams::rms(1e-6);
    let want = reference(&x, &gamma, norm, Activation::Silu);
    for scale in [7.888_609e-31f32, 1.267_650_6e30, 3.0e38] {
        let bytes = fp8_codes(&x, &gamma, rows, channels, norm, scale, None);
        let mut differing = 0;
        for (i, (&got, &y)) in bytes.iter().zip(&want).enumerate() {
            let code = e4m3_encode((y * scale as f64) as f32);
            if y == 0.0 {
                assert_eq!(
                    got & 0x7f,
                    0,
                    "element {i}: y = 0 at scale {scale} gave {got:#04x}"
                );
            } else if got != code {
                differing += 1;
                assert!(
                    (got as i32 - code as i32).abs() == 1,
                    "element {i}, scale {scale}: kernel {got:#04x} vs host {code:#04x}"
                );
            }
        }
        assert!(
            differing * 1000 <= rows * channels,
            "scale {scale}: {differing} codes differ by one"
        );
    }
}

/// The public API: a `QFloat` tensor (E4M3, per-tensor scale 1/scale) whose Burn
/// `dequantize()` gives the host quantiser's `decode(encode(y * scale)) / scale` on the CubeCL
/// device (the fused kernel quantises), and cuDNN's tolerance: dequantised within
/// atol = rtol = 0.125 of `clamp(y * scale, ±448)`; odd C, one row, zero rows.
#[test]
fn fp8_api_returns_a_quantized_tensor_burn_dequantizes() {
    use burn_rmsnorm_silu::fp8::fp8_scheme;
    use burn_rmsnorm_silu::rms_norm_silu_fp8;
    let mut rng = rng("fp8 api");
    let device = device();
    for (rows, channels, scale) in [
        (17, 160, 1.0f32),
        (1, 3, 64.0),
        (6, 1000, 0.37),
        (0, 8, 2.0),
    ] {
        let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::BF16);
        let want = reference(&x, &gamma, NormParams::rms(eps), Activation::Silu);
        let q = rms_norm_silu_fp8(
            tensor(&x, [rows, channels], DType::BF16, &device),
            tensor(&gamma, [channels], DType::BF16, &device),
            eps,
            scale,
        );
        assert_eq!(q.dtype(), DType::QFloat(fp8_scheme()), "{device:?}");
        assert_eq!(q.dims(), [rows, channels]);
        let got = values(q.dequantize());
        let mut differing = 0;
        for (i, (&g, &y)) in got.iter().zip(&want).enumerate() {
            let what = format!("{device:?} T={rows} C={channels} element {i}");
            let clamped = (y * scale as f64).clamp(-448.0, 448.0);
            let deq = g * scale as f64;
            assert!(
                (deq - clamped).abs() <= 0.125 + 0.125 * clamped.abs(),
                "{what}: {deq} vs {clamped} (cuDNN tolerance)"
            );
            let code = e4m3_encode((y * scale as f64) as f32);
            let expected = e4m3_decode(code) as f64;
            if (deq - expected).abs() > 1e-6 * expected.abs() {
                differing += 1;
                // One E4M3 step at most (fp32 y next to a rounding boundary).
                assert!(
                    (deq / expected - 1.0).abs() <= 0.13,
                    "{what}: {deq} vs {expected}"
                );
            }
        }
        let n = rows * channels;
        assert!(
            differing * 100 <= n,
            "{device:?} T={rows} C={channels} scale={scale}: {differing} of {n} differ"
        );
    }
}

#[test]
#[should_panic(expected = "`scale` must be finite and > 0, got 0")]
fn fp8_scale_must_be_positive() {
    let device = device();
    let x = tensor(&[1.0; 8], [2, 4], DType::F32, &device);
    let gamma = tensor(&[1.0; 4], [4], DType::F32, &device);
    let _ = burn_rmsnorm_silu::rms_norm_silu_fp8(x, gamma, 1e-6, 0.0);
}

/// The capability query answers before the call that would panic: CubeCL devices (the test
/// device, raw or under autodiff) have the fused kernels and both quantised outputs; Flex and
/// NdArray have neither.
#[test]
#[allow(deprecated)] // NdArray is deprecated in Burn but still supported here
fn capabilities_say_which_devices_quantise() {
    use burn_rmsnorm_silu::{Capabilities, capabilities};
    let all = Capabilities {
        fused: true,
        fp8: true,
        nvfp4: true,
    };
    let none = Capabilities {
        fused: false,
        fp8: false,
        nvfp4: false,
    };
    assert_eq!(capabilities(&device()), all, "{:?}", device());
    assert_eq!(
        capabilities(&device().autodiff()),
        all,
        "autodiff of {:?}",
        device()
    );
    assert_eq!(capabilities(&burn::tensor::Device::flex()), none, "Flex");
    assert_eq!(
        capabilities(&burn::tensor::Device::flex().autodiff()),
        none,
        "autodiff Flex"
    );
    assert_eq!(
        capabilities(&burn::tensor::Device::ndarray()),
        none,
        "NdArray"
    );
}

#[test]
#[should_panic(expected = "FP8 output needs a CubeCL backend")]
fn fp8_on_a_backend_without_the_kernel_is_refused() {
    let device = burn::tensor::Device::flex();
    let x = tensor(&[1.0; 8], [2, 4], DType::F32, &device);
    let gamma = tensor(&[1.0; 4], [4], DType::F32, &device);
    let _ = burn_rmsnorm_silu::rms_norm_silu_fp8(x, gamma, 1e-6, 1.0);
}

/// amax = max |y| (before scaling) from the same kernel: against the f64 reference on every
/// knob path the selection picks for these shapes, a NaN row makes it NaN, zero rows give 0.
#[test]
fn fp8_amax_is_the_max_of_y() {
    let mut rng = rng("fp8 amax");
    for (rows, channels, scale, nan_row) in [
        (37, 96, 1.0f32, false),
        (5, 1000, 64.0, false),
        (300, 24, 2.0, false),
        (4, 16, 1.0, true),
        (0, 8, 1.0, false),
    ] {
        check_fp8_amax(&mut rng, rows, channels, scale, nan_row, None);
    }
}

/// `max |y|` from the FP8 kernel (`knobs`, or the selected ones) against the host's; with
/// `nan_row` one `x` is NaN and amax must be NaN.
fn check_fp8_amax(
    rng: &mut rand::rngs::StdRng,
    rows: usize,
    channels: usize,
    scale: f32,
    nan_row: bool,
    knobs: Option<Knobs>,
) {
    let device = cube_device();
    let (mut x, gamma, eps) = cudnn_inputs(rng, rows, channels, DType::BF16);
    if nan_row {
        x[channels + 3] = f64::NAN;
    }
    let norm = NormParams::rms(eps);
    let want = reference(&x, &gamma, norm, Activation::Silu);
    let want_amax = want.iter().fold(0.0f64, |m, v| {
        if v.is_nan() || m.is_nan() {
            f64::NAN
        } else {
            m.max(v.abs())
        }
    });
    let n = rows * channels;
    // Zero rows: a one-row buffer that the kernel must not read.
    let x_buffer = if rows == 0 {
        vec![0.0; channels]
    } else {
        x.clone()
    };
    let xt = upload(&x_buffer, vec![rows.max(1), channels], DType::BF16, &device);
    let gt = upload(&gamma, vec![channels], DType::BF16, &device);
    let client = xt.client.clone();
    let out = client.create_from_slice(&vec![0x7Fu8; n.max(1)]);
    let amax = client.create_from_slice(&f32::NAN.to_le_bytes());
    let problem = RowsProblem::dense(rows, channels);
    let knobs = knobs.unwrap_or_else(|| select_knobs(&client, problem, 2, 2, 256));
    launch_forward_to(
        &client,
        RowOperands {
            x: xt.handle.clone(),
            gamma: gt.handle.clone(),
            x_type: elem(DType::BF16),
            gamma_type: elem(DType::BF16),
        },
        OutputTarget::fp8(out, scale, Some(amax.clone())),
        problem,
        norm,
        Activation::Silu,
        &knobs,
    )
    .unwrap();
    let bytes = client.read_one_unchecked(amax).to_vec();
    let got = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as f64;
    let what = format!("T={rows} C={channels} {knobs}");
    if want_amax.is_nan() {
        assert!(got.is_nan(), "{what}: amax {got}, want NaN");
    } else {
        assert!(
            (got - want_amax).abs() <= 1e-5 * want_amax.max(1e-30),
            "{what}: amax {got} vs {want_amax}"
        );
    }
}

/// The API's amax option: the QFloat tensor and `max |y|` from the same kernel, also on an
/// Autodiff device (quantised outputs are not tracked).
#[test]
fn fp8_api_amax() {
    use burn_rmsnorm_silu::{RmsNormSiluOptions, rms_norm_silu_fp8, rms_norm_silu_fp8_amax};
    let mut rng = rng("fp8 api amax");
    for device in [device(), device().autodiff()] {
        let (rows, channels, scale) = (23, 96, 4.0f32);
        let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::BF16);
        let want = reference(&x, &gamma, NormParams::rms(eps), Activation::Silu);
        let want_amax = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let xt = tensor(&x, [rows, channels], DType::BF16, &device);
        let gt = tensor(&gamma, [channels], DType::BF16, &device);
        let (q, amax) =
            rms_norm_silu_fp8_amax(xt.clone(), gt.clone(), RmsNormSiluOptions::rms(eps), scale);
        let amax = values(amax);
        assert_eq!(amax.len(), 1);
        assert!(
            (amax[0] - want_amax).abs() <= 1e-5 * want_amax,
            "{device:?}: amax {} vs {want_amax}",
            amax[0]
        );
        // The codes are those of the plain FP8 call.
        let plain = values(rms_norm_silu_fp8(xt, gt, eps, scale).dequantize());
        assert_eq!(values(q.dequantize()), plain, "{device:?}");
    }
}
