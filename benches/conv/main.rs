//! The convolution tuner and benchmark (custom harness): the Wan2.1 decoder's convolution
//! shapes at 480p on cubek's implicit GEMM, on this crate's `wgmma` implicit GEMM (sm_90, `C_in`
//! a multiple of 64) and, for at most four output channels, on this crate's direct kernel.
//!
//! ```text
//! cargo bench --bench conv -- tune [--out DIR] [--only 1,3] [--serial] [--exclude tma,spec_tma]
//!     # sweep knobs, append each shape's best to DIR/sm<NN>_conv.txt (`--exclude` takes
//!     # routine names, `inferred`, `direct` and `wgmma`; the table's current choice always runs)
//! cargo bench --bench conv -- bench [--out DIR]               # the table's choice vs cubek's own,
//!     # the E4M3 kernel, and (sm_90) the norm in the wgmma convolution's load vs norm + conv
//! ```
//! Each candidate is first run once on poisoned output and checked at 384 sampled output
//! positions (every channel) against an f64 host reference of the same bf16 inputs; then timed
//! with device timers (cubecl profile windows), 2 warm-up runs, the median of 10, the L2
//! flushed before each run. The first run's wall time (compilation included) is reported too.
//! `--only` takes shape indices of [`shapes`] (the printed `#` column).

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Instant;

use burn::backend::DispatchDevice;
use burn::tensor::Device;
use burn_rmsnorm_silu::kernels::conv::direct::MAX_OUT;
use burn_rmsnorm_silu::kernels::conv::fp8::{Fp8ConvKnobs, Fp8ConvOperands, launch_conv_e4m3};
use burn_rmsnorm_silu::kernels::conv::{
    ConvChoice, ConvKnobs, ConvOperands, ConvShape, DirectKnobs, WgmmaKnobs, fallback_knobs,
    launch_conv, lookup_conv, select_conv,
};
use burn_rmsnorm_silu::kernels::cubecl;
use burn_rmsnorm_silu::kernels::cubecl::ir::{ElemType, FloatKind};
use burn_rmsnorm_silu::kernels::cubecl::prelude::*;
use burn_rmsnorm_silu::kernels::cubecl::server::Handle;
use burn_rmsnorm_silu::kernels::cubecl::zspace::Shape;
use burn_rmsnorm_silu::kernels::cubecl::zspace::striding::row_major_contiguous_strides;
use burn_rmsnorm_silu::kernels::device::device_sm;
use burn_rmsnorm_silu::kernels::timing::{Timer, median};
use half::bf16;

mod case;
mod normed;
mod tune;

const BF16: ElemType = ElemType::Float(FloatKind::BF16);
const SAMPLES: usize = 384;

/// A named decoder convolution: `(what, C_in, C_out, kernel, input T H W, padding T H W)`.
struct Site {
    what: &'static str,
    shape: ConvShape,
    /// Launches of this shape per site (the phases of an upsampler or time convolution).
    launches: usize,
}

fn site(
    what: &'static str,
    c_in: usize,
    c_out: usize,
    kernel: [usize; 3],
    input: [usize; 3],
    padding: [usize; 3],
    launches: usize,
) -> Site {
    let output = [0, 1, 2].map(|a| {
        // Causal in T (no end padding); H and W keep their size.
        if a == 0 {
            input[0] + padding[0] + 1 - kernel[0]
        } else {
            input[a]
        }
    });
    Site {
        what,
        shape: ConvShape {
            batch: 1,
            input,
            c_in,
            c_out,
            kernel,
            padding,
            output,
        },
        launches,
    }
}

