//! One NVFP4 block of 16 values: its amax, its E4M3 scale (either recipe), and its E2M1 codes
//! by a magic-number rounding in fp32, packed eight to a word, written with the scale byte.

use cubecl::prelude::*;

use super::{BLOCK, BlockAt, CodeWords, Fp4Config, Fp4Recipe, ScaleLayout};
use crate::activation::{LOG2_E, input_scale, output_value};

/// The E2M1 code (low nibble) of `v`: round to nearest, ties to even, saturate at ±6; the sign
/// bit is `v`'s (so -0 is 0x8); NaN gives 0x7. Computed on the float's bits (about half the
/// instructions of counting the seven midpoints `|v|` has passed):
/// - `|v| >= 1`: E2M1 keeps one mantissa bit, so adding `2^21 - 1` plus the kept bit to the bits
///   rounds the mantissa to one bit, nearest-even (a carry bumps the exponent); the code is then
///   `2 (e - 127) + 2 + m = (bits >> 22) - 252`, saturated at 7;
/// - `|v| < 1`: the code is `rint(2 |v|)` (0, 0.5 or 1), which the fp32 addition of `2^23`
///   rounds to nearest even; its low bits are the integer.
#[cube]
pub fn e2m1_code(v: f32) -> u32 {
    let bits = u32::reinterpret(v);
    let magnitude = bits & 0x7fff_ffffu32;
    let a = f32::reinterpret(magnitude);
    let kept_bit = (magnitude >> 22u32) & 1u32;
    let rounded = (magnitude + 0x001f_ffffu32 + kept_bit) >> 22u32;
    // Wraps for |v| < 1, where `small` is taken instead.
    let large = select(rounded > 259u32, 259u32, rounded) - 252u32;
    let small = u32::reinterpret(a * 2.0f32 + 8_388_608.0f32) - 0x4b00_0000u32;
    let code = select(a < 1.0f32, small, large);
    let sign = (bits >> 28u32) & 8u32;
    select(v.is_nan(), 7u32, sign | code)
}

/// What [`e2m1_biased_code`] adds to the code: `298 = 2 (127 + 22)`, the magic number's
/// exponent field counted in half-binades.
pub const E2M1_CODE_BIAS: u32 = 298;

/// [`E2M1_CODE_BIAS`] in each of the 8 nibbles of a code word (wrapping).
const PACKED_CODE_BIAS: u32 = E2M1_CODE_BIAS.wrapping_mul(0x1111_1111);

/// Magnitudes below this round to at most 6 (the midpoint between 6 and the next binade's
/// first step, 8): where [`e2m1_biased_code`] needs no saturation.
pub const E2M1_UNSATURATED_BELOW: f32 = 7.0;

/// [`e2m1_code`] of a `v` with `|v| <` [`E2M1_UNSATURATED_BELOW`] (so not NaN, nothing to
/// saturate), plus [`E2M1_CODE_BIAS`] (the packing subtracts it once per word): 6 instructions
/// on sm_90 (and one to pack it) where [`e2m1_code`] takes 14.
///
/// `|v|` is rounded onto the E2M1 grid by one fp32 addition of a magic number
/// `M = 2^(22 + e)`, `e = max(exponent(v), 0)`, whose ulp `2^(e - 1)` is the grid's spacing at
/// `|v|` (0.5 below 2, 1 below 4, 2 from 4): the sum's single rounding is the grid's
/// round-to-nearest-even. The sum's mantissa is then the count `k` of grid steps and its
/// exponent field `149 + e`, so `(sum & 7) + (sum >> 22) = k + 2e + 298`, and `k + 2e`
/// is the code (0-3 for 0..1.5 in steps of 0.5, then two codes per binade). `M` is `2^e`
/// (the exponent field of `v`, at least 1's) times `2^22`, one fused multiply-add with `|v|`
/// (`M` is a power of two: the product is exact, so an unfused multiply and add round the
/// same). The sign goes to bit 3 before the addition (`k + 2e < 8`: no carry reaches it).
#[cube]
pub fn e2m1_biased_code(v: f32, #[comptime] ptx: bool) -> u32 {
    let bits = u32::reinterpret(v);
    let e_bits = u32::max(bits & 0x7f80_0000u32, 0x3f80_0000u32);
    let sum = u32::reinterpret(f32::abs(v) + f32::reinterpret(e_bits) * 4_194_304.0f32);
    // `k < 8` and the mantissa's bits above it are 0, so `sum & 7` is `k`; `bits >> 28` is
    // below 16, so its bits from 3 up are the sign.
    let sign = bits >> 28u32;
    #[allow(unused_assignments)]
    let mut low = 0u32;
    if comptime![ptx] {
        // One three-input logic instruction (the compiler, left alone, masks the sign with 8
        // and spends a second one).
        low = ptx_merge_low_3(sum, sign);
    } else {
        low = (sum & 7u32) | (sign & !7u32);
    }
    low + (sum >> 22u32)
}

