//! The per-element math of the fused op after the row scale: the row's inverse RMS, SiLU in
//! its two forms (a plain one for every runtime; on CUDA the PTX `ex2`/`rcp` form computed in
//! the exponent domain, with the FP8 scale folded into its constant), and the PTX helpers.

use cubecl::prelude::*;

use crate::knobs::RowConfig;
use crate::params::Activation;

/// `1 / sqrt(max(ms + eps, floor))`; a NaN mean stays NaN (no `fmax` that would drop it).
#[cube]
pub(crate) fn inv_rms(sum_sq: f32, inv_channels: f32, eps: f32, floor: f32) -> f32 {
    let d = sum_sq * inv_channels + eps;
    let d = select(d < floor, floor, d);
    d.inverse_sqrt()
}

/// [`inv_rms`] for a vector of positions (the channels-first kernels: one sum per position);
/// callers scale eps as `(eps * p) * p` for a prescaled sum (`p * p` alone overflows for the
/// underflow prescale).
#[cube]
pub(crate) fn inv_rms_vector<N: Size>(
    acc: Vector<f32, N>,
    inv_channels: f32,
    eps: Vector<f32, N>,
    floor: Vector<f32, N>,
) -> Vector<f32, N> {
    let d = acc * Vector::new(inv_channels) + eps;
    Vector::inverse_sqrt(select_many(d.less_than(&floor), floor, d))
}

/// SiLU as `v * sigmoid(v)` with `sigmoid(v) = rsqrt(1 + e)^2`, `e = exp(-v)`: NVRTC compiles
/// a plain division to the IEEE-exact sequence (about ten instructions), which makes the kernel
/// compute-bound on an H200; the reciprocal square root is one special-function instruction
/// (max error 2 ulp, so `sigmoid` is within ~5 ulp). `e = inf` (v < -88) gives 0, NaN stays NaN.
///
#[cube]
pub(crate) fn activate<N: Size>(
    v: Vector<f32, N>,
    #[comptime] activation: Activation,
    #[comptime] fast_math: bool,
) -> Vector<f32, N> {
    let mut y = v;
    if comptime![activation == Activation::Silu] {
        if comptime![fast_math] {
            #[unroll]
            for k in 0..N::value() {
                let vk = v.extract(k);
                y.insert(
                    k,
                    vk * ptx_rcp_approx(1.0f32 + ptx_ex2_approx(vk * -LOG2_E)),
                );
            }
        } else {
            let one = Vector::<f32, N>::new(1.0f32);
            let r = Vector::inverse_sqrt(one + Vector::exp(Vector::<f32, N>::new(0.0f32) - v));
            y = v * (r * r);
        }
    }
    y
}

pub(crate) const LOG2_E: f32 = core::f32::consts::LOG2_E;

/// `2^x` with PTX `ex2.approx.ftz.f32` (one special-function instruction; CUDA only).
#[cube]
pub(crate) fn ptx_ex2_approx(x: f32) -> f32 {
    let out: f32;
    gpu_asm!("ex2.approx.ftz.f32 {}, {};", out(_) out, in(_) x, options(pure, nomem));
    out
}

/// `1 / x` with PTX `rcp.approx.ftz.f32` (one special-function instruction; CUDA only).
#[cube]
pub(crate) fn ptx_rcp_approx(x: f32) -> f32 {
    let out: f32;
    gpu_asm!("rcp.approx.ftz.f32 {}, {};", out(_) out, in(_) x, options(pure, nomem));
    out
}

/// The row scale (`rsqrt(mean + eps)`) the stores multiply by: times `-log2(e)` for the PTX SiLU,
/// whose input is `t = -y log2(e)` (see [`output_value`]); one multiply per row.
#[cube]
pub(crate) fn input_scale(scale: f32, #[comptime] cfg: RowConfig) -> f32 {
    let mut s = scale;
    if comptime![cfg.exponent_domain()] {
        s = scale * -LOG2_E;
    }
    s
}

/// The constant `k` of the PTX SiLU: `-log2(e)`, divided by the FP8 scale when that is folded
/// in. Computed on the host and passed to the kernel: in the kernel, the division (an IEEE
/// sequence with a slow-path call) sat in front of the first loads, and pushed them out of the
/// first instructions the SMs fetch after a launch (H200). Host and
/// device divisions are both correctly rounded, so `k` is the same number either way.
pub fn silu_constant(out_scale: f32, cfg: &RowConfig) -> f32 {
    if cfg.folds_out_scale() {
        -LOG2_E / out_scale
    } else {
        -LOG2_E
    }
}

/// The value written for `u = x * input_scale * gamma`: `act(u)` (the FP8 cast and its scale
/// follow in `forward::write_vector`), or, for the PTX SiLU, `u = t = -y log2(e)` and
/// `silu(y) * c = t / (k (1 + 2^t))` with `k = -log2(e) / c` ([`silu_constant`]; `c` is the FP8
/// scale where folded, else 1): `ex2`, one `fma`, `rcp` and one multiply per element, two
/// multiplies fewer than `y = x s g`, `y log2(e)`, `y * sigmoid`, `* c` (the kernel's issue
/// slots, not memory, set the pace for FP8 out on an H200). Limits as the plain form: `y = -inf`
/// gives NaN, a large negative `y` -0, `+inf` stays `+inf`, NaN stays NaN.
#[cube]
pub(crate) fn output_value<N: Size>(
    u: Vector<f32, N>,
    silu_k: f32,
    #[comptime] cfg: RowConfig,
) -> Vector<f32, N> {
    if comptime![cfg.exponent_domain()] {
        silu_from_exponent::<N>(u, silu_k)
    } else {
        activate::<N>(u, cfg.activation, cfg.fast_math)
    }
}

/// `silu(y) * c` from `t = -y log2(e)` and `k = -log2(e) / c` (PTX; see [`output_value`]).
#[cube]
pub(crate) fn silu_from_exponent<N: Size>(t: Vector<f32, N>, k: f32) -> Vector<f32, N> {
    let mut y = t;
    #[unroll]
    for i in 0..N::value() {
        let ti = t.extract(i);
        let d = fma(ptx_ex2_approx(ti), k, k);
        y.insert(i, ti * ptx_rcp_approx(d));
    }
    y
}
