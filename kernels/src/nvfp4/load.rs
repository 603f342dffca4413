//! The NVFP4 kernel's loads of `x` and gamma (into f32 registers, raw words or shared
//! memory) and its streamed-row writer.

use super::*;

/// Where a block goes: row `row`, block column `b` of `blocks`; `column_tiles` for the swizzle.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct BlockAt {
    pub(crate) row: usize,
    pub(crate) b: usize,
    pub(crate) blocks: usize,
    pub(crate) column_tiles: usize,
}

/// This lane's `blocks_per_lane` blocks of the row at vector `base` of `values` as f32 into
/// `dst[first..]` ([`load_f32`]), every load unconditional so that all are in flight together
/// (a block past the row reads the last one; readers skip it). Under a per-block condition
/// each load waited for the one before.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn load_lane_row<T: Float, N: Size, W: Size>(
    values: &[Vector<T, N>],
    words: &[Vector<u32, W>],
    base: usize,
    dst: &mut Array<Vector<f32, N>>,
    #[comptime] first: usize,
    lane: usize,
    blocks: usize,
    #[comptime] cfg: Fp4Config,
    #[comptime] bf16: bool,
) {
    let lanes = comptime![cfg.lanes_per_row as usize];
    let per_block = comptime![BLOCK / cfg.vector_size];
    #[unroll]
    for i in 0..cfg.blocks_per_lane {
        let b = lane + i * lanes;
        let b = select(b < blocks, b, blocks - 1);
        #[unroll]
        for h in 0..per_block {
            dst[first + i * per_block + h] =
                load_f32::<T, N, W>(values, words, base + b * per_block + h, bf16);
        }
    }
}

/// This lane's blocks of gamma into `g_regs` as f32 (gamma held in registers).
#[cube]
pub(crate) fn load_lane_gamma<G: Float, N: Size, W: Size>(
    gamma: &[Vector<G, N>],
    gamma_words: &[Vector<u32, W>],
    g_regs: &mut Array<Vector<f32, N>>,
    lane: usize,
    blocks: usize,
    #[comptime] cfg: Fp4Config,
) {
    load_lane_row::<G, N, W>(
        gamma,
        gamma_words,
        0usize,
        g_regs,
        0usize,
        lane,
        blocks,
        cfg,
        cfg.gamma_words,
    );
}

/// Vector `i` of `values` as f32: through the 32-bit word view `words` when `bf16` (see
/// [`Fp4Config::x_words`]), else by the plain cast.
#[cube]
pub(crate) fn load_f32<T: Float, N: Size, W: Size>(
    values: &[Vector<T, N>],
    words: &[Vector<u32, W>],
    i: usize,
    #[comptime] bf16: bool,
) -> Vector<f32, N> {
    if comptime![bf16] {
        words_to_f32::<T, N, W>(words[i], true)
    } else {
        Vector::<f32, N>::cast_from(values[i])
    }
}

/// The lane's blocks of the row at vector `base` of `x` into `xr[first..]` as loaded (the raw
/// register cache), every load unconditional as in [`load_lane_row`].
#[cube]
pub(crate) fn load_lane_raw<E: Float, N: Size>(
    x: &[Vector<E, N>],
    base: usize,
    xr: &mut Array<Vector<E, N>>,
    #[comptime] first: usize,
    lane: usize,
    blocks: usize,
    #[comptime] cfg: Fp4Config,
) {
    let lanes = comptime![cfg.lanes_per_row as usize];
    let per_block = comptime![BLOCK / cfg.vector_size];
    #[unroll]
    for i in 0..cfg.blocks_per_lane {
        let b = lane + i * lanes;
        let b = select(b < blocks, b, blocks - 1);
        #[unroll]
        for h in 0..per_block {
            xr[first + i * per_block + h] = x[base + b * per_block + h];
        }
    }
}

/// Gamma of block `b` into `gt[0..16 / N]` as f32.
#[cube]
pub(crate) fn load_gamma_block<G: Float, N: Size, W: Size>(
    gamma: &[Vector<G, N>],
    gamma_words: &[Vector<u32, W>],
    b: usize,
    gt: &mut Array<Vector<f32, N>>,
    #[comptime] cfg: Fp4Config,
) {
    let per_block = comptime![BLOCK / cfg.vector_size];
    #[unroll]
    for h in 0..per_block {
        gt[h] = load_f32::<G, N, W>(gamma, gamma_words, b * per_block + h, cfg.gamma_words);
    }
}

/// The lane's blocks `at.b, at.b + lanes, ...` of a row, each read again from `x` (row start
/// `base`) and gamma into `xt` and `gt` (f32, `16 / N` vectors each) and written by
/// [`write_block`].
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn write_streamed_row<E: Float, G: Float, S: Float, N: Size, W: Size>(
    x: &[Vector<E, N>],
    x_words: &[Vector<u32, W>],
    base: usize,
    xt: &mut Array<Vector<f32, N>>,
    gt: &mut Array<Vector<f32, N>>,
    gamma: &[Vector<G, N>],
    gamma_words: &[Vector<u32, W>],
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
    let per_block = comptime![BLOCK / cfg.vector_size];
    let lanes = comptime![cfg.lanes_per_row as usize];
    let mut b = at.b;
    while b < at.blocks {
        #[unroll]
        for h in 0..per_block {
            xt[h] = load_f32::<E, N, W>(x, x_words, base + b * per_block + h, cfg.x_words);
        }
        load_gamma_block::<G, N, W>(gamma, gamma_words, b, gt, cfg);
        let block = BlockAt {
            row: at.row,
            b,
            blocks: at.blocks,
            column_tiles: at.column_tiles,
        };
        write_block::<S, N>(
            &*xt, 0, &*gt, 0, codes, scales, block, scale, p, s_enc, ys, cfg, prescaled,
        );
        b += lanes;
    }
}

/// Gamma's `blocks * 16 / N` vectors widened into `g_shared` by every unit of the cube, then a
/// cube barrier.
#[cube]
pub(crate) fn fill_gamma_shared<G: Float, N: Size, W: Size>(
    gamma: &[Vector<G, N>],
    gamma_words: &[Vector<u32, W>],
    g_shared: &mut Shared<[Vector<f32, N>]>,
    blocks: usize,
    #[comptime] cfg: Fp4Config,
) {
    let vecs = blocks * comptime![BLOCK / cfg.vector_size];
    let units = comptime![cfg.rows().units_per_cube() as usize];
    let mut j = UNIT_POS as usize;
    while j < vecs {
        g_shared[j] = load_f32::<G, N, W>(gamma, gamma_words, j, cfg.gamma_words);
        j += units;
    }
    sync_cube();
}