/// `(a & 7) | (b & !7)` as one PTX `lop3` (CUDA only).
#[cube]
fn ptx_merge_low_3(a: u32, b: u32) -> u32 {
    let out: u32;
    gpu_asm!(
        "lop3.b32 {o}, {a}, {b}, 7, 0xE4;",
        o = out(_) out,
        a = in(_) a,
        b = in(_) b,
        options(pure, nomem)
    );
    out
}

/// `p / 6`, correctly rounded for every `p` above `2^-125` (every f32 checked on the host;
/// below it, where the quotient is subnormal, it may be an ulp off, and every caller maps such
/// a quotient to the same scale byte), ±inf and NaN as the division: the quotient by the
/// reciprocal, then one fused correction by its remainder (NaN only for an infinite `p`,
/// where the plain product is the answer), instead of the compiler's general division (its
/// special-case check, branch and a reciprocal refined at run time). CUDA only (the CPU
/// runtime's `fma` need not be fused); elsewhere `p / 6`.
#[cube]
fn div_by_6(p: f32, #[comptime] fused: bool) -> f32 {
    if comptime![fused] {
        let sixth = f32::new(1.0 / 6.0);
        let q = p * sixth;
        let r = fma(-q, 6.0f32, p);
        let corrected = fma(r, sixth, q);
        select(r.is_nan(), q, corrected)
    } else {
        p / 6.0f32
    }
}

/// Quantises one block held as `16 / N` vectors of fp32 `y` starting at `ys[first]`: writes its
/// two code words and its scale byte.
#[allow(clippy::too_many_arguments)]
#[cube]
fn store_block<S: Float, N: Size>(
    ys: &Array<Vector<f32, N>>,
    codes: &mut [CodeWords],
    scales: &mut [S],
    code_index: usize,
    scale_index: usize,
    s_enc: f32,
    #[comptime] recipe: Fp4Recipe,
    #[comptime] vector_size: usize,
    #[comptime] ptx: bool,
) {
    let per_block = comptime![BLOCK / vector_size];
    // max |y|, NaN-propagating (a NaN makes the block's scale NaN): one PTX `max.NaN` with an
    // |.| operand per element on CUDA; elsewhere on the bits (non-negative floats order as
    // their bit patterns, and a NaN's are above infinity's).
    let mut amax_bits = 0u32;
    if comptime![ptx] {
        let mut m = f32::new(0.0);
        #[unroll]
        for h in 0..per_block {
            #[unroll]
            for k in 0..vector_size {
                // (Through an operation: cubecl hands a mutable variable, or a plain copy of
                // one, to inline PTX as its address; `m` is never negative.)
                let current = f32::abs(m);
                m = ptx_abs_max_nan(current, ys[h].extract(k));
            }
        }
        amax_bits = u32::reinterpret(m);
    } else {
        #[unroll]
        for h in 0..per_block {
            #[unroll]
            for k in 0..vector_size {
                let m = u32::reinterpret(ys[h].extract(k)) & 0x7fff_ffffu32;
                amax_bits = select(m > amax_bits, m, amax_bits);
            }
        }
    }
    let amax = f32::reinterpret(amax_bits);
    #[allow(unused_assignments)]
    let mut stored = 0.0f32;
    #[allow(unused_assignments)]
    let mut encode = 0.0f32;
    match comptime![recipe] {
        Fp4Recipe::TransformerEngine => {
            stored = div_by_6(amax * s_enc, ptx);
            let s = f32::cast_from(S::cast_from(clamp_e4m3(stored)));
            encode = select(s == 0.0f32, 0.0f32, s_enc / s);
        }
        Fp4Recipe::Cudnn => {
            let sf = div_by_6(amax, ptx);
            // max(amax / 6, FLT_MIN) that keeps a NaN.
            stored = select(sf < f32::MIN_POSITIVE, f32::MIN_POSITIVE, sf);
            encode = 1.0f32 / stored;
        }
    }
    scales[scale_index] = S::cast_from(clamp_e4m3(stored));
    let mut lo = 0u32;
    let mut hi = 0u32;
    // Every `|y * encode|` is at most `amax * encode` (rounding is monotonic): below 7 the
    // shorter encoder, which neither saturates nor sees NaN, is exact. Elsewhere (NaN or
    // infinite blocks, the TE recipe's scales clamped at 448 or rounded to an E4M3 subnormal,
    // an overflowing `s_enc / s`) the exact one.
    if amax * encode < E2M1_UNSATURATED_BELOW {
        // Biased codes added into place (wrapping), the 8 biases taken off once per word.
        #[unroll]
        for h in 0..per_block {
            #[unroll]
            for k in 0..vector_size {
                // Element e of the block: constant after unrolling, so the branch folds away.
                let e = u32::cast_from(h * vector_size + k);
                let code = e2m1_biased_code(ys[h].extract(k) * encode, ptx);
                if e < 8u32 {
                    lo += code << (4u32 * e);
                } else {
                    hi += code << (4u32 * (e - 8u32));
                }
            }
        }
        lo -= PACKED_CODE_BIAS;
        hi -= PACKED_CODE_BIAS;
    } else {
        #[unroll]
        for h in 0..per_block {
            #[unroll]
            for k in 0..vector_size {
                let e = u32::cast_from(h * vector_size + k);
                let code = e2m1_code(ys[h].extract(k) * encode);
                if e < 8u32 {
                    lo |= code << (4u32 * e);
                } else {
                    hi |= code << (4u32 * (e - 8u32));
                }
            }
        }
    }
    let mut words = CodeWords::new(0u32);
    words.insert(0usize, lo);
    words.insert(1usize, hi);
    codes[code_index] = words;
}

