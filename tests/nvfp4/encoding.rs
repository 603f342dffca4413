use super::*;

#[test]
fn nvfp4_bytes_match_the_host_quantiser() {
    let mut rng = rng("nvfp4");
    for (rows, channels, dtype) in [
        (37, 96, DType::BF16),
        (5, 1024, DType::BF16),
        (3, 16, DType::F32),
        (1, 4096, DType::F16),
        (130, 48, DType::BF16),
    ] {
        let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, dtype);
        let norm = NormParams::rms(eps);
        let y = reference(&x, &gamma, norm, Activation::Silu);
        let amax = y.iter().fold(0f64, |m, v| m.max(v.abs())) as f32;
        for (recipe, s_enc, host_recipe) in [
            (
                Fp4Recipe::TransformerEngine,
                te_global_scale(amax),
                Nvfp4Recipe::Te {
                    s_enc: te_global_scale(amax),
                },
            ),
            (
                Fp4Recipe::TransformerEngine,
                3.0,
                Nvfp4Recipe::Te { s_enc: 3.0 },
            ),
            (Fp4Recipe::Cudnn, 1.0, Nvfp4Recipe::Cudnn),
        ] {
            let what = format!("T={rows} C={channels} {dtype:?} {recipe:?} s_enc={s_enc}");
            let (codes, scales) = launch(
                Fp4Case::new(&x, &gamma, [rows, channels], dtype),
                norm,
                recipe,
                ScaleLayout::RowMajor,
                s_enc,
            );
            let host = host_blocks(&y, host_recipe);
            // Byte-exact: none of the 3,573 scales and 57,168 codes of these cases differed on
            // the CPU runtime or on an H100 (2026-12-07), the PTX approximations included.
            let (s, n) = compare_blocks(&codes, &scales, &host, &what);
            assert!(
                s == 0 && n == 0,
                "{what}: {s} of {} scales and {n} of {} codes differ (by one) from the host \
                 quantiser",
                host.len(),
                rows * channels
            );
        }
    }
}

/// The swizzled scale layout holds the row-major scales at the formula's offsets, for T not a
/// multiple of 128 and C / 16 not a multiple of 4, and zeros in every padding byte.
#[test]
fn swizzled_scales_follow_the_formula_with_zero_padding() {
    let mut rng = rng("nvfp4_swizzle");
    for (rows, channels) in [(130, 48), (1, 16), (257, 80), (128, 64)] {
        let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::BF16);
        let norm = NormParams::rms(eps);
        let args = |layout| {
            launch(
                Fp4Case::new(&x, &gamma, [rows, channels], DType::BF16),
                norm,
                Fp4Recipe::TransformerEngine,
                layout,
                2.0,
            )
        };
        let (codes_rm, scales_rm) = args(ScaleLayout::RowMajor);
        let (codes_sw, scales_sw) = args(ScaleLayout::Swizzled128x4);
        assert_eq!(codes_rm, codes_sw, "T={rows} C={channels}: codes");
        let blocks = channels / 16;
        let mut valid = vec![false; scales_sw.len()];
        for m in 0..rows {
            for k in 0..blocks {
                let at = swizzled_scale_offset(m, k, channels);
                assert_eq!(scales_sw[at], scales_rm[m * blocks + k], "({m}, {k})");
                valid[at] = true;
            }
        }
        for (i, (&byte, &v)) in scales_sw.iter().zip(&valid).enumerate() {
            assert!(
                v || byte == 0,
                "T={rows} C={channels}: padding byte {i} = {byte:#04x}"
            );
        }
    }
}

/// A NaN in one row makes its block's scale NaN and leaves every other block alone.
#[test]
fn nan_stays_in_its_block() {
    let mut rng = rng("nvfp4_nan");
    let (rows, channels) = (4, 64);
    let (mut x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::F32);
    x[channels + 20] = f64::NAN;
    let norm = NormParams::rms(eps);
    let y = reference(&x, &gamma, norm, Activation::Silu);
    let (codes, scales) = launch(
        Fp4Case::new(&x, &gamma, [rows, channels], DType::F32),
        norm,
        Fp4Recipe::Cudnn,
        ScaleLayout::RowMajor,
        1.0,
    );
    // Row 1 is all NaN (its rms is NaN): its four scales are NaN; the other rows match.
    for (b, &s) in scales.iter().enumerate() {
        assert_eq!(
            e4m3_decode(s).is_nan(),
            b / 4 == 1,
            "block {b}: scale {s:#04x}"
        );
    }
    let host = host_blocks(&y, Nvfp4Recipe::Cudnn);
    compare_blocks(&codes, &scales, &host, "NaN row");
}

