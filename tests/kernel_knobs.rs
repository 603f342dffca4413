//! The row kernel launched directly with explicit knobs on the raw CubeCL backend, into
//! poisoned (NaN) output buffers: every knob path must write every element correctly.

use burn::backend::{DispatchDevice, ops::FloatTensorOps};
use burn::tensor::{DType, read_sync};
use burn_cubecl::{CubeBackend, CubeDevice, kernel::into_contiguous, tensor::CubeTensor};
use burn_rmsnorm_silu::RmsNormSiluBackend;
use rmsnorm_silu_kernels::cubecl::ir::{ElemType, FloatKind};
use rmsnorm_silu_kernels::validate::validate_knobs;
use rmsnorm_silu_kernels::{
    Activation, GammaIn, Knobs, LaneReduce, NormParams, RowsProblem, launch_forward, select_knobs,
};

use crate::common::*;

pub fn cube_device() -> CubeDevice {
    match device().as_dispatch() {
        DispatchDevice::Cube(d) => d.clone(),
        other => panic!("kernel tests need a CubeCL device, got {other:?}"),
    }
}

/// A dense (unpitched) device tensor: uploads may pitch rows on CUDA, and `launch_forward`
/// takes raw buffers.
pub fn upload(values: &[f64], shape: Vec<usize>, dtype: DType, device: &CubeDevice) -> CubeTensor {
    let t = into_contiguous(CubeBackend::float_from_data(
        data(values, shape, dtype),
        device,
    ));
    assert!(t.is_contiguous());
    t
}

pub fn download(t: CubeTensor) -> Vec<f64> {
    read_sync(CubeBackend::float_into_data(t))
        .expect("read back")
        .iter::<f64>()
        .collect()
}

pub fn elem(dtype: DType) -> ElemType {
    match dtype {
        DType::BF16 => ElemType::Float(FloatKind::BF16),
        DType::F16 => ElemType::Float(FloatKind::F16),
        DType::F32 => ElemType::Float(FloatKind::F32),
        other => panic!("{other:?}"),
    }
}

/// Launches with `knobs` into a NaN-filled output and checks every element.
fn check_knobs(knobs: Knobs, rows: usize, channels: usize, dtype: DType, activation: Activation) {
    let mut rng = rng("kernel_knobs");
    let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, dtype);
    let tol = if dtype == DType::F32 { 1e-5 } else { 2e-2 };
    let inputs = Inputs {
        x: &x,
        gamma: &gamma,
        rows,
        channels,
        dtype,
    };
    check_knobs_on(knobs, inputs, NormParams::rms(eps), activation, tol);
}

/// A problem's host values (already representable in `dtype`).
#[derive(Clone, Copy)]
struct Inputs<'a> {
    x: &'a [f64],
    gamma: &'a [f64],
    rows: usize,
    channels: usize,
    dtype: DType,
}

/// Launches with `knobs` on `inputs` into a NaN-filled output and checks every element against
/// the f64 reference within `tol` (absolute and relative).
fn check_knobs_on(
    knobs: Knobs,
    inputs: Inputs,
    norm: NormParams,
    activation: Activation,
    tol: f64,
) {
    let Inputs {
        x,
        gamma,
        rows,
        channels,
        dtype,
    } = inputs;
    let device = cube_device();
    let want = reference(x, gamma, norm, activation);
    let xt = upload(x, vec![rows, channels], dtype, &device);
    let gt = upload(gamma, vec![channels], dtype, &device);
    let out = upload(
        &vec![f64::NAN; rows * channels],
        vec![rows, channels],
        dtype,
        &device,
    );
    launch_forward(
        &xt.client,
        xt.handle.clone(),
        gt.handle.clone(),
        out.handle.clone(),
        elem(dtype),
        elem(dtype),
        RowsProblem::dense(rows, channels),
        norm,
        activation,
        &knobs,
    )
    .unwrap_or_else(|e| panic!("{knobs:?}: {e}"));
    let got = download(out);
    assert_close(
        &got,
        &want,
        tol,
        tol,
        &format!("{knobs:?} T={rows} C={channels} {dtype:?}"),
    );
}

