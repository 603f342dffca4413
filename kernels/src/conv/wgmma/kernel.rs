//! The wgmma convolution's kernel: the ring of reduction steps in shared memory, the
//! `wgmma` steps (or, on the CPU runtime, scalar products of the same staged tiles) and the
//! epilogue (bias, optional residual, the output's strides).

use super::ptx::{accumulator_len, commit_copies, copy_chunk, shared_base, step_ptx, wait_copies};
use super::{WgmmaConfig, WgmmaGeometry};
use crate::conv::prologue::normed_chunk;
use cubecl::ir::ElemType;
use cubecl::prelude::*;

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

/// Writes `value + bias[o]` (plus what the output holds, when accumulating) at element `at`.
#[cube]
fn store<E: Float>(out: &mut [E], at: usize, value: f32, bias: E, #[comptime] accumulate: bool) {
    let mut v = value + f32::cast_from(bias);
    if accumulate {
        v += f32::cast_from(out[at]);
    }
    out[at] = E::cast_from(v);
}

/// The input rows this unit copies: each one's output position (batch index, T, H, W) and
/// whether it is inside the output.
#[derive(CubeType)]
struct Rows {
    b: Array<usize>,
    t: Array<usize>,
    h: Array<usize>,
    w: Array<usize>,
    ok: Array<bool>,
}

/// The norm prologue's loads of one step, held in registers across the previous step's
/// products: the input vectors, their positions' inverse RMS and the matching gamma.
#[derive(CubeType)]
struct Fetched<E: Float, V: Size> {
    values: Array<Vector<E, V>>,
    scales: Array<f32>,
    gammas: Array<Vector<E, V>>,
}

