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

mod kernel;
mod ptx;

pub use kernel::conv_wgmma;

use super::{ConvOperands, ConvShape, span};
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
    /// Apply the norm to the input as it is loaded ([`NormPrologue`]).
    pub norm: bool,
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
    /// Input frames `tail_t..` come from the second source (`in_t` without one), whose strides
    /// follow.
    pub tail_t: usize,
    pub tail_b: usize,
    pub tail_ft: usize,
    pub tail_h: usize,
    pub tail_w: usize,
    pub out_t: usize,
    pub out_h: usize,
    pub out_w: usize,
    /// Output strides of B, T, H, W in elements.
    pub y_b: usize,
    pub y_t: usize,
    pub y_h: usize,
    pub y_w: usize,
}

/// The wgmma launch for `shape` on a device of compute capability `sm` (x 10): the table's
/// `wgmma` entry, else two warpgroups of 128 channels in steps of 64, or of 32 with four in
/// flight where `C_in` is not a multiple of 64 (for callers that run this kernel whatever the
/// table says, such as the norm in its load).
pub fn select_wgmma(sm: Option<u32>, shape: &ConvShape) -> WgmmaKnobs {
    match super::select_conv(sm, shape) {
        super::ConvChoice::Wgmma(k) => k,
        _ if shape.c_in.is_multiple_of(64) => WgmmaKnobs::default(),
        _ => WgmmaKnobs {
            k: 32,
            stages: 4,
            ..WgmmaKnobs::default()
        },
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

/// The norm applied to the convolution's input in its load (`silu(x inv_rms gamma)`, the
/// padding still zero): `inv_rms` dense f32 `[B, T, H, W]` over the input's positions (as
/// [`crate::conv::prologue::launch_positions_inv_rms`] writes it), `gamma` `C_in` values of the
/// input's element type.
pub struct NormPrologue {
    pub inv_rms: TensorBinding,
    pub gamma: TensorBinding,
}

/// A second input source: the input's frames from `first_frame` on are read from `input`
/// (channels-last, its own strides; frame `first_frame` is its frame 0), the ones before from
/// the operands' input. A causal convolution's cached frames and the new chunk, read where
/// they lie instead of joined into one buffer.
pub struct InputTail {
    pub input: TensorBinding,
    pub first_frame: usize,
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
    prologue: Option<NormPrologue>,
    tail: Option<InputTail>,
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
        norm: prologue.is_some(),
    };
    let [in_t, in_h, in_w] = shape.input;
    let [out_t, out_h, out_w] = shape.output;
    let [pad_t, pad_h, pad_w] = shape.padding;
    let dims_of = |b: &TensorBinding| -> [usize; 4] {
        let d = b.shape.to_vec();
        [d[0], d[1], d[2], d[3]]
    };
    if input.shape.len() != 5 {
        return bad(format!("a 5-D input, got {:?}", input.shape.to_vec()));
    }
    let head = dims_of(&input);
    let x_len = (span(&head, &xs) + shape.c_in) / 8;
    // The second source: its frames, strides (vectors) and length; without one, the first
    // source stands in and no frame reaches it.
    let (tail_handle, tail_t, ts, tail_len) = match tail {
        Some(tail) => {
            let ts = tail.input.strides.to_vec();
            let td = tail.input.shape.to_vec();
            let want = [
                shape.batch,
                in_t - tail.first_frame.min(in_t),
                in_h,
                in_w,
                shape.c_in,
            ];
            if tail.first_frame > in_t
                || td != want
                || head[1] != tail.first_frame
                || ts.len() != 5
                || ts[4] != 1
                || ts[..4].iter().any(|s| s % 8 != 0)
            {
                return bad(format!(
                    "the input's frames 0..{} and a second source of shape {want:?} with \
                     contiguous channels and strides multiples of 8, got {:?} and {td:?} \
                     (strides {ts:?})",
                    tail.first_frame,
                    input.shape.to_vec()
                ));
            }
            let len = (span(&dims_of(&tail.input), &ts) + shape.c_in) / 8;
            (tail.input.handle, tail.first_frame, ts, len)
        }
        None => (input.handle.clone(), in_t, vec![0; 5], x_len),
    };
    let y_len = span(&[shape.batch, out_t, out_h, out_w], &ys) + shape.c_out;
    let w_len = shape.c_out * shape.reduction() / 8;
    // Without the prologue the kernel reads neither buffer: the bias stands in for both.
    let positions = shape.batch * in_t * in_h * in_w;
    let (inv_rms, gamma, inv_rms_len, gamma_len) = match prologue {
        Some(p) => {
            let (r, gm) = (
                p.inv_rms.shape.iter().product::<usize>(),
                p.gamma.shape.to_vec(),
            );
            if r != positions || gm != [shape.c_in] {
                return bad(format!(
                    "the norm prologue wants {positions} inverse RMS values and gamma [{}], got \
                     {r} and {gm:?}",
                    shape.c_in
                ));
            }
            (p.inv_rms, p.gamma, positions, shape.c_in / 8)
        }
        None => (bias.clone(), bias.clone(), 1, 1),
    };
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
            AddressType::from_len((x_len.max(tail_len) * 8).max(y_len).max(w_len * 8)),
            8,
            BufferArg::from_raw_parts_binding(input.handle, x_len),
            BufferArg::from_raw_parts_binding(tail_handle, tail_len),
            BufferArg::from_raw_parts_binding(weight.handle, w_len),
            BufferArg::from_raw_parts_binding(bias.handle.clone(), shape.c_out),
            BufferArg::from_raw_parts_binding(inv_rms.handle, inv_rms_len),
            BufferArg::from_raw_parts_binding(gamma.handle, gamma_len),
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
                tail_t,
                ts[0] / 8,
                ts[1] / 8,
                ts[2] / 8,
                ts[3] / 8,
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