/// Rows whose fp32 sum of squares overflows (|x| up to the f32 maximum) or underflows
/// (subnormal and 1e-25 magnitudes with eps = 0) sit between ordinary rows; every knob path
/// must rescue them (see `rmsnorm_silu_kernels::rescue`) and leave the ordinary rows alone.
#[test]
fn out_of_range_rows_are_rescued_on_every_knob_path() {
    use LaneReduce::*;
    let mut rng = rng("rescue");
    let mut cases = vec![
        (knobs(4, 1, 1, 8, Plane), 64),
        (knobs(2, 1, 2, 0, Plane), 100),
        (knobs(2, 2, 1, 8, Shared), 32),
        (knobs(2, 2, 1, 0, Shared), 96),
        (
            Knobs {
                rows_per_unit: 3,
                ..knobs(1, 2, 1, 16, Shared)
            },
            24,
        ),
        (
            Knobs {
                rows_per_unit: 2,
                prefetch: true,
                max_cubes: Some(2),
                ..knobs(4, 2, 1, 4, Shared)
            },
            32,
        ),
    ];
    if on_gpu() {
        cases.extend([
            (knobs(8, 8, 16, 6, Plane), 384),
            (
                Knobs {
                    rows_per_unit: 2,
                    ..knobs(8, 32, 4, 2, Plane)
                },
                512,
            ),
            (knobs(8, 16, 8, 0, Plane), 1000),
            (knobs(8, 64, 2, 2, Shared), 1024),
            (knobs(8, 64, 2, 0, Shared), 4096),
            // Rows packed into planes (lane counts that are not powers of two).
            (knobs(8, 6, 20, 2, Plane), 96),
            (
                Knobs {
                    rows_per_unit: 2,
                    ..knobs(8, 10, 6, 2, Plane)
                },
                160,
            ),
            (knobs(8, 5, 12, 0, Plane), 1000),
            (
                Knobs {
                    prefetch: true,
                    max_cubes: Some(2),
                    ..knobs(8, 3, 10, 4, Plane)
                },
                96,
            ),
        ]);
    }
    let mut failures = Vec::new();
    for (k, channels) in cases {
        let rows = 23;
        // Row classes: ordinary, huge (one element at the f32 maximum), 1e-25, subnormal.
        let mut x = Vec::with_capacity(rows * channels);
        for row in 0..rows {
            let magnitude = [1.0, 1e36, 1e-25, 3e-40][row % 4];
            let mut values: Vec<f64> = randn(&mut rng, channels)
                .iter()
                .map(|v| v * magnitude)
                .collect();
            if row % 4 == 1 {
                values[row % channels] = 3.0e38;
            }
            x.extend(values);
        }
        for dtype in [DType::F32, DType::BF16] {
            let x = round_to(&x, dtype);
            let gamma = round_to(&uniform(&mut rng, channels, 0.5, 2.0), dtype);
            let inputs = Inputs {
                x: &x,
                gamma: &gamma,
                rows,
                channels,
                dtype,
            };
            // eps = 0: every row's true output is O(1), so a relative check is strict.
            let tol = if dtype == DType::F32 { 2e-5 } else { 2e-2 };
            for (norm, activation) in [
                (NormParams::rms(0.0), Activation::Silu),
                (NormParams::rms(0.0), Activation::Identity),
                (NormParams::rms(1e-6), Activation::Silu),
            ] {
                let label = format!("{k} C={channels} {dtype:?} {norm:?} {activation:?}: ");
                record_failure(&mut failures, &label, || {
                    check_knobs_on(k, inputs, norm, activation, tol)
                });
            }
        }
    }
    assert_no_failures(&failures);
}

fn knobs(vector_size: usize, lanes: u32, rows: u32, vpl: usize, reduce: LaneReduce) -> Knobs {
    Knobs {
        vector_size,
        lanes_per_row: lanes,
        rows_per_cube: rows,
        rows_per_unit: 1,
        vectors_per_lane: vpl,
        lane_reduce: reduce,
        gamma: GammaIn::Registers,
        max_cubes: None,
        fast_math: false,
        prefetch: false,
        f32_cache: false,
        word_cache: false,
        groups_per_ticket: 0,
    }
}

/// `k` with `u` rows in flight per unit and gamma in `gamma`.
fn with(k: Knobs, u: u32, gamma: GammaIn) -> Knobs {
    Knobs {
        rows_per_unit: u,
        gamma,
        ..k
    }
}

/// `k` with prefetch on a persistent grid of `cubes` cubes.
fn prefetched(k: Knobs, cubes: u32) -> Knobs {
    Knobs {
        prefetch: true,
        max_cubes: Some(cubes),
        ..k
    }
}

