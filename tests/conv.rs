//! `conv3d_channels_last` against an f64 host convolution: causal temporal padding (first
//! chunk: zeros in front; later chunks: none), 3x3x3, 3x1x1, 1x3x3 and 1x1x1 kernels, odd
//! channel counts, f32 and bf16; and its argument errors. On CUDA this runs cubek's implicit
//! GEMM (tf32 for f32 inputs), on the CPU runtime Burn's own convolution; at most four output
//! channels run the crate's direct kernel on both (its cube shrunk to the CPU runtime's).

use burn::tensor::DType;
use burn_rmsnorm_silu::{
    ConvPadding, Phases, conv3d_channels_last, conv3d_channels_last_add,
    conv3d_channels_last_phases, fold_upsample2x_weights,
};

use crate::common::*;
use rmsnorm_silu_kernels::conv::ConvShape;
use rmsnorm_silu_kernels::cubecl::prelude::TensorBinding;
use rmsnorm_silu_kernels::cubecl::server::Handle;
use rmsnorm_silu_kernels::cubecl::zspace::Shape;
use rmsnorm_silu_kernels::cubecl::zspace::striding::row_major_contiguous_strides;

/// A dense row-major view of `handle` as `shape` (the kernel-level tests' operands).
pub(crate) fn binding(handle: &Handle, shape: &[usize]) -> TensorBinding {
    unsafe {
        TensorBinding::from_raw_parts(
            handle.clone(),
            row_major_contiguous_strides(shape),
            Shape::from(shape.to_vec()),
        )
    }
}

/// The kernels' geometry of the convolution of `xs` by `ws` with `padding`, into `out`.
pub(crate) fn shape_of(
    xs: [usize; 5],
    ws: [usize; 5],
    padding: ConvPadding,
    out: [usize; 5],
) -> ConvShape {
    ConvShape {
        batch: xs[0],
        input: [xs[1], xs[2], xs[3]],
        c_in: xs[4],
        c_out: ws[0],
        kernel: [ws[1], ws[2], ws[3]],
        padding: [padding.t.0, padding.h.0, padding.w.0],
        output: [out[1], out[2], out[3]],
    }
}
/// `y[b, t, h, w, o] = bias[o] + sum x[b, t + dt - pt, h + dh - ph, w + dw - pw, i] w[o, dt, dh, dw, i]`.
pub(crate) fn reference(
    x: &[f64],
    xs: [usize; 5],
    w: &[f64],
    ws: [usize; 5],
    bias: &[f64],
    padding: ConvPadding,
) -> (Vec<f64>, [usize; 5]) {
    let [b, t, h, wd, ci] = xs;
    let [co, kt, kh, kw, _] = ws;
    let (pt, ph, pw) = (padding.t, padding.h, padding.w);
    let out_t = t + pt.0 + pt.1 + 1 - kt;
    let out_h = h + ph.0 + ph.1 + 1 - kh;
    let out_w = wd + pw.0 + pw.1 + 1 - kw;
    let mut y = Vec::with_capacity(b * out_t * out_h * out_w * co);
    for n in 0..b {
        for ot in 0..out_t {
            for oy in 0..out_h {
                for ox in 0..out_w {
                    for (o, &b_o) in bias.iter().enumerate().take(co) {
                        let mut acc = b_o;
                        for dt in 0..kt {
                            let it = (ot + dt) as isize - pt.0 as isize;
                            for dy in 0..kh {
                                let iy = (oy + dy) as isize - ph.0 as isize;
                                for dx in 0..kw {
                                    let ix = (ox + dx) as isize - pw.0 as isize;
                                    if it < 0
                                        || iy < 0
                                        || ix < 0
                                        || it >= t as isize
                                        || iy >= h as isize
                                        || ix >= wd as isize
                                    {
                                        continue;
                                    }
                                    let xi = (((n * t + it as usize) * h + iy as usize) * wd
                                        + ix as usize)
                                        * ci;
                                    let wi = (((o * kt + dt) * kh + dy) * kw + dx) * ci;
                                    for i in 0..ci {
                                        acc += x[xi + i] * w[wi + i];
                                    }
                                }
                            }
                        }
                        y.push(acc);
                    }
                }
            }
        }
    }
    (y, [b, out_t, out_h, out_w, co])
}