/// The kernel's own codecs, exhaustively: every E2M1 value and every midpoint between two
/// neighbours (ties to even), just above and below each, both signs, ±0, saturation, ±inf and
/// NaN; every E4M3 code's value, the midpoints between neighbouring codes, saturation at 448.
/// Both against the host codecs of `kernels::formats`.
#[test]
fn kernel_codecs_match_the_host_at_every_code_and_midpoint() {
    use rmsnorm_silu_kernels::formats::{E2M1_VALUES, e2m1_encode, e4m3_encode};
    use rmsnorm_silu_kernels::nvfp4::{E2M1_UNSATURATED_BELOW, launch_codec_probe};
    let device = cube_device();
    let client = device.client();
    let mut values: Vec<f32> = Vec::new();
    let push_around = |v: f32, values: &mut Vec<f32>| {
        for w in [
            v,
            f32::from_bits(v.to_bits().saturating_add(1)),
            f32::from_bits(v.to_bits().saturating_sub(1)),
        ] {
            values.push(w);
            values.push(-w);
        }
    };
    for (i, &v) in E2M1_VALUES.iter().enumerate() {
        push_around(v, &mut values);
        if let Some(&next) = E2M1_VALUES.get(i + 1) {
            push_around((v + next) / 2.0, &mut values);
        }
    }
    // The unsaturated encoder's bound: just below it rounds to 6.
    push_around(E2M1_UNSATURATED_BELOW, &mut values);
    // E4M3: every finite code's magnitude and the midpoint to the next one.
    let e4m3: Vec<f32> = (0u8..=0x7E).map(e4m3_decode).collect();
    for (i, &v) in e4m3.iter().enumerate() {
        push_around(v, &mut values);
        if let Some(&next) = e4m3.get(i + 1) {
            push_around((v + next) / 2.0, &mut values);
        }
    }
    values.extend([
        7.0,
        100.0,
        449.0,
        464.0,
        1e30,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        1e-40,
        -0.0,
        f32::MAX,
        f32::MIN_POSITIVE,
    ]);
    // Fresh values: the E2M1 range with a random sign (the encoder works on the float's bits,
    // so every exponent and mantissa pattern there matters), and random bit patterns (every
    // exponent, NaN payloads, subnormals).
    let mut rng = rng("codec probe");
    for v in uniform(&mut rng, 4096, -8.0, 8.0) {
        values.push(v as f32);
    }
    for _ in 0..4096 {
        values.push(f32::from_bits(rand::Rng::random::<u32>(&mut rng)));
    }
    let n = values.len();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let vals = client.create_from_slice(&bytes);
    let codes = client.create_from_slice(&vec![0xFFu8; n * 12]);
    let scales = client.create_from_slice(&vec![0xEEu8; n]);
    launch_codec_probe(&client, vals, codes.clone(), scales.clone(), n);
    let codes = client.read_one_unchecked(codes).to_vec();
    let scales = client.read_one_unchecked(scales).to_vec();
    for (i, &v) in values.iter().enumerate() {
        let word = |k: usize| u32::from_le_bytes(codes[4 * k..4 * k + 4].try_into().unwrap());
        assert_eq!(
            word(i),
            e2m1_encode(v) as u32,
            "E2M1 of {v:e} ({:#010x})",
            v.to_bits()
        );
        // The shorter encoder of blocks whose values round to at most 6: every |v| below 7.
        if v.abs() < E2M1_UNSATURATED_BELOW {
            assert_eq!(
                word(n + i),
                e2m1_encode(v) as u32,
                "unsaturated E2M1 of {v:e} ({:#010x})",
                v.to_bits()
            );
        }
        // The kernel's packed word of values i..i + 8 (the pair encoder on sm_90 with the PTX
        // math): every nibble whose value is below 7 in magnitude.
        for j in 0..8 {
            let u = values[(i + j) % n];
            if u.abs() < E2M1_UNSATURATED_BELOW {
                assert_eq!(
                    (word(2 * n + i) >> (4 * j)) & 15,
                    e2m1_encode(u) as u32,
                    "packed E2M1 of {u:e} ({:#010x}), nibble {j}",
                    u.to_bits()
                );
            }
        }
        let want = e4m3_encode(v);
        let got = scales[i];
        if v.is_nan() {
            assert!(e4m3_decode(got).is_nan(), "E4M3 of NaN: {got:#04x}");
        } else {
            assert_eq!(got, want, "E4M3 of {v:e} ({:#010x})", v.to_bits());
        }
    }
}