#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn conv_wgmma<E: Float, V: Size>(
    x: &[Vector<E, V>],
    x_tail: &[Vector<E, V>],
    weight: &[Vector<E, V>],
    bias: &[E],
    inv_rms: &[f32],
    gamma: &[Vector<E, V>],
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
    let mut rows = Rows {
        b: Array::new(a_loads),
        t: Array::new(a_loads),
        h: Array::new(a_loads),
        w: Array::new(a_loads),
        ok: Array::new(a_loads),
    };
    let unrolled = comptime![cfg.tensor_cores];
    #[unroll(unrolled)]
    for j in 0..a_loads {
        let i = unit + j * units;
        let r = m0 + (i % 8) + 8 * (i / (8 * chunks));
        rows.w[j] = r % g.out_w;
        rows.h[j] = (r / g.out_w) % g.out_h;
        rows.t[j] = (r / (g.out_w * g.out_h)) % g.out_t;
        rows.b[j] = r / (g.out_w * g.out_h * g.out_t);
        rows.ok[j] = r < g.rows && i < a_stage;
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
        // With the norm in the load, a step's input rows go through registers: fetched
        // before the previous step's products, normalised and stored after them.
        let fetched = comptime![if cfg.norm { a_loads } else { 1 }];
        let mut held = Fetched::<E, V> {
            values: Array::new(fetched),
            scales: Array::new(fetched),
            gammas: Array::new(fetched),
        };
        for p in 0..comptime![cfg.stages - 1] {
            if p < steps {
                load_step::<E, V>(x, x_tail, weight, &mut tile, base, p, p, &g, &rows, cfg);
                if comptime![cfg.norm] {
                    fetch_rows::<E, V>(x, x_tail, inv_rms, gamma, p, &g, &rows, &mut held, cfg);
                    stash_rows::<E, V>(&mut tile, p, &held, cfg);
                }
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
                    x_tail,
                    weight,
                    &mut tile,
                    base,
                    next,
                    next % comptime![cfg.stages],
                    &g,
                    &rows,
                    cfg,
                );
                if comptime![cfg.norm] {
                    fetch_rows::<E, V>(x, x_tail, inv_rms, gamma, next, &g, &rows, &mut held, cfg);
                }
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
            if comptime![cfg.norm] && next < steps {
                stash_rows::<E, V>(&mut tile, next, &held, cfg);
            }
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
        let fetched = comptime![if cfg.norm { a_loads } else { 1 }];
        let mut held = Fetched::<E, V> {
            values: Array::new(fetched),
            scales: Array::new(fetched),
            gammas: Array::new(fetched),
        };
        for s in 0..steps {
            load_step::<E, V>(x, x_tail, weight, &mut tile, base, s, 0, &g, &rows, cfg);
            if comptime![cfg.norm] {
                fetch_rows::<E, V>(x, x_tail, inv_rms, gamma, s, &g, &rows, &mut held, cfg);
                stash_rows::<E, V>(&mut tile, s, &held, cfg);
            }
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
    x_tail: &[Vector<E, V>],
    weight: &[Vector<E, V>],
    tile: &mut Shared<[Vector<E, V>]>,
    base: u32,
    s: usize,
    slot: usize,
    g: &WgmmaGeometry,
    rows: &Rows,
    #[comptime] cfg: WgmmaConfig,
) {
    let bm = comptime![cfg.rows()];
    let bn = comptime![cfg.n];
    let units = comptime![cfg.units];
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
    let slot_base = slot * stage;
    let unrolled = comptime![cfg.tensor_cores];
    if comptime![!cfg.norm] {
        #[unroll(unrolled)]
        for j in 0..a_loads {
            let i = unit + j * units;
            let src = source(i, j, s, g, rows, cfg);
            if i < a_stage {
                let to = slot_base + ((i / 8) % chunks) * bm + (i % 8) + 8 * (i / (8 * chunks));
                if src.tail {
                    put_chunk::<E, V>(x_tail, src.from, tile, base, to, true, cfg.tensor_cores);
                } else {
                    put_chunk::<E, V>(x, src.from, tile, base, to, src.inside, cfg.tensor_cores);
                }
            }
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

/// Where input row `j` of this unit (copy index `i`) reads in reduction step `s`: inside the
/// input or not (padding, past the output), its vector in `x` and its position's index (dense
/// `[B, T, H, W]`, for the inverse RMS).
#[derive(CubeType)]
struct Source {
    inside: bool,
    /// From the second source (frames `tail_t..`).
    tail: bool,
    from: usize,
    position: usize,
}

#[cube]
#[allow(clippy::too_many_arguments)]
fn source(
    i: usize,
    j: usize,
    s: usize,
    g: &WgmmaGeometry,
    rows: &Rows,
    #[comptime] cfg: WgmmaConfig,
) -> Source {
    let kh = comptime![cfg.kernel[1]];
    let kw = comptime![cfg.kernel[2]];
    let per_tap = comptime![cfg.c_in / cfg.k];
    let chunks = comptime![cfg.chunks()];
    let tap = s / per_tap;
    let dt = tap / (kh * kw);
    let dh = (tap / kw) % kh;
    let dw = tap % kw;
    let t = rows.t[j] + dt;
    let h = rows.h[j] + dh;
    let w = rows.w[j] + dw;
    let inside = rows.ok[j]
        && t >= g.pad_t
        && t - g.pad_t < g.in_t
        && h >= g.pad_h
        && h - g.pad_h < g.in_h
        && w >= g.pad_w
        && w - g.pad_w < g.in_w;
    let mut from = 0usize;
    let mut position = 0usize;
    let mut tail = false;
    if inside {
        let (it, ih, iw) = (t - g.pad_t, h - g.pad_h, w - g.pad_w);
        let channel = (s % per_tap) * chunks + (i / 8) % chunks;
        if it < g.tail_t {
            from = rows.b[j] * g.x_b + it * g.x_t + ih * g.x_h + iw * g.x_w + channel;
        } else {
            tail = true;
            from = rows.b[j] * g.tail_b
                + (it - g.tail_t) * g.tail_ft
                + ih * g.tail_h
                + iw * g.tail_w
                + channel;
        }
        position = ((rows.b[j] * g.in_t + it) * g.in_h + ih) * g.in_w + iw;
    }
    Source {
        inside,
        tail,
        from,
        position,
    }
}

/// The norm prologue's loads of step `s`: this unit's input vectors, their positions' inverse
/// RMS and the matching gamma (zeros for rows outside the input).
#[cube]
#[allow(clippy::too_many_arguments)]
fn fetch_rows<E: Float, V: Size>(
    x: &[Vector<E, V>],
    x_tail: &[Vector<E, V>],
    inv_rms: &[f32],
    gamma: &[Vector<E, V>],
    s: usize,
    g: &WgmmaGeometry,
    rows: &Rows,
    held: &mut Fetched<E, V>,
    #[comptime] cfg: WgmmaConfig,
) {
    let units = comptime![cfg.units];
    let per_tap = comptime![cfg.c_in / cfg.k];
    let chunks = comptime![cfg.chunks()];
    let a_stage = comptime![cfg.rows() * cfg.chunks()];
    let a_loads = comptime![(cfg.rows() * cfg.chunks()).div_ceil(cfg.units)];
    let unit = UNIT_POS as usize;
    let unrolled = comptime![cfg.tensor_cores];
    #[unroll(unrolled)]
    for j in 0..a_loads {
        let i = unit + j * units;
        let src = source(i, j, s, g, rows, cfg);
        let mut v = Vector::<E, V>::new(E::from_int(0));
        let mut r = 0.0f32;
        if src.inside && i < a_stage {
            v = if src.tail {
                x_tail[src.from]
            } else {
                x[src.from]
            };
            r = inv_rms[src.position];
        }
        held.values[j] = v;
        held.scales[j] = r;
        held.gammas[j] = gamma[(s % per_tap) * chunks + (i / 8) % chunks];
    }
}

/// Stores the fetched rows of step `s`, normalised (`silu(x inv_rms gamma)`), into its slot.
#[cube]
fn stash_rows<E: Float, V: Size>(
    tile: &mut Shared<[Vector<E, V>]>,
    s: usize,
    held: &Fetched<E, V>,
    #[comptime] cfg: WgmmaConfig,
) {
    let bm = comptime![cfg.rows()];
    let units = comptime![cfg.units];
    let chunks = comptime![cfg.chunks()];
    let a_stage = comptime![cfg.rows() * cfg.chunks()];
    let a_loads = comptime![(cfg.rows() * cfg.chunks()).div_ceil(cfg.units)];
    let stage = comptime![(cfg.rows() + cfg.n) * cfg.chunks()];
    let slots = comptime![if cfg.tensor_cores { cfg.stages } else { 1 }];
    let slot_base = (s % slots) * stage;
    let unit = UNIT_POS as usize;
    let unrolled = comptime![cfg.tensor_cores];
    #[unroll(unrolled)]
    for j in 0..a_loads {
        let i = unit + j * units;
        if i < a_stage {
            let to = slot_base + ((i / 8) % chunks) * bm + (i % 8) + 8 * (i / (8 * chunks));
            tile[to] = normed_chunk::<E, V>(
                held.values[j],
                held.scales[j],
                held.gammas[j],
                cfg.tensor_cores,
            );
        }
    }
}
