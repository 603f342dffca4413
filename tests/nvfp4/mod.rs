//! NVFP4 output: the kernel's bytes against the host quantiser (`formats::nvfp4_block`) applied
//! to the f64 reference rounded to f32, both recipes, both scale layouts; Burn's own
//! `dequantize()` of the returned `QFloat` tensor against the host decoder; the errors.

use burn::tensor::{DType, Tensor};
use rmsnorm_silu_kernels::LaneReduce;
use rmsnorm_silu_kernels::formats::{
    Fp4Block, Nvfp4Recipe, e4m3_decode, nvfp4_block, nvfp4_dequantize, swizzled_scale_bytes,
    swizzled_scale_offset, te_global_scale,
};
use rmsnorm_silu_kernels::nvfp4::{
    Fp4Knobs, Fp4Recipe, Fp4Target, ScaleLayout, heuristic_fp4_knobs, launch_forward_nvfp4,
};
use rmsnorm_silu_kernels::{Activation, NormParams, RowOperands, RowsProblem};

use burn_rmsnorm_silu::{
    Nvfp4Scaling, RmsNormSiluOptions, rms_norm_silu_nvfp4, rms_norm_silu_nvfp4_parts,
};

use crate::common::*;
use crate::kernel_knobs::{cube_device, elem, upload};

// The encoding against the host, every knob path, and the public API with its refusals.
mod api;
mod device_amax;
mod encoding;
mod knob_paths;

/// Host blocks of `y` (row-major `rows x channels`, rounded to f32 first).
fn host_blocks(y: &[f64], recipe: Nvfp4Recipe) -> Vec<Fp4Block> {
    y.chunks_exact(16)
        .map(|chunk| {
            let mut b = [0f32; 16];
            for (o, &v) in b.iter_mut().zip(chunk) {
                *o = v as f32;
            }
            nvfp4_block(&b, recipe)
        })
        .collect()
}

/// The signed position of an E2M1 code on the number line (-7..=7), for "within one code".
fn ordinal(code: u8) -> i32 {
    let m = (code & 7) as i32;
    if code & 8 != 0 { -m } else { m }
}

/// Compares kernel bytes (`codes` row-major, `scales` row-major) with the host's; returns
/// (differing scales, differing nibbles). Every nibble of a block with the host's scale is
/// within one code of the host's; a block whose scale differs (fp32 rounding of `y` at an
/// E4M3 rounding boundary) is one scale code away.
fn compare_blocks(codes: &[u8], scales: &[u8], host: &[Fp4Block], what: &str) -> (usize, usize) {
    let (mut scale_diffs, mut nibble_diffs) = (0, 0);
    for (b, h) in host.iter().enumerate() {
        let got_scale = scales[b];
        let nan = e4m3_decode(got_scale).is_nan();
        if nan || e4m3_decode(h.scale).is_nan() {
            assert!(
                nan && e4m3_decode(h.scale).is_nan(),
                "{what}: block {b}: scale {got_scale:#04x} vs host {:#04x}",
                h.scale
            );
        } else if got_scale != h.scale {
            scale_diffs += 1;
            assert_eq!(
                (got_scale as i32 - h.scale as i32).abs(),
                1,
                "{what}: block {b}: scale {got_scale:#04x} vs host {:#04x}",
                h.scale
            );
            continue;
        }
        for i in 0..8 {
            let got = codes[b * 8 + i];
            let want = h.packed[i];
            for (g, w) in [(got & 15, want & 15), (got >> 4, want >> 4)] {
                if g != w {
                    nibble_diffs += 1;
                    assert!(
                        (ordinal(g) - ordinal(w)).abs() <= 1,
                        "{what}: block {b} byte {i}: nibble {g:#x} vs host {w:#x}"
                    );
                }
            }
        }
    }
    (scale_diffs, nibble_diffs)
}

/// An NVFP4 launch's host inputs: `x` of `[rows, channels]` (row-major) and `gamma`, uploaded in
/// `dtype`.
#[derive(Clone, Copy)]
struct Fp4Case<'a> {
    x: &'a [f64],
    gamma: &'a [f64],
    rows: usize,
    channels: usize,
    dtype: DType,
}

impl<'a> Fp4Case<'a> {
    fn new(x: &'a [f64], gamma: &'a [f64], [rows, channels]: [usize; 2], dtype: DType) -> Self {
        Self {
            x,
            gamma,
            rows,
            channels,
            dtype,
        }
    }
}

