//! A direct convolution on CUDA cores for layers with a few output channels (the Wan decoder's
//! `conv_out`, 96 -> 3): an implicit GEMM with `N = 3` would leave most of each tensor-core
//! tile empty and re-read every input position once per kernel tap from L2, so its cost is the
//! input traffic, not the arithmetic.
//!
//! One cube computes a tile of `units_y * rows_per_unit` rows by `units_x` columns of one
//! output frame, all output channels. For each temporal tap and each chunk of `chunk` input
//! channels it stages the tile's input window (the tile plus the kernel's spatial halo, zeros
//! where the padding is) in shared memory, channel-major so that neighbouring units read
//! neighbouring words, then every unit sums its column of `rows_per_unit` positions: each
//! input value it reads serves up to `kH` of its rows, each weight (read by the whole cube at
//! one address) all of them. Cubes walk the output frames fastest, so the `kT` cubes that read
//! one input frame run close together and the frame comes from DRAM about once.
//!
//! f32 accumulation; bias added before the output's rounding. Any stride-1 geometry of
//! [`ConvShape`], channels contiguous in the input and output (the output may be a strided
//! view), `C_out <= MAX_OUT`.

use super::{ConvOperands, ConvShape};
use crate::problem::KernelError;
use cubecl::ir::{AddressType, ElemType};
use cubecl::prelude::*;

/// The most output channels the direct kernel computes (its accumulators per position).
pub const MAX_OUT: usize = 4;

/// The direct kernel's launch shape; its text form is `direct.u32x4.r8.c16` (units along the
/// columns x units along the rows, rows per unit, channels per shared-memory stage).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DirectKnobs {
    /// Units per cube along W (one output column each) and along H.
    pub units: [u32; 2],
    /// Consecutive output rows each unit computes.
    pub rows_per_unit: u32,
    /// Input channels staged in shared memory at a time.
    pub chunk: u32,
}

impl Default for DirectKnobs {
    /// 128 units in columns of 8 rows (a 32 x 32 output tile), 16 channels a stage: the
    /// tuner's best for the decoder's `conv_out` on an H100 (2026-12-07: 1313 us, against 2052
    /// us with 8 channels a stage, 1587 us with 256 units of 4 rows, 2304 us with 16 rows per
    /// unit; cuDNN channels-last 1218 us, cubek's implicit GEMM 2187 us).
    fn default() -> Self {
        Self {
            units: [32, 4],
            rows_per_unit: 8,
            chunk: 16,
        }
    }
}

