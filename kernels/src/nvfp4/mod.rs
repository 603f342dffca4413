//! The NVFP4 row kernel: the fused norm + SiLU written as E2M1 values in blocks of 16 along C,
//! one E4M3 scale byte per block, in software on every architecture (sm_90 has no E2M1
//! conversion instruction; the CPU runtime has none at all).
//!
//! Mapping: a lane owns whole blocks of 16 (blocks `l, l + lanes, ...` of its row), so a block's
//! amax, scale and codes need no communication; only the row's sum of squares is shared between
//! the lanes of a row (the forward kernel's `lane_sums`, with its overflow/underflow rescue).
//! Rows whose blocks fit the comptime register budget (`blocks_per_lane`) read `x` once, kept in
//! registers as f32 or, with the raw cache ([`Fp4Knobs::raw_cache`]), as loaded; longer rows are
//! read twice (the second time mostly from L2).
//!
//! Codes are rounded to nearest, ties to even, saturating at ±6; the block scale is the E4M3
//! byte of `amax_b * s_enc / 6` (TransformerEngine: values encoded with the *rounded* scale,
//! `q = e2m1(y * (s_enc / s_b))`) or of `max(amax_b / 6, FLT_MIN)` (the cuDNN engine: values
//! encoded with the unrounded fp32 scale). Both follow [`crate::formats::nvfp4_block`] op for op,
//! so the kernel's bytes equal the host quantiser's for the same fp32 `y`.
//!
//! A NaN `y` makes its block's scale the E4M3 NaN and its codes 0x7 (E2M1 has no NaN): the block
//! dequantises to NaN, other blocks and rows are untouched.
//!
//! Knobs ([`select_fp4_knobs`]): the measured H200 table (`lut/sm90_nvfp4.txt`, from the
//! `quant` bench's sweep) by C and nearest T on sm_90, else [`heuristic_fp4_knobs`].

use cubecl::ir::{AddressType, ElemType};
use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::activation::inv_rms;
use crate::device::{has_ptx_math, reduction_plane_width};
use crate::knobs::{GammaIn, LaneReduce, RowConfig};
use crate::lanes::{horizontal_sum, lane_sums, rows_seen, unit_lane, unit_row};
use crate::params::{Activation, NormParams, Output};
use crate::problem::{ForwardError, RowsProblem};
use crate::rescue::{prescale, small_eps};
use crate::row_io::{widen, words_to_f32};
use crate::validate::{cube_dim, lane_layout_error};

mod encode;
mod selection;

pub use encode::{
    E2M1_UNSATURATED_BELOW, e2m1_code, e2m1_magnitude_bits, e2m1_unsaturated_code,
    has_pair_encoder, packed_word,
};
use encode::{clamp_e4m3, write_block};
pub use selection::{Fp4Knobs, heuristic_fp4_knobs, packed_lanes, select_fp4_knobs, sm90_table};

/// Elements per NVFP4 block.
pub const BLOCK: usize = 16;

/// Blocks per lane up to which gamma is held in registers as f32 (16 registers per block), so
/// that a lane walking several rows loads and converts it once; wider caches read it per row.
const GAMMA_REGISTER_BLOCKS: usize = 3;

/// Blocks per lane up to which a full grid's cube loads gamma into registers with x (see
/// [`Fp4Config::gamma_after_x`]): 16 more registers per block. Measured on the H200
/// (2026-12-03, `quant`, same call): one block per lane 2-9% faster on every such table entry
/// (C = 128 T = 24960 9.02 -> 8.35 us), two blocks 1-3% slower (C = 1024 T = 399360 367.1 ->
/// 376.9 us), so one.
const GAMMA_AFTER_X_BLOCKS: usize = 1;

/// How block scales are formed (see the module docs and [`crate::formats::Nvfp4Recipe`]).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Fp4Recipe {
    /// TransformerEngine / vLLM / FlashInfer: a global encode scale `s_enc` (run-time argument).
    TransformerEngine,
    /// The cuDNN engine: no global scale.
    Cudnn,
}

/// Where the block scales go.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ScaleLayout {
    /// `[rows, C/16]`, row-major (Burn's quantised tensors, the cuDNN engine).
    RowMajor,
    /// The cuBLASLt / CUTLASS block-scaled GEMM layout: rows padded to 128, scale columns to 4,
    /// 512-byte tiles (see [`crate::formats::swizzled_scale_offset`]); padding is written as 0.
    Swizzled128x4,
}