/// Relative to the output's scale. bf16: output rounding with f32 sums on CUDA (cubek); Burn's
/// convolution on the CPU runtime also sums in bf16 (measured up to 1.2e-2 at K = 162). f32:
/// tf32 products on CUDA.
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::BF16 if on_gpu() => 1e-2,
        DType::BF16 => 3e-2,
        _ if on_gpu() => 3e-3,
        _ => 1e-5,
    }
}

/// `conv3d_channels_last` of random inputs in `dtype` (x normal, weight and bias uniform in
/// ±0.5, drawn in that order) and the host convolution of the same rounded values: (result,
/// reference, reference shape).
fn random_case(
    rng: &mut rand::rngs::StdRng,
    device: &burn::tensor::Device,
    xs: [usize; 5],
    ws: [usize; 5],
    padding: ConvPadding,
    dtype: DType,
) -> (burn::tensor::Tensor<5>, Vec<f64>, [usize; 5]) {
    let x = round_to(&randn(rng, xs.iter().product()), dtype);
    let w = round_to(&uniform(rng, ws.iter().product(), -0.5, 0.5), dtype);
    let b = round_to(&uniform(rng, ws[0], -0.5, 0.5), dtype);
    let (want, shape) = reference(&x, xs, &w, ws, &b, padding);
    let got = conv3d_channels_last(
        tensor::<5>(&x, xs, dtype, device),
        tensor::<5>(&w, ws, dtype, device),
        tensor::<1>(&b, [ws[0]], dtype, device),
        padding,
    );
    (got, want, shape)
}

/// The channels-last causal convolution against the host's f64 convolution: the first chunk's
/// zero frames, cached frames, the temporal upsampler's 3x1x1, per-frame 3x3 and 1x1, asymmetric
/// spatial padding; in f32 here.
#[test]
fn matches_the_host_convolution_in_f32() {
    host_convolution_cases(DType::F32);
}

/// [`matches_the_host_convolution_in_f32`] in bf16 (a test of its own: each dtype compiles its
/// own kernels, and a parallel suite runs the two side by side).
#[test]
fn matches_the_host_convolution_in_bf16() {
    host_convolution_cases(DType::BF16);
}

fn host_convolution_cases(dtype: DType) {
    let device = device();
    let mut rng = rng(&format!("conv3d_channels_last {dtype:?}"));
    let cases: [([usize; 5], [usize; 5], ConvPadding); 7] = [
        // First chunk: one frame, two zero frames in front.
        ([1, 1, 5, 6, 7], [5, 3, 3, 3, 7], ConvPadding::causal(2, 1)),
        // Later chunk: two cached frames and two new ones.
        ([1, 4, 4, 5, 6], [9, 3, 3, 3, 6], ConvPadding::causal(0, 1)),
        // One cached frame only: one zero frame in front.
        ([2, 2, 3, 4, 8], [4, 3, 3, 3, 8], ConvPadding::causal(1, 1)),
        // The temporal upsampler's 3x1x1.
        ([1, 3, 4, 5, 8], [16, 3, 1, 1, 8], ConvPadding::causal(0, 0)),
        // A per-frame 3x3 and 1x1.
        ([1, 2, 7, 3, 5], [3, 1, 3, 3, 5], ConvPadding::causal(0, 1)),
        ([1, 3, 2, 5, 9], [5, 1, 1, 1, 9], ConvPadding::causal(0, 0)),
        // Asymmetric spatial padding.
        (
            [1, 1, 4, 4, 4],
            [4, 1, 3, 3, 4],
            ConvPadding {
                t: (0, 0),
                h: (2, 0),
                w: (0, 2),
            },
        ),
    ];
    for (xs, ws, padding) in cases {
        let (got, want, shape) = random_case(&mut rng, &device, xs, ws, padding, dtype);
        assert_eq!(got.dims(), shape, "{xs:?} * {ws:?} {padding:?}");
        assert_eq!(got.dtype(), dtype);
        let rel = tolerance(dtype);
        assert_close_to_scale(
            &values(got),
            &want,
            rel,
            &format!("{dtype:?} {xs:?} * {ws:?} {padding:?}"),
        );
    }
}

