//! How a unit gets its vectors of a row: loads issued together with clamped indices, the
//! prefetch's staging through shared memory as 32-bit words and their conversion to f32 (bf16
//! by integer shifts), gamma into registers, and the sums of squares of what was loaded.

use cubecl::prelude::*;

use crate::knobs::RowConfig;
use crate::lanes::horizontal_sum;

/// Vector `j` of a row as an index to load: `j` where the lanes cover the row exactly
/// ([`RowConfig::fills_lanes`]), else clamped to the row's last vector (the readers skip it).
#[cube]
pub(crate) fn load_index(j: usize, vecs_per_row: usize, #[comptime] cfg: RowConfig) -> usize {
    let mut k = j;
    if comptime![!cfg.fills_lanes] {
        k = select(j < vecs_per_row, j, vecs_per_row - 1);
    }
    k
}

/// Whether vector `j` lies in the row: always where the lanes cover the row exactly.
#[cube]
pub(crate) fn in_row(j: usize, vecs_per_row: usize, #[comptime] cfg: RowConfig) -> bool {
    let mut inside = true;
    if comptime![!cfg.fills_lanes] {
        inside = j < vecs_per_row;
    }
    inside
}

/// Gamma's vectors of this lane into registers as f32 (`GammaIn::Registers`).
#[cube]
pub(crate) fn load_gamma_registers<G: Float, N: Size, W: Size>(
    gamma: &[Vector<G, N>],
    g_regs: &mut Array<Vector<f32, N>>,
    lane: usize,
    vecs_per_row: usize,
    #[comptime] cfg: RowConfig,
) {
    let lanes = comptime![cfg.lanes_per_row as usize];
    #[unroll]
    for i in 0..comptime![cfg.vectors_per_lane] {
        let j = lane + i * lanes;
        if comptime![cfg.prefetch] {
            // (A persistent prefetching cube loads gamma once; the unconditional form below
            // made ptxas spill in the FP8 C = 96 kernel, 5-8% slower. Prefetching configs never
            // have `fills_lanes`, so this test is always the run-time one.)
            g_regs[i] = Vector::<f32, N>::new(0.0f32);
            if j < vecs_per_row {
                g_regs[i] = widen::<G, N, W>(gamma[j], cfg.bf16_gamma);
            }
        } else {
            // Unconditional loads (a vector past the row reads the last one, never used), all
            // in flight together: under `if j < vecs_per_row` each waited for the one before,
            // ahead of the first row's loads (a cube of a full grid has one row group: C = 1024
            // with one row per plane and gamma in registers, 151 -> 109 us at T = 99840).
            g_regs[i] = widen::<G, N, W>(gamma[load_index(j, vecs_per_row, cfg)], cfg.bf16_gamma);
        }
    }
}

/// A loaded vector as f32: through its 32-bit words when `bf16` (one integer instruction per
/// value, where the compiler's cast byte-permutes each high half first; `W` is then half of
/// `N`), else by the plain cast.
#[cube]
pub(crate) fn widen<E: Float, N: Size, W: Size>(
    v: Vector<E, N>,
    #[comptime] bf16: bool,
) -> Vector<f32, N> {
    if comptime![bf16] {
        words_to_f32::<E, N, W>(Vector::<u32, W>::reinterpret(v), true)
    } else {
        Vector::<f32, N>::cast_from(v)
    }
}

/// Writes `count` vectors of words from `regs` into this unit's slots `offset..offset + count`
/// of `staged` (slot `k` of unit `u` at `k * units + u`, so neighbouring units write
/// neighbouring addresses). Only this unit reads them back: no barrier.
#[cube]
pub(crate) fn stage_words<W: Size>(
    regs: &Array<Vector<u32, W>>,
    staged: &mut Shared<[Vector<u32, W>]>,
    #[comptime] offset: usize,
    #[comptime] count: usize,
    #[comptime] units: usize,
) {
    let unit = UNIT_POS as usize;
    #[unroll]
    for k in 0..count {
        staged[(offset + k) * units + unit] = regs[k];
    }
}

/// Rows as a kernel reads them: how many, the distance between two rows and the vectors of a
/// row (both in vectors).
#[derive(CubeType, Clone, Copy)]
pub(crate) struct RowLayout {
    pub rows: usize,
    pub row_stride: usize,
    pub vecs_per_row: usize,
}

/// Loads this unit's share of the rows `first_row + r * rows_per_cube` (`r < rows_per_unit`) into
/// `xs`. The prefetch loads 32-bit words (`x_words`, `x` viewed as words: one vector of `x` per
/// vector of words): the compiler splits vectors of 16-bit floats into 16-bit values and
/// repacks them right after the load, which waits for the load and defeats the prefetch.
/// A slot of a row past the end or of a column past the row loads the last row's or column's
/// vector instead (every reader masks those slots), so the loads need no condition either and
/// are all in flight together.
#[cube]
pub(crate) fn load_rows<T: Scalar, W: Size>(
    x_words: &[Vector<T, W>],
    xs: &mut Array<Vector<T, W>>,
    lane: usize,
    first_row: usize,
    layout: RowLayout,
    #[comptime] cfg: RowConfig,
) {
    let (rows, x_row_stride, vecs_per_row) = (layout.rows, layout.row_stride, layout.vecs_per_row);
    let lanes = comptime![cfg.lanes_per_row as usize];
    let vpl = comptime![cfg.vectors_per_lane];
    #[unroll]
    for r in 0..comptime![cfg.rows_per_unit as usize] {
        let row = first_row + r * comptime![cfg.rows_per_cube as usize];
        let base = select(row < rows, row, rows - 1) * x_row_stride;
        #[unroll]
        for i in 0..vpl {
            let j = load_index(lane + i * lanes, vecs_per_row, cfg);
            xs[r * vpl + i] = x_words[base + j];
        }
    }
}