#[test]
fn every_knob_path_writes_every_element() {
    use LaneReduce::*;
    // Register cache, streaming, shared-memory lane reduction, several rows per cube, a capped
    // (persistent) grid, every vector width; T and C chosen so rows and vectors have tails.
    let mut cases = vec![
        (knobs(8, 1, 1, 8, Plane), 13, 64),
        (knobs(8, 1, 2, 2, Plane), 13, 160),
        (knobs(4, 1, 1, 0, Plane), 5, 1000),
        (knobs(2, 2, 1, 4, Shared), 7, 14),
        (knobs(2, 2, 1, 0, Shared), 7, 258),
        (knobs(1, 1, 2, 3, Plane), 9, 3),
        (knobs(1, 2, 1, 1, Shared), 4, 1),
        (
            Knobs {
                max_cubes: Some(3),
                ..knobs(8, 1, 2, 4, Plane)
            },
            29,
            256,
        ),
        (
            Knobs {
                max_cubes: Some(1),
                ..knobs(4, 2, 1, 0, Shared)
            },
            11,
            96,
        ),
    ];
    // Several rows in flight per unit, gamma in shared or global memory.
    cases.extend([
        (
            with(knobs(8, 1, 1, 8, Plane), 4, GammaIn::Registers),
            13,
            64,
        ),
        (with(knobs(4, 2, 1, 4, Shared), 2, GammaIn::Shared), 11, 32),
        (with(knobs(2, 1, 2, 2, Plane), 3, GammaIn::Global), 17, 4),
        (with(knobs(4, 2, 1, 0, Shared), 2, GammaIn::Shared), 9, 100),
        (with(knobs(8, 1, 2, 3, Plane), 2, GammaIn::Shared), 7, 24),
    ]);
    if on_gpu() {
        for u in [2, 4] {
            for gamma in [GammaIn::Registers, GammaIn::Shared, GammaIn::Global] {
                cases.push((with(knobs(8, 8, 16, 6, Plane), u, gamma), 1001, 384));
                cases.push((with(knobs(8, 64, 2, 2, Shared), u, gamma), 77, 1024));
            }
        }
        for (lanes, rows) in [(2, 64), (4, 32), (8, 16), (16, 8), (32, 4)] {
            cases.push((knobs(8, lanes, rows, 4, Plane), 1001, 384));
            cases.push((knobs(8, lanes, rows, 0, Plane), 1001, 1000));
        }
        for lanes in [64, 128, 256] {
            cases.push((knobs(8, lanes, 2, 2, Shared), 333, 4096));
        }
        cases.push((
            Knobs {
                max_cubes: Some(132),
                ..knobs(8, 4, 32, 3, Plane)
            },
            99_999,
            96,
        ));
        // SiLU through PTX ex2/rcp approximations (CUDA only).
        for (k, rows, channels) in [
            (knobs(8, 16, 8, 3, Plane), 1001, 384),
            (knobs(8, 8, 16, 0, Plane), 1001, 1000),
            (knobs(4, 64, 2, 2, Shared), 77, 512),
        ] {
            cases.push((
                Knobs {
                    fast_math: true,
                    ..k
                },
                rows,
                channels,
            ));
        }
    }
    // Prefetch (the next row group staged through shared memory) on persistent grids of one
    // to a few cubes, so that each cube walks several groups and the last is partial.
    cases.extend([
        (prefetched(knobs(8, 1, 2, 4, Plane), 3), 29, 32),
        (prefetched(knobs(8, 1, 2, 3, Plane), 1), 7, 24),
        (prefetched(knobs(2, 2, 1, 4, Shared), 2), 7, 14),
        (
            prefetched(with(knobs(4, 1, 2, 3, Plane), 3, GammaIn::Shared), 2),
            31,
            12,
        ),
        (
            prefetched(with(knobs(2, 2, 1, 2, Shared), 2, GammaIn::Global), 3),
            17,
            6,
        ),
        // More cubes than groups: every cube's prologue, no second group.
        (prefetched(knobs(8, 1, 2, 2, Plane), 64), 5, 16),
    ]);
    // The f32 register cache on the same prefetch paths (bf16 words converted by shifts, f16
    // and f32 by the cast).
    let with_f32_cache: Vec<_> = cases
        .iter()
        .filter(|(k, _, _)| k.prefetch)
        .map(|&(k, rows, channels)| {
            (
                Knobs {
                    f32_cache: true,
                    ..k
                },
                rows,
                channels,
            )
        })
        .collect();
    cases.extend(with_f32_cache);
    if on_gpu() {
        for (k, rows, channels) in [
            (
                with(knobs(8, 8, 16, 3, Plane), 2, GammaIn::Registers),
                99_999,
                160,
            ),
            (
                with(knobs(8, 8, 16, 3, Plane), 2, GammaIn::Shared),
                4_001,
                160,
            ),
            (
                with(knobs(8, 16, 8, 3, Plane), 1, GammaIn::Registers),
                1_001,
                384,
            ),
            (
                with(knobs(8, 64, 2, 2, Shared), 2, GammaIn::Registers),
                777,
                1024,
            ),
            (
                with(knobs(4, 32, 4, 5, Plane), 2, GammaIn::Shared),
                3_333,
                640,
            ),
        ] {
            for (fast_math, f32_cache) in [(false, false), (true, false), (true, true)] {
                cases.push((
                    Knobs {
                        fast_math,
                        f32_cache,
                        ..prefetched(k, 132 * 3)
                    },
                    rows,
                    channels,
                ));
            }
        }
    }
    if on_gpu() {
        cases.extend(packed_cases());
    }
    cases.push((knobs(2, 1, 1, 2, LaneReduce::Plane), 3, 8));
    check_cases_in_every_dtype(cases);
}

