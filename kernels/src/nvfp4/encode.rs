//! The E2M1 encoders of the NVFP4 kernel: a value's code by a magic-number rounding in fp32,
//! eight codes packed to a word (the fp32 encoder, or the bf16 pair encoder on sm_90+).

use cubecl::prelude::*;

use crate::device::{device_sm, has_ptx_math};

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

/// Magnitudes below this round to at most 6 (the midpoint between 6 and the next binade's
/// first step, 8): where the packed encoder ([`e2m1_magnitude_bits`](fn@e2m1_magnitude_bits)) needs no saturation.
pub const E2M1_UNSATURATED_BELOW: f32 = 7.0;

/// The E2M1 magnitude code of `v = w / 2` for `|w| < 2 *` [`E2M1_UNSATURATED_BELOW`] (so not
/// NaN, nothing to saturate), in the low nibble of the returned bits (the bits above it are
/// not part of the code): 4 instructions on sm_90 (mask, max, shift-add, fused multiply-add).
///
/// `|w|` is rounded onto the doubled E2M1 grid (spacing 1 below 4, 2 below 8, 4 from 8) by one
/// fp32 addition of a magic number `M` whose ulp `2^(E - 1)` is the grid's spacing at `|w|`,
/// `E = max(exponent(w), 1)`: `M = 2^(22 + E) (1 + m 2^-23)` with `m = 2 (127 + E)` (the
/// exponent field of `2^E` shifted down once: `e + (e >> 22)` on its bits). `M` is a multiple
/// of its ulp, so the sum's single rounding is the grid's round-to-nearest-even (the sum's last
/// mantissa bit is the count's, `m` being even), and its mantissa is `m + k`, `k` the count of
/// grid steps. Since `m = 256 + 2 (E - 1)`, the low nibble is `k + 2 (E - 1)`: the code (0-3
/// for 0..1.5 in steps of 0.5, then two codes per binade). `M` is the power of two `2^E`
/// (with `m` in its mantissa) times `2^22`, so the product is exact and one fused multiply-add
/// rounds as the plain addition.
///
/// The doubling keeps `E >= 1` for every `|w|` below 2 (one binade up from the grid's 1), where
/// the shifted exponent field `2 (127 + E)` is a multiple of 16 plus `2 (E - 1)`; the caller
/// folds it into the block's encode scale (a power of two: the products are exactly twice the
/// undoubled ones).
#[cube]
pub fn e2m1_magnitude_bits(w: f32, #[comptime] ptx: bool) -> u32 {
    let e = u32::max(u32::reinterpret(w) & 0x7f80_0000u32, 0x4000_0000u32);
    #[allow(unused_assignments)]
    let mut m = 0u32;
    if comptime![ptx] {
        // One instruction (ptxas makes the `mad.hi` a `LEA.HI`; left alone, the compiler sees
        // that the two terms share no bits and spends a shift and an OR).
        m = ptx_add_shifted_22(e);
    } else {
        m = e + (e >> 22u32);
    }
    u32::reinterpret(f32::abs(w) + f32::reinterpret(m) * 4_194_304.0f32)
}

/// `e + (e >> 22)` as one PTX `mad.hi.u32` (`e * 2^10`'s high word is `e >> 22`; CUDA only).
#[cube]
fn ptx_add_shifted_22(e: u32) -> u32 {
    let out: u32;
    gpu_asm!(
        "mad.hi.u32 {o}, {e}, 1024, {e};",
        o = out(_) out,
        e = in(_) e,
        options(pure, nomem)
    );
    out
}

/// `(acc >> 4) | (bits << 28)`: `bits`' low nibble shifted in from the top (CUDA: one PTX
/// funnel shift, which the compiler otherwise splits).
#[cube]
fn shift_in_from_top(acc: u32, bits: u32, #[comptime] ptx: bool) -> u32 {
    #[allow(unused_assignments)]
    let mut out = 0u32;
    if comptime![ptx] {
        // (Through an operation: cubecl hands a mutable variable to inline PTX as its address.)
        #[allow(clippy::identity_op)]
        let current = acc | 0u32;
        out = ptx_funnel_right_4(current, bits);
    } else {
        out = (acc >> 4u32) | (bits << 28u32);
    }
    out
}