/// The comptime configuration of one compiled NVFP4 kernel.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Fp4Config {
    /// Elements per load (`N`), known here so block sizes are comptime.
    pub vector_size: usize,
    pub lanes_per_row: u32,
    pub rows_per_cube: u32,
    pub rows_per_unit: u32,
    pub blocks_per_lane: usize,
    pub lane_reduce: LaneReduce,
    pub activation: Activation,
    pub fast_math: bool,
    pub recipe: Fp4Recipe,
    pub layout: ScaleLayout,
    /// Gamma held in registers as f32 for every row a lane handles: with the register cache,
    /// up to `GAMMA_REGISTER_BLOCKS` blocks per lane, and only on a persistent grid (one
    /// row group per cube gains nothing from it but the registers it costs).
    pub gamma_registers: bool,
    /// `x` is bf16 and read through its 32-bit word view (`w << 16`, `w & 0xffff0000` are the
    /// two values' f32 bits: no byte permutes for the high halves). Set at launch.
    pub x_words: bool,
    /// The same for a bf16 `gamma`.
    pub gamma_words: bool,
    /// `crate::RowConfig::plane_width` for the lane sums (set at launch).
    pub plane_width: u32,
    /// Set at launch for one row group per cube (a full grid) with up to
    /// `GAMMA_AFTER_X_BLOCKS` cached blocks per lane
    /// ([`Fp4Knobs::loads_gamma_after_x`]): gamma goes into registers (`gamma_registers`), loaded
    /// right after the group's x, in the loop that then runs once. Read per block at its use,
    /// gamma's loads waited for the row's sum (one more memory round trip per cube, after the
    /// shuffles).
    pub gamma_after_x: bool,
    /// [`Fp4Knobs::raw_cache`]: the register cache holds x as loaded and each use widens it
    /// (only with `blocks_per_lane > 0`).
    pub raw_cache: bool,
    /// Set at launch for the TE recipe on CUDA when the global scale is within
    /// [`MODERATE_GLOBAL_SCALE`] of 1: every `s_enc / s_b` (`s_b` an E4M3 value, 2^-9 to 448) is
    /// then far from overflow and underflow, where CUDA's IEEE division takes its fast path
    /// (reciprocal, one refinement, quotient, one correction), and the kernel writes that path
    /// without the range check and slow-path call around it (six instructions per block fewer).
    pub moderate_global_scale: bool,
    /// Set at launch with the PTX math on sm_90+: the packed encoder rounds two values per
    /// instruction on bf16 pairs (`encode`'s `pack_codes_pairs`; its 16-bit integer min/max
    /// need sm_90).
    pub pair_encoder: bool,
    /// [`Fp4Knobs::gamma_shared`]: gamma as f32 in shared memory, filled once per cube.
    pub gamma_shared: bool,
    /// With `gamma_shared` on a grid of one row group per cube: the cube fills
    /// gamma's shared copy right after issuing its x loads (inside the loop, which then runs
    /// once), so that gamma's load and conversion wait beside x's instead of before them.
    pub gamma_shared_after_x: bool,
}

/// How far from 1 (as a power of two) the TE recipe's global scale may be for
/// [`Fp4Config::moderate_global_scale`]: quotients by E4M3 scales stay within 2^±73.
pub const MODERATE_GLOBAL_SCALE: f32 = 18_446_744_073_709_551_616.0; // 2^64

impl Fp4Config {
    /// Whether rows are packed side by side into planes: a plane reduction over a lane count
    /// that is not a power of two (the butterfly needs aligned power-of-two groups; packing
    /// keeps every row inside one plane and leaves only `plane % lanes` units of it idle).
    pub fn packs_rows(self) -> bool {
        self.rows().packs_rows()
    }

    /// Rows side by side in one plane when [`Self::packs_rows`].
    pub fn rows_per_plane(self) -> u32 {
        self.rows().rows_per_plane()
    }

    /// The row-kernel configuration whose lane reduction this kernel shares.
    fn rows(self) -> RowConfig {
        RowConfig {
            lanes_per_row: self.lanes_per_row,
            rows_per_cube: self.rows_per_cube,
            rows_per_unit: self.rows_per_unit,
            vectors_per_lane: 0,
            lane_reduce: self.lane_reduce,
            gamma: GammaIn::Global,
            activation: self.activation,
            fast_math: self.fast_math,
            prefetch: false,
            f32_cache: false,
            word_cache: false,
            groups_per_ticket: 0,
            bf16_input: false,
            bf16_gamma: false,
            output: Output::Input,
            saturating_cast: false,
            packed_fp8: false,
            scale_foldable: false,
            plane_width: self.plane_width,
            gamma_after_x: false,
            fills_lanes: false,
        }
    }
}