/// The word cache (`.wd`): x loaded as 32-bit words and widened from them at each use, with
/// one and several vectors per lane, rows per unit, every gamma placement and lane reduction,
/// tails of rows and columns, and with prefetch; bf16 (integer widening), f16 and f32 (the cast).
#[test]
fn word_cache_matches_the_reference() {
    use LaneReduce::*;
    let mut cases = vec![
        (knobs(8, 2, 1, 10, Shared), 13, 160),
        (knobs(2, 2, 1, 4, Shared), 7, 14),
        (knobs(4, 2, 1, 9, Shared), 9, 72),
        (
            with(knobs(8, 1, 1, 8, Plane), 4, GammaIn::Registers),
            13,
            64,
        ),
        (with(knobs(4, 2, 1, 4, Shared), 2, GammaIn::Shared), 11, 32),
        (with(knobs(2, 1, 2, 2, Plane), 3, GammaIn::Global), 17, 4),
        (prefetched(knobs(8, 1, 2, 3, Plane), 2), 19, 24),
        (
            prefetched(with(knobs(4, 2, 1, 5, Shared), 2, GammaIn::Shared), 3),
            23,
            40,
        ),
    ];
    if on_gpu() {
        // The shapes the `.wd` entries serve (C = 96 and 160) and a wide row.
        cases.extend([
            (knobs(4, 8, 16, 5, Plane), 24_960, 160),
            (knobs(2, 16, 8, 5, Plane), 4_001, 160),
            (knobs(8, 4, 32, 3, Plane), 24_961, 96),
            (knobs(8, 64, 2, 2, Shared), 777, 1024),
            (
                prefetched(with(knobs(8, 8, 16, 3, Plane), 2, GammaIn::Registers), 396),
                9_999,
                160,
            ),
        ]);
    }
    let cases = cases
        .into_iter()
        .map(|(k, rows, channels)| {
            (
                Knobs {
                    word_cache: true,
                    fast_math: on_gpu(),
                    ..k
                },
                rows,
                channels,
            )
        })
        .collect();
    check_cases_in_every_dtype(cases);
}

/// Checks each `(knobs, rows, C)` case in bf16, f32 and f16 ([`check_knobs`]). Every case runs;
/// the failures are reported together. RMSNORM_KNOB_CASE=i runs case i only.
fn check_cases_in_every_dtype(cases: Vec<(Knobs, usize, usize)>) {
    let only: Option<usize> = std::env::var("RMSNORM_KNOB_CASE")
        .ok()
        .and_then(|v| v.parse().ok());
    let runs: Vec<_> = cases
        .into_iter()
        .enumerate()
        .filter(|(i, _)| only.is_none_or(|o| o == *i))
        .flat_map(|(i, (k, rows, channels))| {
            [DType::BF16, DType::F32, DType::F16].map(|dtype| (i, k, rows, channels, dtype))
        })
        .collect();
    let failures = run_cases(
        &runs,
        |_, &(i, ..)| format!("case {i}: "),
        |&(_, k, rows, channels, dtype)| check_knobs(k, rows, channels, dtype, Activation::Silu),
    );
    assert_no_failures(&failures);
}

/// The ticketed walk (`.tk<k>`: row groups drawn in order from a device counter, k per ticket)
/// on persistent grids of one to a few cubes (CPU) and of up to two cubes per SM (CUDA), so
/// cubes draw several tickets and the last one is cut short: with and without prefetch and the
/// f32 cache, streaming rows, the shared reduction, gamma in every place, more cubes than
/// groups, and a full grid. Each case launches once per dtype on one client, so a launch that
/// left the counters non-zero would leave the next launch's output NaN. Small enough for
/// compute-sanitizer (`SANITIZE_FILTER=ticketed`).
#[test]
fn ticketed_walks_match_the_reference() {
    use LaneReduce::*;
    let tk = |k: Knobs, groups_per_ticket: u32| Knobs {
        groups_per_ticket,
        ..k
    };
    let mut cases = vec![
        (tk(prefetched(knobs(8, 1, 2, 4, Plane), 3), 1), 29, 32),
        (tk(prefetched(knobs(8, 1, 2, 3, Plane), 1), 3), 7, 24),
        (tk(prefetched(knobs(2, 2, 1, 4, Shared), 2), 1), 7, 14),
        (
            tk(
                prefetched(with(knobs(4, 1, 2, 3, Plane), 3, GammaIn::Shared), 2),
                3,
            ),
            31,
            12,
        ),
        (
            tk(
                prefetched(with(knobs(2, 2, 1, 2, Shared), 2, GammaIn::Global), 3),
                2,
            ),
            17,
            6,
        ),
        (
            Knobs {
                f32_cache: true,
                ..tk(prefetched(knobs(8, 1, 2, 4, Plane), 2), 2)
            },
            37,
            32,
        ),
        // More cubes than groups: every cube's first draws, no second ticket for most.
        (tk(prefetched(knobs(8, 1, 2, 2, Plane), 64), 1), 5, 16),
        // Without prefetch; streaming rows; a full grid.
        (
            tk(
                Knobs {
                    max_cubes: Some(3),
                    ..knobs(8, 1, 2, 4, Plane)
                },
                1,
            ),
            29,
            256,
        ),
        (
            tk(
                Knobs {
                    max_cubes: Some(1),
                    ..knobs(4, 2, 1, 0, Shared)
                },
                2,
            ),
            11,
            96,
        ),
        (tk(knobs(4, 2, 1, 2, Shared), 2), 9, 16),
    ];
    if on_gpu() {
        let fast = |k: Knobs| Knobs {
            fast_math: true,
            ..k
        };
        cases.extend([
            (
                tk(fast(prefetched(knobs(8, 32, 4, 4, Plane), 264)), 1),
                5_001,
                1024,
            ),
            (
                tk(fast(prefetched(knobs(8, 32, 4, 4, Plane), 264)), 2),
                4_099,
                1024,
            ),
            (
                tk(
                    Knobs {
                        f32_cache: true,
                        ..fast(prefetched(
                            with(knobs(4, 32, 4, 5, Plane), 1, GammaIn::Shared),
                            264,
                        ))
                    },
                    4,
                ),
                3_001,
                640,
            ),
            (
                tk(fast(prefetched(knobs(8, 32, 8, 2, Plane), 132)), 1),
                4_001,
                512,
            ),
            (
                tk(
                    fast(prefetched(
                        with(knobs(8, 16, 8, 3, Plane), 2, GammaIn::Registers),
                        99,
                    )),
                    2,
                ),
                3_333,
                384,
            ),
            (
                tk(
                    Knobs {
                        max_cubes: Some(66),
                        ..knobs(8, 8, 16, 0, Plane)
                    },
                    1,
                ),
                2_001,
                1000,
            ),
        ]);
    }
    check_cases_in_every_dtype(cases);
}

