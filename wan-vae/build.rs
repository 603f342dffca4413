//! Exports `__truncsfbf2` from the decoder's binary and test binaries (defined in
//! `burn_rmsnorm_silu::cpu_bf16_shim`): LLVM lowers f32 -> bf16 conversions on x86-64 CPUs
//! without AVX512-BF16 to a call of this compiler-rt routine, which the CubeCL CPU runtime's
//! JIT looks up among the process's symbols and which Debian 12's libgcc does not have.
fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    // Only builds with the CPU runtime (the `cpu` feature) define and need the symbol.
    let cpu_runtime = std::env::var_os("CARGO_FEATURE_CPU").is_some();
    if cpu_runtime && target.starts_with("x86_64") && target.contains("linux") {
        let export = "-Wl,-u,__truncsfbf2,--export-dynamic-symbol=__truncsfbf2";
        println!("cargo:rustc-link-arg-bins={export}");
        println!("cargo:rustc-link-arg-tests={export}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
