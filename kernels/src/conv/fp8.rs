//! An implicit-GEMM convolution on FP8 E4M3 operands: the input as E4M3 codes with one decode
//! scale, the weights as E4M3 codes with one decode scale per output channel, f32 accumulation,
//! the output in f32 / f16 / bf16 with the bias added:
//! `y[m, o] = bias[o] + s_x s_w[o] sum_k x[m, k] w[o, k]`.
//!
//! The GEMM view is [`super`]'s (`M` output positions, `N = C_out`, `K = kT kH kW C_in`). A cube
//! computes `BM = 16 warps_m tiles_m` positions by `BN = 8 warps_n tiles_n` channels; each warp
//! `tiles_m x tiles_n` tiles of 16 x 8. The reduction advances 32 codes (one instruction's K)
//! at a time: the cube stages the 32 codes of each of its `BM` input rows (one kernel tap, zeros
//! where the tap falls in the padding) and `BN` weight rows in shared memory, then every warp
//! multiplies its tiles. `C_in` must be a multiple of 32, so a stage never straddles two taps.
//!
//! On CUDA the product is PTX `mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32` (sm_89+),
//! written inline: cubecl 0.11.3's MMA API emits sm_120's `.kind::f8f6f4` form, which ptxas
//! refuses for sm_90. On sm_90 ptxas lowers that instruction to f16 tensor-core instructions
//! (`F2FP.F16.E4M3.UNPACK_B` conversions and `HMMA.16816.F32`, offline SASS): Hopper's FP8 rate
//! is reached only through `wgmma` ([`wgmma_m64n64k32_e4m3`]), so there this kernel saves the
//! operands' bytes, not time. On the CubeCL CPU runtime (planes of one, no tensor cores) the
//! staged tiles are multiplied as scalars, so the staging, the padding and the epilogue run in
//! CI; the
//! fragment layout (PTX ISA, m16n8k32 for 8-bit types) is the one the `fp8_mma` probe checks
//! exactly on an H100.

use super::ConvShape;
use crate::device::device_sm;
use crate::problem::KernelError;
use cubecl::ir::{AddressType, ElemType};
use cubecl::prelude::*;

/// Shared-memory words per staged row: 8 words of codes and 4 of padding, so that the eight
/// rows a fragment load touches fall in distinct banks.
const ROW_WORDS: usize = 12;

/// The launch shape; text form `e4m3.w2x2.t2x4` (warps along positions x channels, tiles of
/// 16 x 8 per warp along the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fp8ConvKnobs {
    pub warps: [u32; 2],
    pub tiles: [u32; 2],
}

impl Default for Fp8ConvKnobs {
    /// Four warps of 2 x 4 tiles: 64 positions by 64 channels a cube (not yet tuned).
    fn default() -> Self {
        Self {
            warps: [2, 2],
            tiles: [2, 4],
        }
    }
}

impl std::fmt::Display for Fp8ConvKnobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ([wm, wn], [tm, tn]) = (self.warps, self.tiles);
        write!(f, "e4m3.w{wm}x{wn}.t{tm}x{tn}")
    }
}

/// What the kernel fixes at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fp8ConvConfig {
    pub kernel: [usize; 3],
    pub c_in: usize,
    pub warps: [usize; 2],
    pub tiles: [usize; 2],
    /// `mma.sync` on tensor cores (32 units a warp), else scalar products over `units` units.
    pub tensor_cores: bool,
    pub units: usize,
}

impl Fp8ConvConfig {
    fn block(&self) -> [usize; 2] {
        [
            16 * self.warps[0] * self.tiles[0],
            8 * self.warps[1] * self.tiles[1],
        ]
    }
}

/// Extents of one launch (the input and output dense, channels-last).
#[derive(CubeLaunch, CubeType)]
pub struct Fp8ConvGeometry {
    /// Output positions (GEMM M) and channels.
    pub rows: usize,
    pub c_out: usize,
    pub in_t: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub pad_t: usize,
    pub pad_h: usize,
    pub pad_w: usize,
    pub out_t: usize,
    pub out_h: usize,
    pub out_w: usize,
}

