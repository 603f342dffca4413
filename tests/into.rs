//! `rms_norm_silu_into`: the op written over a slice of an existing tensor (frames behind a
//! causal convolution's cached ones), against the f64 reference; the rest of the target keeps
//! its values, a shared target is not changed under its other owners.

use burn::tensor::{DType, Tensor};
use burn_rmsnorm_silu::{RmsNormSiluOptions, rms_norm_silu_into};
use rmsnorm_silu_kernels::Activation;

use crate::common::*;

const POISON: f64 = -7.25;

/// `into` `[b, frames, h, w, c]` full of POISON except what the op wrote at `at..`; checks every
/// element: the written frames against the reference of `x`, the others still POISON (or the
/// `kept` values).
#[allow(clippy::too_many_arguments)]
fn check(
    got: &[f64],
    x: &[f64],
    gamma: &[f64],
    [b, frames, h, w, c]: [usize; 5],
    t: usize,
    at: usize,
    dtype: DType,
    what: &str,
) {
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
            t,
            at,
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
    check(
        &values(out),
        &x,
        &gamma,
        shape,
        3,
        2,
        DType::F32,
        "shared target",
    );
    assert_eq!(
        values(other_owner),
        vec![POISON; n],
        "the other owner's values"
    );

    // [1, 5, 2, 3, 16] as a permuted view of [1, 16, 5, 2, 3] memory.
    let stored = tensor(&vec![POISON; n], [1, 16, 5, 2, 3], DType::F32, &device);
    let out = run(stored.permute([0, 2, 3, 4, 1]));
    check(
        &values(out),
        &x,
        &gamma,
        shape,
        3,
        2,
        DType::F32,
        "permuted target",
    );
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
