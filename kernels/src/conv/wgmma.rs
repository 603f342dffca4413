//! An implicit-GEMM convolution of this crate's on Hopper's warpgroup tensor-core instruction
//! (`wgmma.mma_async`, sm_90a), bf16 / f16 operands, f32 accumulation, the output in the input
//! type with the bias added (and, on request, added to what the output holds: a residual in the
//! store).
//!
//! Why: cubecl 0.11.3's MMA API has no `wgmma`, so cubek's convolutions run Hopper's tensor
//! cores through `mma.sync` at 35-51% of the bf16 peak on the Wan decoder's shapes, where
//! cuDNN's channels-last kernels reach 52-75%. `wgmma` reads both operands from shared memory
//! and runs asynchronously, so one warpgroup keeps the tensor cores of a whole multiprocessor
//! busy with a 64 x N x 16 product per instruction.
//!
//! The GEMM view is [`super`]'s (`M` output positions, `N = C_out`, `K = kT kH kW C_in`). A cube
//! of `groups` warpgroups computes `BM = 64 groups` positions by `BN` channels; the reduction
//! advances 64 channels of one kernel tap at a time (`C_in` a multiple of 64, so a step never
//! straddles two taps). Each step's input rows (zeros where the tap falls in the padding) and
//! weight rows are copied to shared memory with `cp.async` (16 bytes a copy, zero-filled by a
//! source size of 0), `stages` steps in flight, into the no-swizzle K-major layout the
//! instruction reads: for each 16-byte chunk of 8 channels, the tile's rows one after the
//! other, so that a core matrix (8 rows x 16 bytes) is 128 contiguous bytes, 8-row groups are
//! 128 bytes apart (stride byte offset) and chunks `16 BM` bytes apart (leading byte offset).
//! Eight consecutive units copy the same chunk of eight consecutive rows: one core matrix a
//! store phase (no bank conflict) and 64 contiguous bytes of each row a warp.
//!
//! cubecl's inline assembly has no in-out operands, so the accumulators enter a step as inputs,
//! are copied to the outputs and the step's four instructions are committed and waited for in
//! the same statement; the copies of the next steps are already in flight then, and a
//! multiprocessor runs more than one warpgroup, so the tensor cores stay fed.
//!
//! On the CubeCL CPU runtime (no tensor cores, no `cp.async`) the same shared layout is filled
//! with plain loads and multiplied as scalars, one step at a time, so the indexing, the padding
//! and the epilogue run in CI.

use super::{ConvOperands, ConvShape};
use crate::device::device_sm;
use crate::problem::KernelError;
use cubecl::ir::{AddressType, ElemType, FloatKind};
use cubecl::prelude::*;

/// The launch shape; text form `wgmma.g2.n192.s4` (warpgroups along the positions, output
/// channels a cube, reduction steps in flight).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WgmmaKnobs {
    pub groups: u32,
    pub n: u32,
    /// Channels of one reduction step: 32 or 64 (two or four `k16` instructions).
    pub k: u32,
    pub stages: u32,
}

impl Default for WgmmaKnobs {
    /// Two warpgroups (128 positions) by 128 channels, three steps in flight: 96 KiB of shared
    /// memory, two cubes a multiprocessor.
    fn default() -> Self {
        Self {
            groups: 2,
            n: 128,
            k: 64,
            stages: 3,
        }
    }
}

impl std::fmt::Display for WgmmaKnobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "wgmma.g{}.n{}.k{}.s{}",
            self.groups, self.n, self.k, self.stages
        )
    }
}

