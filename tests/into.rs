//! `rms_norm_silu_into`: the op written over a slice of an existing tensor (frames behind a
//! causal convolution's cached ones), against the f64 reference; the rest of the target keeps
//! its values, a shared target is not changed under its other owners.

use burn::tensor::{DType, Tensor, s};
use burn_rmsnorm_silu::{RmsNormSiluOptions, rms_norm_silu_into};
use rmsnorm_silu_kernels::Activation;

use crate::common::*;

const POISON: f64 = -7.25;

/// `into` `[b, frames, h, w, c]` full of POISON except the frames `written` (the op's output for
/// `x`); checks every element: the written frames against the reference of `x`, the others still
/// POISON.
fn check(
    got: &[f64],
    x: &[f64],
    gamma: &[f64],
    [b, frames, h, w, c]: [usize; 5],
    written: std::ops::Range<usize>,
    dtype: DType,
    what: &str,
) {
    let (at, t) = (written.start, written.len());
    let norm = RmsNormSiluOptions::wan().norm.params(c);
    let want_x = reference(x, gamma, norm, Activation::Silu);
    let frame = h * w * c;
    let mut want = vec![POISON; b * frames * frame];
    for bi in 0..b {
        for f in 0..t {
            let dst = (bi * frames + at + f) * frame;
            let src = (bi * t + f) * frame;
            want[dst..dst + frame].copy_from_slice(&want_x[src..src + frame]);
        }
    }
    let (atol, rtol) = match dtype {
        DType::BF16 => (1e-2, 8e-3),
        _ => (1e-5, 1e-5),
    };
    assert_close(got, &want, atol, rtol, what);
}

#[test]
fn frames_written_behind_cached_ones() {
    let device = device();
    let mut rng = rng("into frames");
    for (dtype, [b, frames, h, w, c], t, at) in [
        (DType::F32, [1, 6, 3, 5, 24], 4, 2),
        (DType::F32, [1, 3, 2, 3, 7], 1, 2),
        (DType::F32, [1, 4, 1, 1, 16], 4, 0),
        (DType::BF16, [1, 5, 4, 3, 96], 3, 1),
        // B = 2: the target slice is not one block of memory (a slice assignment).
        (DType::F32, [2, 5, 2, 3, 8], 3, 2),
    ] {
        let what = format!(
            "{dtype:?} into {:?} at {at}, {t} frames",
            [b, frames, h, w, c]
        );
        let x = round_to(&randn(&mut rng, b * t * h * w * c), dtype);
        let gamma = round_to(&uniform(&mut rng, c, 0.5, 2.0), dtype);
        let into = tensor(
            &vec![POISON; b * frames * h * w * c],
            [b, frames, h, w, c],
            dtype,
            &device,
        );
        let out = rms_norm_silu_into(
            tensor(&x, [b, t, h, w, c], dtype, &device),
            tensor(&gamma, [c], dtype, &device),
            RmsNormSiluOptions::wan(),
            into,
            1,
            at,
        );
        assert_eq!(out.dims(), [b, frames, h, w, c], "{what}");
        assert_eq!(out.dtype(), dtype, "{what}");
        check(
            &values(out),
            &x,
            &gamma,
            [b, frames, h, w, c],
            at..at + t,
            dtype,
            &what,
        );
    }
}

/// A target another tensor still shares is written into a copy: the other owner sees its old
/// values. A target presented through a permuted view gets the same result.
#[test]
fn shared_and_strided_targets_keep_their_meaning() {
    let device = device();
    let mut rng = rng("into shared");
    let shape = [1, 5, 2, 3, 16];
    let n: usize = shape.iter().product();
    let x = round_to(&randn(&mut rng, 3 * 2 * 3 * 16), DType::F32);
    let gamma = round_to(&uniform(&mut rng, 16, 0.5, 2.0), DType::F32);
    let into = tensor(&vec![POISON; n], shape, DType::F32, &device);
    let other_owner = into.clone();
    // Frames 2..5 of each target hold the new 3 frames; the rest keep their poison.
    let check_target =
        |got: Tensor<5>, what: &str| check(&values(got), &x, &gamma, shape, 2..5, DType::F32, what);
    let run = |into: Tensor<5>| {
        rms_norm_silu_into(
            tensor(&x, [1, 3, 2, 3, 16], DType::F32, &device),
            tensor(&gamma, [16], DType::F32, &device),
            RmsNormSiluOptions::wan(),
            into,
            1,
            2,
        )
    };
    let out = run(into);
    check_target(out, "shared target");
    assert_eq!(
        values(other_owner),
        vec![POISON; n],
        "the other owner's values"
    );

    // [1, 5, 2, 3, 16] as a permuted view of [1, 16, 5, 2, 3] memory.
    let stored = tensor(&vec![POISON; n], [1, 16, 5, 2, 3], DType::F32, &device);
    let out = run(stored.permute([0, 2, 3, 4, 1]));
    check_target(out, "permuted target");

    // A target sliced from wider rows (the first 16 of each row of a [1, 5, 2, 3, 24] buffer):
    // rows at a pitch, as CUDA allocates rows whose width is not a power of two bytes, written
    // in place there (the CPU runtime's fusion hands the slice over dense).
    let stored = tensor(
        &vec![POISON; n / 16 * 24],
        [1, 5, 2, 3, 24],
        DType::F32,
        &device,
    );
    let out = run(stored.slice(s![.., .., .., .., 0..16]));
    check_target(out, "pitched target");
}