/// `conv3d_channels_last_add` against the host convolution plus the residual: a residual that
/// is the tensor's last use (on CUDA the convolution stores into it, adding), one that is
/// still used afterwards (it must come back unchanged), a channels-first view (not dense), and
/// a layer the direct kernel runs (no accumulating form); f32 and bf16.
#[test]
fn residual_joins_in_the_store() {
    let device = device();
    for dtype in [DType::F32, DType::BF16] {
        let mut rng = rng(&format!("conv3d_channels_last_add {dtype:?}"));
        let cases: [([usize; 5], [usize; 5], ConvPadding); 3] = [
            ([1, 1, 5, 6, 7], [5, 3, 3, 3, 7], ConvPadding::causal(2, 1)),
            ([2, 3, 2, 5, 9], [6, 1, 1, 1, 9], ConvPadding::causal(0, 0)),
            ([1, 1, 4, 5, 8], [3, 3, 3, 3, 8], ConvPadding::causal(2, 1)),
        ];
        for (xs, ws, padding) in cases {
            let x = round_to(&randn(&mut rng, xs.iter().product()), dtype);
            let w = round_to(&uniform(&mut rng, ws.iter().product(), -0.5, 0.5), dtype);
            let b = round_to(&uniform(&mut rng, ws[0], -0.5, 0.5), dtype);
            let (conv, shape) = reference(&x, xs, &w, ws, &b, padding);
            let r = round_to(&randn(&mut rng, conv.len()), dtype);
            let want: Vec<f64> = conv.iter().zip(&r).map(|(c, r)| c + r).collect();
            let run = |residual: burn::tensor::Tensor<5>| {
                conv3d_channels_last_add(
                    tensor::<5>(&x, xs, dtype, &device),
                    tensor::<5>(&w, ws, dtype, &device),
                    tensor::<1>(&b, [ws[0]], dtype, &device),
                    padding,
                    residual,
                )
            };
            let what = format!("{dtype:?} {xs:?} * {ws:?}");
            let rel = tolerance(dtype);
            // The residual's last use.
            let got = run(tensor::<5>(&r, shape, dtype, &device));
            assert_eq!(got.dims(), shape, "{what}");
            assert_close_to_scale(&values(got), &want, rel, &format!("{what}, last use"));
            // Still used afterwards: the sum is right and the residual unchanged.
            let kept = tensor::<5>(&r, shape, dtype, &device);
            let got = run(kept.clone());
            assert_close_to_scale(&values(got), &want, rel, &format!("{what}, shared"));
            assert_eq!(values(kept), r, "{what}: a shared residual was written");
            // A channels-first tensor permuted to channels-last.
            let [n, t, h, wd, c] = shape;
            let mut first = vec![0.0; r.len()];
            for (i, v) in r.iter().enumerate() {
                let (ci, p) = (i % c, i / c);
                let (wi, p) = (p % wd, p / wd);
                let (hi, p) = (p % h, p / h);
                let (ti, ni) = (p % t, p / t);
                first[(((ni * c + ci) * t + ti) * h + hi) * wd + wi] = *v;
            }
            let view =
                tensor::<5>(&first, [n, c, t, h, wd], dtype, &device).permute([0, 2, 3, 4, 1]);
            let got = run(view);
            assert_close_to_scale(&values(got), &want, rel, &format!("{what}, view"));
        }
    }
}

