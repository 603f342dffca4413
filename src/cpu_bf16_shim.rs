//! `__truncsfbf2` (f32 -> bf16, round to nearest even) for the CubeCL CPU runtime's JIT.
//!
//! Why: LLVM 22.1.8 lowers the kernels' f32 -> bf16 conversions on x86-64 without AVX512-BF16 to
//! a call of this compiler-rt routine; the JIT resolves it among the process's exported symbols
//! (`build.rs` exports it from this crate's test, example and bench binaries), and neither Rust's
//! runtime nor Debian 12's libgcc provides it. The x86-64 ABI passes the f32 and returns the
//! bf16 in the low 16 bits of `xmm0`, which an `f32` return value with those bits occupies.

/// f32 -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN.
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1));
    (rounded >> 16) as u16
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[unsafe(no_mangle)]
pub extern "C" fn __truncsfbf2(x: f32) -> f32 {
    f32::from_bits(f32_to_bf16_bits(x) as u32)
}

#[cfg(test)]
mod tests {
    use super::f32_to_bf16_bits;

    #[test]
    fn rounds_to_nearest_even() {
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        // Halfway between 0x3f80 and 0x3f81: to even (0x3f80); just above: up.
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(f32_to_bf16_bits(f32::INFINITY), 0x7f80);
        assert_eq!(f32_to_bf16_bits(f32::MAX), 0x7f80);
        assert!(f32_to_bf16_bits(f32::NAN) & 0x7f != 0 || f32_to_bf16_bits(f32::NAN) == 0x7fc0);
    }
}