/// `(acc << 4) | (bits >> 28)`: `bits`' top nibble shifted in from the bottom (CUDA: one PTX
/// funnel shift).
#[cube]
fn shift_in_from_bottom(acc: u32, bits: u32, #[comptime] ptx: bool) -> u32 {
    #[allow(unused_assignments)]
    let mut out = 0u32;
    if comptime![ptx] {
        #[allow(clippy::identity_op)]
        let current = acc | 0u32;
        out = ptx_funnel_left_4(bits, current);
    } else {
        out = (acc << 4u32) | (bits >> 28u32);
    }
    out
}

/// The low word of `{hi:lo} >> 4` (PTX `shf.r.wrap.b32`; CUDA only).
#[cube]
fn ptx_funnel_right_4(lo: u32, hi: u32) -> u32 {
    let out: u32;
    gpu_asm!(
        "shf.r.wrap.b32 {o}, {lo}, {hi}, 4;",
        o = out(_) out,
        lo = in(_) lo,
        hi = in(_) hi,
        options(pure, nomem)
    );
    out
}

/// The high word of `{hi:lo} << 4` (PTX `shf.l.wrap.b32`; CUDA only).
#[cube]
fn ptx_funnel_left_4(lo: u32, hi: u32) -> u32 {
    let out: u32;
    gpu_asm!(
        "shf.l.wrap.b32 {o}, {lo}, {hi}, 4;",
        o = out(_) out,
        lo = in(_) lo,
        hi = in(_) hi,
        options(pure, nomem)
    );
    out
}

/// [`e2m1_code`](fn@e2m1_code) of `v` with `|v| <` [`E2M1_UNSATURATED_BELOW`] by the packed encoder's steps
/// ([`e2m1_magnitude_bits`](fn@e2m1_magnitude_bits) of `2 v`, the sign from `v`'s bits), one value at a time (for the
/// codec probe; the kernel assembles whole words, see `pack_codes`).
#[cube]
pub fn e2m1_unsaturated_code(v: f32) -> u32 {
    let magnitude = e2m1_magnitude_bits(v * 2.0f32, false) & 7u32;
    magnitude | ((u32::reinterpret(v) >> 28u32) & 8u32)
}

/// Eight codes in one word (value `j` in nibble `j`) from the doubled values
/// `w[first..first + 8]` (each below 14 in magnitude): the magnitude nibbles shifted in from
/// the top in order (`(word >> 4) | (bits << 28)`), the sign nibbles (`bits >> 28`, the sign
/// in bit 3) shifted in from the bottom in reverse order, each one funnel shift per value on
/// CUDA; the signs merged once per word.
#[cube]
fn pack_codes(w: &Array<f32>, #[comptime] first: usize, #[comptime] ptx: bool) -> u32 {
    let mut magnitudes = 0u32;
    let mut signs = 0u32;
    #[unroll]
    for j in 0..8 {
        let bits = e2m1_magnitude_bits(w[first + j], ptx);
        magnitudes = shift_in_from_top(magnitudes, bits, ptx);
    }
    #[unroll]
    for j in 0..8 {
        let bits = u32::reinterpret(w[first + 7 - j]);
        signs = shift_in_from_bottom(signs, bits, ptx);
    }
    magnitudes | (signs & 0x8888_8888u32)
}