impl WgmmaKnobs {
    /// Parses the text form.
    ///
    /// # Errors
    /// Text that is not `wgmma.g<groups>.n<channels>.k<channels>.s<stages>`, named.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad =
            || format!("expected wgmma.g<groups>.n<channels>.k<channels>.s<stages>, got `{text}`");
        let parts: Vec<&str> = text.split('.').collect();
        let [name, g, n, k, s] = parts[..] else {
            return Err(bad());
        };
        let num = |p: &str, prefix: char| {
            p.strip_prefix(prefix)
                .and_then(|v| v.parse::<u32>().ok())
                .ok_or_else(bad)
        };
        if name != "wgmma" {
            return Err(bad());
        }
        Ok(Self {
            groups: num(g, 'g')?,
            n: num(n, 'n')?,
            k: num(k, 'k')?,
            stages: num(s, 's')?,
        })
    }

    /// Shared memory of one cube: `stages` steps of `64 groups + n` rows of `k` values.
    pub fn shared_bytes(&self) -> usize {
        (self.stages * (64 * self.groups + self.n) * self.k) as usize * 2
    }

    /// Checks the knobs alone: 1 or 2 warpgroups, `n` one of 64, 96, 128, 192, 256 (the
    /// instruction's N; a unit's accumulators split into at most two power-of-two vectors),
    /// `k` 32 or 64, 2 to 6 stages.
    pub fn validate(&self) -> Result<(), String> {
        if ![32, 64].contains(&self.k) {
            return Err(format!("{self}: k must be 32 or 64, got {}", self.k));
        }
        if !(1..=2).contains(&self.groups) {
            return Err(format!("{self}: 1 or 2 warpgroups, got {}", self.groups));
        }
        if ![64, 96, 128, 192, 256].contains(&self.n) {
            return Err(format!(
                "{self}: n must be one of 64, 96, 128, 192, 256, got {}",
                self.n
            ));
        }
        if !(2..=6).contains(&self.stages) {
            return Err(format!("{self}: 2 to 6 stages, got {}", self.stages));
        }
        Ok(())
    }
}

/// What the kernel fixes at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WgmmaConfig {
    pub kernel: [usize; 3],
    pub c_in: usize,
    pub groups: usize,
    pub n: usize,
    /// Channels a reduction step (32 or 64).
    pub k: usize,
    pub stages: usize,
    /// `wgmma` and `cp.async` (sm_90), else plain loads and scalar products over `units` units.
    pub tensor_cores: bool,
    pub units: usize,
    /// f16 operands (else bf16).
    pub f16: bool,
    /// Add the result to what the output holds.
    pub accumulate: bool,
}

impl WgmmaConfig {
    fn rows(&self) -> usize {
        64 * self.groups
    }

    /// 16-byte chunks of one row in a step.
    fn chunks(&self) -> usize {
        self.k / 8
    }
}

/// Extents and strides of one launch.
#[derive(CubeLaunch, CubeType)]
pub struct WgmmaGeometry {
    /// Output positions (GEMM M) and channels.
    pub rows: usize,
    pub c_out: usize,
    pub in_t: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub pad_t: usize,
    pub pad_h: usize,
    pub pad_w: usize,
    /// Input strides of B, T, H, W in 16-byte vectors.
    pub x_b: usize,
    pub x_t: usize,
    pub x_h: usize,
    pub x_w: usize,
    pub out_t: usize,
    pub out_h: usize,
    pub out_w: usize,
    /// Output strides of B, T, H, W in elements.
    pub y_b: usize,
    pub y_t: usize,
    pub y_h: usize,
    pub y_w: usize,
}

/// `cp.async` of 16 bytes from `src[offset]` to the shared address `dst`, reading `bytes` of
/// them (16, or 0 for zeros). CUDA only.
#[cube]
fn copy_chunk<E: Float, V: Size>(src: &[Vector<E, V>], offset: usize, dst: u32, bytes: u32) {
    let ptr = unsafe { src[offset..offset + 1].as_ptr_unchecked() };
    gpu_asm!(
        "cp.async.cg.shared::cta.global [{}], [{}], 16, {};",
        mem_out(_) dst, mem_in(_) ptr, in(_) bytes, options(explicit_mem)
    );
}

#[cube]
fn commit_copies() {
    gpu_asm!("cp.async.commit_group;");
}

/// Waits until at most `pending` committed groups of this unit's copies are in flight.
#[cube]
fn wait_copies(#[comptime] pending: usize) {
    gpu_asm!("cp.async.wait_group {n};", n = const pending);
}

/// The vector of a unit's `n / 2` accumulators: the next power of two (cubecl aligns a vector
/// type to its size, and an assembly statement has one output), the registers past `n / 2`
/// unused.
fn accumulator_len(n: usize) -> usize {
    (n / 2).next_power_of_two()
}