impl DirectKnobs {
    /// Parses the text form (`direct.u32x4.r8.c8`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split('.').collect();
        let [kind, units, rows, chunk] = parts[..] else {
            return Err(format!(
                "direct knobs `{text}`: want four dotted parts, as in direct.u32x4.r8.c8"
            ));
        };
        if kind != "direct" {
            return Err(format!("direct knobs `{text}`: must start with `direct`"));
        }
        let number = |s: &str, prefix: &str, what: &str| -> Result<u32, String> {
            s.strip_prefix(prefix)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("direct knobs `{text}`: bad {what} `{s}`"))
        };
        let (ux, uy) = units
            .strip_prefix('u')
            .and_then(|u| u.split_once('x'))
            .ok_or_else(|| format!("direct knobs `{text}`: bad units `{units}` (want uXxY)"))?;
        Ok(Self {
            units: [
                number(ux, "", "units along W")?,
                number(uy, "", "units along H")?,
            ],
            rows_per_unit: number(rows, "r", "rows per unit")?,
            chunk: number(chunk, "c", "channel chunk")?,
        })
    }

    /// Output rows and columns of one cube's tile.
    pub fn tile(&self) -> [usize; 2] {
        [
            (self.units[1] * self.rows_per_unit) as usize,
            self.units[0] as usize,
        ]
    }

    /// Shared memory one cube of `shape` uses: the staged input window and the chunk's weights
    /// of one temporal tap, in f32.
    pub fn shared_bytes(&self, shape: &ConvShape) -> usize {
        let [tile_h, tile_w] = self.tile();
        let window = (tile_h + shape.kernel[1] - 1) * (tile_w + shape.kernel[2] - 1);
        let weights = shape.kernel[1] * shape.kernel[2] * shape.c_out;
        self.chunk as usize * (window + weights) * 4
    }

    /// These knobs shrunk until a cube fits the device: at most `max_units` units and
    /// `max_dim` along each axis (units along H halved first, then along W), then at most
    /// `max_shared` bytes of shared memory (the channel chunk halved first, then the rows per
    /// unit). The CubeCL CPU runtime allows as many units per cube as the machine has cores.
    pub fn fitted(
        mut self,
        shape: &ConvShape,
        max_units: u32,
        max_dim: [u32; 2],
        max_shared: usize,
    ) -> Self {
        let too_many = |u: [u32; 2]| u[0] * u[1] > max_units;
        while self.units[1] > 1 && (self.units[1] > max_dim[1] || too_many(self.units)) {
            self.units[1] /= 2;
        }
        while self.units[0] > 1 && (self.units[0] > max_dim[0] || too_many(self.units)) {
            self.units[0] /= 2;
        }
        while self.shared_bytes(shape) > max_shared && self.chunk > 1 {
            self.chunk /= 2;
        }
        while self.shared_bytes(shape) > max_shared && self.rows_per_unit > 1 {
            self.rows_per_unit /= 2;
        }
        self
    }

    /// Checks the knobs against `shape` and the device's cube limits.
    pub fn validate(&self, shape: &ConvShape, max_units: u32) -> Result<(), KernelError> {
        let bad = |why: String| Err(KernelError::InvalidKnobs(why));
        let [ux, uy] = self.units;
        if ux == 0 || uy == 0 || self.rows_per_unit == 0 || self.rows_per_unit > 32 {
            return bad(format!(
                "{self}: units must be nonzero and rows per unit 1 to 32"
            ));
        }
        if ux * uy > max_units {
            return bad(format!(
                "{self}: {} units exceed the cube's {max_units}",
                ux * uy
            ));
        }
        if !(self.chunk as usize).is_power_of_two() || self.chunk > 64 {
            return bad(format!(
                "{self}: the channel chunk must be a power of two up to 64"
            ));
        }
        if shape.c_out == 0 || shape.c_out > MAX_OUT {
            return bad(format!(
                "the direct convolution computes 1 to {MAX_OUT} output channels, got {}",
                shape.c_out
            ));
        }
        shape.validate()
    }
}

impl std::fmt::Display for DirectKnobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "direct.u{}x{}.r{}.c{}",
            self.units[0], self.units[1], self.rows_per_unit, self.chunk
        )
    }
}

/// What the kernel fixes at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DirectConfig {
    pub c_out: usize,
    pub kernel: [usize; 3],
    pub units: [usize; 2],
    pub rows_per_unit: usize,
    pub chunk: usize,
}

impl DirectConfig {
    fn halo(&self) -> [usize; 2] {
        [
            self.units[1] * self.rows_per_unit + self.kernel[1] - 1,
            self.units[0] + self.kernel[2] - 1,
        ]
    }
}

/// Extents and strides of one launch (elements; the input's in vectors of `N` channels).
#[derive(CubeLaunch, CubeType)]
pub struct DirectGeometry {
    pub c_in: usize,
    /// Input T, H, W and the padding in front of each.
    pub in_t: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub pad_t: usize,
    pub pad_h: usize,
    pub pad_w: usize,
    /// Input strides of B, T, H, W in vectors.
    pub x_b: usize,
    pub x_t: usize,
    pub x_h: usize,
    pub x_w: usize,
    /// Output T, H, W.
    pub out_t: usize,
    pub out_h: usize,
    pub out_w: usize,
    /// Output strides of B, T, H, W in elements.
    pub y_b: usize,
    pub y_t: usize,
    pub y_h: usize,
    pub y_w: usize,
    /// Tiles along H and W.
    pub tiles_h: usize,
    pub tiles_w: usize,
}