/// The value of an E4M3 code (the low byte of `code`): sign, 4 exponent bits of bias 7, 3
/// mantissa bits; exponent 0 is subnormal; `S.1111.111` is NaN.
#[cube]
fn e4m3_value(code: u32) -> f32 {
    let e = (code >> 3u32) & 15u32;
    let m = code & 7u32;
    let sign = (code & 128u32) << 24u32;
    let mut v = f32::reinterpret(sign | ((e + 120u32) << 23u32) | (m << 20u32));
    if e == 0u32 {
        v = f32::cast_from(m) * 0.001953125f32; // m 2^-9
        if sign != 0u32 {
            v = -v;
        }
    }
    if e == 15u32 && m == 7u32 {
        v = f32::reinterpret(0x7fc0_0000u32);
    }
    v
}

/// `sum_k a_k b_k` over the four codes of two words.
#[cube]
fn dot4(a: u32, b: u32) -> f32 {
    let mut s = 0.0f32;
    #[unroll]
    for q in 0..4u32 {
        s += e4m3_value((a >> (8 * q)) & 255u32) * e4m3_value((b >> (8 * q)) & 255u32);
    }
    s
}

/// `c + A B` for one 16 x 8 x 32 tile: A's fragment words `a`, B's `b` as the PTX ISA assigns
/// them to this lane.
#[cube]
fn mma_e4m3<N: Size>(
    a0: u32,
    a1: u32,
    a2: u32,
    a3: u32,
    b0: u32,
    b1: u32,
    c: Vector<f32, N>,
) -> Vector<f32, N> {
    let d: Vector<f32, N>;
    gpu_asm!(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {d}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {c};",
        a0 = in(_) a0, a1 = in(_) a1, a2 = in(_) a2, a3 = in(_) a3,
        b0 = in(_) b0, b1 = in(_) b1, c = in(_) c, d = out(_) d,
        options(nomem),
    );
    d
}

/// The address of `words`' first element in the `.shared` window (what a `wgmma` matrix
/// descriptor holds, shifted right by 4). CUDA only.
#[cube]
pub fn shared_address(words: &Shared<[u32]>) -> u32 {
    cubecl_cpp::cuda::ptx::generic_to_shared::<u32>(unsafe { words.as_ptr_unchecked() })
}

/// `mov.f32 %i, %(n + i)` for `n` accumulator registers: cubecl's inline PTX has no in-out
/// operands, so C comes in as inputs and is copied to D's registers first.
fn acc_movs(n: usize) -> String {
    (0..n)
        .map(|i| format!("mov.f32 %{i}, %{};", n + i))
        .collect()
}

/// One warpgroup's (128 units, converged) `D = A B + C` on Hopper's FP8 tensor cores:
/// `wgmma.mma_async` m64n64k32 E4M3, A (64 x 32) and B (64 columns x 32) K-major in shared
/// memory, given as matrix descriptors in 32-bit halves (`al`/`ah`, `bl`/`bh`), 32 f32
/// accumulators a unit, committed and waited for in the same statement. sm_90a; offline it
/// compiles to one `QGMMA.64` (the probe `cuda_source wgmma_probe`); not yet in a kernel.
#[cube]
pub fn wgmma_m64n64k32_e4m3<N: Size>(
    c: Vector<f32, N>,
    al: u32,
    ah: u32,
    bl: u32,
    bh: u32,
) -> Vector<f32, N> {
    let d: Vector<f32, N>;
    gpu_asm!(
        "{{ .reg .b64 da, db; {movs} // {c}
        mov.b64 da, {{{al}, {ah}}}; mov.b64 db, {{{bl}, {bh}}};
        wgmma.fence.sync.aligned;
        wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {d}, da, db, 1, 1, 1;
        wgmma.commit_group.sync.aligned;
        wgmma.wait_group.sync.aligned 0; }}",
        d = out(_) d, c = in(_) c, al = in(_) al, ah = in(_) ah,
        bl = in(_) bl, bh = in(_) bh, movs = const acc_movs(32),
    );
    d
}

