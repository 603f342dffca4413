use super::*;

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
    // Every (knobs, dtype, norm) run, its inputs drawn in a fixed order; on CUDA the runs
    // compile and check on several threads (`run_cases`).
    let rows = 23;
    let mut runs = Vec::new();
    for (k, channels) in cases {
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
            for (norm, activation) in [
                (NormParams::rms(0.0), Activation::Silu),
                (NormParams::rms(0.0), Activation::Identity),
                (NormParams::rms(1e-6), Activation::Silu),
            ] {
                runs.push((
                    k,
                    channels,
                    dtype,
                    x.clone(),
                    gamma.clone(),
                    norm,
                    activation,
                ));
            }
        }
    }
    let failures = run_cases(
        &runs,
        |_, (k, channels, dtype, _, _, norm, activation)| {
            format!("{k} C={channels} {dtype:?} {norm:?} {activation:?}: ")
        },
        |(k, channels, dtype, x, gamma, norm, activation)| {
            let inputs = Inputs {
                x,
                gamma,
                rows,
                channels: *channels,
                dtype: *dtype,
            };
            // eps = 0: every row's true output is O(1), so a relative check is strict.
            let tol = if *dtype == DType::F32 { 2e-5 } else { 2e-2 };
            check_knobs_on(*k, inputs, *norm, *activation, tol)
        },
    );
    assert_no_failures(&failures);
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