#[cube(launch_unchecked, address_type = "dynamic")]
pub fn conv_direct<E: Float, N: Size>(
    x: &[Vector<E, N>],
    weight: &[E],
    bias: &[E],
    out: &mut [E],
    g: DirectGeometry,
    #[comptime] cfg: DirectConfig,
    #[define(E)] _elem: ElemType,
) {
    let c_out = comptime![cfg.c_out];
    let kt = comptime![cfg.kernel[0]];
    let kh = comptime![cfg.kernel[1]];
    let kw = comptime![cfg.kernel[2]];
    let rows = comptime![cfg.rows_per_unit];
    let units = comptime![cfg.units[0] * cfg.units[1]];
    let chunk = comptime![cfg.chunk];
    let halo_w = comptime![cfg.halo()[1]];
    let plane = comptime![cfg.halo()[0] * cfg.halo()[1]];
    let taps = comptime![cfg.kernel[1] * cfg.kernel[2]];
    let nv = N::value();
    // The input window, channel-major: [chunk][halo_h][halo_w], converted to f32 once when
    // staged rather than at each of its up to kH * kW reads.
    let mut xs = Shared::<[f32]>::new_slice(comptime![cfg.chunk * cfg.halo()[0] * cfg.halo()[1]]);
    // The chunk's weights of one temporal tap: [c][dh][dw][o] in f32.
    let mut ws = Shared::<[f32]>::new_slice(comptime![cfg.chunk * taps * cfg.c_out]);

    // Output frames fastest (see the module docs), then tiles along W, H, and the batch.
    let mut tile = CUBE_POS;
    let t_o = tile % g.out_t;
    tile /= g.out_t;
    let w0 = (tile % g.tiles_w) * comptime![cfg.units[0]];
    tile /= g.tiles_w;
    let h0 = (tile % g.tiles_h) * comptime![cfg.units[1] * cfg.rows_per_unit];
    let b = tile / g.tiles_h;
    let ux = UNIT_POS_X as usize;
    let uy = UNIT_POS_Y as usize;
    let unit = uy * comptime![cfg.units[0]] + ux;

    let mut acc = Array::<f32>::new(comptime![cfg.rows_per_unit * cfg.c_out]);
    #[unroll]
    for i in 0..rows * c_out {
        acc[i] = 0.0f32;
    }
    let mut wv = Array::<f32>::new(comptime![taps * cfg.c_out]);
    let mut win = Array::<f32>::new(comptime![
        (cfg.rows_per_unit + cfg.kernel[1] - 1) * cfg.kernel[2]
    ]);
    let zero = Vector::<E, N>::new(E::from_int(0));

    for dt in 0..kt {
        let f = t_o + dt;
        // The whole cube sees the same frame: a padded one adds nothing.
        if f >= g.pad_t && f - g.pad_t < g.in_t {
            let frame = b * g.x_b + (f - g.pad_t) * g.x_t;
            let mut c0 = 0usize;
            while c0 < g.c_in {
                // This tap's weights of the chunk, zero past C_in.
                let mut i = unit;
                while i < comptime![cfg.chunk * taps * cfg.c_out] {
                    let o = i % c_out;
                    let tap = (i / c_out) % taps;
                    let c = i / (c_out * taps);
                    let mut v = 0.0f32;
                    if c0 + c < g.c_in {
                        v = f32::cast_from(weight[((o * kt + dt) * taps + tap) * g.c_in + c0 + c]);
                    }
                    ws[i] = v;
                    i += units;
                }
                // The input window: `chunk / N` vectors per position, zeros in the padding.
                let per_position = chunk / nv;
                let mut j = unit;
                while j < plane * per_position {
                    let pos = j / per_position;
                    let v = j % per_position;
                    let ih = h0 + pos / halo_w;
                    let iw = w0 + pos % halo_w;
                    let c = c0 + v * nv;
                    let mut value = zero;
                    if ih >= g.pad_h
                        && ih - g.pad_h < g.in_h
                        && iw >= g.pad_w
                        && iw - g.pad_w < g.in_w
                        && c < g.c_in
                    {
                        value = x[frame + (ih - g.pad_h) * g.x_h + (iw - g.pad_w) * g.x_w + c / nv];
                    }
                    #[unroll]
                    for k in 0..nv {
                        xs[(v * nv + k) * plane + pos] = f32::cast_from(value.extract(k));
                    }
                    j += units;
                }
                sync_cube();
                let column = uy * rows * halo_w + ux;
                for c in 0..chunk {
                    #[unroll]
                    for k in 0..taps * c_out {
                        wv[k] = ws[c * comptime![taps * cfg.c_out] + k];
                    }
                    // The unit's window of this channel, read once: each value serves up
                    // to kH of its output rows.
                    let base = c * plane + column;
                    #[unroll]
                    for r in 0..rows + kh - 1 {
                        #[unroll]
                        for dw in 0..kw {
                            win[r * kw + dw] = xs[base + r * halo_w + dw];
                        }
                    }
                    #[unroll]
                    for p in 0..rows {
                        #[unroll]
                        for dh in 0..kh {
                            #[unroll]
                            for dw in 0..kw {
                                let v = win[(p + dh) * kw + dw];
                                #[unroll]
                                for o in 0..c_out {
                                    acc[p * c_out + o] += v * wv[(dh * kw + dw) * c_out + o];
                                }
                            }
                        }
                    }
                }
                sync_cube();
                c0 += chunk;
            }
        }
    }

    let ow = w0 + ux;
    if ow < g.out_w {
        let at = b * g.y_b + t_o * g.y_t + ow * g.y_w;
        #[unroll]
        for p in 0..rows {
            let oh = h0 + uy * rows + p;
            if oh < g.out_h {
                #[unroll]
                for o in 0..c_out {
                    out[at + oh * g.y_h + o] =
                        E::cast_from(acc[p * c_out + o] + f32::cast_from(bias[o]));
                }
            }
        }
    }
}