/// Lane counts that are not powers of two, rows packed side by side into planes of 32 (CUDA):
/// 1 to 10 rows per plane, idle units at each plane's end, rows whose vectors do not fill the
/// lanes (C = 88, 152), streaming rows, several rows per unit, gamma in every place, prefetch
/// with the f32 cache and the PTX SiLU on persistent grids.
fn packed_cases() -> Vec<(Knobs, usize, usize)> {
    use LaneReduce::Plane;
    // The f32 cache with the PTX SiLU.
    let ptx_f32 = |k: Knobs| Knobs {
        fast_math: true,
        f32_cache: true,
        ..k
    };
    vec![
        (knobs(8, 3, 10, 4, Plane), 1001, 96),
        (knobs(8, 6, 20, 2, Plane), 1001, 96),
        (knobs(8, 12, 8, 1, Plane), 1001, 96),
        (knobs(8, 5, 12, 4, Plane), 777, 160),
        (knobs(8, 10, 12, 2, Plane), 777, 160),
        (knobs(8, 20, 4, 1, Plane), 777, 160),
        (knobs(8, 6, 5, 4, Plane), 333, 192),
        (knobs(8, 24, 2, 1, Plane), 333, 192),
        (knobs(8, 3, 10, 4, Plane), 101, 88),
        (knobs(8, 5, 6, 4, Plane), 101, 152),
        (knobs(8, 5, 6, 0, Plane), 101, 1000),
        (
            with(knobs(8, 6, 20, 2, Plane), 2, GammaIn::Shared),
            1001,
            96,
        ),
        (
            with(knobs(8, 10, 12, 2, Plane), 1, GammaIn::Global),
            777,
            160,
        ),
        (prefetched(knobs(8, 6, 20, 2, Plane), 132), 99_999, 96),
        (
            ptx_f32(prefetched(
                with(knobs(8, 3, 10, 4, Plane), 2, GammaIn::Shared),
                7,
            )),
            3_333,
            96,
        ),
        (
            ptx_f32(prefetched(knobs(8, 10, 12, 2, Plane), 264)),
            4_001,
            160,
        ),
    ]
}

/// Whatever the heuristic picks for this device is valid and correct, for C from 1 to 600.
/// SiLU at the edges of its range on every SiLU path the device has (the exact one; on CUDA
/// also the PTX one and its pairwise `shared_rcp` form): gamma spreads `y` over +-300, holds
/// NaN, +-inf and +-1e30 in single columns; each such column must give the reference's value
/// (-inf gives NaN, a huge negative `y` -0) without disturbing its neighbour in the pair.
#[test]
fn silu_edge_values_on_every_silu_path() {
    let mut rng = rng("silu_edges");
    let (rows, channels) = (37, 64);
    let x = randn(&mut rng, rows * channels);
    let mut gamma = uniform(&mut rng, channels, -100.0, 100.0);
    for (col, g) in [
        (0, f64::NAN),
        (3, f64::INFINITY),
        (6, f64::NEG_INFINITY),
        (9, 1e30),
        (12, -1e30),
        (17, 0.0),
    ] {
        gamma[col] = g;
    }
    let x = round_to(&x, DType::F32);
    let gamma = round_to(&gamma, DType::F32);
    let mut paths = vec![false];
    let mut base = knobs(4, 2, 1, 8, LaneReduce::Shared);
    if on_gpu() {
        paths.push(true);
        base = knobs(8, 8, 16, 1, LaneReduce::Plane);
    }
    let mut failures = Vec::new();
    for fast_math in paths {
        let k = Knobs { fast_math, ..base };
        let inputs = Inputs {
            x: &x,
            gamma: &gamma,
            rows,
            channels,
            dtype: DType::F32,
        };
        record_failure(&mut failures, &format!("{k}: "), || {
            check_knobs_on(k, inputs, NormParams::rms(1e-6), Activation::Silu, 1e-5)
        });
    }
    assert_no_failures(&failures);
}

