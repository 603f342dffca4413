//! Host reference codecs for the quantised outputs (FP8 E4M3, NVFP4 = E2M1 values with E4M3
//! block scales), independent of any kernel: the ground truth the FP8/NVFP4 writers will be
//! tested against. Conventions: `../shared/docs/FORMATS.md`.

/// Largest finite E4M3 magnitude.
pub const E4M3_MAX: f32 = 448.0;
/// The E4M3 NaN code with the sign bit clear (S.1111.111).
pub const E4M3_NAN: u8 = 0x7F;
/// Largest E2M1 magnitude.
pub const E2M1_MAX: f32 = 6.0;
/// E2M1 magnitudes of codes 0..8 (codes 8..16 are their negatives).
pub const E2M1_VALUES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// Decodes an OCP E4M3FN byte (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no
/// infinities; S.1111.111 is NaN).
pub fn e4m3_decode(code: u8) -> f32 {
    let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = ((code >> 3) & 0x0F) as i32;
    let mant = (code & 0x07) as f32;
    if exp == 15 && code & 0x07 == 7 {
        return f32::NAN;
    }
    let magnitude = if exp == 0 {
        mant / 8.0 * 2f32.powi(-6)
    } else {
        (1.0 + mant / 8.0) * 2f32.powi(exp - 7)
    };
    sign * magnitude
}

/// Encodes with round-to-nearest, ties to even, saturating to ±448 (`cvt.rn.satfinite`):
/// infinities saturate, NaN gives the NaN code (sign kept), -0 gives 0x80.
pub fn e4m3_encode(value: f32) -> u8 {
    let sign = if value.is_sign_negative() { 0x80 } else { 0 };
    if value.is_nan() {
        return sign | E4M3_NAN;
    }
    let a = value.abs() as f64;
    // Codes 0..=0x7E are the finite magnitudes in increasing order.
    sign | round_to_codes(a, 0x7E, |c| e4m3_decode(c as u8) as f64) as u8
}

/// Decodes an E2M1 nibble (1 sign, 2 exponent, 1 mantissa bit; no infinities or NaN).
pub fn e2m1_decode(code: u8) -> f32 {
    let magnitude = E2M1_VALUES[(code & 0x07) as usize];
    if code & 0x08 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// Encodes with round-to-nearest, ties to even, saturating to ±6; NaN is not representable
/// and encodes as +6 (the saturated magnitude, like an infinity) — callers should not send it.
pub fn e2m1_encode(value: f32) -> u8 {
    if value.is_nan() {
        return 0x07;
    }
    let sign = if value.is_sign_negative() { 0x08 } else { 0 };
    sign | round_to_codes(value.abs() as f64, 7, |c| E2M1_VALUES[c as usize] as f64) as u8
}

/// The code in `0..=max_code` (magnitudes increasing with the code) nearest to `a >= 0`, ties
/// to the even code, values above the largest magnitude saturating to it.
fn round_to_codes(a: f64, max_code: u32, magnitude: impl Fn(u32) -> f64) -> u32 {
    if a >= magnitude(max_code) {
        return max_code;
    }
    // Largest code whose magnitude is <= a.
    let (mut lo, mut hi) = (0u32, max_code);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if magnitude(mid) <= a {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let below = lo;
    if magnitude(below) == a {
        return below;
    }
    let above = below + 1;
    let (d_below, d_above) = (a - magnitude(below), magnitude(above) - a);
    if d_below < d_above || (d_below == d_above && below % 2 == 0) {
        below
    } else {
        above
    }
}

/// Byte offset of block scale (row `m`, scale column `k`) in the cuBLASLt / CUTLASS 128x4
/// swizzled layout for rows of `channels` elements (16 per scale): rows padded to 128, scale
/// columns to 4.
pub fn swizzled_scale_offset(m: usize, k: usize, channels: usize) -> usize {
    let column_tiles = channels.div_ceil(64);
    (m / 128 * column_tiles + k / 4) * 512 + (m % 32) * 16 + (m % 128) / 32 * 4 + k % 4
}

/// Size in bytes of the swizzled scale buffer for `rows` rows of `channels` elements.
pub fn swizzled_scale_bytes(rows: usize, channels: usize) -> usize {
    rows.div_ceil(128) * 128 * channels.div_ceil(64) * 4
}

/// One NVFP4-quantised row block of 16 values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fp4Block {
    /// E2M1 codes, element `2i` in the low nibble of byte `i`.
    pub packed: [u8; 8],
    /// The E4M3 block scale byte.
    pub scale: u8,
}

/// How NVFP4 block scales are formed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Nvfp4Recipe {
    /// TransformerEngine / vLLM: `s_b = e4m3(amax_b * s_enc / 6)`, values encoded with the
    /// rounded scale `x * s_enc / s_b`; the GEMM gets `1 / s_enc` as its global scale.
    Te { s_enc: f32 },
    /// The cuDNN engine: `sf = max(amax_b / 6, f32::MIN_POSITIVE)` kept in fp32 for the encode,
    /// stored as E4M3; no global scale.
    Cudnn,
}

