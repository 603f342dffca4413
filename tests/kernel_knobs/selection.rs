use super::*;

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