/// Slot `k` of the register cache in f32 (converted here, or already f32 with `f32_cache`;
/// from the loaded words with `word_cache`).
/// Staged bf16 (prefetch, `W` words per vector) with one vector per lane converts through the
/// words, as [`words_to_f32`]: one integer instruction per value, where the compiler's bf16
/// cast spends a byte permute more on each high half (FP8 C = 64, T = 399360: 6.6% faster on
/// the H200). With more vectors per lane the compiler's cast stays: it keeps the converted
/// values for the output pass instead (more registers, fewer instructions), which measured
/// faster there (FP8 C = 1024, T = 99840: 5% slower through the words); `word_cache` asks
/// for the words anyway (see [`crate::Knobs::word_cache`]).
#[cube]
pub(crate) fn cached<E: Float, N: Size, W: Size>(
    xs: &Array<Vector<E, N>>,
    xf: &Array<Vector<f32, N>>,
    xw: &Array<Vector<u32, W>>,
    k: usize,
    #[comptime] cfg: RowConfig,
) -> Vector<f32, N> {
    if comptime![cfg.f32_cache] {
        xf[k]
    } else if comptime![cfg.word_cache] {
        words_to_f32::<E, N, W>(xw[k], cfg.bf16_input)
    } else {
        widen::<E, N, W>(
            xs[k],
            comptime![cfg.prefetch && cfg.bf16_input && cfg.vectors_per_lane == 1],
        )
    }
}

/// Adds the squares of `f`, one of a lane's `vectors` vectors of a row, to `acc`: the vector
/// of partial sums (`N` independent chains across the vectors), or with one vector per lane
/// its [`sum_squares`] in element 0. [`squares_total`] then gives the lane's sum.
#[cube]
pub(crate) fn add_squares<N: Size>(
    acc: &mut Vector<f32, N>,
    f: Vector<f32, N>,
    #[comptime] vectors: usize,
) {
    if comptime![vectors == 1] {
        acc.insert(0usize, sum_squares::<N>(f));
    } else {
        *acc += f * f;
    }
}

/// The lane's sum of an [`add_squares`] accumulator.
#[cube]
pub(crate) fn squares_total<N: Size>(acc: Vector<f32, N>, #[comptime] vectors: usize) -> f32 {
    if comptime![vectors == 1] {
        acc.extract(0usize)
    } else {
        horizontal_sum::<N>(acc)
    }
}

/// `sum(f^2)` in two chains of fused multiply-adds (even and odd elements) and one add: 9
/// instructions for 8 values where squaring into a vector and adding its elements up takes
/// 15. For a lane that holds one vector of its row; with several, the vector of partial sums
/// (`N` independent chains across the vectors) stays cheaper per value.
#[cube]
pub(crate) fn sum_squares<N: Size>(f: Vector<f32, N>) -> f32 {
    let mut even = 0.0f32;
    let mut odd = 0.0f32;
    #[unroll]
    for k in 0..N::value() {
        let v = f.extract(k);
        // `k` is a constant after unrolling: the branch folds away.
        if k % 2 == 0 {
            even = fma(v, v, even);
        } else {
            odd = fma(v, v, odd);
        }
    }
    even + odd
}

/// A staged vector of words as f32 values: bf16 by integer operations on each word (element
/// `2w` is the low half, `2w + 1` the high half: `w << 16` and `w & 0xffff0000` are their f32
/// bits, one instruction each; the compiler's bf16 members cost a byte permute more for the
/// high halves), other dtypes by the plain cast.
#[cube]
pub(crate) fn staged_to_f32<E: Float, N: Size, W: Size>(
    words: Vector<u32, W>,
    #[comptime] cfg: RowConfig,
) -> Vector<f32, N> {
    words_to_f32::<E, N, W>(words, cfg.bf16_input)
}

/// [`staged_to_f32`] for any kernel: `bf16` says that `E` is bf16 (then integer operations).
#[cube]
pub(crate) fn words_to_f32<E: Float, N: Size, W: Size>(
    words: Vector<u32, W>,
    #[comptime] bf16: bool,
) -> Vector<f32, N> {
    if comptime![bf16] {
        let mut f = Vector::<f32, N>::new(0.0f32);
        #[unroll]
        for w in 0..W::value() {
            let word = words.extract(w);
            f.insert(2 * w, f32::reinterpret(word << 16u32));
            f.insert(2 * w + 1, f32::reinterpret(word & 0xffff_0000u32));
        }
        f
    } else {
        Vector::<f32, N>::cast_from(Vector::<E, N>::reinterpret(words))
    }
}

/// This lane's share of `sum((p * x)^2)` over one row, read from global memory (the streaming
/// variant); 0 for an inactive row.
#[cube]
pub(crate) fn streamed_sum_sq<E: Float, N: Size>(
    x: &[Vector<E, N>],
    lane: usize,
    base: usize,
    vecs_per_row: usize,
    active: bool,
    p: f32,
    #[comptime] cfg: RowConfig,
) -> f32 {
    let lanes = comptime![cfg.lanes_per_row as usize];
    let pv = Vector::<f32, N>::new(p);
    let mut acc = Vector::<f32, N>::new(0.0f32);
    if active {
        let mut j = lane;
        while j < vecs_per_row {
            let v = Vector::<f32, N>::cast_from(x[base + j]) * pv;
            acc += v * v;
            j += lanes;
        }
    }
    horizontal_sum::<N>(acc)
}