/// Launches the kernel into poisoned buffers and returns (codes, scales) bytes.
fn launch(
    case: Fp4Case,
    norm: NormParams,
    recipe: Fp4Recipe,
    layout: ScaleLayout,
    s_enc: f32,
) -> (Vec<u8>, Vec<u8>) {
    let device = cube_device();
    let knobs = heuristic_fp4_knobs(&device.client(), case.channels, case.dtype.size());
    launch_with(case, norm, recipe, layout, s_enc, knobs)
}

/// [`launch`] with explicit knobs.
fn launch_with(
    case: Fp4Case,
    norm: NormParams,
    recipe: Fp4Recipe,
    layout: ScaleLayout,
    s_enc: f32,
    knobs: Fp4Knobs,
) -> (Vec<u8>, Vec<u8>) {
    let Fp4Case {
        x,
        gamma,
        rows,
        channels,
        dtype,
    } = case;
    let device = cube_device();
    let xt = upload(x, vec![rows, channels], dtype, &device);
    let gt = upload(gamma, vec![channels], dtype, &device);
    let client = xt.client.clone();
    let scale_len = match layout {
        ScaleLayout::RowMajor => rows * channels / 16,
        ScaleLayout::Swizzled128x4 => swizzled_scale_bytes(rows, channels),
    };
    // Poison: 0xFF everywhere (an E4M3 NaN scale, -6 codes).
    let codes = client.create_from_slice(&vec![0xFFu8; rows * channels / 2]);
    let scales = client.create_from_slice(&vec![0xFFu8; scale_len.max(1)]);
    let target = Fp4Target {
        codes: codes.clone(),
        scales: scales.clone(),
        recipe,
        layout,
        s_enc,
        device_amax: None,
    };
    launch_forward_nvfp4(
        &client,
        RowOperands {
            x: xt.handle.clone(),
            gamma: gt.handle.clone(),
            x_type: elem(dtype),
            gamma_type: elem(dtype),
        },
        target,
        RowsProblem::dense(rows, channels),
        norm,
        Activation::Silu,
        &knobs,
    )
    .unwrap_or_else(|e| panic!("{knobs}: {e}"));
    (
        client.read_one_unchecked(codes).to_vec(),
        client.read_one_unchecked(scales).to_vec(),
    )
}

/// Whether the device has plane operations (shuffles): the plane lane reductions need them.
fn has_plane_ops(client: &rmsnorm_silu_kernels::cubecl::prelude::Client) -> bool {
    client
        .features()
        .plane
        .contains(rmsnorm_silu_kernels::cubecl::ir::features::Plane::Ops)
}

/// Rows for the knob-path tests: cuDNN-style inputs with row 2's fp32 sum of squares
/// overflowing (~1e30) and row 5's underflowing (eps 0), so the rescue pass runs; with the
/// host's blocks of their f64 reference (cuDNN recipe).
struct RescueRows {
    x: Vec<f64>,
    gamma: Vec<f64>,
    rows: usize,
    channels: usize,
    host: Vec<Fp4Block>,
}

impl RescueRows {
    fn new(rng: &mut rand::rngs::StdRng, rows: usize, channels: usize) -> Self {
        let (mut x, gamma, _) = cudnn_inputs(rng, rows, channels, DType::F32);
        for c in 0..channels {
            x[2 * channels + c] *= 1e30; // overflows the fp32 sum of squares
            x[5 * channels + c] *= 1e-30; // underflows it (eps = 0)
        }
        let y = reference(&x, &gamma, NormParams::rms(0.0), Activation::Silu);
        let host = host_blocks(&y, Nvfp4Recipe::Cudnn);
        RescueRows {
            x,
            gamma,
            rows,
            channels,
            host,
        }
    }

    /// The kernel with `knobs` against the host: at most two bytes one step away.
    fn check(&self, knobs: Fp4Knobs) {
        let (codes, scales) = launch_with(
            Fp4Case::new(&self.x, &self.gamma, [self.rows, self.channels], DType::F32),
            NormParams::rms(0.0),
            Fp4Recipe::Cudnn,
            ScaleLayout::RowMajor,
            1.0,
            knobs,
        );
        let (s, n) = compare_blocks(&codes, &scales, &self.host, &knobs.to_string());
        assert!(s + n <= 2, "{knobs}: {s} scales and {n} codes differ");
    }
}
