//! The NVFP4 row kernel: the fused norm + SiLU written as E2M1 values in blocks of 16 along C,
//! one E4M3 scale byte per block, in software on every architecture (sm_90 has no E2M1
//! conversion instruction; the CPU runtime has none at all).
//!
//! Mapping: a lane owns whole blocks of 16 (blocks `l, l + lanes, ...` of its row), so a block's
//! amax, scale and codes need no communication; only the row's sum of squares is shared between
//! the lanes of a row (the forward kernel's [`lane_sums`], with its overflow/underflow rescue).
//! Rows whose blocks fit the comptime register budget (`blocks_per_lane`) read `x` once;
//! longer rows are read twice (the second time mostly from L2).
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

use crate::activation::{LOG2_E, has_ptx_math, input_scale, inv_rms, output_value};
use crate::forward::{ForwardError, RowsProblem, cube_dim, lane_layout_error};
use crate::knobs::{GammaIn, LaneReduce, RowConfig};
use crate::lanes::{
    horizontal_sum, lane_sums, reduction_plane_width, rows_seen, unit_lane, unit_row,
};
use crate::params::{Activation, NormParams, Output};
use crate::rescue::{prescale, small_eps};
use crate::row_io::words_to_f32;

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

/// Launch parameters of the NVFP4 kernel.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Fp4Knobs {
    /// Elements per load (divides 16).
    pub vector_size: usize,
    /// Units per row: a power of two, or any count up to a plane (rows then packed side by
    /// side into planes, see [`Fp4Config::packs_rows`]) or, with the shared-memory reduction,
    /// any count up to a plane's width and multiples of it.
    pub lanes_per_row: u32,
    /// Rows per cube.
    pub rows_per_cube: u32,
    /// Rows each unit handles per step (independent rows for the scheduler to interleave; the
    /// per-row work that is not per element, and gamma, shared between them).
    pub rows_per_unit: u32,
    /// Blocks each lane keeps in registers; 0 streams the row (reads it twice).
    pub blocks_per_lane: usize,
    /// How the lanes of a row add their sums of squares.
    pub lane_reduce: LaneReduce,
    /// PTX SiLU (CUDA only), as in [`crate::Knobs::fast_math`].
    pub fast_math: bool,
    /// Cap on the number of cubes (persistent grid); `None`: one cube per row group.
    pub max_cubes: Option<u32>,
    /// Load the next row group's x (this cube's next step of the grid stride) before the current
    /// one is computed, so that the loads wait behind arithmetic instead of in front of it.
    /// Needs the register cache (`blocks_per_lane` covering the row); pays with a persistent
    /// grid (`max_cubes`), where a cube walks several row groups.
    pub prefetch: bool,
}

impl core::fmt::Display for Fp4Knobs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let reduce = match self.lane_reduce {
            LaneReduce::Plane => "plane",
            LaneReduce::Shared => "shared",
        };
        write!(
            f,
            "v{}.l{}.r{}.b{}.{reduce}",
            self.vector_size, self.lanes_per_row, self.rows_per_cube, self.blocks_per_lane
        )?;
        match self.max_cubes {
            Some(m) => write!(f, ".m{m}")?,
            None => write!(f, ".m-")?,
        }
        if self.rows_per_unit != 1 {
            write!(f, ".u{}", self.rows_per_unit)?;
        }
        if self.fast_math {
            write!(f, ".fast")?;
        }
        if self.prefetch {
            write!(f, ".pf")?;
        }
        Ok(())
    }
}

impl Fp4Knobs {
    /// Whether the lanes' register cache holds every block of a row of `channels` elements
    /// (read once); otherwise the kernel streams the row (reads it twice).
    pub fn caches_row(&self, channels: usize) -> bool {
        self.blocks_per_lane > 0
            && self.lanes_per_row as usize * self.blocks_per_lane >= channels.div_ceil(BLOCK)
    }

    /// Whether the kernel keeps gamma in registers for rows of `channels` elements (see
    /// [`Fp4Config::gamma_registers`]).
    pub fn holds_gamma_in_registers(&self, channels: usize) -> bool {
        self.caches_row(channels)
            && self.blocks_per_lane <= GAMMA_REGISTER_BLOCKS
            && self.max_cubes.is_some()
    }

    /// Whether a launch of these knobs whose cubes each have one row group (`one_group_per_cube`)
    /// loads gamma into registers right after x ([`Fp4Config::gamma_after_x`]).
    pub fn loads_gamma_after_x(&self, channels: usize, one_group_per_cube: bool) -> bool {
        one_group_per_cube
            && !self.prefetch
            && self.caches_row(channels)
            && self.blocks_per_lane <= GAMMA_AFTER_X_BLOCKS
    }