/// Eight codes in one word (value `j` in nibble `j`) from the doubled values
/// `w[first..first + 8]` (each below 14 in magnitude), two values per instruction: the
/// magic-number rounding of [`e2m1_magnitude_bits`] done on bf16 pairs (PTX, sm_90+: 40
/// instructions per 8 values against the fp32 path's 49, each path with 8 scale multiplies
/// before it). Each pair's bf16 values are the
/// high halves of its floats (truncation) with the sticky bit of the dropped halves in the
/// last place: round to odd at 8 bits, which the 2-bit E2M1 grid then rounds exactly as the
/// float itself (no double rounding: a rounded-to-odd value is a midpoint of the coarser grid
/// only if the float was). With `E = max(exponent, 1)`, `e + (e >> 6)` on the bf16 exponent
/// field is the magic number `2^(E + 2) (1 + (2E - 2) / 128)`; times 16 its last place is the
/// grid's spacing `2^(E - 1)`, so one bf16x2 fused multiply-add leaves the code `2E - 2 + k` in
/// each half's low nibble. The signs come from the bf16 halves by a sign-replicating byte
/// permute.
///
/// In the PTX, pairs `(w0, w2)`, `(w4, w6)`, `(w1, w3)`, `(w5, w7)`: the even values' codes then
/// sit in bytes 0, 2 of two words and a byte permute gathers them in order, likewise the odd
/// ones, shifted into the high nibbles.
#[cube]
fn pack_codes_pairs(w: &Array<f32>, #[comptime] first: usize) -> u32 {
    let w0 = w[first];
    let w1 = w[first + 1];
    let w2 = w[first + 2];
    let w3 = w[first + 3];
    let w4 = w[first + 4];
    let w5 = w[first + 5];
    let w6 = w[first + 6];
    let w7 = w[first + 7];
    let out: u32;
    gpu_asm!(
        "{{ .reg .b32 h<4>, l<4>, v<4>, e<4>, c<4>, one, floor, sixteen, p, q, se, so;
        mov.b32 one, 0x00010001;
        mov.b32 floor, 0x40004000;
        mov.b32 sixteen, 0x41804180;
        prmt.b32 h0, {w0}, {w2}, 0x7632;
        prmt.b32 l0, {w0}, {w2}, 0x5410;
        prmt.b32 h1, {w4}, {w6}, 0x7632;
        prmt.b32 l1, {w4}, {w6}, 0x5410;
        prmt.b32 h2, {w1}, {w3}, 0x7632;
        prmt.b32 l2, {w1}, {w3}, 0x5410;
        prmt.b32 h3, {w5}, {w7}, 0x7632;
        prmt.b32 l3, {w5}, {w7}, 0x5410;
        min.u16x2 l0, l0, one;
        min.u16x2 l1, l1, one;
        min.u16x2 l2, l2, one;
        min.u16x2 l3, l3, one;
        and.b32 v0, h0, 0x7fff7fff;
        and.b32 v1, h1, 0x7fff7fff;
        and.b32 v2, h2, 0x7fff7fff;
        and.b32 v3, h3, 0x7fff7fff;
        or.b32 v0, v0, l0;
        or.b32 v1, v1, l1;
        or.b32 v2, v2, l2;
        or.b32 v3, v3, l3;
        and.b32 e0, v0, 0x7f807f80;
        and.b32 e1, v1, 0x7f807f80;
        and.b32 e2, v2, 0x7f807f80;
        and.b32 e3, v3, 0x7f807f80;
        max.u16x2 e0, e0, floor;
        max.u16x2 e1, e1, floor;
        max.u16x2 e2, e2, floor;
        max.u16x2 e3, e3, floor;
        mad.hi.u32 e0, e0, 0x4000000, e0;
        mad.hi.u32 e1, e1, 0x4000000, e1;
        mad.hi.u32 e2, e2, 0x4000000, e2;
        mad.hi.u32 e3, e3, 0x4000000, e3;
        fma.rn.bf16x2 c0, e0, sixteen, v0;
        fma.rn.bf16x2 c1, e1, sixteen, v1;
        fma.rn.bf16x2 c2, e2, sixteen, v2;
        fma.rn.bf16x2 c3, e3, sixteen, v3;
        prmt.b32 se, h0, h1, 0xfdb9;
        prmt.b32 so, h2, h3, 0xfdb9;
        prmt.b32 p, c0, c1, 0x6420;
        prmt.b32 q, c2, c3, 0x6420;
        and.b32 se, se, 0x08080808;
        and.b32 so, so, 0x08080808;
        or.b32 p, p, se;
        or.b32 q, q, so;
        shl.b32 q, q, 4;
        and.b32 p, p, 0x0f0f0f0f;
        and.b32 q, q, 0xf0f0f0f0;
        or.b32 {o}, p, q; }}",
        o = out(_) out,
        w0 = in(_) w0,
        w1 = in(_) w1,
        w2 = in(_) w2,
        w3 = in(_) w3,
        w4 = in(_) w4,
        w5 = in(_) w5,
        w6 = in(_) w6,
        w7 = in(_) w7,
        options(pure, nomem)
    );
    out
}