#[test]
fn selected_knobs_are_valid_and_correct() {
    let device = cube_device();
    let client = device.client();
    let mut failures = Vec::new();
    for channels in (1..=600).chain([1024, 2048, 4096, 8192]) {
        for (elem_size, dtype) in [(2usize, DType::BF16), (4, DType::F32)] {
            let problem = RowsProblem::dense(3, channels);
            let k = select_knobs(&client, problem, elem_size, elem_size, 256);
            validate_knobs(&client, &k, problem, &[0, 0, 0], &[elem_size; 3])
                .unwrap_or_else(|e| panic!("C={channels}: {k:?}: {e}"));
            if channels % 37 == 1 || channels > 600 {
                record_failure(&mut failures, "", || {
                    check_knobs(k, 3, channels, dtype, Activation::Silu)
                });
            }
        }
    }
    assert_no_failures(&failures);
}

#[test]
fn invalid_knobs_are_refused_with_a_reason() {
    let device = cube_device();
    let client = device.client();
    let problem = RowsProblem::dense(4, 12);
    let cases = [
        (knobs(8, 1, 1, 2, LaneReduce::Plane), "must divide C"),
        (knobs(4, 1, 1 << 20, 2, LaneReduce::Plane), "units per cube"),
    ];
    let pitched = RowsProblem {
        x_row_stride: 14,
        ..problem
    };
    let err = validate_knobs(
        &client,
        &knobs(4, 1, 1, 3, LaneReduce::Plane),
        pitched,
        &[0; 3],
        &[2; 3],
    )
    .unwrap_err();
    assert!(err.to_string().contains("x row stride 14"), "{err}");
    for (k, needle) in cases {
        let err = validate_knobs(&client, &k, problem, &[0, 0, 0], &[2; 3]).unwrap_err();
        assert!(err.to_string().contains(needle), "{k:?}: {err}");
    }
    if on_gpu() {
        // Packed rows take whole planes; a shared reduction wider than a plane whole planes of
        // a row.
        let wide = RowsProblem::dense(4, 320);
        for (k, needle) in [
            (
                knobs(8, 10, 4, 4, LaneReduce::Plane),
                "must be a multiple of 3",
            ),
            (
                knobs(8, 40, 2, 1, LaneReduce::Shared),
                "multiple of the plane",
            ),
        ] {
            let err = validate_knobs(&client, &k, wide, &[0; 3], &[2; 3]).unwrap_err();
            assert!(err.to_string().contains(needle), "{k:?}: {err}");
        }
    }
    if !on_gpu() {
        let fast = Knobs {
            fast_math: true,
            ..knobs(4, 1, 1, 3, LaneReduce::Plane)
        };
        let err = validate_knobs(&client, &fast, problem, &[0; 3], &[2; 3]).unwrap_err();
        assert!(err.to_string().contains("needs a CUDA device"), "{err}");
    }
    // Prefetch stages whole 32-bit words and needs the register cache; the f32 cache converts
    // the staged words.
    for (k, needle) in [
        (
            Knobs {
                f32_cache: true,
                ..knobs(4, 1, 1, 3, LaneReduce::Plane)
            },
            "needs prefetch",
        ),
        (
            Knobs {
                prefetch: true,
                ..knobs(1, 1, 1, 12, LaneReduce::Plane)
            },
            "32-bit words",
        ),
        (
            Knobs {
                prefetch: true,
                ..knobs(2, 1, 1, 0, LaneReduce::Plane)
            },
            "register cache",
        ),
        (
            Knobs {
                word_cache: true,
                ..knobs(1, 1, 1, 12, LaneReduce::Plane)
            },
            "32-bit words",
        ),
        (
            Knobs {
                word_cache: true,
                ..knobs(2, 1, 1, 0, LaneReduce::Plane)
            },
            "register cache",
        ),
        (
            Knobs {
                word_cache: true,
                f32_cache: true,
                ..prefetched(knobs(4, 1, 1, 3, LaneReduce::Plane), 2)
            },
            "choose one",
        ),
    ] {
        let err = validate_knobs(&client, &k, problem, &[0; 3], &[2; 3]).unwrap_err();
        assert!(err.to_string().contains(needle), "{k:?}: {err}");
    }
    // The ticketed walk's counters are 32-bit: 2^32 one-group tickets are refused; 2^32 - 4
    // plus one cube's two spare draws still fit, and so do 2^32 groups two per ticket.
    let ticketed = Knobs {
        groups_per_ticket: 1,
        max_cubes: Some(1),
        ..knobs(4, 1, 1, 3, LaneReduce::Plane)
    };
    let rows = |rows| RowsProblem::dense(rows, 12);
    let err = validate_knobs(&client, &ticketed, rows(1 << 32), &[0; 3], &[2; 3]).unwrap_err();
    assert!(err.to_string().contains("32 bits"), "{err}");
    validate_knobs(&client, &ticketed, rows((1 << 32) - 4), &[0; 3], &[2; 3])
        .unwrap_or_else(|e| panic!("{e}"));
    let pairs = Knobs {
        groups_per_ticket: 2,
        ..ticketed
    };
    validate_knobs(&client, &pairs, rows(1 << 32), &[0; 3], &[2; 3])
        .unwrap_or_else(|e| panic!("{e}"));
    let misaligned = validate_knobs(
        &client,
        &knobs(4, 1, 1, 3, LaneReduce::Plane),
        problem,
        &[2, 0, 0],
        &[2; 3],
    )
    .unwrap_err();
    assert!(misaligned.to_string().contains("aligned"), "{misaligned}");
}