/// A probe of [`wgmma_m64n64k32_e4m3`] (the GPU test
/// `fp8_mma::e4m3_wgmma_matches_the_host_product`, `cuda_source wgmma_probe`): one
/// warpgroup's product, A (64 x 32) and B (64 columns x 32) K-major in shared memory without
/// swizzle: core matrices of 8 rows x 16 bytes, each 128 contiguous
/// bytes, the two along K 128 bytes apart (leading byte offset) and successive 8-row groups 256
/// bytes apart (stride byte offset). `a` and `b` arrive in that order; the kernel copies them
/// verbatim. D: unit `u` (warp `w`, lane `l`) holds row `16 w + l / 4 + 8 ((i >> 1) & 1)`,
/// column `8 (i >> 2) + 2 (l % 4) + (i & 1)` in its register `i`.
///
/// `swapped` exchanges the two offsets in the descriptors (128 bytes as the stride byte offset,
/// 256 as the leading one), so that the probe can tell which reading of the PTX ISA's
/// descriptor fields the hardware follows.
#[cube(launch)]
pub fn wgmma_probe(a: &[u32], b: &[u32], out: &mut [f32], #[comptime] swapped: bool) {
    let mut a_s = Shared::<[u32]>::new_aligned_slice(512usize, 1024usize);
    let mut b_s = Shared::<[u32]>::new_aligned_slice(512usize, 1024usize);
    let unit = UNIT_POS as usize;
    #[unroll]
    for i in 0..4usize {
        a_s[unit + i * 128] = a[unit + i * 128];
        b_s[unit + i * 128] = b[unit + i * 128];
    }
    sync_async_proxy_shared();
    sync_cube();
    // Descriptor low words: address >> 4, leading byte offset (128) >> 4 in bits 16..30; high
    // word: stride byte offset (256) >> 4, no swizzle.
    let (lbo, sbo) = comptime![if swapped {
        (16u32, 8u32)
    } else {
        (8u32, 16u32)
    }];
    let a_lo = ((shared_address(&a_s) & 0x3FFFFu32) >> 4u32) | (lbo << 16u32);
    let b_lo = ((shared_address(&b_s) & 0x3FFFFu32) >> 4u32) | (lbo << 16u32);
    let hi = sbo;
    let size!(N32) = comptime![32usize];
    let c = Vector::<f32, N32>::new(0.0f32);
    let d = wgmma_m64n64k32_e4m3::<N32>(c, a_lo, hi, b_lo, hi);
    #[unroll]
    for i in 0..32usize {
        out[unit * 32 + i] = d.extract(i);
    }
}

/// Writes output `(r, o)` (ignored past the output): `sum`, the product already scaled by the
/// input's decode scale, times the channel's weight scale, plus the bias.
#[cube]
fn store_output<O: Float>(
    out: &mut [O],
    sum: f32,
    r: usize,
    o: usize,
    w_scale: &[f32],
    bias: &[O],
    g: &Fp8ConvGeometry,
) {
    if r < g.rows && o < g.c_out {
        out[r * g.c_out + o] = O::cast_from(sum * w_scale[o] + f32::cast_from(bias[o]));
    }
}