/// The TransformerEngine global encode scale from a tensor amax: `448 * 6 / amax` (1 when the
/// amax is 0 or not finite).
pub fn te_global_scale(amax: f32) -> f32 {
    if amax > 0.0 && amax.is_finite() {
        E4M3_MAX * E2M1_MAX / amax
    } else {
        1.0
    }
}

/// Quantises 16 values with `recipe`.
pub fn nvfp4_block(values: &[f32; 16], recipe: Nvfp4Recipe) -> Fp4Block {
    // NaN-propagating: a NaN makes the block's scale the E4M3 NaN (its codes are then 0x7).
    let amax = values.iter().fold(0.0f32, |m, v| {
        if m.is_nan() || v.is_nan() {
            f32::NAN
        } else {
            m.max(v.abs())
        }
    });
    let (scale, encode_scale) = match recipe {
        Nvfp4Recipe::Te { s_enc } => {
            let scale = e4m3_encode(amax * s_enc / E2M1_MAX);
            let s = e4m3_decode(scale);
            (scale, if s == 0.0 { 0.0 } else { s_enc / s })
        }
        Nvfp4Recipe::Cudnn => {
            let sf = amax / E2M1_MAX;
            let sf = if sf < f32::MIN_POSITIVE {
                f32::MIN_POSITIVE
            } else {
                sf
            };
            (e4m3_encode(sf), 1.0 / sf)
        }
    };
    let mut packed = [0u8; 8];
    for (i, pair) in values.chunks_exact(2).enumerate() {
        let lo = e2m1_encode(pair[0] * encode_scale);
        let hi = e2m1_encode(pair[1] * encode_scale);
        packed[i] = lo | (hi << 4);
    }
    Fp4Block { packed, scale }
}

