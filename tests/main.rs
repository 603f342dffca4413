//! Integration tests, one binary (each file in `tests/` would link its own copy of LLVM).
//!
//! Device: the CubeCL CPU runtime by default (what CI runs); `RMSNORM_TEST_DEVICE=cuda` runs the
//! same tests on CUDA device 0. Shapes too large for the CPU are `#[ignore]`d and run on a GPU
//! with `--ignored`.

mod common;

mod attention;
mod autodiff;
mod backward;
mod channels;
mod channels_backward;
mod conv;
mod conv_fp8;
mod conv_normed;
mod conv_wgmma;
mod edge_cases;
mod errors;
mod forward;
mod fp8;
mod fp8_delayed;
mod fp8_mma;
mod fusion;
mod into;
mod kernel_knobs;
mod module;
mod nvfp4;
mod properties;
mod quantized_axes;
mod timing;
mod upstream;