/// Layers of at most four output channels (the decoder's `conv_out`) run the crate's direct
/// kernel: outputs spanning several of its 32 x 32 tiles with partial edge tiles, the first
/// chunk's zero frames, several output frames, channel counts that allow vectors of 8, 4 and 1,
/// and a chunk of channels that is partly past `C_in`.
#[test]
fn narrow_outputs_match_the_host_convolution() {
    let device = device();
    let mut rng = rng("conv3d_channels_last narrow");
    let cases: [([usize; 5], [usize; 5], ConvPadding); 4] = [
        (
            [1, 3, 37, 45, 24],
            [3, 3, 3, 3, 24],
            ConvPadding::causal(0, 1),
        ),
        (
            [1, 1, 33, 9, 20],
            [3, 3, 3, 3, 20],
            ConvPadding::causal(2, 1),
        ),
        ([2, 4, 5, 70, 7], [1, 3, 3, 3, 7], ConvPadding::causal(1, 1)),
        (
            [1, 2, 65, 3, 16],
            [4, 1, 3, 3, 16],
            ConvPadding::causal(0, 1),
        ),
    ];
    for dtype in [DType::F32, DType::BF16] {
        for (xs, ws, padding) in cases {
            let (got, want, shape) = random_case(&mut rng, &device, xs, ws, padding, dtype);
            assert_eq!(got.dims(), shape, "{xs:?} * {ws:?} {padding:?}");
            // f32 sums on every runtime: bf16 output rounding, or f32 rounding.
            let rel = if dtype == DType::BF16 { 1e-2 } else { 1e-5 };
            assert_close_to_scale(
                &values(got),
                &want,
                rel,
                &format!("direct {dtype:?} {xs:?} * {ws:?} {padding:?}"),
            );
        }
    }
}

/// A channels-first tensor permuted to `[B, T, H, W, C]` (channels not contiguous, as the
/// decoder's latent): copied once and convolved, for the direct kernel (3 output channels) and
/// the wider path (8), against the host convolution of the permuted values.
#[test]
fn channels_first_views_match_the_host_convolution() {
    let device = device();
    let mut rng = rng("conv3d_channels_last channels-first view");
    let (b, c, t, h, w) = (1, 6, 3, 5, 7);
    let first = round_to(&randn(&mut rng, b * c * t * h * w), DType::F32);
    // The same values channels-last, for the reference.
    let mut last = vec![0.0; first.len()];
    for ci in 0..c {
        for p in 0..t * h * w {
            last[p * c + ci] = first[ci * t * h * w + p];
        }
    }
    for c_out in [3, 8] {
        let ws = [c_out, 3, 3, 3, c];
        let wv = round_to(
            &uniform(&mut rng, ws.iter().product(), -0.5, 0.5),
            DType::F32,
        );
        let bias = round_to(&uniform(&mut rng, c_out, -0.5, 0.5), DType::F32);
        let padding = ConvPadding::causal(2, 1);
        let (want, shape) = reference(&last, [b, t, h, w, c], &wv, ws, &bias, padding);
        let x = tensor::<5>(&first, [b, c, t, h, w], DType::F32, &device).permute([0, 2, 3, 4, 1]);
        let got = conv3d_channels_last(
            x,
            tensor::<5>(&wv, ws, DType::F32, &device),
            tensor::<1>(&bias, [c_out], DType::F32, &device),
            padding,
        );
        assert_eq!(got.dims(), shape, "C_out {c_out}");
        assert_close_to_scale(
            &values(got),
            &want,
            tolerance(DType::F32),
            &format!("channels-first view, C_out {c_out}"),
        );
    }
}