/// The extension called on the raw (un-fused) CubeCL backend.
#[test]
fn raw_cube_backend_extension() {
    let device = cube_device();
    let mut rng = rng("raw_cube");
    let (rows, channels) = (10, 384);
    let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::BF16);
    let want = reference(&x, &gamma, NormParams::rms(eps), Activation::Silu);
    let y = <CubeBackend as RmsNormSiluBackend>::rms_norm_silu(
        upload(&x, vec![2, 5, channels], DType::BF16, &device),
        upload(&gamma, vec![channels], DType::BF16, &device),
        NormParams::rms(eps),
        Activation::Silu,
    );
    assert_close(&download(y), &want, 2e-2, 2e-2, "raw CubeBackend");
}

/// Rows read from and written to pitched buffers: padding in x is NaN (it must not be read)
/// and padding in the output stays NaN (it must not be written).
#[test]
fn pitched_rows_are_read_and_written_in_place() {
    let device = cube_device();
    let mut rng = rng("pitched");
    let (rows, channels, x_pitch, out_pitch) = (9, 40, 48, 56);
    let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::F32);
    let want = reference(&x, &gamma, NormParams::rms(eps), Activation::Silu);
    let mut x_padded = vec![f64::NAN; rows * x_pitch];
    for r in 0..rows {
        x_padded[r * x_pitch..r * x_pitch + channels]
            .copy_from_slice(&x[r * channels..(r + 1) * channels]);
    }
    let xt = upload(&x_padded, vec![rows * x_pitch], DType::F32, &device);
    let gt = upload(&gamma, vec![channels], DType::F32, &device);
    let out = upload(
        &vec![f64::NAN; rows * out_pitch],
        vec![rows * out_pitch],
        DType::F32,
        &device,
    );
    let problem = RowsProblem {
        rows,
        channels,
        x_row_stride: x_pitch,
        out_row_stride: out_pitch,
    };
    let client = xt.client.clone();
    let k = select_knobs(&client, problem, 4, 4, 256);
    launch_forward(
        &client,
        xt.handle.clone(),
        gt.handle.clone(),
        out.handle.clone(),
        elem(DType::F32),
        elem(DType::F32),
        problem,
        NormParams::rms(eps),
        Activation::Silu,
        &k,
    )
    .unwrap();
    let got = download(out);
    let rows_got: Vec<f64> = (0..rows)
        .flat_map(|r| got[r * out_pitch..r * out_pitch + channels].to_vec())
        .collect();
    assert_close(&rows_got, &want, 1e-5, 1e-5, "pitched rows");
    for r in 0..rows {
        assert!(
            got[r * out_pitch + channels..(r + 1) * out_pitch]
                .iter()
                .all(|v| v.is_nan()),
            "row {r}: the kernel wrote into the output padding"
        );
    }
}

/// A pitched Burn tensor (a slice of a wider one) goes through the public API without a copy
/// of its rows being needed for correctness.
#[test]
fn sliced_tensor_through_the_api() {
    use burn::tensor::s;
    let device = device();
    let mut rng = rng("sliced");
    let (rows, wide, channels) = (6, 72, 64);
    let x = round_to(&randn(&mut rng, rows * wide), DType::F32);
    let gamma = round_to(&uniform(&mut rng, channels, 0.5, 2.0), DType::F32);
    let x_rows: Vec<f64> = (0..rows)
        .flat_map(|r| x[r * wide..r * wide + channels].to_vec())
        .collect();
    let want = reference(&x_rows, &gamma, NormParams::rms(1e-5), Activation::Silu);
    let xt = tensor(&x, [rows, wide], DType::F32, &device).slice(s![.., 0..channels]);
    let y =
        burn_rmsnorm_silu::rms_norm_silu(xt, tensor(&gamma, [channels], DType::F32, &device), 1e-5);
    assert_close(&values(y), &want, 1e-6, 1e-5, "sliced rows");
}