    /// Parses the form written by `Display` (`v8.l4.r32.b1.plane.m-.u2.fast.pf`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "NVFP4 knobs `{text}`: expected v<vector>.l<lanes>.r<rows>.b<blocks per lane>.\
                 <plane|shared>.m<max cubes|->[.u<rows per unit>][.fast][.pf]"
            )
        };
        let parts: Vec<&str> = text.trim().split('.').collect();
        let (fields, prefetch) = match parts.as_slice() {
            [fields @ .., "pf"] => (fields, true),
            fields => (fields, false),
        };
        let (fields, fast_math) = match fields {
            [fields @ .., "fast"] => (fields, true),
            fields => (fields, false),
        };
        let (fields, rows_per_unit) = match fields {
            [fields @ .., u] if u.starts_with('u') => {
                (fields, u[1..].parse::<u32>().map_err(|_| bad())?)
            }
            fields => (fields, 1),
        };
        let [v, l, r, b, reduce, m] = fields else {
            return Err(bad());
        };
        let num = |s: &str, prefix: char| -> Result<u64, String> {
            s.strip_prefix(prefix)
                .and_then(|n| n.parse().ok())
                .ok_or_else(bad)
        };
        Ok(Fp4Knobs {
            vector_size: num(v, 'v')? as usize,
            lanes_per_row: num(l, 'l')? as u32,
            rows_per_cube: num(r, 'r')? as u32,
            rows_per_unit,
            blocks_per_lane: num(b, 'b')? as usize,
            lane_reduce: match *reduce {
                "plane" => LaneReduce::Plane,
                "shared" => LaneReduce::Shared,
                _ => return Err(bad()),
            },
            fast_math,
            max_cubes: match *m {
                "m-" => None,
                m => Some(num(m, 'm')? as u32),
            },
            prefetch,
        })
    }
}

/// The measured H200 NVFP4 table: `(C, T, knobs)`.
const SM90_NVFP4: &str = include_str!("../lut/sm90_nvfp4.txt");

/// The parsed sm_90 NVFP4 table (parsed once); panics on a malformed line (compiled in, caught
/// by tests).
pub fn sm90_table() -> &'static [(usize, usize, Fp4Knobs)] {
    static TABLE: std::sync::OnceLock<Vec<(usize, usize, Fp4Knobs)>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        SM90_NVFP4
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                let parsed = (|| {
                    Some((
                        f.first()?.parse().ok()?,
                        f.get(1)?.parse().ok()?,
                        Fp4Knobs::parse(f.get(2)?).ok()?,
                    ))
                })();
                parsed.unwrap_or_else(|| panic!("NVFP4 LUT line `{line}` is malformed"))
            })
            .collect()
    })
}