/// Dequantises a block: `q * s_b / s_enc` (TE) or `q * s_b` (cuDNN).
pub fn nvfp4_dequantize(block: &Fp4Block, recipe: Nvfp4Recipe) -> [f32; 16] {
    let s = e4m3_decode(block.scale)
        / match recipe {
            Nvfp4Recipe::Te { s_enc } => s_enc,
            Nvfp4Recipe::Cudnn => 1.0,
        };
    let mut out = [0.0; 16];
    for (i, byte) in block.packed.iter().enumerate() {
        out[2 * i] = e2m1_decode(byte & 0x0F) * s;
        out[2 * i + 1] = e2m1_decode(byte >> 4) * s;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_all_256_codes() {
        let mut finite = 0;
        for code in 0..=255u8 {
            let v = e4m3_decode(code);
            if code & 0x7F == E4M3_NAN {
                assert!(v.is_nan(), "code {code:#04x}");
                assert_eq!(e4m3_encode(v) & 0x7F, E4M3_NAN);
                continue;
            }
            finite += 1;
            assert_eq!(e4m3_encode(v), code, "round trip of {code:#04x} = {v}");
        }
        assert_eq!(finite, 254);
        assert_eq!(e4m3_decode(0x7E), 448.0);
        assert_eq!(e4m3_decode(0x01), 2f32.powi(-9));
        assert_eq!(e4m3_decode(0x08), 2f32.powi(-6));
        assert_eq!(e4m3_decode(0x38), 1.0);
    }

    #[test]
    fn e4m3_ties_to_even_and_saturation() {
        // Every midpoint between consecutive positive codes rounds to the even code.
        for code in 0..0x7Eu8 {
            let mid = (e4m3_decode(code) as f64 + e4m3_decode(code + 1) as f64) / 2.0;
            let want = if code % 2 == 0 { code } else { code + 1 };
            assert_eq!(e4m3_encode(mid as f32), want, "midpoint above {code:#04x}");
            assert_eq!(e4m3_encode(-mid as f32), 0x80 | want);
        }
        for v in [448.0f32, 449.0, 464.0, 480.0, 1e6, f32::INFINITY] {
            assert_eq!(e4m3_encode(v), 0x7E, "{v}");
            assert_eq!(e4m3_encode(-v), 0xFE, "-{v}");
        }
        assert_eq!(e4m3_encode(-0.0), 0x80);
        assert_eq!(e4m3_encode(2f32.powi(-11)), 0x00); // below half the smallest subnormal
        assert_eq!(e4m3_encode(2f32.powi(-10)), 0x00); // exactly half: tie to even (0)
        assert_eq!(e4m3_encode(1.5 * 2f32.powi(-10)), 0x01);
    }

    #[test]
    fn e2m1_all_16_codes_and_midpoints() {
        for code in 0..16u8 {
            let v = e2m1_decode(code);
            assert_eq!(e2m1_encode(v), code, "round trip of {code:#x} = {v}");
        }
        for code in 0..7u8 {
            let mid = (E2M1_VALUES[code as usize] + E2M1_VALUES[code as usize + 1]) / 2.0;
            let want = if code % 2 == 0 { code } else { code + 1 };
            assert_eq!(e2m1_encode(mid), want, "midpoint {mid}");
            assert_eq!(e2m1_encode(-mid), 0x08 | want, "midpoint -{mid}");
        }
        assert_eq!(e2m1_encode(7.0), 0x07);
        assert_eq!(e2m1_encode(f32::NEG_INFINITY), 0x0F);
    }

    #[test]
    fn swizzled_offsets_match_the_formula_and_cover_the_buffer() {
        // T not a multiple of 128, C/16 not a multiple of 4: every (m, k) lands on a distinct
        // byte inside the padded buffer.
        let (rows, channels) = (300, 16 * 7);
        let bytes = swizzled_scale_bytes(rows, channels);
        assert_eq!(bytes, 384 * 8);
        let mut seen = vec![false; bytes];
        for m in 0..rows {
            for k in 0..channels / 16 {
                let o = swizzled_scale_offset(m, k, channels);
                assert!(o < bytes && !seen[o], "m {m} k {k} -> {o}");
                seen[o] = true;
            }
        }
        assert_eq!(swizzled_scale_offset(0, 0, channels), 0);
        assert_eq!(swizzled_scale_offset(1, 0, channels), 16);
        assert_eq!(swizzled_scale_offset(32, 0, channels), 4);
        assert_eq!(swizzled_scale_offset(0, 1, channels), 1);
        assert_eq!(swizzled_scale_offset(0, 4, channels), 512);
        assert_eq!(swizzled_scale_offset(128, 0, channels), 1024);
    }

    #[test]
    fn nvfp4_blocks_round_trip_within_one_code() {
        let values: [f32; 16] = core::array::from_fn(|i| (i as f32 - 7.3) * 0.37);
        for recipe in [
            Nvfp4Recipe::Cudnn,
            Nvfp4Recipe::Te {
                s_enc: te_global_scale(2.7),
            },
        ] {
            let block = nvfp4_block(&values, recipe);
            let back = nvfp4_dequantize(&block, recipe);
            let amax = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            for (v, b) in values.iter().zip(back) {
                // One E2M1 step at the top of the range is amax/3 (4 -> 6); allow a step.
                assert!((v - b).abs() <= amax / 3.0 + 1e-6, "{recipe:?}: {v} -> {b}");
            }
        }
        let zeros = nvfp4_block(&[0.0; 16], Nvfp4Recipe::Te { s_enc: 1.0 });
        assert_eq!((zeros.packed, zeros.scale), ([0; 8], 0));
    }
}
