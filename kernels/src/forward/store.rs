//! The row kernel's output writers: one vector in the output dtype or FP8, a row from the register cache, a row read again (streamed).

use super::*;

/// Stores `y` (from [`output_value`]) at vector `idx` of the output: cast to the output dtype,
/// or FP8 codes of `y * out_scale` (unless the scale is already folded in), packed into words
/// where the device converts pairs ([`e4m3_words`]).
#[cube]
pub(crate) fn write_vector<O: Float, N: Size, V: Size>(
    y: Vector<f32, N>,
    out: &mut [Vector<O, N>],
    out_words: &mut [Vector<u32, V>],
    idx: usize,
    out_scale: f32,
    #[comptime] cfg: RowConfig,
) {
    let mut z = y;
    if comptime![cfg.output.is_fp8() && !cfg.folds_out_scale()] {
        z = y * Vector::new(out_scale);
    }
    if comptime![cfg.packed_fp8] {
        out_words[idx] = e4m3_words::<N, V>(z);
    } else {
        out[idx] = encode::<O, N>(z, cfg.output, cfg.saturating_cast);
    }
}

/// Writes this lane's share of one row from the register cache:
/// `act((p * x) * scale * gamma)`, with the multiplication by `p` compiled in only for rescued
/// rows (`prescaled`), so ordinary rows pay nothing for it.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn store_cached_row<E: Float, G: Float, O: Float, N: Size, W: Size, V: Size>(
    xs: &Array<Vector<E, N>>,
    xf: &Array<Vector<f32, N>>,
    xw: &Array<Vector<u32, W>>,
    g_regs: &Array<Vector<f32, N>>,
    g_shared: &Shared<[Vector<f32, N>]>,
    gamma: &[Vector<G, N>],
    out: &mut [Vector<O, N>],
    out_words: &mut [Vector<u32, V>],
    lane: usize,
    r: usize,
    active: bool,
    out_base: usize,
    vecs_per_row: usize,
    scale: f32,
    p: f32,
    out_scale: f32,
    silu_k: f32,
    #[comptime] cfg: RowConfig,
    #[comptime] prescaled: bool,
) -> f32 {
    let lanes = comptime![cfg.lanes_per_row as usize];
    let vpl = comptime![cfg.vectors_per_lane];
    let scale = Vector::<f32, N>::new(input_scale(scale, cfg));
    let pv = Vector::<f32, N>::new(p);
    let mut amax = 0.0f32;
    // Gamma from global memory: every load first, none under the row's condition (a vector past
    // the row reads the last one), so they do not wait for each other.
    let from_global = comptime![cfg.gamma == GammaIn::Global];
    let mut g_raw = Array::<Vector<G, N>>::new(comptime![if from_global { vpl } else { 1 }]);
    if comptime![from_global] {
        #[unroll]
        for i in 0..vpl {
            let j = lane + i * lanes;
            g_raw[i] = gamma[load_index(j, vecs_per_row, cfg)];
        }
    }
    #[unroll]
    for i in 0..vpl {
        let j = lane + i * lanes;
        if active && in_row(j, vecs_per_row, cfg) {
            #[allow(unused_assignments)]
            let mut g = Vector::<f32, N>::new(0.0f32);
            match comptime![cfg.gamma] {
                GammaIn::Registers => g = g_regs[i],
                GammaIn::Shared => g = g_shared[j],
                GammaIn::Global => g = widen::<G, N, W>(g_raw[i], cfg.bf16_gamma),
            }
            let mut v = cached::<E, N, W>(xs, xf, xw, r * vpl + i, cfg);
            if comptime![prescaled] {
                v *= pv;
            }
            let y = output_value::<N>(v * scale * g, silu_k, cfg);
            amax = nan_max(amax, vector_amax::<N>(y, cfg.output));
            write_vector::<O, N, V>(y, out, out_words, out_base + j, out_scale, cfg);
        }
    }
    amax
}

/// Writes this lane's share of one row, re-reading `x` from global memory (the streaming
/// variant); `prescaled` as in [`store_cached_row`].
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn store_streamed_row<E: Float, G: Float, O: Float, N: Size, V: Size>(
    x: &[Vector<E, N>],
    gamma: &[Vector<G, N>],
    out: &mut [Vector<O, N>],
    out_words: &mut [Vector<u32, V>],
    lane: usize,
    base: usize,
    out_base: usize,
    vecs_per_row: usize,
    scale: f32,
    p: f32,
    out_scale: f32,
    silu_k: f32,
    #[comptime] cfg: RowConfig,
    #[comptime] prescaled: bool,
) -> f32 {
    let lanes = comptime![cfg.lanes_per_row as usize];
    let scale = Vector::<f32, N>::new(input_scale(scale, cfg));
    let pv = Vector::<f32, N>::new(p);
    let mut amax = 0.0f32;
    let mut j = lane;
    while j < vecs_per_row {
        let mut v = Vector::<f32, N>::cast_from(x[base + j]);
        if comptime![prescaled] {
            v *= pv;
        }
        let g = Vector::<f32, N>::cast_from(gamma[j]);
        let y = output_value::<N>(v * scale * g, silu_k, cfg);
        amax = nan_max(amax, vector_amax::<N>(y, cfg.output));
        write_vector::<O, N, V>(y, out, out_words, out_base + j, out_scale, cfg);
        j += lanes;
    }
    amax
}