/// The NVFP4 knobs for `rows x channels` of `elem_size`-byte inputs: on an sm_90 device with
/// 2-byte inputs, the table entry of the same C with the nearest T (log scale); otherwise, or
/// when the entry cannot run here, [`heuristic_fp4_knobs`].
pub fn select_fp4_knobs(
    client: &Client,
    channels: usize,
    rows: usize,
    elem_size: usize,
) -> Fp4Knobs {
    let heuristic = || heuristic_fp4_knobs(client, channels, elem_size);
    let sm = crate::select::device_sm(client);
    if sm != Some(90) || elem_size != 2 {
        return heuristic();
    }
    let distance = |t: usize| ((t.max(1) as f64).ln() - (rows.max(1) as f64).ln()).abs();
    sm90_table()
        .iter()
        .filter(|(c, _, _)| *c == channels)
        .min_by(|a, b| distance(a.1).total_cmp(&distance(b.1)))
        .map(|&(_, _, k)| k)
        .filter(|k| {
            let hw = &client.properties().hardware;
            k.vector_size <= hw.max_vector_size
                && k.lanes_per_row * k.rows_per_cube <= hw.max_units_per_cube
                && (k.lane_reduce == LaneReduce::Shared
                    || k.lanes_per_row == 1
                    || k.lanes_per_row <= hw.plane_size_min)
        })
        .unwrap_or_else(heuristic)
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
    /// [`Fp4Knobs::prefetch`] (only with `blocks_per_lane > 0`).
    pub prefetch: bool,
    /// Gamma held in registers as f32 for every row a lane handles: with the register cache,
    /// up to [`GAMMA_REGISTER_BLOCKS`] blocks per lane, and only on a persistent grid (one
    /// row group per cube gains nothing from it but the registers it costs).
    pub gamma_registers: bool,
    /// `x` is bf16 and read through its 32-bit word view (`w << 16`, `w & 0xffff0000` are the
    /// two values' f32 bits: no byte permutes for the high halves). Set at launch.
    pub x_words: bool,
    /// The same for a bf16 `gamma`.
    pub gamma_words: bool,
    /// [`crate::RowConfig::plane_width`] for the lane sums (set at launch).
    pub plane_width: u32,
    /// Set at launch for one row group per cube (a full grid) with up to
    /// [`GAMMA_AFTER_X_BLOCKS`] cached blocks per lane and no prefetch
    /// ([`Fp4Knobs::loads_gamma_after_x`]): gamma goes into registers (`gamma_registers`), loaded
    /// right after the group's x, in the loop that then runs once. Read per block at its use,
    /// gamma's loads waited for the row's sum (one more memory round trip per cube, after the
    /// shuffles).
    pub gamma_after_x: bool,
}

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
            groups_per_ticket: 0,
            bf16_input: false,
            output: Output::Input,
            saturating_cast: false,
            packed_fp8: false,
            scale_foldable: false,
            plane_width: self.plane_width,
            gamma_after_x: false,
        }
    }
}

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
    codes: &mut [u32],
    scales: &mut [S],
    code_word: usize,
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
    codes[code_word] = lo;
    codes[code_word + 1] = hi;
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
fn clamp_e4m3(v: f32) -> f32 {
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

/// Where a block goes: row `row`, block column `b` of `blocks`; `column_tiles` for the swizzle.
#[derive(CubeType, Clone, Copy)]
struct BlockAt {
    row: usize,
    b: usize,
    blocks: usize,
    column_tiles: usize,
}

/// Block `at.b` of a row from f32 `x` (`xf[x_first..]`) and gamma (`gf[g_first..]`): `y` (with
/// the prescale `p` for rescued rows), quantised, codes and scale stored.
#[allow(clippy::too_many_arguments)]
#[cube]
fn write_block<S: Float, N: Size>(
    xf: &Array<Vector<f32, N>>,
    x_first: usize,
    gf: &Array<Vector<f32, N>>,
    g_first: usize,
    codes: &mut [u32],
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
        (at.row * at.blocks + at.b) * 2,
        scale_offset(at.row, at.b, at.blocks, at.column_tiles, cfg.layout),
        s_enc,
        cfg.recipe,
        cfg.vector_size,
        cfg.fast_math,
    );
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
    codes: &mut [u32],
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
/// two words per block (8 bytes, element `2i` in the low nibble of byte `i`), rows dense;
/// `scales` one `S` (E4M3) per block at [`scale_offset`].
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn rms_norm_nvfp4_rows<E: Float, G: Float, S: Float, N: Size, W: Size>(
    x: &[Vector<E, N>],
    x_words: &[Vector<u32, W>],
    gamma: &[Vector<G, N>],
    gamma_words: &[Vector<u32, W>],
    codes: &mut [u32],
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
    let mut group = CUBE_POS;
    let mut sums = Array::<f32>::new(rpu);
    let mut rescued = Array::<f32>::new(rpu);
    let mut prescales = Array::<f32>::new(rpu);
    let small = small_eps(eps, floor);
    let mut ys = Array::<Vector<f32, N>>::new(per_block);
    // The register cache: the unit's blocks of x as f32 (converted once, for the sum of squares
    // and for y), and gamma's (loaded once per lane, for every row it handles) up to
    // `GAMMA_REGISTER_BLOCKS` blocks; `xt`/`gt` hold one streamed block.
    let gamma_regs = comptime![cfg.gamma_registers];
    let mut xf = Array::<Vector<f32, N>>::new(comptime![(rpu * row_cache).max(1)]);
    let mut g_regs =
        Array::<Vector<f32, N>>::new(comptime![if gamma_regs { row_cache } else { 1 }]);
    let mut xt = Array::<Vector<f32, N>>::new(per_block);
    let mut gt = Array::<Vector<f32, N>>::new(per_block);
    if comptime![gamma_regs && !cfg.gamma_after_x] {
        load_lane_gamma::<G, N, W>(gamma, gamma_words, &mut g_regs, lane, blocks, cfg);
    }
    // Prefetch: the raw x of this step's rows (`xr`) and of the next step's (`xn`), loaded one
    // grid-stride step ahead.
    let raw_len = comptime![if cfg.prefetch { rpu * row_cache } else { 1 }];
    let mut xr = Array::<Vector<E, N>>::new(raw_len);
    let mut xn = Array::<Vector<E, N>>::new(raw_len);
    if comptime![cfg.prefetch] {
        #[unroll]
        for u in 0..rpu {
            let first = group * step_rows + y + u * rows_per_cube;
            load_lane_blocks::<E, N>(
                x,
                first * x_row_stride,
                &mut xr,
                u * row_cache,
                lane,
                blocks,
                first < rows_here,
                cfg,
            );
        }
    }

    while group < groups {
        let step_first_row = group * step_rows;
        if comptime![cfg.prefetch] {
            #[unroll]
            for u in 0..rpu {
                let next = (group + CUBE_COUNT) * step_rows + y + u * rows_per_cube;
                load_lane_blocks::<E, N>(
                    x,
                    next * x_row_stride,
                    &mut xn,
                    u * row_cache,
                    lane,
                    blocks,
                    next < rows_here,
                    cfg,
                );
            }
        }
        if comptime![bpl > 0 && !cfg.prefetch] {
            // The step's cached blocks: every load first, none under a condition (a row past
            // the end or a block past the row reads the last one; pass 1 skips them). Loaded
            // inside the row's `if`, with its squares right after it, each block waited for the
            // one before (one memory latency per block).
            #[unroll]
            for u in 0..rpu {
                let row = step_first_row + y + u * rows_per_cube;
                let base = select(row < rows, row, rows - 1) * x_row_stride;
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
            if comptime![cfg.gamma_after_x] {
                load_lane_gamma::<G, N, W>(gamma, gamma_words, &mut g_regs, lane, blocks, cfg);
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
                            if comptime![cfg.prefetch] {
                                xf[k] = Vector::<f32, N>::cast_from(xr[k]);
                            }
                            let f = xf[k];
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
                                let first = u * row_cache + i * per_block;
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
        if comptime![cfg.prefetch] {
            #[unroll]
            for k in 0..raw_len {
                xr[k] = xn[k];
            }
        }
        if comptime![cfg.gamma_after_x] {
            // One group per cube: the loop ends here, as the compilers can see.
            group = groups;
        } else {
            group += CUBE_COUNT;
        }
    }
}

/// The lane's cached blocks `lane, lane + lanes, ...` of the row at `base` into
/// `xr[first..]` (raw), when `valid`; a lane's blocks past the row's end are left alone.
#[allow(clippy::too_many_arguments)]
#[cube]
fn load_lane_blocks<E: Float, N: Size>(
    x: &[Vector<E, N>],
    base: usize,
    xr: &mut Array<Vector<E, N>>,
    first: usize,
    lane: usize,
    blocks: usize,
    valid: bool,
    #[comptime] cfg: Fp4Config,
) {
    let per_block = comptime![BLOCK / cfg.vector_size];
    let lanes = comptime![cfg.lanes_per_row as usize];
    #[unroll]
    for i in 0..cfg.blocks_per_lane {
        let b = lane + i * lanes;
        if valid && b < blocks {
            #[unroll]
            for h in 0..per_block {
                xr[first + i * per_block + h] = x[base + b * per_block + h];
            }
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

/// The heuristic NVFP4 knobs for rows of `channels` elements of `elem_size` bytes: rows packed
/// into planes where [`packed_lanes`] finds a lane count that fits the row; else ~2 blocks
/// per lane in registers, a plane-sized or smaller row group on devices with plane ops, a
/// shared-memory reduction over up to 256 lanes for wide rows, streaming beyond that; one lane
/// per row on devices without plane ops (the CPU runtime).
pub fn heuristic_fp4_knobs(client: &Client, channels: usize, elem_size: usize) -> Fp4Knobs {
    let props = client.properties();
    let hw = &props.hardware;
    let plane_ops = client
        .features()
        .plane
        .contains(cubecl::ir::features::Plane::Ops);
    let blocks = channels.div_ceil(BLOCK).max(1);
    let vector_size = (16 / elem_size.max(1))
        .clamp(1, BLOCK)
        .min(hw.max_vector_size.max(1));
    let vector_size = if BLOCK.is_multiple_of(vector_size) {
        vector_size
    } else {
        1
    };
    let fast_math = has_ptx_math(client);
    if !plane_ops || hw.plane_size_min <= 1 {
        return Fp4Knobs {
            vector_size,
            lanes_per_row: 1,
            rows_per_cube: 2.min(hw.max_units_per_cube).max(1),
            rows_per_unit: 1,
            blocks_per_lane: if blocks <= 16 { blocks } else { 0 },
            lane_reduce: LaneReduce::Shared,
            fast_math,
            max_cubes: None,
            prefetch: false,
        };
    }
    let plane = hw.plane_size_min.max(1);
    if let Some(lanes) = packed_lanes(blocks, plane) {
        // Rows packed into planes, four planes per cube (the sweep's winners for C = 96, 160,
        // 192 and 320 on the H200).
        return Fp4Knobs {
            vector_size,
            lanes_per_row: lanes,
            rows_per_cube: plane / lanes * 4,
            rows_per_unit: 1,
            blocks_per_lane: blocks / lanes as usize,
            lane_reduce: LaneReduce::Plane,
            fast_math,
            max_cubes: None,
            prefetch: false,
        };
    }
    let lanes = (blocks.div_ceil(2).next_power_of_two() as u32).min(256);
    let lane_reduce = if lanes <= plane {
        LaneReduce::Plane
    } else {
        LaneReduce::Shared
    };
    let bpl = blocks.div_ceil(lanes as usize);
    let units = 256u32.min(hw.max_units_per_cube);
    Fp4Knobs {
        vector_size,
        lanes_per_row: lanes,
        rows_per_cube: (units / lanes).max(1),
        rows_per_unit: 1,
        blocks_per_lane: if bpl <= 8 { bpl } else { 0 },
        lane_reduce,
        fast_math,
        max_cubes: None,
        prefetch: false,
    }
}

/// The lane count of a packed layout ([`Fp4Config::packs_rows`]) for rows of `blocks` blocks on
/// planes of `plane` units, where one exists that fits the row exactly with one or two blocks
/// per lane (the fewest), packs at least two rows per plane and leaves at most 2 units of it
/// idle: 3, 5, 6, 10 lanes on planes of 32 (C = 48, 80, 96, 160, 192, 320, ...). Power-of-two
/// counts are the unpacked layouts' business.
pub fn packed_lanes(blocks: usize, plane: u32) -> Option<u32> {
    [1usize, 2]
        .into_iter()
        .filter(|per_lane| blocks.is_multiple_of(*per_lane))
        .map(|per_lane| (blocks / per_lane) as u32)
        .find(|&lanes| {
            lanes >= 3 && !lanes.is_power_of_two() && 2 * lanes <= plane && plane % lanes <= 2
        })
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
    if knobs.prefetch && !cached {
        return bad(format!(
            "prefetch (`.pf`) loads into the register cache: {lanes} lanes x {} blocks per lane \
             do not hold the {blocks} blocks of a row",
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
    let gamma_after_x = knobs.loads_gamma_after_x(channels, cubes >= groups);
    let cfg = Fp4Config {
        vector_size: v,
        lanes_per_row: lanes,
        rows_per_cube: knobs.rows_per_cube,
        rows_per_unit: knobs.rows_per_unit,
        blocks_per_lane: if cached { knobs.blocks_per_lane } else { 0 },
        lane_reduce,
        activation,
        fast_math: knobs.fast_math && activation == Activation::Silu,
        recipe: target.recipe,
        layout: target.layout,
        prefetch: knobs.prefetch,
        gamma_registers: knobs.holds_gamma_in_registers(channels) || gamma_after_x,
        x_words: words && x_type == bf16,
        gamma_words: words && gamma_type == bf16,
        plane_width: reduction_plane_width(client),
        gamma_after_x,
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
            BufferArg::from_raw_parts(target.codes, rows * blocks * 2),
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
/// codecs themselves, independent of the norm): `codes[i]` = [`e2m1_code`]`(values[i])`,
/// `codes[len + i]` = [`e2m1_biased_code`] (PTX `lop3` on CUDA) less its bias,
/// `scales[i]` = the E4M3 byte of `values[i]` clamped to ±448.
#[cube(launch_unchecked)]
pub fn rms_norm_nvfp4_codec_probe<S: Float>(
    values: &[f32],
    codes: &mut [u32],
    scales: &mut [S],
    len: usize,
    #[comptime] ptx: bool,
    #[define(S)] _scale: ElemType,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        codes[i] = e2m1_code(values[i]);
        codes[len + i] = e2m1_biased_code(values[i], ptx) - E2M1_CODE_BIAS;
        scales[i] = S::cast_from(clamp_e4m3(values[i]));
    }
}

/// Runs [`rms_norm_nvfp4_codec_probe`] on `len` f32 `values`; `codes` gets `2 len` u32 (the
/// exact encoder's, then the unsaturated encoder's, meaningful for `|v| < 7`) and `scales` `len`
/// bytes.
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
            BufferArg::from_raw_parts(codes, 2 * len),
            BufferArg::from_raw_parts(scales, len),
            len,
            has_ptx_math(client),
            ElemType::Float(cubecl::ir::FloatKind::E4M3),
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
