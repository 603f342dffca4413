use super::*;

/// Every knob path (one or several lanes per row, plane or shared-memory reduction, blocks
/// cached in registers or streamed, several rows per cube, a capped grid) gives the host's
/// bytes (one or two rows per unit, a capped grid, and the PTX math where the device has it),
/// including rows
/// whose fp32 sum of squares overflows (~1e30) or underflows (eps 0):
/// the rescue pass. On CUDA a sample that covers every knob value ([`sample_cases`]).
#[test]
fn every_nvfp4_knob_path_matches_the_host() {
    let device = cube_device();
    let client = device.client();
    let hw = client.properties().hardware.clone();
    let plane_ops = has_plane_ops(&client);
    let ptx = rmsnorm_silu_kernels::device::has_ptx_math(&client);
    let mut rng = rng("nvfp4_knobs");
    let inputs = RescueRows::new(&mut rng, 13, 160);
    let mut cases = Vec::new();
    for lanes in [1u32, 2, 4, 8, 16] {
        for reduce in [LaneReduce::Shared, LaneReduce::Plane] {
            for rows_per_cube in [1u32, 2, 4] {
                for blocks_per_lane in [0, 10usize.div_ceil(lanes as usize)] {
                    for (max_cubes, rows_per_unit) in
                        [(None, 1), (Some(2), 1), (None, 2), (Some(2), 2)]
                    {
                        let knobs = Fp4Knobs {
                            vector_size: 4,
                            lanes_per_row: lanes,
                            rows_per_cube,
                            rows_per_unit,
                            blocks_per_lane,
                            lane_reduce: reduce,
                            // The PTX paths (SiLU, NaN-propagating amax) where the device has
                            // them, on every other configuration.
                            fast_math: ptx && max_cubes.is_some(),
                            max_cubes,
                            raw_cache: false,
                            gamma_shared: false,
                        };
                        let plane_ok = reduce == LaneReduce::Shared
                            || lanes == 1
                            || (plane_ops && lanes <= hw.plane_size_min);
                        if lanes * rows_per_cube > hw.max_units_per_cube || !plane_ok {
                            continue;
                        }
                        cases.push(knobs);
                        // The raw register cache (f32 inputs here: widened by the plain cast),
                        // and gamma in shared memory, alone and with the raw cache.
                        if blocks_per_lane > 0 && rows_per_cube == 2 {
                            for (raw_cache, gamma_shared) in
                                [(true, false), (false, true), (true, true)]
                            {
                                cases.push(Fp4Knobs {
                                    raw_cache,
                                    gamma_shared,
                                    ..knobs
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    let cases = sample_cases(cases, |k| k.to_string());
    let failures = run_cases(&cases, |_, k| format!("{k}: "), |&k| inputs.check(k));
    assert_no_failures(&failures);
}

/// Lane counts that are not powers of two (C = 160: 10 blocks on 10, 5 or 3 lanes; C = 96: 6
/// blocks on 6): the shared-memory tree over every row's lanes (CPU and GPU) and, with plane
/// operations, rows packed side by side into planes with shuffles down inside each row; with
/// and without the register cache, two rows per unit, a persistent grid, and rows
/// that need the rescue. Against the host bytes.
#[test]
fn nvfp4_lane_counts_that_are_not_powers_of_two() {
    let device = cube_device();
    let client = device.client();
    let hw = client.properties().hardware.clone();
    let plane_ops = has_plane_ops(&client);
    let ptx = rmsnorm_silu_kernels::device::has_ptx_math(&client);
    let mut rng = rng("nvfp4_odd_lanes");
    let problems = [(160usize, &[10u32, 5, 3][..]), (96, &[6][..])];
    let inputs: Vec<RescueRows> = problems
        .iter()
        .map(|&(channels, _)| RescueRows::new(&mut rng, 37, channels))
        .collect();
    let mut cases = Vec::new();
    for (p, &(channels, lane_counts)) in problems.iter().enumerate() {
        let blocks = channels / 16;
        for &lanes in lane_counts {
            for reduce in [LaneReduce::Shared, LaneReduce::Plane] {
                if reduce == LaneReduce::Plane && !(plane_ops && lanes <= hw.plane_size_min) {
                    continue;
                }
                // Packed planes take whole planes of rows.
                let rows_per_cube = match reduce {
                    LaneReduce::Plane => hw.plane_size_min / lanes,
                    LaneReduce::Shared => 3,
                };
                // (The CPU runtime's cubes hold fewer units than a row has lanes here.)
                if lanes * rows_per_cube > hw.max_units_per_cube {
                    continue;
                }
                for blocks_per_lane in [0, blocks.div_ceil(lanes as usize)] {
                    for (max_cubes, rows_per_unit) in [(None, 1), (Some(2), 1), (None, 2)] {
                        let knobs = Fp4Knobs {
                            vector_size: 4,
                            lanes_per_row: lanes,
                            rows_per_cube,
                            rows_per_unit,
                            blocks_per_lane,
                            lane_reduce: reduce,
                            fast_math: ptx && max_cubes.is_some(),
                            max_cubes,
                            raw_cache: false,
                            gamma_shared: false,
                        };
                        cases.push((p, knobs));
                    }
                }
            }
        }
    }
    // Each case compiles its kernels: on a GPU a seeded sample covering every knob value.
    for (p, knobs) in sample_cases_up_to(cases, 12, |(p, k)| format!("P{p} {k}")) {
        inputs[p].check(knobs);
    }
}

/// Packed planes need whole planes of rows per cube: anything else is refused by name (on a
/// device with plane operations and cubes of 40 units; elsewhere the cube or the plane
/// reduction itself is refused).
#[test]
fn nvfp4_packed_rows_need_whole_planes() {
    let device = cube_device();
    let client = device.client();
    let mut rng = rng("nvfp4_packed_refused");
    let (x, gamma, _) = cudnn_inputs(&mut rng, 8, 160, DType::F32);
    let xt = upload(&x, vec![8, 160], DType::F32, &device);
    let gt = upload(&gamma, vec![160], DType::F32, &device);
    let knobs = Fp4Knobs {
        vector_size: 4,
        lanes_per_row: 10,
        rows_per_cube: 4,
        rows_per_unit: 1,
        blocks_per_lane: 1,
        lane_reduce: LaneReduce::Plane,
        fast_math: false,
        max_cubes: None,
        raw_cache: false,
        gamma_shared: false,
    };
    let err = launch_forward_nvfp4(
        &client,
        RowOperands {
            x: xt.handle.clone(),
            gamma: gt.handle.clone(),
            x_type: elem(DType::F32),
            gamma_type: elem(DType::F32),
        },
        Fp4Target {
            codes: client.create_from_slice(&[0u8; 8 * 80]),
            scales: client.create_from_slice(&[0u8; 8 * 10]),
            recipe: Fp4Recipe::Cudnn,
            layout: ScaleLayout::RowMajor,
            s_enc: 1.0,
            device_amax: None,
        },
        RowsProblem::dense(8, 160),
        NormParams::rms(1e-6),
        Activation::Silu,
        &knobs,
    )
    .expect_err("10 lanes x 4 rows is not whole planes")
    .to_string();
    let hw = client.properties().hardware.clone();
    let plane_ops = has_plane_ops(&client);
    if plane_ops && hw.plane_size_min == 32 && hw.max_units_per_cube >= 40 {
        assert!(
            err.contains("rows_per_cube 4 must be a multiple of 3"),
            "{err}"
        );
    } else {
        assert!(
            err.contains("does not fit") || err.contains("needs plane ops"),
            "{err}"
        );
    }
}

/// The compiled-in H200 NVFP4 table parses, its knobs round-trip through `Display`, and every
/// entry that can run on this device gives the host's bytes.
#[test]
fn nvfp4_table_entries_are_valid_and_correct() {
    use rmsnorm_silu_kernels::nvfp4::sm90_table;
    let device = cube_device();
    let client = device.client();
    let hw = client.properties().hardware.clone();
    let plane_ops = has_plane_ops(&client);
    let mut rng = rng("nvfp4_table");
    let table = sm90_table();
    assert!(!table.is_empty());
    for &(c, t, knobs) in table {
        assert_eq!(Fp4Knobs::parse(&knobs.to_string()), Ok(knobs));
        let runs_here = knobs.lanes_per_row * knobs.rows_per_cube <= hw.max_units_per_cube
            && (knobs.lane_reduce == LaneReduce::Shared
                || knobs.lanes_per_row == 1
                || (plane_ops && knobs.lanes_per_row <= hw.plane_size_min))
            && (!knobs.fast_math || crate::common::on_gpu());
        if !runs_here {
            continue;
        }
        let rows = 37;
        let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, c, DType::BF16);
        let norm = NormParams::rms(eps);
        let y = reference(&x, &gamma, norm, Activation::Silu);
        let (codes, scales) = launch_with(
            Fp4Case::new(&x, &gamma, [rows, c], DType::BF16),
            norm,
            Fp4Recipe::Cudnn,
            ScaleLayout::RowMajor,
            1.0,
            knobs,
        );
        let host = host_blocks(&y, Nvfp4Recipe::Cudnn);
        let (s, n) = compare_blocks(&codes, &scales, &host, &format!("C={c} T={t} {knobs}"));
        assert!(s * 100 <= host.len().max(100) && n * 200 <= rows * c);
    }
}

/// The raw register cache (x kept as loaded, widened at each use) writes the same bytes as the
/// f32 cache with the same knobs, for bf16 (widened through its words) and f16 inputs (f32 in
/// `every_nvfp4_knob_path_matches_the_host`),
/// with two rows per unit and a persistent grid; and the host's bytes.
#[test]
fn nvfp4_raw_cache_writes_the_f32_caches_bytes() {
    let device = cube_device();
    let client = device.client();
    let hw = client.properties().hardware.clone();
    let plane_ops = has_plane_ops(&client);
    let ptx = rmsnorm_silu_kernels::device::has_ptx_math(&client);
    let mut rng = rng("nvfp4_raw_cache");
    let grids = [(None, 1), (Some(2), 1), (Some(3), 2)];
    // Each case compiles three kernels: on a GPU a seeded sample covering every problem, lane
    // layout and grid.
    let case_key = |p: usize, lanes: u32, g: usize| format!("P{p} L{lanes} grid{g}");
    let keep = sampled_keys(
        (0..3)
            .flat_map(|p| {
                [2u32, 8]
                    .into_iter()
                    .flat_map(move |l| (0..grids.len()).map(move |g| (p, l, g)))
            })
            .map(|(p, l, g)| case_key(p, l, g))
            .collect(),
        6,
    );
    for (p, (rows, channels, dtype)) in [
        (21, 160, DType::BF16),
        (9, 1024, DType::BF16),
        (11, 96, DType::F16),
    ]
    .into_iter()
    .enumerate()
    {
        let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, dtype);
        let norm = NormParams::rms(eps);
        let y = reference(&x, &gamma, norm, Activation::Silu);
        let host = host_blocks(&y, Nvfp4Recipe::Cudnn);
        let blocks = channels / 16;
        // On a GPU the shared-memory layout of C = 1024 takes 16 lanes (4 blocks a lane): with
        // 2 lanes its 32 unrolled blocks a lane took NVRTC minutes.
        let shared_lanes = if on_gpu() {
            (blocks as u32 / 4).max(2)
        } else {
            2
        };
        let mut layouts = vec![(shared_lanes, LaneReduce::Shared)];
        if plane_ops && hw.plane_size_min >= 8 {
            layouts.push((8, LaneReduce::Plane));
        }
        for (lanes, lane_reduce) in layouts {
            for (g, (max_cubes, rows_per_unit)) in grids.into_iter().enumerate() {
                let key_lanes = if lane_reduce == LaneReduce::Shared {
                    2
                } else {
                    8
                };
                if !keep.contains(&case_key(p, key_lanes, g)) {
                    continue;
                }
                let knobs = Fp4Knobs {
                    vector_size: 4,
                    lanes_per_row: lanes,
                    rows_per_cube: 2,
                    rows_per_unit,
                    blocks_per_lane: blocks.div_ceil(lanes as usize),
                    lane_reduce,
                    fast_math: ptx,
                    max_cubes,
                    raw_cache: false,
                    gamma_shared: false,
                };
                if lanes * 2 > hw.max_units_per_cube {
                    continue;
                }
                let raw = Fp4Knobs {
                    raw_cache: true,
                    ..knobs
                };
                let run = |k: Fp4Knobs| {
                    launch_with(
                        Fp4Case::new(&x, &gamma, [rows, channels], dtype),
                        norm,
                        Fp4Recipe::Cudnn,
                        ScaleLayout::RowMajor,
                        1.0,
                        k,
                    )
                };
                let (codes, scales) = run(knobs);
                // The raw cache, and it with gamma in shared memory (gamma widened through
                // its words there too): the same bytes.
                let shared = Fp4Knobs {
                    gamma_shared: true,
                    ..raw
                };
                for other in [raw, shared] {
                    let (raw_codes, raw_scales) = run(other);
                    let what = format!("C={channels} {dtype:?} {other}");
                    assert_eq!(
                        raw_codes, codes,
                        "{what}: codes differ from the f32 cache's"
                    );
                    assert_eq!(
                        raw_scales, scales,
                        "{what}: scales differ from the f32 cache's"
                    );
                    let (s, n) = compare_blocks(&raw_codes, &raw_scales, &host, &what);
                    assert!(
                        s * 100 <= host.len().max(100) && n * 200 <= rows * channels,
                        "{what}: {s} scales and {n} codes differ from the host's"
                    );
                }
            }
        }
    }
}

/// Knobs that stream the row (no register cache) on a small problem, with the raw cache and
/// gamma in shared memory as given: the options that need the register cache are refused by
/// name.
fn launch_streamed_row(raw_cache: bool, gamma_shared: bool) {
    let mut rng = rng("nvfp4_streamed_refused");
    let (x, gamma, eps) = cudnn_inputs(&mut rng, 4, 64, DType::BF16);
    let knobs = Fp4Knobs {
        vector_size: 4,
        lanes_per_row: 1,
        rows_per_cube: 1,
        rows_per_unit: 1,
        blocks_per_lane: 0,
        lane_reduce: LaneReduce::Shared,
        fast_math: false,
        max_cubes: Some(1),
        raw_cache,
        gamma_shared,
    };
    launch_with(
        Fp4Case::new(&x, &gamma, [4, 64], DType::BF16),
        NormParams::rms(eps),
        Fp4Recipe::Cudnn,
        ScaleLayout::RowMajor,
        1.0,
        knobs,
    );
}

/// The raw register cache is a form of the register cache.
#[test]
#[should_panic(expected = "the raw register cache (`.raw`) needs the register cache")]
fn nvfp4_raw_cache_without_the_register_cache_is_refused() {
    launch_streamed_row(true, false);
}

/// Gamma in shared memory takes the register cache's layout.
#[test]
#[should_panic(expected = "gamma in shared memory (`.gs`) needs the register cache")]
fn nvfp4_gamma_shared_without_the_register_cache_is_refused() {
    launch_streamed_row(false, true);
}

/// Gamma in shared memory that does not fit the device's shared memory is refused by name (a
/// row of 65536 channels: 256 KiB of f32 gamma per cube).
#[test]
#[should_panic(expected = "bytes of shared memory per cube")]
fn nvfp4_gamma_shared_beyond_the_shared_memory_is_refused() {
    let (rows, channels) = (1, 65536);
    let x = vec![1.0; rows * channels];
    let gamma = vec![1.0; channels];
    let knobs = Fp4Knobs {
        vector_size: 4,
        lanes_per_row: 16,
        rows_per_cube: 1,
        rows_per_unit: 1,
        blocks_per_lane: 256,
        lane_reduce: LaneReduce::Shared,
        fast_math: false,
        max_cubes: None,
        raw_cache: false,
        gamma_shared: true,
    };
    launch_with(
        Fp4Case::new(&x, &gamma, [rows, channels], DType::BF16),
        NormParams::rms(1e-6),
        Fp4Recipe::Cudnn,
        ScaleLayout::RowMajor,
        1.0,
        knobs,
    );
}

/// The knob text round-trips, the PTX math included; the prefetch knob (`.pf`, removed: it won
/// one of 33 shapes by under 1%) no longer parses.
#[test]
fn nvfp4_knobs_parse_what_they_print() {
    for text in [
        "v8.l4.r32.b1.plane.m-",
        "v8.l4.r32.b1.plane.m-.fast",
        "v8.l64.r2.b1.shared.m528.fast",
        "v4.l1.r2.b3.shared.m2",
        "v8.l16.r4.b1.plane.m-.u2.fast",
        "v8.l16.r4.b1.plane.m264.u2.fast",
        "v8.l8.r32.b5.plane.m-.fast.raw.gs",
        "v8.l16.r8.b3.plane.m-.fast.gs",
        "v4.l2.r2.b5.shared.m2.gs",
    ] {
        assert_eq!(Fp4Knobs::parse(text).unwrap().to_string(), text);
    }
    assert!(Fp4Knobs::parse("v8.l64.r2.b1.shared.m528.fast.pf").is_err());
    assert!(Fp4Knobs::parse("v8.l4.r32.b1.plane.m-.gs.raw").is_err());
}
