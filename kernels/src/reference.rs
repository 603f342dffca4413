//! Host reference in f64 of the same function, independent of the kernels: used by tests, the
//! demo and the tuner to check results.

use crate::params::{Activation, NormParams};

/// `act(x * rsqrt(max(mean(x^2) + eps, floor)) * gamma)` per row of `x` (`rows x channels`,
/// row-major), computed in f64 from the given values.
pub fn rms_norm_silu_f64(
    x: &[f64],
    gamma: &[f64],
    channels: usize,
    norm: NormParams,
    activation: Activation,
) -> Vec<f64> {
    assert_eq!(gamma.len(), channels, "gamma length must equal C");
    if channels == 0 {
        return Vec::new();
    }
    assert!(
        x.len().is_multiple_of(channels),
        "x length must be a multiple of C"
    );
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(channels) {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / channels as f64;
        let d = ms + norm.eps as f64;
        let d = if d < norm.floor as f64 {
            norm.floor as f64
        } else {
            d
        };
        let r = 1.0 / d.sqrt();
        out.extend(row.iter().zip(gamma).map(|(&v, &g)| {
            let y = v * r * g;
            match activation {
                Activation::Silu => silu_f64(y),
                Activation::Identity => y,
            }
        }));
    }
    out
}

/// `v * sigmoid(v)` in f64.
pub fn silu_f64(v: f64) -> f64 {
    v / (1.0 + (-v).exp())
}

/// Counts elements outside `|got - want| <= atol + rtol * |want|` (NaN never passes unless both
/// are NaN; equal infinities pass). Returns (mismatches, max abs error, max relative error).
pub fn compare(got: &[f64], want: &[f64], atol: f64, rtol: f64) -> Comparison {
    assert_eq!(got.len(), want.len(), "compared slices differ in length");
    let mut c = Comparison::default();
    for (&g, &w) in got.iter().zip(want) {
        // Equal values (infinities included) and NaN against NaN agree.
        if (g.is_nan() && w.is_nan()) || g == w {
            continue;
        }
        let err = (g - w).abs();
        let rel = err / w.abs().max(f64::MIN_POSITIVE);
        // NaN errors count as mismatches and propagate into the maxima.
        if err.is_nan() || err > atol + rtol * w.abs() {
            c.mismatches += 1;
        }
        if err.is_nan() || err > c.max_abs {
            c.max_abs = err;
        }
        if w.abs() > 1e-3 && (rel.is_nan() || rel > c.max_rel) {
            c.max_rel = rel;
        }
    }
    c
}

/// Result of [`compare`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Comparison {
    pub mismatches: usize,
    pub max_abs: f64,
    /// Largest relative error over elements with `|want| > 1e-3`.
    pub max_rel: f64,
}