/// The widest vector of channels (at most 16 bytes and `chunk`) that divides `C_in` and the
/// input's strides.
fn channel_vector(shape: &ConvShape, strides: &[usize], elem: ElemType, chunk: usize) -> usize {
    let mut v = (16 / elem.size()).clamp(1, chunk);
    while v > 1 && !(shape.c_in.is_multiple_of(v) && strides[..4].iter().all(|s| s % v == 0)) {
        v /= 2;
    }
    v
}

/// Launches the direct convolution of `shape` with `knobs` on `operands` (as the module docs of
/// [`super`] lay them out; `weight` dense, the bias required).
///
/// # Errors
/// Knobs that do not fit the shape or the device, a missing bias, a channel axis that is not
/// contiguous, or an element type other than f32 / f16 / bf16.
pub fn launch_direct(
    client: &Client,
    operands: ConvOperands,
    elem: ElemType,
    shape: &ConvShape,
    knobs: &DirectKnobs,
) -> Result<(), KernelError> {
    let bad = |why: String| Err(KernelError::InvalidKnobs(why));
    let hw = &client.properties().hardware;
    knobs.validate(shape, hw.max_units_per_cube)?;
    if knobs.shared_bytes(shape) > hw.max_shared_memory_size {
        return bad(format!(
            "{knobs}: {} bytes of shared memory per cube, the device has {}",
            knobs.shared_bytes(shape),
            hw.max_shared_memory_size
        ));
    }
    if !matches!(elem, ElemType::Float(_)) {
        return bad(format!(
            "the direct convolution runs f32 / f16 / bf16, got {elem:?}"
        ));
    }
    let ConvOperands {
        input,
        weight,
        bias,
        out,
        accumulate,
    } = operands;
    if accumulate {
        return bad("the direct convolution does not add to its output (`accumulate`)".into());
    }
    let Some(bias) = bias else {
        return bad("the direct convolution needs a bias".into());
    };
    let (xs, ys) = (input.strides.to_vec(), out.strides.to_vec());
    if xs.len() != 5 || ys.len() != 5 || xs[4] != 1 || ys[4] != 1 {
        return bad(format!(
            "the direct convolution wants 5-D strides with contiguous channels, got input \
             {xs:?} and output {ys:?}"
        ));
    }
    let [tile_h, tile_w] = knobs.tile();
    let [out_t, out_h, out_w] = shape.output;
    let tiles_h = out_h.div_ceil(tile_h);
    let tiles_w = out_w.div_ceil(tile_w);
    let cubes = shape.batch * out_t * tiles_h * tiles_w;
    if cubes > hw.max_cube_count.0 as usize {
        return bad(format!(
            "{cubes} tiles exceed the device's {} cubes per launch",
            hw.max_cube_count.0
        ));
    }
    let nv = channel_vector(shape, &xs, elem, knobs.chunk as usize);
    let [in_t, in_h, in_w] = shape.input;
    let x_len = (super::span(&[shape.batch, in_t, in_h, in_w], &xs) + shape.c_in) / nv;
    let y_len = super::span(&[shape.batch, out_t, out_h, out_w], &ys) + shape.c_out;
    let w_len = shape.c_out * shape.reduction();
    let cfg = DirectConfig {
        c_out: shape.c_out,
        kernel: shape.kernel,
        units: [knobs.units[0] as usize, knobs.units[1] as usize],
        rows_per_unit: knobs.rows_per_unit as usize,
        chunk: knobs.chunk as usize,
    };
    let [pad_t, pad_h, pad_w] = shape.padding;
    log::debug!("conv_direct: {shape:?} {knobs} vector {nv} cubes {cubes}");
    unsafe {
        conv_direct::launch_unchecked(
            client,
            CubeCount::new_1d(cubes as u32),
            CubeDim::new_2d(knobs.units[0], knobs.units[1]),
            AddressType::from_len((x_len * nv).max(y_len).max(w_len)),
            nv,
            BufferArg::from_raw_parts_binding(input.handle, x_len),
            BufferArg::from_raw_parts_binding(weight.handle, w_len),
            BufferArg::from_raw_parts_binding(bias.handle, shape.c_out),
            BufferArg::from_raw_parts_binding(out.handle, y_len),
            DirectGeometryLaunch::new(
                shape.c_in,
                in_t,
                in_h,
                in_w,
                pad_t,
                pad_h,
                pad_w,
                xs[0] / nv,
                xs[1] / nv,
                xs[2] / nv,
                xs[3] / nv,
                out_t,
                out_h,
                out_w,
                ys[0],
                ys[1],
                ys[2],
                ys[3],
                tiles_h,
                tiles_w,
            ),
            cfg,
            elem,
        );
    }
    Ok(())
}