/// The packed word of the doubled values `w[first..first + 8]` (each below 14 in magnitude)
/// by the pair encoder (`pairs`, PTX sm_90+, see [`has_pair_encoder`]) or the fp32 one (its
/// PTX funnel shifts where `ptx`).
#[cube]
pub fn packed_word(
    w: &Array<f32>,
    #[comptime] first: usize,
    #[comptime] pairs: bool,
    #[comptime] ptx: bool,
) -> u32 {
    #[allow(unused_assignments)]
    let mut word = 0u32;
    if comptime![pairs] {
        word = pack_codes_pairs(w, first);
    } else {
        word = pack_codes(w, first, ptx);
    }
    word
}

/// Whether the device runs the pair encoder ([`packed_word`](fn@packed_word)'s `pairs`): the PTX math on
/// sm_90+ (its 16-bit integer `min`/`max` need sm_90; ptxas refuses them for sm_80).
pub fn has_pair_encoder(client: &Client) -> bool {
    has_ptx_math(client) && device_sm(client).is_some_and(|sm| sm >= 90)
}

#[cfg(test)]
mod tests {
    use crate::formats::e2m1_encode;

    /// [`super::e2m1_magnitude_bits`]'s arithmetic in plain Rust (`mul_add` is the fused
    /// multiply-add the kernel's `M * 2^22 + |w|` compiles to; the product is exact, so an
    /// unfused one rounds the same).
    fn magnitude_bits(w: f32) -> u32 {
        let e = (w.to_bits() & 0x7f80_0000).max(0x4000_0000);
        let m = e + (e >> 22);
        f32::from_bits(m).mul_add(4_194_304.0, w.abs()).to_bits()
    }

    fn packed_code(v: f32) -> u8 {
        let w = v * 2.0;
        ((magnitude_bits(w) & 7) | ((v.to_bits() >> 28) & 8)) as u8
    }

    /// One half of [`super::pack_codes_pairs`] in plain Rust: the magnitude code (low nibble)
    /// of the doubled value `w`, and the sign bit. The bf16 values are the float's high half
    /// with the sticky bit of the low half; the bf16 fused multiply-add is exact in f64 (`M`
    /// and the value span few bits, or the value is far below `M`'s last place), then rounded
    /// to bf16 through f32 (exact there for the same reason) nearest-even.
    fn pair_code(w: f32) -> u8 {
        let bits = w.to_bits();
        let (high, low) = ((bits >> 16) as u16, bits as u16);
        let v = (high & 0x7fff) | u16::from(low != 0);
        let e = (v & 0x7f80).max(0x4000);
        let m = e + (e >> 6);
        let bf16 = |h: u16| f32::from_bits(u32::from(h) << 16) as f64;
        let sum = (bf16(m) * 16.0 + bf16(v)) as f32;
        let b = sum.to_bits();
        let rounded = ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16;
        assert_eq!(rounded & 0x70, 0, "{w:e}: mantissa bits above the code");
        (rounded & 0xf) as u8 | ((high >> 12) & 8) as u8
    }

    /// The pair encoder's rounding (round to odd at 8 bits, then the E2M1 grid) against the
    /// host codec for every float from 1/8 up to the unsaturated bound 7, every 61st below,
    /// both signs and ±0: the same values as the fp32 encoder's test below.
    #[test]
    fn pair_encoder_rounding_matches_the_host_codec_below_7() {
        matches_the_host_codec_below_7(|v| pair_code(v * 2.0));
    }

    /// The packed encoder's rounding against the host codec for every float from 1/8 up to
    /// the unsaturated bound 7 (where every E2M1 midpoint lies), every 61st below it (all
    /// round to 0 or are exact), both signs, and ±0.
    #[test]
    fn magnitude_rounding_matches_the_host_codec_below_7() {
        matches_the_host_codec_below_7(packed_code);
    }

    /// `code(v)` against the host codec for every float `v` from 1/8 up to the unsaturated
    /// bound 7, every 61st below it, both signs, and ±0.
    fn matches_the_host_codec_below_7(code: impl Fn(f32) -> u8) {
        let top = super::E2M1_UNSATURATED_BELOW.to_bits();
        let eighth = 0.125f32.to_bits();
        let check = |bits: u32| {
            for v in [f32::from_bits(bits), -f32::from_bits(bits)] {
                assert_eq!(code(v), e2m1_encode(v), "{v:e} ({:#010x})", v.to_bits());
            }
        };
        (eighth..top).for_each(check);
        (0..eighth).step_by(61).for_each(check);
        check(0);
    }
}