#[cube(launch_unchecked, address_type = "dynamic")]
pub fn conv_e4m3<O: Float, V: Size>(
    x: &[Vector<u32, V>],
    weight: &[Vector<u32, V>],
    x_scale: &[f32],
    w_scale: &[f32],
    bias: &[O],
    out: &mut [O],
    g: Fp8ConvGeometry,
    #[comptime] cfg: Fp8ConvConfig,
    #[define(O)] _elem: ElemType,
) {
    let bm = comptime![cfg.block()[0]];
    let bn = comptime![cfg.block()[1]];
    let units = comptime![cfg.units];
    let kh = comptime![cfg.kernel[1]];
    let kw = comptime![cfg.kernel[2]];
    let taps = comptime![cfg.kernel[0] * cfg.kernel[1] * cfg.kernel[2]];
    // 16-byte vectors of codes: per position, per staged row (32 codes), per weight row.
    let per_position = comptime![cfg.c_in / 16];
    let per_weight = comptime![cfg.c_in * cfg.kernel[0] * cfg.kernel[1] * cfg.kernel[2] / 16];
    let a_loads = comptime![(cfg.block()[0] * 2).div_ceil(cfg.units)];
    let b_loads = comptime![(cfg.block()[1] * 2).div_ceil(cfg.units)];
    let mut a_s = Shared::<[u32]>::new_slice(comptime![cfg.block()[0] * ROW_WORDS]);
    let mut b_s = Shared::<[u32]>::new_slice(comptime![cfg.block()[1] * ROW_WORDS]);
    let unit = UNIT_POS as usize;
    let m0 = CUBE_POS_X as usize * bm;
    let n0 = CUBE_POS_Y as usize * bn;

    // The output position of each input row this unit stages: (b * out_t + t, h, w), or past
    // the output.
    let mut row_t = Array::<usize>::new(a_loads);
    let mut row_h = Array::<usize>::new(a_loads);
    let mut row_w = Array::<usize>::new(a_loads);
    let unrolled = comptime![cfg.tensor_cores];
    #[unroll(unrolled)]
    for j in 0..a_loads {
        let r = m0 + (unit + j * units) / 2;
        row_w[j] = r % g.out_w;
        row_h[j] = (r / g.out_w) % g.out_h;
        row_t[j] = r / (g.out_w * g.out_h);
    }

    let tiles = comptime![cfg.tiles[0] * cfg.tiles[1]];
    let size!(N4) = comptime![4usize];
    let acc_len = comptime![if cfg.tensor_cores {
        cfg.tiles[0] * cfg.tiles[1]
    } else {
        (cfg.block()[0] * cfg.block()[1]).div_ceil(cfg.units)
    }];
    let mut acc = Array::<Vector<f32, N4>>::new(acc_len);
    #[unroll(unrolled)]
    for i in 0..acc_len {
        acc[i] = Vector::new(0.0f32);
    }
    let zero = Vector::<u32, V>::new(0u32);
    // On tensor cores: this unit's warp (its place in the cube's warp grid) and its lane's
    // fragment coordinates (group `gr` of four lanes, thread `t` in the group).
    let warp = unit / 32;
    let (gr, t) = ((unit % 32) / 4, unit % 4);
    let wm = warp % comptime![cfg.warps[0]];
    let wn = warp / comptime![cfg.warps[0]];

    for tap in 0..taps {
        let dt = tap / (kh * kw);
        let dh = (tap / kw) % kh;
        let dw = tap % kw;
        for c0 in 0..comptime![cfg.c_in / 32] {
            // Input rows: two 16-byte halves of 32 codes each; zeros in the padding.
            #[unroll(unrolled)]
            for j in 0..a_loads {
                let i = unit + j * units;
                if i < bm * 2 {
                    let half = i % 2;
                    let r = m0 + i / 2;
                    let t = row_t[j] % g.out_t + dt;
                    let h = row_h[j] + dh;
                    let w = row_w[j] + dw;
                    let mut v = zero;
                    if r < g.rows
                        && t >= g.pad_t
                        && t - g.pad_t < g.in_t
                        && h >= g.pad_h
                        && h - g.pad_h < g.in_h
                        && w >= g.pad_w
                        && w - g.pad_w < g.in_w
                    {
                        let b = row_t[j] / g.out_t;
                        let pos = ((b * g.in_t + t - g.pad_t) * g.in_h + h - g.pad_h) * g.in_w + w
                            - g.pad_w;
                        v = x[pos * per_position + c0 * 2 + half];
                    }
                    #[unroll]
                    for q in 0..4usize {
                        a_s[(i / 2) * ROW_WORDS + half * 4 + q] = v.extract(q);
                    }
                }
            }
            // Weight rows of this tap and channel step; zeros past C_out.
            #[unroll(unrolled)]
            for j in 0..b_loads {
                let i = unit + j * units;
                if i < bn * 2 {
                    let half = i % 2;
                    let o = n0 + i / 2;
                    let mut v = zero;
                    if o < g.c_out {
                        v = weight[o * per_weight + tap * per_position + c0 * 2 + half];
                    }
                    #[unroll]
                    for q in 0..4usize {
                        b_s[(i / 2) * ROW_WORDS + half * 4 + q] = v.extract(q);
                    }
                }
            }
            sync_cube();
            if comptime![cfg.tensor_cores] {
                #[unroll]
                for mi in 0..comptime![cfg.tiles[0]] {
                    let r = (wm * comptime![cfg.tiles[0]] + mi) * 16 + gr;
                    let a0 = a_s[r * ROW_WORDS + t];
                    let a1 = a_s[(r + 8) * ROW_WORDS + t];
                    let a2 = a_s[r * ROW_WORDS + 4 + t];
                    let a3 = a_s[(r + 8) * ROW_WORDS + 4 + t];
                    #[unroll]
                    for ni in 0..comptime![cfg.tiles[1]] {
                        let o = (wn * comptime![cfg.tiles[1]] + ni) * 8 + gr;
                        let b0 = b_s[o * ROW_WORDS + t];
                        let b1 = b_s[o * ROW_WORDS + 4 + t];
                        let k = mi * comptime![cfg.tiles[1]] + ni;
                        acc[k] = mma_e4m3::<N4>(a0, a1, a2, a3, b0, b1, acc[k]);
                    }
                }
            } else {
                for j in 0..acc_len {
                    let idx = unit + j * units;
                    if idx < bm * bn {
                        let (r, o) = (idx / bn, idx % bn);
                        let mut s = 0.0f32;
                        for wd in 0..8usize {
                            s += dot4(a_s[r * ROW_WORDS + wd], b_s[o * ROW_WORDS + wd]);
                        }
                        acc[j] += Vector::new(s);
                    }
                }
            }
            sync_cube();
        }
    }

    let scale = x_scale[0];
    if comptime![cfg.tensor_cores] {
        #[unroll]
        for k in 0..tiles {
            let mi = k / comptime![cfg.tiles[1]];
            let ni = k % comptime![cfg.tiles[1]];
            let r = m0 + (wm * comptime![cfg.tiles[0]] + mi) * 16 + gr;
            let o = n0 + (wn * comptime![cfg.tiles[1]] + ni) * 8 + 2 * t;
            let d = acc[k] * Vector::new(scale);
            store_output::<O>(out, d.extract(0usize), r, o, w_scale, bias, &g);
            store_output::<O>(out, d.extract(1usize), r, o + 1, w_scale, bias, &g);
            store_output::<O>(out, d.extract(2usize), r + 8, o, w_scale, bias, &g);
            store_output::<O>(out, d.extract(3usize), r + 8, o + 1, w_scale, bias, &g);
        }
    } else {
        for j in 0..acc_len {
            let idx = unit + j * units;
            if idx < bm * bn {
                let (r, o) = (m0 + idx / bn, n0 + idx % bn);
                let sum = acc[j].extract(0usize) * scale;
                store_output::<O>(out, sum, r, o, w_scale, bias, &g);
            }
        }
    }
}