impl crate::table::TextKnobs for DirectKnobs {
    const KERNEL: &'static str = "direct conv";
    fn from_text(text: &str) -> Result<Self, String> {
        Self::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips_and_names_bad_parts() {
        let k = DirectKnobs::default();
        assert_eq!(k.to_string(), "direct.u32x4.r8.c16");
        assert_eq!(DirectKnobs::parse(&k.to_string()), Ok(k));
        let k = DirectKnobs::parse("direct.u16x8.r4.c16").unwrap();
        assert_eq!(k.tile(), [32, 16]);
        assert!(
            DirectKnobs::parse("direct.u16.r4.c16")
                .unwrap_err()
                .contains("bad units")
        );
        assert!(
            DirectKnobs::parse("direct.u16x8.q4.c16")
                .unwrap_err()
                .contains("rows per unit")
        );
        assert!(
            DirectKnobs::parse("mma.u16x8.r4.c16")
                .unwrap_err()
                .contains("start with")
        );
    }

    #[test]
    fn validation_names_the_limit() {
        let shape = ConvShape {
            batch: 1,
            input: [3, 8, 8],
            c_in: 96,
            c_out: 3,
            kernel: [3, 3, 3],
            padding: [0, 1, 1],
            output: [1, 8, 8],
        };
        assert!(DirectKnobs::default().validate(&shape, 1024).is_ok());
        let wide = ConvShape { c_out: 8, ..shape };
        assert!(
            DirectKnobs::default()
                .validate(&wide, 1024)
                .unwrap_err()
                .to_string()
                .contains("1 to 4")
        );
        let big = DirectKnobs {
            units: [64, 32],
            ..DirectKnobs::default()
        };
        assert!(
            big.validate(&shape, 1024)
                .unwrap_err()
                .to_string()
                .contains("exceed")
        );
        let odd = DirectKnobs {
            chunk: 12,
            ..DirectKnobs::default()
        };
        assert!(
            odd.validate(&shape, 1024)
                .unwrap_err()
                .to_string()
                .contains("power of two")
        );
        // The CubeCL CPU runtime on two cores: two units per cube, at most 2 along an axis.
        let small = DirectKnobs::default().fitted(&shape, 2, [2, 2], 49_152);
        assert_eq!(small.to_string(), "direct.u2x1.r8.c16");
        assert!(small.validate(&shape, 2).is_ok());
        let tight = DirectKnobs::default().fitted(&shape, 1024, [1024, 1024], 20_000);
        assert!(tight.shared_bytes(&shape) <= 20_000, "{tight}");
        assert_eq!((tight.units, tight.rows_per_unit), ([32, 4], 8), "{tight}");
        // 16 channels of a 34 x 34 window and 16 x 9 x 3 weights, in f32.
        assert_eq!(
            DirectKnobs::default().shared_bytes(&shape),
            16 * (34 * 34 + 27) * 4
        );
    }
}