/// Every configuration the tuned tables can choose gives the reference answer (on CUDA every
/// entry runs; on the CPU runtime, whose cubes hold at most a few units and no plane ops, the
/// entries are checked for validity against a GPU-like device and skipped here).
#[test]
fn lut_configurations_match_the_reference() {
    use rmsnorm_silu_kernels::lut::tables;
    let device = cube_device();
    let client = device.client();
    let sms = client.properties().hardware.num_streaming_multiprocessors;
    let mut runs = Vec::new();
    for table in tables() {
        // The FP8 entries are knobs of the same kernel: checked here on the bf16 output (the
        // FP8 encoding of each path is checked in `fp8.rs`).
        for e in table
            .entries
            .iter()
            .filter(|e| e.out == "bf16" || e.out == "fp8")
        {
            let k = e.knobs_for(sms);
            // A ticketed walk on a GPU's persistent grid: rows enough for every cube's two
            // tickets and a cut-short last one, so the drawing order is exercised.
            let rows = match k.max_cubes {
                Some(cubes) if k.groups_per_ticket > 0 => {
                    (2 * cubes * k.groups_per_ticket) as usize * k.rows_per_step() + 777
                }
                _ => 777,
            };
            let problem = RowsProblem::dense(rows, e.channels);
            if validate_knobs(&client, &k, problem, &[0; 3], &[2; 3]).is_err() {
                assert!(
                    !on_gpu() || table.sm != 90,
                    "sm90 entry invalid on this GPU: {e:?}"
                );
                continue;
            }
            runs.push((table.sm, k, rows, e.channels));
        }
    }
    eprintln!("running {} table configurations", runs.len());
    let failures = run_cases(
        &runs,
        |_, (sm, k, ..)| format!("sm{sm} {k}: "),
        |&(_, k, rows, channels)| check_knobs(k, rows, channels, DType::BF16, Activation::Silu),
    );
    assert_no_failures(&failures);
}

/// Selection returns a valid configuration for every C from 1 to 8192 and T from 1 to 10^7.
#[test]
fn selection_is_valid_for_every_shape() {
    use rmsnorm_silu_kernels::select_knobs_with_source;
    let device = cube_device();
    let client = device.client();
    for channels in 1..=8192usize {
        for rows in [1usize, 7, 1000, 24_960, 100_000, 1_597_440, 10_000_000] {
            for elem in [2usize, 4] {
                let problem = RowsProblem::dense(rows, channels);
                let (k, source) = select_knobs_with_source(&client, problem, elem, elem, 256);
                if let Err(e) = validate_knobs(&client, &k, problem, &[0; 3], &[elem; 3]) {
                    panic!("C={channels} T={rows} elem={elem}: {k} ({source:?}): {e}");
                }
            }
        }
    }
}

/// The table-derived fallback candidate is valid and correct on shapes outside the table (it
/// needs a device with a table: CUDA sm_90; elsewhere it is `None`); rows more than twice as
/// wide as the table's widest (C = 4096 against 1024) hold at most 2 vectors per lane; C = 48
/// on a long input leaves no lane idle.
#[test]
fn table_derived_fallback_is_valid_and_correct() {
    use rmsnorm_silu_kernels::table_derived_knobs;
    let device = cube_device();
    let client = device.client();
    for channels in [48usize, 200, 768, 1536, 2048, 4096, 33, 1000] {
        for rows in [1000usize, 50_000, 399_360] {
            let problem = RowsProblem::dense(rows, channels);
            match table_derived_knobs(&client, problem, 2, 2, 256) {
                Some(k) => {
                    // The ticketed walk stays with the width it was measured on (the sm_90
                    // table's ticketed entries at C = 640 and 1024 are nearest to 768 and 1536+).
                    assert_eq!(
                        k.groups_per_ticket, 0,
                        "C={channels} T={rows}: {k} takes a ticketed walk to another width"
                    );
                    if channels > 2048 {
                        assert!(
                            k.vectors_per_lane * k.rows_per_unit as usize <= 2,
                            "C={channels} T={rows}: {k} holds more than 2 vectors per lane"
                        );
                    }
                    if channels == 48 && rows >= 24_960 {
                        assert_eq!(
                            k.lanes_per_row as usize * k.vectors_per_lane * k.vector_size,
                            channels,
                            "C={channels} T={rows}: {k} leaves lanes idle on a long input"
                        );
                    }
                    check_knobs(k, rows.min(2000), channels, DType::BF16, Activation::Silu)
                }
                None => assert_ne!(
                    rmsnorm_silu_kernels::device::device_sm(&client),
                    Some(90),
                    "no table-derived knobs for C={channels} on sm_90"
                ),
            }
        }
    }
}

/// The benchmarks' two copy roofs (`Timer::copy`, `Timer::copy_unrolled`) move every byte,
/// for lengths that leave a tail after the unrolled steps and with 16-, 8- and 4-byte vectors.
#[test]
fn copy_roofs_move_every_byte() {
    use rmsnorm_silu_kernels::timing::Timer;
    let device = cube_device();
    let timer = Timer::new(device.client());
    let mut rng = rng("copy_roofs");
    for len in [1usize, 6, 4 * 1031, 4 * 77 * 256 + 12] {
        let src = upload(
            &uniform(&mut rng, len, -9.0, 9.0),
            vec![len],
            DType::F32,
            &device,
        );
        for unrolled in [false, true] {
            let dst = upload(&vec![f64::NAN; len], vec![len], DType::F32, &device);
            if unrolled {
                timer.copy_unrolled(&src.handle, &dst.handle, len * 4);
            } else {
                timer.copy(&src.handle, &dst.handle, len * 4);
            }
            let got = download(dst);
            let want = download(src.clone());
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "len {len}, unrolled {unrolled}: the copy differs"
            );
        }
    }
}
