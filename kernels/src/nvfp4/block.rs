//! One NVFP4 block's store: `y` of its 16 values, the amax, the E4M3 scale of either recipe at
//! its offset in the scale layout, and the packed E2M1 codes.

use cubecl::prelude::*;

use super::{BLOCK, BlockAt, CodeWords, Fp4Config, Fp4Recipe, ScaleLayout};
use crate::activation::{LOG2_E, input_scale, output_value, ptx_rcp_approx};

use super::encode::*;

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

/// `a / s` by the fast path of CUDA's IEEE division (the instructions NVRTC emits for `a / s`
/// after its range check): the reciprocal, refined once, the quotient and one correction by
/// its remainder. Correctly rounded where that check passes, which
/// [`super::Fp4Config::moderate_global_scale`] ensures for the TE recipe's quotients; `s = 0`
/// gives NaN (the caller selects 0 there). CUDA only.
#[cube]
fn divide_fast_path(a: f32, s: f32) -> f32 {
    let r0 = ptx_rcp_approx(s);
    let e = fma(-s, r0, 1.0f32);
    let r = fma(r0, e, r0);
    let q0 = a * r;
    let rem = fma(-s, q0, a);
    fma(r, rem, q0)
}

/// Quantises one block held as `16 / N` vectors of fp32 `y` starting at `ys[first]`: writes its
/// two code words and its scale byte (`cfg`: the recipe, vector width, PTX math, global-scale
/// range and encoder).
#[cube]
fn store_block<S: Float, N: Size>(
    ys: &Array<Vector<f32, N>>,
    codes: &mut [CodeWords],
    scales: &mut [S],
    code_index: usize,
    scale_index: usize,
    s_enc: f32,
    #[comptime] cfg: Fp4Config,
) {
    let recipe = comptime![cfg.recipe];
    let vector_size = comptime![cfg.vector_size];
    let ptx = comptime![cfg.fast_math];
    let moderate_global_scale = comptime![cfg.moderate_global_scale];
    let pair_encoder = comptime![cfg.pair_encoder];
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
            let s = f32::cast_from(S::cast_from(clamp_for_cast(stored, ptx)));
            #[allow(unused_assignments)]
            let mut q = 0.0f32;
            if comptime![moderate_global_scale] {
                q = divide_fast_path(s_enc, s);
            } else {
                q = s_enc / s;
            }
            encode = select(s == 0.0f32, 0.0f32, q);
        }
        Fp4Recipe::Cudnn => {
            let sf = div_by_6(amax, ptx);
            // max(amax / 6, FLT_MIN) that keeps a NaN.
            stored = select(sf < f32::MIN_POSITIVE, f32::MIN_POSITIVE, sf);
            encode = 1.0f32 / stored;
        }
    }
    scales[scale_index] = S::cast_from(clamp_for_cast(stored, ptx));
    let mut lo = 0u32;
    let mut hi = 0u32;
    // Every `|y * encode|` is at most `amax * encode` (rounding is monotonic): below 7 the
    // packed encoder, which neither saturates nor sees NaN, is exact. Elsewhere (NaN or
    // infinite blocks, the TE recipe's scales clamped at 448 or rounded to an E4M3 subnormal,
    // an overflowing `s_enc / s`) the exact one. The packed encoder takes the values doubled
    // (see [`e2m1_magnitude_bits`]): `encode` is doubled once per block, and each product is
    // exactly twice the undoubled one (no overflow below 14, and values that small in
    // magnitude that the doubling is inexact encode to zero either way).
    let encode2 = encode * 2.0f32;
    if amax * encode2 < 2.0f32 * E2M1_UNSATURATED_BELOW {
        let mut w = Array::<f32>::new(BLOCK);
        #[unroll]
        for h in 0..per_block {
            #[unroll]
            for k in 0..vector_size {
                w[h * vector_size + k] = ys[h].extract(k) * encode2;
            }
        }
        lo = packed_word(&w, 0usize, pair_encoder, ptx);
        hi = packed_word(&w, 8usize, pair_encoder, ptx);
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

/// `v` ready for the E4M3 cast: as it is on CUDA (`ptx`), whose cast saturates (±448 for
/// out-of-range values and infinities, NaN stays NaN; see `RowConfig::saturating_cast`), else
/// [`clamp_e4m3`]: two instructions per block fewer on CUDA.
#[cube]
fn clamp_for_cast(v: f32, #[comptime] ptx: bool) -> f32 {
    let mut c = v;
    if comptime![!ptx] {
        c = clamp_e4m3(v);
    }
    c
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
        cfg,
    );
}