/// The operands of [`launch_conv_e4m3`]: `input` the E4M3 codes of a dense channels-last
/// `[B, T, H, W, C_in]` tensor (bytes), `weight` the codes of a dense `[C_out, kT, kH, kW, C_in]`
/// one, `input_scale` one f32 (the codes' decode scale), `weight_scale` `C_out` f32, `bias`
/// `C_out` values and `out` a dense `[B, T', H', W', C_out]` of the output element type.
pub struct Fp8ConvOperands {
    pub input: TensorBinding,
    pub weight: TensorBinding,
    pub input_scale: TensorBinding,
    pub weight_scale: TensorBinding,
    pub bias: TensorBinding,
    pub out: TensorBinding,
}

/// Launches [`conv_e4m3`] for `shape` (output element type `elem`).
///
/// # Errors
/// `C_in` not a multiple of 32, a device with tensor cores older than sm_89, or knobs whose cube
/// does not fit the device.
pub fn launch_conv_e4m3(
    client: &Client,
    operands: Fp8ConvOperands,
    elem: ElemType,
    shape: &ConvShape,
    knobs: &Fp8ConvKnobs,
) -> Result<(), KernelError> {
    let bad = |why: String| Err(KernelError::InvalidKnobs(format!("{knobs}: {why}")));
    shape.validate()?;
    if !shape.c_in.is_multiple_of(32) {
        return bad(format!("C_in must be a multiple of 32, got {}", shape.c_in));
    }
    let hw = &client.properties().hardware;
    let tensor_cores = hw.plane_size_max >= 32;
    if tensor_cores && !matches!(device_sm(client), Some(89..)) {
        return bad("E4M3 mma.sync needs sm_89 or newer".into());
    }
    let warps = [knobs.warps[0] as usize, knobs.warps[1] as usize];
    let units = if tensor_cores {
        32 * warps[0] * warps[1]
    } else {
        (hw.max_units_per_cube as usize).clamp(1, 4)
    };
    if units > hw.max_units_per_cube as usize || knobs.tiles.contains(&0) || warps.contains(&0) {
        return bad(format!(
            "{units} units a cube (the device allows {})",
            hw.max_units_per_cube
        ));
    }
    let cfg = Fp8ConvConfig {
        kernel: shape.kernel,
        c_in: shape.c_in,
        warps,
        tiles: [knobs.tiles[0] as usize, knobs.tiles[1] as usize],
        tensor_cores,
        units,
    };
    let [bm, bn] = cfg.block();
    let rows = shape.rows();
    let [in_t, in_h, in_w] = shape.input;
    let [out_t, out_h, out_w] = shape.output;
    let [pad_t, pad_h, pad_w] = shape.padding;
    let x_vectors = shape.batch * in_t * in_h * in_w * shape.c_in / 16;
    let w_vectors = shape.c_out * shape.reduction() / 16;
    let y_len = rows * shape.c_out;
    let cubes = (rows.div_ceil(bm) as u32, shape.c_out.div_ceil(bn) as u32);
    unsafe {
        conv_e4m3::launch_unchecked(
            client,
            CubeCount::new_2d(cubes.0, cubes.1),
            CubeDim::new_1d(units as u32),
            AddressType::from_len((x_vectors * 16).max(w_vectors * 16).max(y_len)),
            4,
            BufferArg::from_raw_parts_binding(operands.input.handle, x_vectors),
            BufferArg::from_raw_parts_binding(operands.weight.handle, w_vectors),
            BufferArg::from_raw_parts_binding(operands.input_scale.handle, 1),
            BufferArg::from_raw_parts_binding(operands.weight_scale.handle, shape.c_out),
            BufferArg::from_raw_parts_binding(operands.bias.handle, shape.c_out),
            BufferArg::from_raw_parts_binding(operands.out.handle, y_len),
            Fp8ConvGeometryLaunch::new(
                rows,
                shape.c_out,
                in_t,
                in_h,
                in_w,
                pad_t,
                pad_h,
                pad_w,
                out_t,
                out_h,
                out_w,
            ),
            cfg,
            elem,
        )
    };
    Ok(())
}
