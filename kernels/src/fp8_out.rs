//! The FP8 E4M3 output of the row kernel: the saturated cast (by the device's conversion where
//! it saturates, else clamped first), four codes per word through PTX
//! `cvt.rn.satfinite.e4m3x2.f32` on sm_89+, and the amax of `y` for delayed scaling.

use cubecl::prelude::*;

use crate::params::Output;

/// `z` in the output dtype; for FP8 (`z` already multiplied by the scale) the saturated code
/// (a NaN passes the clamp and stays NaN). With `saturating_cast` the cast itself saturates and
/// the clamp is left out (see [`e4m3_words`] for the packed form).
#[cube]
pub(crate) fn encode<O: Float, N: Size>(
    z: Vector<f32, N>,
    #[comptime] output: Output,
    #[comptime] saturating_cast: bool,
) -> Vector<O, N> {
    let mut v = z;
    if comptime![output.is_fp8() && !saturating_cast] {
        let hi = Vector::<f32, N>::new(448.0f32);
        let lo = Vector::<f32, N>::new(-448.0f32);
        v = select_many(v.greater_than(&hi), hi, v);
        v = select_many(v.less_than(&lo), lo, v);
    }
    Vector::<O, N>::cast_from(v)
}

/// The saturated E4M3 codes of `v` as `V = N / 4` words, two codes per PTX
/// `cvt.rn.satfinite.e4m3x2.f32` (sm_89+): the same codes as the scalar cast, with half the
/// conversions and the words stored as they are (written through the output's word view, the
/// compiler leaves the bytes in place instead of splitting and repacking them).
#[cube]
pub(crate) fn e4m3_words<N: Size, V: Size>(v: Vector<f32, N>) -> Vector<u32, V> {
    let mut words = Vector::<u32, V>::new(0u32);
    #[unroll]
    for w in 0..V::value() {
        words.insert(
            w,
            ptx_e4m3x4(
                v.extract(4 * w),
                v.extract(4 * w + 1),
                v.extract(4 * w + 2),
                v.extract(4 * w + 3),
            ),
        );
    }
    words
}

/// Four saturated E4M3 codes in one word, byte `k` the code of `xk` (PTX, sm_89+).
#[cube]
pub(crate) fn ptx_e4m3x4(x0: f32, x1: f32, x2: f32, x3: f32) -> u32 {
    let out: u32;
    gpu_asm!(
        "{{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, {b}, {a}; cvt.rn.satfinite.e4m3x2.f32 hi, {d}, {c}; mov.b32 {o}, {{lo, hi}}; }}",
        o = out(_) out,
        a = in(_) x0,
        b = in(_) x1,
        c = in(_) x2,
        d = in(_) x3,
        options(pure, nomem)
    );
    out
}

/// `max |y|` over a vector's lanes when the output records amax; 0 otherwise (compiled out).
#[cube]
pub(crate) fn vector_amax<N: Size>(y: Vector<f32, N>, #[comptime] output: Output) -> f32 {
    let mut m = 0.0f32;
    if comptime![output == Output::Fp8E4M3WithAmax] {
        #[unroll]
        for k in 0..N::value() {
            m = nan_max(m, y.extract(k).abs());
        }
    }
    m
}

/// `max(a, b)` that keeps a NaN from either side (a NaN `y` makes amax NaN).
#[cube]
pub(crate) fn nan_max(a: f32, b: f32) -> f32 {
    select(b > a || b.is_nan(), b, a)
}