/// The Wan2.1 decoder's convolutions for a 480p latent (60 x 104) in the steady state of the
/// chunked decode: one latent frame per call, two cached frames in front of each 3-frame
/// kernel's input (`T_in = T + 2`), T = 1 / 2 / 4 frames in the 60x104 / 120x208 / 240x416 and
/// 480x832 stages. The upsamplers' 3x3 convolutions after nearest x2 upsampling run as four 2x2
/// phase convolutions of the low-resolution input, and the time convolutions (C -> 2C) as two
/// C -> C phases (`burn_rmsnorm_silu::Phases`): those sites list one phase, `launches` times.
/// The first chunk (T = 1, zero frames by padding) has the same classes with fewer rows.
fn shapes() -> Vec<Site> {
    let k3 = [3, 3, 3];
    let k1 = [1, 1, 1];
    let k22 = [1, 2, 2];
    let kt = [3, 1, 1];
    vec![
        site("up3 resnet 96", 96, 96, k3, [6, 480, 832], [0, 1, 1], 1),
        site("up2 resnet 192", 192, 192, k3, [6, 240, 416], [0, 1, 1], 1),
        site(
            "up2 upsample 192->96",
            192,
            96,
            k22,
            [4, 240, 416],
            [0, 1, 1],
            4,
        ),
        site(
            "up1 upsample 384->192",
            384,
            192,
            k22,
            [4, 120, 208],
            [0, 1, 1],
            4,
        ),
        site("up1 resnet 384", 384, 384, k3, [4, 120, 208], [0, 1, 1], 1),
        site(
            "up1 resnet 192->384",
            192,
            384,
            k3,
            [4, 120, 208],
            [0, 1, 1],
            1,
        ),
        site(
            "mid/up0 resnet 384",
            384,
            384,
            k3,
            [3, 60, 104],
            [0, 1, 1],
            1,
        ),
        site("conv_out 96->3", 96, 3, k3, [6, 480, 832], [0, 1, 1], 1),
        site(
            "up0 upsample 384->192",
            384,
            192,
            k22,
            [2, 60, 104],
            [0, 1, 1],
            4,
        ),
        site(
            "up1 time_conv 384->2x384",
            384,
            384,
            kt,
            [4, 120, 208],
            [0, 0, 0],
            2,
        ),
        site(
            "up0 time_conv 384->2x384",
            384,
            384,
            kt,
            [3, 60, 104],
            [0, 0, 0],
            2,
        ),
        site(
            "up1 shortcut 192->384",
            192,
            384,
            k1,
            [2, 120, 208],
            [0, 0, 0],
            1,
        ),
        site("conv_in 16->384", 16, 384, k3, [3, 60, 104], [0, 1, 1], 1),
        site(
            "attention qkv 384->1152",
            384,
            1152,
            k1,
            [1, 60, 104],
            [0, 0, 0],
            1,
        ),
        site(
            "attention proj 384->384",
            384,
            384,
            k1,
            [1, 60, 104],
            [0, 0, 0],
            1,
        ),
        site(
            "post_quant_conv 16->16",
            16,
            16,
            k1,
            [21, 60, 104],
            [0, 0, 0],
            1,
        ),
    ]
}

struct Args {
    mode: String,
    out: String,
    only: Option<Vec<usize>>,
    /// Check candidates one at a time, naming each before its launch (a candidate that faults
    /// poisons the CUDA context: the last name printed is the culprit).
    serial: bool,
    /// Routines (the knobs' first field) left out of the sweep.
    exclude: Vec<String>,
}

fn args() -> Args {
    let raw: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let value = |name: &str| {
        raw.iter()
            .position(|a| a == name)
            .and_then(|i| raw.get(i + 1).cloned())
    };
    let mode = raw
        .first()
        .filter(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_else(|| "bench".into());
    assert!(
        mode == "tune" || mode == "bench",
        "unknown mode `{mode}`: expected tune or bench"
    );
    Args {
        mode,
        out: value("--out").unwrap_or_else(|| "target/bench".into()),
        only: value("--only").map(|list| {
            list.split(',')
                .map(|v| {
                    v.trim()
                        .parse()
                        .expect("--only takes shape indices like 0,3")
                })
                .collect()
        }),
        serial: raw.iter().any(|a| a == "--serial"),
        exclude: value("--exclude")
            .map(|list| list.split(',').map(|v| v.trim().to_string()).collect())
            .unwrap_or_default(),
    }
}

fn main() {
    let args = args();
    let device = Device::cuda(0);
    let DispatchDevice::Cube(cube) = device.as_dispatch() else {
        panic!("the convolution bench needs a CubeCL CUDA device");
    };
    let mut timer = Timer::new(cube.client());
    let props = timer.client.properties();
    println!(
        "device: {} ({}), {} SMs",
        props.identity.name,
        props.identity.fingerprint,
        props.hardware.num_streaming_multiprocessors.unwrap_or(0)
    );
    let sites: Vec<(usize, Site)> = shapes()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| args.only.as_ref().is_none_or(|o| o.contains(i)))
        .collect();
    match args.mode.as_str() {
        "tune" => tune::tune(&mut timer, &args, &sites),
        _ => tune::bench(&mut timer, &args, &sites),
    }
}