/// Nearest x2 upsampling of H and W then a 3x3 convolution (padding 1), against the four folded
/// 2x2 phase convolutions of the low-resolution input; odd sizes, batch 2, bf16 and f32.
#[test]
fn upsample_phases_match_upsample_then_conv() {
    let device = device();
    let mut rng = rng("conv3d_channels_last_phases upsample");
    for (xs, c_out) in [
        ([1, 2, 5, 7, 6], 5),
        ([2, 1, 3, 4, 8], 8),
        ([1, 1, 1, 1, 3], 2),
    ] {
        let [b, t, h, w, ci] = xs;
        for dtype in [DType::F32, DType::BF16] {
            let x = round_to(&randn(&mut rng, xs.iter().product()), dtype);
            let wt = round_to(&uniform(&mut rng, c_out * 9 * ci, -0.5, 0.5), dtype);
            let bias = round_to(&uniform(&mut rng, c_out, -0.5, 0.5), dtype);
            let mut up = Vec::with_capacity(x.len() * 4);
            for n in 0..b * t {
                for y in 0..2 * h {
                    for xx in 0..2 * w {
                        let src = ((n * h + y / 2) * w + xx / 2) * ci;
                        up.extend_from_slice(&x[src..src + ci]);
                    }
                }
            }
            let (want, shape) = reference(
                &up,
                [b, t, 2 * h, 2 * w, ci],
                &wt,
                [c_out, 1, 3, 3, ci],
                &bias,
                ConvPadding::causal(0, 1),
            );
            let w32: Vec<f32> = wt.iter().map(|&v| v as f32).collect();
            let folded: Vec<f64> = fold_upsample2x_weights(&w32, c_out, ci)
                .iter()
                .map(|&v| v as f64)
                .collect();
            let bias4: Vec<f64> = (0..4).flat_map(|_| bias.iter().copied()).collect();
            let got = conv3d_channels_last_phases(
                tensor::<5>(&x, xs, dtype, &device),
                tensor::<6>(&folded, [4, c_out, 1, 2, 2, ci], dtype, &device),
                tensor::<2>(&bias4, [4, c_out], dtype, &device),
                Phases::upsample2x(),
            );
            assert_eq!(got.dims(), shape, "{xs:?}");
            let rel = tolerance(dtype);
            assert_close_to_scale(
                &values(got),
                &want,
                rel,
                &format!("{dtype:?} {xs:?} upsample"),
            );
        }
    }
}

/// A causal 3x1x1 convolution to 2C channels whose halves interleave into twice the frames,
/// against the two phase convolutions writing alternate frames (first chunk and a cached one).
#[test]
fn frame_phases_match_conv_then_interleave() {
    let device = device();
    let mut rng = rng("conv3d_channels_last_phases frames");
    for (xs, front) in [
        ([1, 1, 3, 5, 4], 2),
        ([1, 4, 2, 3, 6], 0),
        ([2, 3, 2, 2, 5], 1),
    ] {
        let [b, _, h, w, c] = xs;
        for dtype in [DType::F32, DType::BF16] {
            let x = round_to(&randn(&mut rng, xs.iter().product()), dtype);
            let wt = round_to(&uniform(&mut rng, 2 * c * 3 * c, -0.5, 0.5), dtype);
            let bias = round_to(&uniform(&mut rng, 2 * c, -0.5, 0.5), dtype);
            let padding = ConvPadding::causal(front, 0);
            let (y, [_, ot, _, _, _]) = reference(&x, xs, &wt, [2 * c, 3, 1, 1, c], &bias, padding);
            // [b, ot, h, w, (2, c)] -> [b, (ot, 2), h, w, c]
            let mut want = vec![0.0; y.len()];
            for n in 0..b {
                for f in 0..ot {
                    for p in 0..h * w {
                        for j in 0..2 {
                            let src = ((n * ot + f) * h * w + p) * 2 * c + j * c;
                            let dst = ((n * 2 * ot + 2 * f + j) * h * w + p) * c;
                            want[dst..dst + c].copy_from_slice(&y[src..src + c]);
                        }
                    }
                }
            }
            let got = conv3d_channels_last_phases(
                tensor::<5>(&x, xs, dtype, &device),
                tensor::<6>(&wt, [2, c, 3, 1, 1, c], dtype, &device),
                tensor::<2>(&bias, [2, c], dtype, &device),
                Phases::frames2x(padding),
            );
            assert_eq!(got.dims(), [b, 2 * ot, h, w, c], "{xs:?}");
            let rel = tolerance(dtype);
            assert_close_to_scale(
                &values(got),
                &want,
                rel,
                &format!("{dtype:?} {xs:?} frames"),
            );
        }
    }
}

