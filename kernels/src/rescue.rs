//! Rows whose fp32 sum of squares leaves the normal range, and how the kernels rescue them.
//!
//! The kernels accumulate `sum(x^2)` in fp32. That is exact enough for every ordinary row, but
//! it overflows to `inf` once `|x|` reaches ~1.8e19 (f32 and bf16 go up to 3.4e38) and loses
//! all precision when `|x|` is below ~1e-19 and eps is too small to dominate. The true output
//! is finite and well defined in both cases, so a wrong answer there is a bug.
//!
//! Fixing it on every row (a max pass, or scaled partial sums) costs instructions on every
//! element of a kernel that is already compute-bound on an H200. Instead the kernels keep the
//! plain sum and check the row total once: only a row whose total is `+inf`, or below
//! [`UNDERFLOW_SUM`] while `max(eps, floor) < SMALL_EPS`, is summed a second time with its
//! values multiplied by a power of two ([`prescale`](fn@prescale)), which is exact. With `x' = p * x`:
//! `y = act(x' * rsqrt(max(mean(x'^2) + eps p^2, floor p^2)) * gamma)`, the same value.
//!
//! Rows that contain `inf` also total `+inf`; the rescue leaves them as they were (their
//! scaled total is still `inf`), and a NaN total is never rescued (NaN stays NaN).

use cubecl::prelude::*;

/// `2^-80`: `|x| <= 2^128` becomes `<= 2^48`, its square `<= 2^96`, and a sum over up to
/// `2^31` channels stays below the f32 maximum.
pub const OVERFLOW_PRESCALE: f32 = 8.271_806e-25;
/// `2^100`: applied only when the row total is below `2^-100`, so every `|x| < 2^-50`
/// becomes `< 2^50`, and the smallest subnormal (`2^-149`) squares to a normal `2^-98`.
pub const UNDERFLOW_PRESCALE: f32 = 1.267_650_6e30;
/// `2^-100`: row totals below this have lost precision to subnormal squares.
pub const UNDERFLOW_SUM: f32 = 7.888_609e-31;
/// `2^-72`: when `max(eps, floor)` is at least this, a total below [`UNDERFLOW_SUM`] is
/// negligible next to eps (2^-28 of it, below fp32 precision) and needs no rescue; below it,
/// `eps * UNDERFLOW_PRESCALE^2` stays finite.
pub const SMALL_EPS: f32 = 2.117_582_4e-22;

/// The largest finite f32 (a total above it is `+inf`).
const F32_MAX: f32 = 3.402_823_5e38;

/// Whether underflowing rows need the rescue for these norm parameters.
#[cube]
pub fn small_eps(eps: f32, floor: f32) -> bool {
    eps < SMALL_EPS && floor < SMALL_EPS
}

/// The factor a row's values are multiplied by before a second, exact summation: 1 for an
/// ordinary (or inactive, or NaN) row, [`OVERFLOW_PRESCALE`] for a `+inf` total,
/// [`UNDERFLOW_PRESCALE`] for a tiny total when eps is small too.
#[cube]
pub fn prescale(total: f32, active: bool, small_eps: bool) -> f32 {
    let under = select(
        small_eps && total < UNDERFLOW_SUM,
        UNDERFLOW_PRESCALE,
        1.0f32,
    );
    let p = select(total > F32_MAX, OVERFLOW_PRESCALE, under);
    select(active, p, 1.0f32)
}

/// [`prescale`](fn@prescale) for each of the `N` independent totals of a vector (the channels kernel keeps
/// one per position).
#[cube]
pub fn prescale_vector<N: Size>(total: Vector<f32, N>, small_eps: bool) -> Vector<f32, N> {
    let mut p = Vector::<f32, N>::new(1.0f32);
    #[unroll]
    for k in 0..N::value() {
        p.insert(k, prescale(total.extract(k), true, small_eps));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_are_the_powers_of_two_they_claim() {
        assert_eq!(OVERFLOW_PRESCALE, 2f32.powi(-80));
        assert_eq!(UNDERFLOW_PRESCALE, 2f32.powi(100));
        assert_eq!(UNDERFLOW_SUM, 2f32.powi(-100));
        assert_eq!(SMALL_EPS, 2f32.powi(-72));
        assert_eq!(F32_MAX, f32::MAX);
        // The bounds the docs rely on.
        assert!(f32::MAX * OVERFLOW_PRESCALE <= 2f32.powi(48));
        assert!((2f32.powi(48) * 2f32.powi(48) * 2f32.powi(31)).is_finite());
        assert!((2f32.powi(-149) * UNDERFLOW_PRESCALE).powi(2) >= f32::MIN_POSITIVE);
        assert!((SMALL_EPS * 0.999 * UNDERFLOW_PRESCALE * UNDERFLOW_PRESCALE).is_finite());
    }
}