#[test]
fn bad_targets_are_refused_by_name() {
    let device = device();
    let x = || Tensor::<5>::zeros([1, 2, 2, 2, 8], &device);
    let gamma = || Tensor::<1>::ones([8], &device);
    let into = |shape: [usize; 5], dtype: DType| Tensor::<5>::zeros(shape, (&device, dtype));
    let opts = RmsNormSiluOptions::rms(1e-6);
    for (target, dim, at, expected) in [
        (
            into([1, 4, 2, 2, 8], DType::F32),
            4,
            0,
            "`dim` must be an axis of `x` before the last",
        ),
        (
            into([1, 4, 2, 2, 8], DType::F32),
            1,
            3,
            "positions 3..5 must exist",
        ),
        (
            into([1, 4, 2, 3, 8], DType::F32),
            1,
            0,
            "must have the shape of `x`",
        ),
        (
            into([1, 4, 2, 2, 8], DType::BF16),
            1,
            0,
            "`into` must have the dtype of `x`",
        ),
    ] {
        let message =
            panic_message(|| drop(rms_norm_silu_into(x(), gamma(), opts, target, dim, at)));
        assert!(
            message.contains("rms_norm_silu_into") && message.contains(expected),
            "expected `{expected}`, got: {message}"
        );
    }
}

/// The write behind the cached frames costs what the plain op costs (in place: no copy of the
/// target, no copy of `x`), timed as the decoder calls it: the target made by a slice
/// assignment of two cached frames into an empty buffer. Ignored: a timing (run it on the
/// device the numbers are for).
#[test]
#[ignore]
fn into_costs_what_the_plain_op_costs() {
    let device = device();
    let [t, h, w, c] = if on_gpu() {
        [4, 480, 832, 96]
    } else {
        [4, 60, 104, 96]
    };
    let mut rng = rng("into timing");
    let x = tensor::<5>(
        &randn(&mut rng, t * h * w * c),
        [1, t, h, w, c],
        DType::BF16,
        &device,
    );
    let cached = tensor::<5>(
        &randn(&mut rng, 2 * h * w * c),
        [1, 2, h, w, c],
        DType::BF16,
        &device,
    );
    let gamma = tensor::<1>(&uniform(&mut rng, c, 0.5, 1.5), [c], DType::BF16, &device);
    let options = RmsNormSiluOptions::wan();
    // The best of 5 calls, each between two syncs, its input made before the first.
    let time = |f: &dyn Fn(Tensor<5>) -> Tensor<5>, input: &dyn Fn() -> Tensor<5>| {
        let mut best = f64::INFINITY;
        for _ in 0..6 {
            let arg = input();
            device.sync().expect("sync");
            let start = std::time::Instant::now();
            let y = f(arg);
            device.sync().expect("sync");
            best = best.min(start.elapsed().as_secs_f64());
            drop(y);
        }
        best
    };
    let target = || {
        Tensor::<5>::empty([1, 2 + t, h, w, c], (&device, DType::BF16))
            .slice_assign(s![.., 0..2], cached.clone())
    };
    let plain = time(
        &|x| burn_rmsnorm_silu::rms_norm_silu_with(x, gamma.clone(), options),
        &|| x.clone(),
    );
    let into = time(
        &|target| rms_norm_silu_into(x.clone(), gamma.clone(), options, target, 1, 2),
        &target,
    );
    // Bytes the op must move: x read, its output written.
    let bytes = 2.0 * (t * h * w * c * 2) as f64;
    println!(
        "[1, {t}, {h}, {w}, {c}] bf16: plain {:.1} us ({:.0} GB/s), into {:.1} us ({:.0} GB/s), \
         {:.2}x",
        plain * 1e6,
        bytes / plain / 1e9,
        into * 1e6,
        bytes / into / 1e9,
        into / plain
    );
}