#[test]
fn bad_arguments_name_what_is_wrong() {
    let device = device();
    let t = |shape: [usize; 5]| {
        tensor::<5>(
            &vec![0.5; shape.iter().product()],
            shape,
            DType::F32,
            &device,
        )
    };
    let bias = |n: usize| tensor::<1>(&vec![0.0; n], [n], DType::F32, &device);
    let msg = panic_message(|| {
        conv3d_channels_last(
            t([1, 1, 4, 4, 6]),
            t([2, 3, 3, 3, 5]),
            bias(2),
            ConvPadding::causal(2, 1),
        );
    });
    assert!(msg.contains("must have C_in = 6"), "{msg}");
    let msg = panic_message(|| {
        conv3d_channels_last(
            t([1, 1, 4, 4, 6]),
            t([2, 3, 3, 3, 6]),
            bias(3),
            ConvPadding::causal(2, 1),
        );
    });
    assert!(
        msg.contains("`bias` must have length C_out = 2, got 3"),
        "{msg}"
    );
    let msg = panic_message(|| {
        conv3d_channels_last(
            t([1, 1, 4, 4, 6]),
            t([2, 3, 3, 3, 6]),
            bias(2),
            ConvPadding::causal(3, 1),
        );
    });
    assert!(
        msg.contains("padding must be below the kernel extent"),
        "{msg}"
    );
    let msg = panic_message(|| {
        conv3d_channels_last(
            t([1, 1, 4, 4, 6]),
            t([2, 3, 3, 3, 6]),
            bias(2),
            ConvPadding::causal(0, 1),
        );
    });
    assert!(msg.contains("axis 1 of `x`"), "{msg}");
    let msg = panic_message(|| {
        let w = t([2, 3, 3, 3, 6]).cast(DType::BF16);
        conv3d_channels_last(t([1, 1, 4, 4, 6]), w, bias(2), ConvPadding::causal(2, 1));
    });
    assert!(msg.contains("`weight` must have the dtype of `x`"), "{msg}");
    let msg = panic_message(|| {
        conv3d_channels_last_add(
            t([1, 1, 4, 4, 6]),
            t([2, 3, 3, 3, 6]),
            bias(2),
            ConvPadding::causal(2, 1),
            t([1, 1, 4, 4, 3]),
        );
    });
    assert!(
        msg.contains("`residual` must have the output's shape [1, 1, 4, 4, 2]"),
        "{msg}"
    );
    let msg = panic_message(|| {
        let w6 = tensor::<6>(
            &vec![0.5; 3 * 2 * 4 * 6],
            [3, 2, 1, 2, 2, 6],
            DType::F32,
            &device,
        );
        let b2 = tensor::<2>(&[0.0; 6], [3, 2], DType::F32, &device);
        conv3d_channels_last_phases(t([1, 1, 4, 4, 6]), w6, b2, Phases::upsample2x());
    });
    assert!(
        msg.contains("`weights` must be [4, C_out, kT, kH, kW, C_in]"),
        "{msg}"
    );
    let msg = panic_message(|| {
        let w6 = tensor::<6>(
            &vec![0.5; 4 * 2 * 4 * 6],
            [4, 2, 1, 2, 2, 6],
            DType::F32,
            &device,
        );
        let b2 = tensor::<2>(&[0.0; 8], [2, 4], DType::F32, &device);
        conv3d_channels_last_phases(t([1, 1, 4, 4, 6]), w6, b2, Phases::upsample2x());
    });
    assert!(msg.contains("`bias` must be [4, 2]"), "{msg}");
}
