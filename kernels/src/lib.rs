//! CubeCL kernels for the fused RMSNorm + SiLU operation.
//!
//! `y = act(x * rsqrt(max(mean(x^2) + eps, floor)) * gamma)` over the last axis of a row-major
//! `[rows, C]` view, fp32 math inside, with `act` SiLU (or the identity for a plain norm).
//!
//! This crate knows nothing about Burn: it takes cubecl handles and element types. Its rooms:
//! - [`knobs`]: the launch parameters of the row kernel, a plain comptime struct;
//! - [`select`]: how the knobs are chosen for a device and shape: an override, the tuned
//!   per-architecture table ([`lut`]), a heuristic valid everywhere;
//! - [`table`]: the one text form of every kernel's knobs and the one format, loader and
//!   nearest-rows lookup of every measured table (`lut/*.txt`);
//! - [`timing`]: device timers, L2 flush and the copy roof for benchmarks and the tuner;
//! - [`forward`]: the row kernel itself and its launch;
//! - [`problem`]: the row problem and the launch error every launcher shares;
//! - [`validate`]: whether a row-kernel configuration can run a problem on a device;
//! - [`device`]: what the kernels ask of the device (planes, PTX math, compute capability,
//!   threads per multiprocessor);
//! - [`lanes`]: how the units of a row add up their partial sums (shared by the row kernels);
//! - [`activation`]: the per-element math after the row scale (inverse RMS, the SiLU forms);
//! - [`row_io`]: how a unit loads its vectors (together, clamped; prefetch staging; gamma) and
//!   sums their squares;
//! - [`fp8_out`]: the FP8 E4M3 output (saturated codes, packed PTX conversion, amax);
//! - [`backward`]: the fused backward (dx, and dgamma reduced deterministically);
//! - [`channels`]: the channels-first kernel (normalise over C at stride S);
//! - [`rescue`]: how rows whose fp32 sum of squares overflows or underflows are summed again;
//! - [`reference`](mod@reference): an f64 host reference of the same function, for tests and demos;
//! - [`nvfp4`]: the NVFP4 row kernel (E2M1 values, E4M3 block scales, two recipes, two scale
//!   layouts);
//! - [`tickets`]: ticket counters for persistent grids that draw their work in order;
//! - [`conv`]: channels-last 3D convolutions on tensor cores (cubek's implicit GEMM) with
//!   measured per-shape configurations;
//! - [`formats`]: host reference codecs for FP8 E4M3 and NVFP4 (for the quantised outputs).

pub mod activation;
pub mod backward;
pub mod channels;
pub mod conv;
pub mod device;
pub mod formats;
pub mod forward;
pub mod fp8_out;
pub mod knobs;
pub mod lanes;
pub mod lut;
pub mod nvfp4;
pub mod params;
pub mod problem;
pub mod quant;
pub mod reference;
pub mod rescue;
pub mod row_io;
pub mod select;
pub mod table;
pub mod tickets;
pub mod timing;
pub mod validate;

pub use forward::launch_forward;
pub use knobs::{GammaIn, Knobs, LaneReduce};
pub use params::{Activation, NormParams};
pub use problem::{KernelError, RowOperands, RowsProblem};
pub use select::{
    KnobSource, heuristic_knobs, select_knobs, select_knobs_with_source, table_derived_knobs,
};

/// Re-exported so downstream crates name the same cubecl.
pub use cubecl;
pub use cubek;
