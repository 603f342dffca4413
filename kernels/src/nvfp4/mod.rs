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
use crate::lanes::{RowStep, horizontal_sum, lane_sums, rows_seen, unit_lane, unit_row};
use crate::params::{Activation, NormParams, Output};
use crate::problem::{KernelError, RowOperands, RowsProblem};
use crate::rescue::{prescale, small_eps};
use crate::row_io::{widen, words_to_f32};
use crate::validate::{cube_dim, lane_layout_error};

mod block;
mod encode;
mod launch;
mod load;
mod selection;

use block::{clamp_e4m3, write_block};
pub use encode::{
    E2M1_UNSATURATED_BELOW, e2m1_code, e2m1_magnitude_bits, e2m1_unsaturated_code,
    has_pair_encoder, packed_word,
};
pub use launch::{
    DeviceAmax, Fp4Target, launch_codec_probe, launch_forward_nvfp4, rms_norm_nvfp4_codec_probe,
};
use load::{
    BlockAt, fill_gamma_shared, load_f32, load_gamma_block, load_lane_gamma, load_lane_raw,
    load_lane_row, write_streamed_row,
};
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

/// TransformerEngine's global encode scale `448 * 6 / amax` for a usable tensor amax (finite,
/// > 0), else 1: the device form of [`crate::formats::te_global_scale`] (the same f32 quotient).
#[cube]
pub fn te_global_scale(amax: f32) -> f32 {
    let usable = amax > 0.0f32 && !amax.is_inf();
    select(usable, 2688.0f32 / amax, 1.0f32)
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
    device_amax: ComptimeOption<&[f32]>,
    decode_scale: ComptimeOption<&mut [f32]>,
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
    // TransformerEngine's recipe with the tensor amax on the device: `s_enc` from it here (as
    // the host's `te_global_scale`), and the first unit writes the quantised tensor's decode
    // scale `1 / s_enc` (the launch never takes the moderate-scale fast path then).
    let from_amax: ComptimeOption<f32> = device_amax.map(|a| te_global_scale(a[0]));
    let s_enc = from_amax.unwrap_or_else(|| s_enc);
    let _: ComptimeOption<()> = decode_scale.map(|word| {
        if ABSOLUTE_POS == 0 {
            word[0] = 1.0f32 / s_enc;
        }
    });
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
            RowStep {
                lane,
                y,
                step_first_row,
                rows: rows_here,
                small_eps: small,
            },
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
                RowStep {
                    lane,
                    y,
                    step_first_row,
                    rows: rows_here,
                    small_eps: small,
                },
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

#[cfg(test)]
mod tests;