/// A block's 16 codes as two words stored together (one 8-byte store per block: a plane of
/// lanes writes contiguous bytes, where two 4-byte stores each touched every other word).
pub(crate) type CodeWords = Vector<u32, Const<2>>;

/// Where a block goes: row `row`, block column `b` of `blocks`; `column_tiles` for the swizzle.
#[derive(CubeType, Clone, Copy)]
struct BlockAt {
    row: usize,
    b: usize,
    blocks: usize,
    column_tiles: usize,
}

/// This lane's `blocks_per_lane` blocks of the row at vector `base` of `values` as f32 into
/// `dst[first..]` ([`load_f32`]), every load unconditional so that all are in flight together
/// (a block past the row reads the last one; readers skip it). Under a per-block condition
/// each load waited for the one before.
#[allow(clippy::too_many_arguments)]
#[cube]
fn load_lane_row<T: Float, N: Size, W: Size>(
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
fn load_lane_gamma<G: Float, N: Size, W: Size>(
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
fn load_f32<T: Float, N: Size, W: Size>(
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
#[allow(clippy::too_many_arguments)]
#[cube]
fn load_lane_raw<E: Float, N: Size>(
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
fn load_gamma_block<G: Float, N: Size, W: Size>(
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
fn write_streamed_row<E: Float, G: Float, S: Float, N: Size, W: Size>(
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

/// The NVFP4 kernel. `x` and `gamma` are vectors of `N` elements (`16 % N == 0`); `codes` holds
/// one pair of words per block (8 bytes, element `2i` in the low nibble of byte `i`), rows dense;
/// `scales` one `S` (E4M3) per block at `scale_offset`.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn rms_norm_nvfp4_rows<E: Float, G: Float, S: Float, N: Size, W: Size>(
    x: &[Vector<E, N>],
    x_words: &[Vector<u32, W>],
    gamma: &[Vector<G, N>],
    gamma_words: &[Vector<u32, W>],
    codes: &mut [CodeWords],
    scales: &mut [S],
    rows: usize,
    blocks: usize,
    x_row_stride: usize,
    inv_channels: f32,
    eps: f32,
    floor: f32,
    s_enc: f32,
    column_tiles: usize,
    #[comptime] cfg: Fp4Config,
    #[define(E, G, S)] _types: [ElemType; 3],
) {
    let lanes = comptime![cfg.lanes_per_row as usize];
    let rows_per_cube = comptime![cfg.rows_per_cube as usize];
    let rpu = comptime![cfg.rows_per_unit as usize];
    let bpl = comptime![cfg.blocks_per_lane];
    let per_block = comptime![BLOCK / cfg.vector_size];
    // One row's cache: `bpl` blocks of `per_block` vectors.
    let row_cache = comptime![bpl * per_block];
    let shared_len = comptime![match cfg.lane_reduce {
        LaneReduce::Shared => (cfg.lanes_per_row * cfg.rows_per_cube * cfg.rows_per_unit) as usize,
        LaneReduce::Plane => 1usize,
    }];
    let mut shared = Shared::<[f32]>::new_slice(shared_len);
    // Rows packed into planes (a lane count that is not a power of two): `32 / lanes` rows side
    // by side in each plane of the cube's x axis, the plane's last `32 % lanes` units idle
    // (they take part in the shuffles, and see no rows).
    let lane = unit_lane(cfg.rows());
    let y = unit_row(cfg.rows());
    let rows_here = rows_seen(rows, cfg.rows());
    // A step of the grid stride covers `rows_per_cube * rows_per_unit` rows; unit row `y` has
    // rows `y, y + rows_per_cube, ...` of it.
    let step_rows = comptime![rows_per_cube * rpu];
    #[allow(clippy::manual_div_ceil)]
    let groups = (rows + step_rows - 1) / step_rows;
    // A 1-D grid: the x position alone (see `crate::tickets::walk_start`).
    let mut group = CUBE_POS_X as usize;
    let mut sums = Array::<f32>::new(rpu);
    let mut rescued = Array::<f32>::new(rpu);
    let mut prescales = Array::<f32>::new(rpu);
    let small = small_eps(eps, floor);
    let mut ys = Array::<Vector<f32, N>>::new(per_block);
    // The register cache: the unit's blocks of x as f32 (converted once, for the sum of squares
    // and for y), and gamma's (loaded once per lane, for every row it handles) up to
    // `GAMMA_REGISTER_BLOCKS` blocks; `xt`/`gt` hold one streamed block.
    let gamma_regs = comptime![cfg.gamma_registers];
    let raw = comptime![cfg.raw_cache];
    // (With the raw cache, `xf` holds the one block being written, widened again.)
    let mut xf = Array::<Vector<f32, N>>::new(comptime![if raw {
        per_block
    } else {
        (rpu * row_cache).max(1)
    }]);
    let mut g_regs =
        Array::<Vector<f32, N>>::new(comptime![if gamma_regs { row_cache } else { 1 }]);
    let mut xt = Array::<Vector<f32, N>>::new(per_block);
    let mut gt = Array::<Vector<f32, N>>::new(per_block);
    // Gamma as f32 in shared memory: the row's vectors (every lane's blocks, `lanes * bpl`
    // blocks cover the row), filled by the whole cube.
    let gs = comptime![cfg.gamma_shared];
    let mut g_shared =
        Shared::<[Vector<f32, N>]>::new_slice(comptime![if gs { lanes * row_cache } else { 1 }]);
    if comptime![gs && !cfg.gamma_shared_after_x] {
        fill_gamma_shared::<G, N, W>(gamma, gamma_words, &mut g_shared, blocks, cfg);
    }
    if comptime![gamma_regs && !cfg.gamma_after_x] {
        load_lane_gamma::<G, N, W>(gamma, gamma_words, &mut g_regs, lane, blocks, cfg);
    }
    // The raw x of this step's rows (the raw cache).
    let mut xr = Array::<Vector<E, N>>::new(comptime![if raw { rpu * row_cache } else { 1 }]);

    while group < groups {
        let step_first_row = group * step_rows;
        if comptime![bpl > 0] {
            // The step's cached blocks: every load first, none under a condition (a row past
            // the end or a block past the row reads the last one; pass 1 skips them). Loaded
            // inside the row's `if`, with its squares right after it, each block waited for the
            // one before (one memory latency per block).
            #[unroll]
            for u in 0..rpu {
                let row = step_first_row + y + u * rows_per_cube;
                let base = select(row < rows, row, rows - 1) * x_row_stride;
                if comptime![raw] {
                    load_lane_raw::<E, N>(x, base, &mut xr, u * row_cache, lane, blocks, cfg);
                } else {
                    load_lane_row::<E, N, W>(
                        x,
                        x_words,
                        base,
                        &mut xf,
                        u * row_cache,
                        lane,
                        blocks,
                        cfg,
                        cfg.x_words,
                    );
                }
            }
            if comptime![cfg.gamma_after_x] {
                load_lane_gamma::<G, N, W>(gamma, gamma_words, &mut g_regs, lane, blocks, cfg);
            }
            if comptime![cfg.gamma_shared_after_x] {
                fill_gamma_shared::<G, N, W>(gamma, gamma_words, &mut g_shared, blocks, cfg);
            }
        }
        // Pass 1: this lane's sums of squares (blocks cached in registers when they fit).
        #[unroll]
        for u in 0..rpu {
            let row = step_first_row + y + u * rows_per_cube;
            let active = row < rows_here;
            let base = row * x_row_stride;
            let mut acc = Vector::<f32, N>::new(0.0f32);
            if comptime![bpl > 0] {
                #[unroll]
                for i in 0..bpl {
                    let b = lane + i * lanes;
                    if active && b < blocks {
                        #[unroll]
                        for h in 0..per_block {
                            let k = u * row_cache + i * per_block + h;
                            #[allow(unused_assignments)]
                            let mut f = Vector::<f32, N>::new(0.0f32);
                            if comptime![raw] {
                                f = widen::<E, N, W>(xr[k], cfg.x_words);
                            } else {
                                f = xf[k];
                            }
                            acc += f * f;
                        }
                    }
                }
            } else if active {
                let mut b = lane;
                while b < blocks {
                    #[unroll]
                    for h in 0..per_block {
                        let f =
                            load_f32::<E, N, W>(x, x_words, base + b * per_block + h, cfg.x_words);
                        acc += f * f;
                    }
                    b += lanes;
                }
            }
            sums[u] = horizontal_sum::<N>(acc);
        }
        let rescue = lane_sums(
            &mut sums,
            &mut shared,
            lane,
            y,
            step_first_row,
            rows_here,
            small,
            cfg.rows(),
        );
        #[unroll]
        for u in 0..rpu {
            prescales[u] = 1.0f32;
        }
        if rescue {
            // Rescued rows (rare) re-read x with the exact power-of-two prescale `p`.
            #[unroll]
            for u in 0..rpu {
                let row = step_first_row + y + u * rows_per_cube;
                let active = row < rows_here;
                let base = row * x_row_stride;
                let p = prescale(sums[u], active, small);
                prescales[u] = p;
                let pv = Vector::<f32, N>::new(p);
                let mut acc = Vector::<f32, N>::new(0.0f32);
                if active {
                    let mut b = lane;
                    while b < blocks {
                        #[unroll]
                        for h in 0..per_block {
                            let f = Vector::<f32, N>::cast_from(x[base + b * per_block + h]) * pv;
                            acc += f * f;
                        }
                        b += lanes;
                    }
                }
                rescued[u] = horizontal_sum::<N>(acc);
            }
            lane_sums(
                &mut rescued,
                &mut shared,
                lane,
                y,
                step_first_row,
                rows_here,
                small,
                cfg.rows(),
            );
        }
        // Pass 2: y block by block, quantised and stored.
        #[unroll]
        for u in 0..rpu {
            let row = step_first_row + y + u * rows_per_cube;
            let base = row * x_row_stride;
            let p = prescales[u];
            if row < rows_here {
                if p == 1.0f32 {
                    let scale = inv_rms(sums[u], inv_channels, eps, floor);
                    if comptime![bpl > 0] {
                        #[unroll]
                        for i in 0..bpl {
                            let b = lane + i * lanes;
                            if b < blocks {
                                let at = BlockAt {
                                    row,
                                    b,
                                    blocks,
                                    column_tiles,
                                };
                                let cached_first = comptime![u * row_cache + i * per_block];
                                if comptime![raw] {
                                    // This block widened again, into `xf`, through the words
                                    // as in pass 1 (the plain cast spends a byte permute on
                                    // each odd element).
                                    #[unroll]
                                    for h in 0..per_block {
                                        xf[h] = widen::<E, N, W>(xr[cached_first + h], cfg.x_words);
                                    }
                                }
                                let first = comptime![if raw { 0 } else { cached_first }];
                                if comptime![gamma_regs] {
                                    write_block::<S, N>(
                                        &xf,
                                        first,
                                        &g_regs,
                                        i * per_block,
                                        codes,
                                        scales,
                                        at,
                                        scale,
                                        1.0f32,
                                        s_enc,
                                        &mut ys,
                                        cfg,
                                        false,
                                    );
                                } else if comptime![gs] {
                                    #[unroll]
                                    for h in 0..per_block {
                                        gt[h] = g_shared[b * per_block + h];
                                    }
                                    write_block::<S, N>(
                                        &xf, first, &gt, 0, codes, scales, at, scale, 1.0f32,
                                        s_enc, &mut ys, cfg, false,
                                    );
                                } else {
                                    load_gamma_block::<G, N, W>(
                                        gamma,
                                        gamma_words,
                                        b,
                                        &mut gt,
                                        cfg,
                                    );
                                    write_block::<S, N>(
                                        &xf, first, &gt, 0, codes, scales, at, scale, 1.0f32,
                                        s_enc, &mut ys, cfg, false,
                                    );
                                }
                            }
                        }
                    } else {
                        write_streamed_row::<E, G, S, N, W>(
                            x,
                            x_words,
                            base,
                            &mut xt,
                            &mut gt,
                            gamma,
                            gamma_words,
                            codes,
                            scales,
                            BlockAt {
                                row,
                                b: lane,
                                blocks,
                                column_tiles,
                            },
                            scale,
                            1.0f32,
                            s_enc,
                            &mut ys,
                            cfg,
                            false,
                        );
                    }
                } else {
                    let scale = inv_rms(rescued[u], inv_channels, eps * p * p, floor * p * p);
                    write_streamed_row::<E, G, S, N, W>(
                        x,
                        x_words,
                        base,
                        &mut xt,
                        &mut gt,
                        gamma,
                        gamma_words,
                        codes,
                        scales,
                        BlockAt {
                            row,
                            b: lane,
                            blocks,
                            column_tiles,
                        },
                        scale,
                        p,
                        s_enc,
                        &mut ys,
                        cfg,
                        true,
                    );
                }
            }
        }
        if comptime![cfg.gamma_after_x || cfg.gamma_shared_after_x] {
            // One group per cube: the loop ends here, as the compilers can see.
            group = groups;
        } else {
            group += CUBE_COUNT_X as usize;
        }
    }
}

/// Gamma's `blocks * 16 / N` vectors widened into `g_shared` by every unit of the cube, then a
/// cube barrier.
#[cube]
fn fill_gamma_shared<G: Float, N: Size, W: Size>(
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

/// Writes 0 to every padding byte of a swizzled scale buffer (rows `>= rows` of the last
/// 128-row tile, scale columns `>= blocks`), one unit per byte of the padded buffer.
#[cube(launch_unchecked)]
pub fn rms_norm_nvfp4_scale_padding<S: Float>(
    scales: &mut [S],
    rows: usize,
    blocks: usize,
    padded_len: usize,
    column_tiles: usize,
    #[define(S)] _scale: ElemType,
) {
    let i = ABSOLUTE_POS;
    if i < padded_len {
        // Invert the swizzle: tile, then row and column inside the 512-byte tile.
        let tile = i / 512;
        let within = i % 512;
        let m = (tile / column_tiles) * 128 + (within % 16) / 4 * 32 + within / 16;
        let k = (tile % column_tiles) * 4 + within % 4;
        if m >= rows || k >= blocks {
            scales[i] = S::cast_from(0.0f32);
        }
    }
}

/// Where and how the NVFP4 kernel writes.
#[derive(Clone, Debug)]
pub struct Fp4Target {
    /// `rows * C / 2` bytes of codes.
    pub codes: Handle,
    /// The scale bytes: `rows * C / 16` (row-major) or [`crate::formats::swizzled_scale_bytes`].
    pub scales: Handle,
    pub recipe: Fp4Recipe,
    pub layout: ScaleLayout,
    /// The global encode scale `s_enc` of [`Fp4Recipe::TransformerEngine`] (ignored by cuDNN's).
    pub s_enc: f32,
}

/// Launches the NVFP4 kernel (and, for the swizzled layout, the padding fill). `problem.channels`
/// must be a multiple of 16 and `problem.out_row_stride` equal to it.
#[allow(clippy::too_many_arguments)]
pub fn launch_forward_nvfp4(
    client: &Client,
    x: Handle,
    gamma: Handle,
    target: Fp4Target,
    x_type: ElemType,
    gamma_type: ElemType,
    problem: RowsProblem,
    norm: NormParams,
    activation: Activation,
    knobs: &Fp4Knobs,
) -> Result<(), ForwardError> {
    let bad = |why: String| Err(ForwardError::InvalidKnobs(why));
    let RowsProblem {
        rows,
        channels,
        x_row_stride,
        ..
    } = problem;
    if !channels.is_multiple_of(BLOCK) || problem.out_row_stride != channels {
        return bad(format!(
            "NVFP4 needs C a multiple of 16 and dense output rows (C = {channels}, output row \
             stride {})",
            problem.out_row_stride
        ));
    }
    let codes_offset = target.codes.offset_start.unwrap_or(0);
    if !codes_offset.is_multiple_of(8) {
        return bad(format!(
            "NVFP4 codes must start on an 8-byte boundary (one 8-byte store per block); the \
             codes buffer starts at byte offset {codes_offset}"
        ));
    }
    let blocks = channels / BLOCK;
    let column_tiles = channels.div_ceil(64);
    let scale_type = ElemType::Float(cubecl::ir::FloatKind::E4M3);
    if target.layout == ScaleLayout::Swizzled128x4 {
        let padded = crate::formats::swizzled_scale_bytes(rows, channels);
        if padded > 0 && padded != rows * blocks {
            let threads = 256u32;
            unsafe {
                rms_norm_nvfp4_scale_padding::launch_unchecked(
                    client,
                    CubeCount::new_1d(padded.div_ceil(threads as usize) as u32),
                    CubeDim::new_1d(threads),
                    BufferArg::from_raw_parts(target.scales.clone(), padded),
                    rows,
                    blocks,
                    padded,
                    column_tiles,
                    scale_type,
                );
            }
        }
    }
    if rows == 0 {
        return Ok(());
    }
    let hw = &client.properties().hardware;
    let v = knobs.vector_size;
    if v == 0 || !BLOCK.is_multiple_of(v) || v > hw.max_vector_size {
        return bad(format!(
            "vector_size {v} must divide 16 and fit the device maximum {}",
            hw.max_vector_size
        ));
    }
    if !x_row_stride.is_multiple_of(v) {
        return bad(format!(
            "x row stride {x_row_stride} is not a multiple of vector_size {v}"
        ));
    }
    let lanes = knobs.lanes_per_row;
    if knobs.rows_per_unit == 0 {
        return bad("rows_per_unit must be at least 1".into());
    }
    let lane_reduce = if lanes == 1 {
        LaneReduce::Plane
    } else {
        knobs.lane_reduce
    };
    if knobs.fast_math && !has_ptx_math(client) {
        return bad("fast_math needs a CUDA device".into());
    }
    let cached = knobs.caches_row(channels);
    if knobs.gamma_shared && !cached {
        return bad(format!(
            "gamma in shared memory (`.gs`) needs the register cache: {lanes} lanes x {} blocks \
             per lane do not hold the {blocks} blocks of a row",
            knobs.blocks_per_lane
        ));
    }
    // Shared memory: the lane sums (shared-memory reduction) and gamma's f32 copy (`.gs`).
    let shared_bytes = match lane_reduce {
        LaneReduce::Shared => (lanes * knobs.rows_per_cube * knobs.rows_per_unit) as usize * 4,
        LaneReduce::Plane => 0,
    } + if knobs.gamma_shared {
        lanes as usize * knobs.blocks_per_lane * BLOCK * 4
    } else {
        0
    };
    if shared_bytes > hw.max_shared_memory_size {
        return bad(format!(
            "the knobs need {shared_bytes} bytes of shared memory per cube (gamma in shared \
             memory, `.gs`, takes 64 bytes per block of the register cache), the device has {}",
            hw.max_shared_memory_size
        ));
    }
    if knobs.raw_cache && !cached {
        return bad(format!(
            "the raw register cache (`.raw`) needs the register cache: {lanes} lanes x {} blocks \
             per lane do not hold the {blocks} blocks of a row",
            knobs.blocks_per_lane
        ));
    }
    let bf16 = ElemType::Float(cubecl::ir::FloatKind::BF16);
    // The word views need whole words per vector; offsets of vectors are then word-aligned.
    let words = v.is_multiple_of(2);
    let groups = rows.div_ceil((knobs.rows_per_cube * knobs.rows_per_unit) as usize);
    let cubes = groups
        .min(knobs.max_cubes.map_or(usize::MAX, |m| m as usize))
        .min(hw.max_cube_count.0 as usize);
    let one_group_per_cube = cubes >= groups;
    let fast_math = knobs.fast_math && activation == Activation::Silu;
    let cfg = Fp4Config {
        vector_size: v,
        lanes_per_row: lanes,
        rows_per_cube: knobs.rows_per_cube,
        rows_per_unit: knobs.rows_per_unit,
        blocks_per_lane: if cached { knobs.blocks_per_lane } else { 0 },
        lane_reduce,
        activation,
        fast_math,
        recipe: target.recipe,
        layout: target.layout,
        gamma_registers: knobs.gamma_in_registers(channels, one_group_per_cube),
        x_words: words && x_type == bf16,
        gamma_words: words && gamma_type == bf16,
        plane_width: reduction_plane_width(client),
        gamma_after_x: knobs.loads_gamma_after_x(channels, one_group_per_cube),
        raw_cache: knobs.raw_cache,
        moderate_global_scale: fast_math
            && target.recipe == Fp4Recipe::TransformerEngine
            && target.s_enc <= MODERATE_GLOBAL_SCALE
            && target.s_enc >= 1.0 / MODERATE_GLOBAL_SCALE,
        pair_encoder: fast_math && has_pair_encoder(client),
        gamma_shared: knobs.gamma_shared,
        gamma_shared_after_x: knobs.fills_gamma_shared_after_x(channels, one_group_per_cube),
    };
    // The lane layout's checks and cube shape are the row kernel's.
    if let Some(why) = lane_layout_error(client, &cfg.rows()) {
        return bad(why);
    }
    let cube_dim = cube_dim(&cfg.rows());
    let vecs_per_row = channels / v;
    let x_len = (rows - 1) * x_row_stride / v + vecs_per_row;
    let scales_len = match target.layout {
        ScaleLayout::RowMajor => rows * blocks,
        ScaleLayout::Swizzled128x4 => crate::formats::swizzled_scale_bytes(rows, channels),
    };
    let address_type = AddressType::from_len(x_len * v);
    // The word views (one vector of `v / 2` words per vector of bf16; a 1-element placeholder
    // of the same buffer where unused).
    let words_per_vector = if words { v / 2 } else { 1 };
    let x_words_len = if cfg.x_words { x_len } else { 1 };
    let gamma_words_len = if cfg.gamma_words { vecs_per_row } else { 1 };
    log::debug!(
        "rms_norm_nvfp4_rows: rows={rows} C={channels} {x_type:?}/{gamma_type:?} knobs={knobs} \
         {:?} {:?} cubes={cubes}",
        target.recipe,
        target.layout
    );
    unsafe {
        rms_norm_nvfp4_rows::launch_unchecked(
            client,
            CubeCount::new_1d(cubes as u32),
            cube_dim,
            address_type,
            v,
            words_per_vector,
            BufferArg::from_raw_parts(x.clone(), x_len),
            BufferArg::from_raw_parts(x, x_words_len),
            BufferArg::from_raw_parts(gamma.clone(), vecs_per_row),
            BufferArg::from_raw_parts(gamma, gamma_words_len),
            BufferArg::from_raw_parts(target.codes, rows * blocks),
            BufferArg::from_raw_parts(target.scales, scales_len),
            rows,
            blocks,
            x_row_stride / v,
            (1.0f64 / channels as f64) as f32,
            norm.eps,
            norm.floor,
            target.s_enc,
            column_tiles,
            cfg,
            [x_type, gamma_type, scale_type],
        );
    }
    Ok(())
}

/// The kernel's E2M1 encoder and the E4M3 scale cast applied to `values` (for tests of the
/// codecs themselves, independent of the norm): `codes[i]` = [`e2m1_code`](fn@e2m1_code)`(values[i])`,
/// `codes[len + i]` = [`e2m1_unsaturated_code`](fn@e2m1_unsaturated_code) (the packed encoder's steps),
/// `codes[2 len + i]` = the kernel's packed word of `values[i..i + 8]` (indices modulo `len`;
/// the pair encoder where `pairs`, else the fp32 one), `scales[i]` = the E4M3 byte of
/// `values[i]` clamped to ±448.
#[cube(launch_unchecked)]
pub fn rms_norm_nvfp4_codec_probe<S: Float>(
    values: &[f32],
    codes: &mut [u32],
    scales: &mut [S],
    len: usize,
    #[define(S)] _scale: ElemType,
    #[comptime] pairs: bool,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        codes[i] = e2m1_code(values[i]);
        codes[len + i] = e2m1_unsaturated_code(values[i]);
        scales[i] = S::cast_from(clamp_e4m3(values[i]));
        let mut w = Array::<f32>::new(8usize);
        #[unroll]
        for j in 0..8usize {
            w[j] = values[(i + j) % len] * 2.0f32;
        }
        codes[2 * len + i] = packed_word(&w, 0usize, pairs, false);
    }
}

/// Runs [`rms_norm_nvfp4_codec_probe`](fn@rms_norm_nvfp4_codec_probe) on `len` f32 `values`; `codes` gets `3 len` u32 (the
/// exact encoder's, the unsaturated encoder's and the packed words', meaningful for
/// `|v| < 7`) and `scales` `len` bytes. The packed words come from the encoder the NVFP4
/// kernel uses on this device with the PTX math (the pair encoder on sm_90+).
pub fn launch_codec_probe(
    client: &Client,
    values: Handle,
    codes: Handle,
    scales: Handle,
    len: usize,
) {
    if len == 0 {
        return;
    }
    unsafe {
        rms_norm_nvfp4_codec_probe::launch_unchecked(
            client,
            CubeCount::new_1d(len.div_ceil(64) as u32),
            CubeDim::new_1d(64),
            BufferArg::from_raw_parts(values, len),
            BufferArg::from_raw_parts(codes, 3 * len),
            BufferArg::from_raw_parts(scales, len),
            len,
            ElemType::Float(cubecl::ir::FloatKind::E4M3),
            has_pair_encoder(client),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The heuristic's packed layouts: the measured winners' lane counts, none where no count
    /// fits, and for every block count the invariants the kernel and its launch need.
    #[test]
    fn packed_lanes_fit_the_row_and_the_plane() {
        for (blocks, want) in [
            (3, Some(3)),
            (5, Some(5)),
            (6, Some(6)),
            (10, Some(10)),
            (12, Some(6)),
            (20, Some(10)),
            (1, None),
            (2, None),
            (4, None),
            (7, None),
            (8, None),
            (24, None),
            (40, None),
        ] {
            assert_eq!(packed_lanes(blocks, 32), want, "{blocks} blocks");
        }
        for blocks in 1..=8192 {
            if let Some(lanes) = packed_lanes(blocks, 32) {
                let per_lane = blocks / lanes as usize;
                assert_eq!(per_lane * lanes as usize, blocks, "{blocks} blocks");
                assert!((1..=2).contains(&per_lane), "{blocks} blocks");
                assert!(!lanes.is_power_of_two() && 32 / lanes >= 2 && 32 % lanes <= 2);
            }
        }
        assert_eq!(packed_lanes(6, 1), None, "no plane, no packing");
    }
}