/// `max(m, |v|)`, NaN if either is NaN (PTX `max.NaN.f32`, sm_80+; CUDA only).
#[cube]
fn ptx_abs_max_nan(m: f32, v: f32) -> f32 {
    let out: f32;
    gpu_asm!(
        "{{ .reg .f32 a; abs.f32 a, {v}; max.NaN.f32 {o}, {m}, a; }}",
        o = out(_) out,
        m = in(_) m,
        v = in(_) v,
        options(pure, nomem)
    );
    out
}

/// Clamps to ±448 before the E4M3 cast (which rounds to nearest even); NaN passes.
#[cube]
pub(super) fn clamp_e4m3(v: f32) -> f32 {
    let v = select(v > 448.0f32, 448.0f32, v);
    select(v < -448.0f32, -448.0f32, v)
}

/// Byte offset of scale (row `m`, block column `k`) in the layout; `column_tiles` is
/// `ceil(C / 64)`.
#[cube]
fn scale_offset(
    m: usize,
    k: usize,
    blocks: usize,
    column_tiles: usize,
    #[comptime] layout: ScaleLayout,
) -> usize {
    match comptime![layout] {
        ScaleLayout::RowMajor => m * blocks + k,
        ScaleLayout::Swizzled128x4 => {
            (m / 128 * column_tiles + k / 4) * 512 + (m % 32) * 16 + (m % 128) / 32 * 4 + k % 4
        }
    }
}

/// `y` of one block into `ys` (as `16 / N` fp32 vectors) from f32 `x` vectors `xf[x_first..]`
/// and f32 gamma vectors `gf[g_first..]`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn block_y<N: Size>(
    xf: &Array<Vector<f32, N>>,
    x_first: usize,
    gf: &Array<Vector<f32, N>>,
    g_first: usize,
    scale: f32,
    p: f32,
    ys: &mut Array<Vector<f32, N>>,
    #[comptime] cfg: Fp4Config,
    #[comptime] prescaled: bool,
) {
    let per_block = comptime![BLOCK / cfg.vector_size];
    // The PTX SiLU in the exponent domain, as the row kernel's (`activation::output_value`).
    let rows = comptime![cfg.rows()];
    let sv = Vector::<f32, N>::new(input_scale(scale, rows));
    let silu_k = f32::new(-LOG2_E);
    #[unroll]
    for h in 0..per_block {
        let mut v = xf[x_first + h];
        if comptime![prescaled] {
            v *= Vector::<f32, N>::new(p);
        }
        ys[h] = output_value::<N>(v * sv * gf[g_first + h], silu_k, rows);
    }
}

/// Block `at.b` of a row from f32 `x` (`xf[x_first..]`) and gamma (`gf[g_first..]`): `y` (with
/// the prescale `p` for rescued rows), quantised, codes and scale stored.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn write_block<S: Float, N: Size>(
    xf: &Array<Vector<f32, N>>,
    x_first: usize,
    gf: &Array<Vector<f32, N>>,
    g_first: usize,
    codes: &mut [CodeWords],
    scales: &mut [S],
    at: BlockAt,
    scale: f32,
    p: f32,
    s_enc: f32,
    ys: &mut Array<Vector<f32, N>>,
    #[comptime] cfg: Fp4Config,
    #[comptime] prescaled: bool,
) {
    block_y::<N>(xf, x_first, gf, g_first, scale, p, ys, cfg, prescaled);
    store_block::<S, N>(
        &*ys,
        codes,
        scales,
        at.row * at.blocks + at.b,
        scale_offset(at.row, at.b, at.blocks, at.column_tiles, cfg.layout),
        s_enc,
        cfg.recipe,
        cfg.vector_size,
        cfg.fast_math,
    );
}