/// The PTX of one reduction step: the accumulators (`outs` registers, inputs `%outs..%2outs`)
/// copied to the outputs (`%0..%outs`), then four `k16` instructions on the first `n / 2` of
/// them whose descriptors advance by `a_step` / `b_step` (16-byte units) from the base words
/// (inputs `%2outs..%2outs+4`: A low, A high, B low, B high), committed and waited for.
fn step_ptx(outs: usize, cfg: &WgmmaConfig) -> String {
    let (n, f16) = (cfg.n, cfg.f16);
    let (a_step, b_step) = (2 * cfg.rows(), 2 * cfg.n);
    let ty = if f16 { "f16" } else { "bf16" };
    let regs = (0..n / 2)
        .map(|i| format!("%{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let (al, ah, bl, bh) = (2 * outs, 2 * outs + 1, 2 * outs + 2, 2 * outs + 3);
    let mut s = String::from("{ .reg .b64 da, db; .reg .b32 ta, tb;\n");
    for i in 0..n / 2 {
        s += &format!("mov.f32 %{i}, %{};\n", outs + i);
    }
    s += "wgmma.fence.sync.aligned;\n";
    for k in 0..cfg.k / 16 {
        s += &format!(
            "add.u32 ta, %{al}, {}; add.u32 tb, %{bl}, {};\n\
             mov.b64 da, {{ta, %{ah}}}; mov.b64 db, {{tb, %{bh}}};\n\
             wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{regs}}}, da, db, 1, 1, 1, 0, 0;\n",
            k * a_step,
            k * b_step,
        );
    }
    s += "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0; }";
    s
}

/// Stores this unit's accumulators that fall in output row `r` (`half` 0: rows `16 w + l / 4`,
/// 1: those + 8) at element `at`: unit (warp w of its warpgroup, lane l) holds column
/// `8 (i / 4) + 2 (l % 4) + i % 2` of its register i.
#[cube]
#[allow(clippy::too_many_arguments)]
fn store_fragment<E: Float, N: Size>(
    out: &mut [E],
    acc: Vector<f32, N>,
    at: usize,
    n0: usize,
    half: usize,
    bias: &[E],
    c_out: usize,
    #[comptime] cfg: WgmmaConfig,
) {
    let lane = UNIT_POS as usize % 32;
    #[unroll]
    for i in 0..comptime![cfg.n / 2] {
        if ((i >> 1) & 1) == half {
            let o = n0 + 8 * (i >> 2) + 2 * (lane % 4) + (i & 1);
            if o < c_out {
                store::<E>(out, at + o, acc.extract(i), bias[o], cfg.accumulate);
            }
        }
    }
}

/// The address of `tile`'s first element in the `.shared` window. CUDA only.
#[cube]
fn shared_base<T: CubePrimitive>(tile: &Shared<[T]>) -> u32 {
    cubecl_cpp::cuda::ptx::generic_to_shared::<T>(unsafe { tile.as_ptr_unchecked() })
}

/// Writes `value + bias[o]` (plus what the output holds, when accumulating) at element `at`.
#[cube]
fn store<E: Float>(out: &mut [E], at: usize, value: f32, bias: E, #[comptime] accumulate: bool) {
    let mut v = value + f32::cast_from(bias);
    if accumulate {
        v += f32::cast_from(out[at]);
    }
    out[at] = E::cast_from(v);
}

#[cube(launch_unchecked, address_type = "dynamic")]
pub fn conv_wgmma<E: Float, V: Size>(
    x: &[Vector<E, V>],
    weight: &[Vector<E, V>],
    bias: &[E],
    out: &mut [E],
    g: WgmmaGeometry,
    #[comptime] cfg: WgmmaConfig,
    #[define(E)] _elem: ElemType,
) {
    let bm = comptime![cfg.rows()];
    let bn = comptime![cfg.n];
    let units = comptime![cfg.units];
    let steps = comptime![cfg.kernel[0] * cfg.kernel[1] * cfg.kernel[2] * cfg.c_in / cfg.k];
    let chunks = comptime![cfg.chunks()];
    let a_stage = comptime![cfg.rows() * cfg.chunks()];
    let stage = comptime![(cfg.rows() + cfg.n) * cfg.chunks()];
    let a_loads = comptime![(cfg.rows() * cfg.chunks()).div_ceil(cfg.units)];
    let slots = comptime![if cfg.tensor_cores { cfg.stages } else { 1 }];
    let mut tile = Shared::<[Vector<E, V>]>::new_aligned_slice(comptime![slots * stage], 128usize);
    let unit = UNIT_POS as usize;
    let n_tiles = g.c_out.div_ceil(bn);
    let m0 = (CUBE_POS / n_tiles) * bm;
    let n0 = (CUBE_POS % n_tiles) * bn;

    // The output position of each input row this unit copies: its input origin (batch offset
    // and the window's corner, padding included) and whether it is inside the output.
    let mut row_b = Array::<usize>::new(a_loads);
    let mut row_t = Array::<usize>::new(a_loads);
    let mut row_h = Array::<usize>::new(a_loads);
    let mut row_w = Array::<usize>::new(a_loads);
    let mut row_ok = Array::<bool>::new(a_loads);
    let unrolled = comptime![cfg.tensor_cores];
    #[unroll(unrolled)]
    for j in 0..a_loads {
        let i = unit + j * units;
        let r = m0 + (i % 8) + 8 * (i / (8 * chunks));
        row_w[j] = r % g.out_w;
        row_h[j] = (r / g.out_w) % g.out_h;
        row_t[j] = (r / (g.out_w * g.out_h)) % g.out_t;
        row_b[j] = (r / (g.out_w * g.out_h * g.out_t)) * g.x_b;
        row_ok[j] = r < g.rows && i < a_stage;
    }
    let mut base = 0u32;
    if comptime![cfg.tensor_cores] {
        base = shared_base::<Vector<E, V>>(&tile);
    }

    if comptime![cfg.tensor_cores] {
        let size!(NA) = comptime![accumulator_len(cfg.n)];
        let mut acc = Vector::<f32, NA>::new(0.0f32);
        // Descriptors: low word = address >> 4 | leading byte offset >> 4 << 16; high word =
        // stride byte offset >> 4 (128 bytes), no swizzle.
        let group = unit / 128;
        let a_lbo = comptime![(cfg.rows() as u32) << 16];
        let b_lbo = comptime![(cfg.n as u32) << 16];
        let sbo = 8u32;
        for p in 0..comptime![cfg.stages - 1] {
            if p < steps {
                load_step::<E, V>(
                    x, weight, &mut tile, base, p, p, &g, &row_b, &row_t, &row_h, &row_w, &row_ok,
                    cfg,
                );
            }
            commit_copies();
        }
        for s in 0..steps {
            wait_copies(comptime![cfg.stages - 2]);
            sync_async_proxy_shared();
            sync_cube();
            let next = s + comptime![cfg.stages - 1];
            if next < steps {
                load_step::<E, V>(
                    x,
                    weight,
                    &mut tile,
                    base,
                    next,
                    next % comptime![cfg.stages],
                    &g,
                    &row_b,
                    &row_t,
                    &row_h,
                    &row_w,
                    &row_ok,
                    cfg,
                );
            }
            commit_copies();
            let slot = (s % comptime![cfg.stages]) * stage;
            let a_addr = base + u32::cast_from((slot + group * 64) * 16);
            let b_addr = base + u32::cast_from((slot + a_stage) * 16);
            // (A fresh value: a mutable variable would enter the assembly as its address.)
            let c = acc + Vector::<f32, NA>::new(0.0f32);
            let al = ((a_addr & 0x3FFFFu32) >> 4u32) | a_lbo;
            let bl = ((b_addr & 0x3FFFFu32) >> 4u32) | b_lbo;
            let d: Vector<f32, NA>;
            gpu_asm!(
                "// {d} {c} {al} {ah} {bl} {bh}\n{body}",
                d = out(_) d, c = in(_) c, al = in(_) al, ah = in(_) sbo, bl = in(_) bl,
                bh = in(_) sbo,
                body = const step_ptx(accumulator_len(cfg.n), &cfg),
            );
            acc = d;
        }
        // Unit (warp w of its warpgroup, lane l) holds rows 16 w + l / 4 and that + 8.
        let lane = unit % 32;
        let r0 = m0 + group * 64 + ((unit / 32) % 4) * 16 + lane / 4;
        #[unroll]
        for half in 0..2usize {
            let r = r0 + half * 8;
            if r < g.rows {
                let at = output_offset(r, &g);
                store_fragment::<E, NA>(out, acc, at, n0, half, bias, g.c_out, cfg);
            }
        }
    } else {
        let outputs = comptime![(cfg.rows() * cfg.n).div_ceil(cfg.units)];
        let mut acc = Array::<f32>::new(outputs);
        for j in 0..outputs {
            acc[j] = 0.0f32;
        }
        for s in 0..steps {
            load_step::<E, V>(
                x, weight, &mut tile, base, s, 0, &g, &row_b, &row_t, &row_h, &row_w, &row_ok, cfg,
            );
            sync_cube();
            for j in 0..outputs {
                let idx = unit + j * units;
                if idx < bm * bn {
                    let (r, o) = (idx / bn, idx % bn);
                    let mut sum = 0.0f32;
                    for c in 0..chunks {
                        let a = tile[c * bm + r];
                        let b = tile[a_stage + c * bn + o];
                        #[unroll]
                        for e in 0..8usize {
                            sum += f32::cast_from(a.extract(e)) * f32::cast_from(b.extract(e));
                        }
                    }
                    acc[j] += sum;
                }
            }
            sync_cube();
        }
        for j in 0..outputs {
            let idx = unit + j * units;
            let (r, o) = (m0 + idx / bn, n0 + idx % bn);
            if idx < bm * bn && r < g.rows && o < g.c_out {
                store::<E>(
                    out,
                    output_offset(r, &g) + o,
                    acc[j],
                    bias[o],
                    cfg.accumulate,
                );
            }
        }
    }
}

/// The element offset of output position `r`'s channel 0.
#[cube]
fn output_offset(r: usize, g: &WgmmaGeometry) -> usize {
    let w = r % g.out_w;
    let h = (r / g.out_w) % g.out_h;
    let t = (r / (g.out_w * g.out_h)) % g.out_t;
    let b = r / (g.out_w * g.out_h * g.out_t);
    b * g.y_b + t * g.y_t + h * g.y_h + w * g.y_w
}

/// Copies reduction step `s` (tap `s / (C_in / 64)`, channels `64 (s % (C_in / 64))` on) into
/// shared slot `slot`: this unit's input rows (zeros in the padding and past the output), then
/// its weight rows (zeros past C_out); `cp.async` on tensor-core devices, else plain stores.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_step<E: Float, V: Size>(
    x: &[Vector<E, V>],
    weight: &[Vector<E, V>],
    tile: &mut Shared<[Vector<E, V>]>,
    base: u32,
    s: usize,
    slot: usize,
    g: &WgmmaGeometry,
    row_b: &Array<usize>,
    row_t: &Array<usize>,
    row_h: &Array<usize>,
    row_w: &Array<usize>,
    row_ok: &Array<bool>,
    #[comptime] cfg: WgmmaConfig,
) {
    let bm = comptime![cfg.rows()];
    let bn = comptime![cfg.n];
    let units = comptime![cfg.units];
    let kh = comptime![cfg.kernel[1]];
    let kw = comptime![cfg.kernel[2]];
    let per_tap = comptime![cfg.c_in / cfg.k];
    let w_row = comptime![cfg.kernel[0] * cfg.kernel[1] * cfg.kernel[2] * cfg.c_in / 8];
    let chunks = comptime![cfg.chunks()];
    let a_stage = comptime![cfg.rows() * cfg.chunks()];
    let stage = comptime![(cfg.rows() + cfg.n) * cfg.chunks()];
    let a_loads = comptime![(cfg.rows() * cfg.chunks()).div_ceil(cfg.units)];
    let b_loads = comptime![(cfg.n * cfg.chunks()).div_ceil(cfg.units)];
    let unit = UNIT_POS as usize;
    let tap = s / per_tap;
    let channel = (s % per_tap) * chunks;
    let dt = tap / (kh * kw);
    let dh = (tap / kw) % kh;
    let dw = tap % kw;
    let slot_base = slot * stage;
    let unrolled = comptime![cfg.tensor_cores];
    #[unroll(unrolled)]
    for j in 0..a_loads {
        let i = unit + j * units;
        let chunk = (i / 8) % chunks;
        let row = (i % 8) + 8 * (i / (8 * chunks));
        let t = row_t[j] + dt;
        let h = row_h[j] + dh;
        let w = row_w[j] + dw;
        let inside = row_ok[j]
            && t >= g.pad_t
            && t - g.pad_t < g.in_t
            && h >= g.pad_h
            && h - g.pad_h < g.in_h
            && w >= g.pad_w
            && w - g.pad_w < g.in_w;
        let mut from = 0usize;
        if inside {
            from = row_b[j]
                + (t - g.pad_t) * g.x_t
                + (h - g.pad_h) * g.x_h
                + (w - g.pad_w) * g.x_w
                + channel
                + chunk;
        }
        let to = slot_base + chunk * bm + row;
        if i < a_stage {
            put_chunk::<E, V>(x, from, tile, base, to, inside, cfg.tensor_cores);
        }
    }
    #[unroll(unrolled)]
    for j in 0..b_loads {
        let i = unit + j * units;
        let chunk = (i / 8) % chunks;
        let row = (i % 8) + 8 * (i / (8 * chunks));
        let o = row + (CUBE_POS % g.c_out.div_ceil(bn)) * bn;
        let inside = o < g.c_out;
        let mut from = 0usize;
        if inside {
            from = o * w_row + tap * comptime![cfg.c_in / 8] + channel + chunk;
        }
        if i < comptime![cfg.n * cfg.chunks()] {
            put_chunk::<E, V>(
                weight,
                from,
                tile,
                base,
                slot_base + a_stage + chunk * bn + row,
                inside,
                cfg.tensor_cores,
            );
        }
    }
}

/// `tile[to] = src[from]` (zeros unless `inside`): `cp.async` on tensor-core devices.
#[cube]
fn put_chunk<E: Float, V: Size>(
    src: &[Vector<E, V>],
    from: usize,
    tile: &mut Shared<[Vector<E, V>]>,
    base: u32,
    to: usize,
    inside: bool,
    #[comptime] tensor_cores: bool,
) {
    if tensor_cores {
        // (A value, not a mutable variable: the assembly would get its address.)
        let bytes = u32::cast_from(inside) * 16u32;
        copy_chunk::<E, V>(src, from, base + u32::cast_from(to * 16), bytes);
    } else {
        let mut v = Vector::<E, V>::new(E::from_int(0));
        if inside {
            v = src[from];
        }
        tile[to] = v;
    }
}

/// Whether the wgmma convolution with `knobs` can run `shape` on `client` (sm_90 or the CPU
/// runtime, `C_in` a multiple of the knobs' step, 2-byte elements), and why not.
pub fn supported(
    client: &Client,
    shape: &ConvShape,
    elem: ElemType,
    knobs: &WgmmaKnobs,
) -> Result<(), String> {
    if !shape.c_in.is_multiple_of(knobs.k as usize) {
        return Err(format!(
            "C_in must be a multiple of the step k = {}, got {}",
            knobs.k, shape.c_in
        ));
    }
    if !matches!(elem, ElemType::Float(FloatKind::BF16 | FloatKind::F16)) {
        return Err(format!("bf16 or f16 operands, got {elem:?}"));
    }
    let tensor_cores = client.properties().hardware.plane_size_max >= 32;
    if tensor_cores && device_sm(client) != Some(90) {
        return Err("wgmma needs an sm_90 device".into());
    }
    Ok(())
}

/// Launches [`conv_wgmma`] for `shape` with `knobs` on `operands` (the layout of [`super`]; the
/// weight dense; the bias required; the input's strides multiples of 8 elements).
///
/// # Errors
/// What [`supported`] refuses, knobs that do not fit the device, a missing bias or strides the
/// copies cannot take, in words.
pub fn launch_wgmma(
    client: &Client,
    operands: ConvOperands,
    elem: ElemType,
    shape: &ConvShape,
    knobs: &WgmmaKnobs,
) -> Result<(), KernelError> {
    let bad = |why: String| Err(KernelError::InvalidKnobs(format!("{knobs}: {why}")));
    shape.validate()?;
    knobs.validate().map_err(KernelError::InvalidKnobs)?;
    if let Err(why) = supported(client, shape, elem, knobs) {
        return bad(why);
    }
    let hw = &client.properties().hardware;
    let tensor_cores = hw.plane_size_max >= 32;
    if tensor_cores && knobs.shared_bytes() > hw.max_shared_memory_size {
        return bad(format!(
            "{} bytes of shared memory a cube, the device has {}",
            knobs.shared_bytes(),
            hw.max_shared_memory_size
        ));
    }
    let ConvOperands {
        input,
        weight,
        bias,
        out,
        accumulate,
    } = operands;
    let Some(bias) = bias else {
        return bad("the wgmma convolution needs a bias".into());
    };
    let (xs, ys) = (input.strides.to_vec(), out.strides.to_vec());
    if xs.len() != 5
        || ys.len() != 5
        || xs[4] != 1
        || ys[4] != 1
        || xs.iter().any(|s| s % 8 != 0 && *s != 1)
    {
        return bad(format!(
            "5-D strides with contiguous channels (the input's others multiples of 8), got \
             input {xs:?} and output {ys:?}"
        ));
    }
    let groups = knobs.groups as usize;
    let units = if tensor_cores {
        128 * groups
    } else {
        (hw.max_units_per_cube as usize).clamp(1, 4)
    };
    let cfg = WgmmaConfig {
        kernel: shape.kernel,
        c_in: shape.c_in,
        groups,
        n: knobs.n as usize,
        k: knobs.k as usize,
        stages: knobs.stages as usize,
        tensor_cores,
        units,
        f16: matches!(elem, ElemType::Float(FloatKind::F16)),
        accumulate,
    };
    let [in_t, in_h, in_w] = shape.input;
    let [out_t, out_h, out_w] = shape.output;
    let [pad_t, pad_h, pad_w] = shape.padding;
    let extent = |dims: [usize; 4], strides: &[usize]| {
        dims.iter()
            .zip(strides)
            .map(|(d, s)| (d - 1) * s)
            .sum::<usize>()
    };
    let x_len = (extent([shape.batch, in_t, in_h, in_w], &xs) + shape.c_in) / 8;
    let y_len = extent([shape.batch, out_t, out_h, out_w], &ys) + shape.c_out;
    let w_len = shape.c_out * shape.reduction() / 8;
    let rows = shape.rows();
    let cubes = rows.div_ceil(cfg.rows()) * shape.c_out.div_ceil(cfg.n);
    if cubes > u32::MAX as usize / 2 {
        return bad(format!("{cubes} cubes in one launch"));
    }
    unsafe {
        conv_wgmma::launch_unchecked(
            client,
            CubeCount::new_1d(cubes as u32),
            CubeDim::new_1d(units as u32),
            AddressType::from_len((x_len * 8).max(y_len).max(w_len * 8)),
            8,
            BufferArg::from_raw_parts_binding(input.handle, x_len),
            BufferArg::from_raw_parts_binding(weight.handle, w_len),
            BufferArg::from_raw_parts_binding(bias.handle, shape.c_out),
            BufferArg::from_raw_parts_binding(out.handle, y_len),
            WgmmaGeometryLaunch::new(
                rows,
                shape.c_out,
                in_t,
                in_h,
                in_w,
                pad_t,
                pad_h,
                pad_w,
                xs[0] / 8,
                xs[1] / 8,
                xs[2] / 8,
                xs[3] / 8,
                out_t,
                out_h,
                out_w,
                ys[0],
                ys[1],
                ys[2],
                ys[3],
            ),
            cfg,
            elem,
        );
    }
    Ok(())
}
