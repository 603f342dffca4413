//! The benchmark's `tune` (the knob sweep per shape that writes `kernels/lut/sm<NN>.txt`, or the FP8 table
//! with `--output fp8`) and `fallback` (the heuristic against the best knobs on shapes outside
//! the table).

use super::*;

/// The knob space the tuner sweeps for one shape: 16-byte vectors; lanes per row from 1 to
/// 256 (plane shuffles up to 32, shared memory above) with at most 16 vectors per lane; 1, 2 or
/// 4 rows in flight per unit; 32, 64, 128 or 256 units per cube (a plane of 32 holding one row
/// of 1024 channels on a full grid is Inductor's kernel at C = 1024, and ours too since its loads
/// are issued together); one cube per row group or a persistent grid at full occupancy (at most
/// 32 cubes per SM). Refinements of the best are added by [`refinements`].
pub(crate) fn candidates(client: &Client, problem: RowsProblem) -> Vec<Knobs> {
    let v = pick_vector_size(client, problem, 2, 2, 256);
    let vecs = problem.channels / v;
    let mut out = Vec::new();
    for lanes in [1u32, 2, 4, 8, 16, 32, 64, 128, 256] {
        if lanes as usize > vecs.next_power_of_two() {
            continue;
        }
        let vpl = vecs.div_ceil(lanes as usize);
        if vpl > 16 {
            continue;
        }
        for u in [1u32, 2, 4] {
            if vpl * u as usize > 16 {
                continue;
            }
            for units in [32u32, 64, 128, 256] {
                if units < lanes {
                    continue;
                }
                for occupancy in [0u32, (2048 / units).min(32)] {
                    out.push(Knobs {
                        vector_size: v,
                        lanes_per_row: lanes,
                        rows_per_cube: units / lanes,
                        rows_per_unit: u,
                        vectors_per_lane: vpl,
                        lane_reduce: if lanes <= 32 {
                            LaneReduce::Plane
                        } else {
                            LaneReduce::Shared
                        },
                        gamma: GammaIn::Registers,
                        max_cubes: (occupancy > 0).then_some(occupancy * sms(client)),
                        fast_math: false,
                        prefetch: false,
                        f32_cache: false,
                        word_cache: false,
                        groups_per_ticket: 0,
                    });
                }
            }
        }
    }
    out.extend(packed_candidates(client, v, vecs));
    out
}

/// Lane counts that are not powers of two, rows packed into planes (plane reduction): the
/// counts up to a plane that divide the row's vectors with at most 4 per lane (C = 96: 3, 6 and
/// 12 lanes; 160: 5, 10, 20; 192: 6, 12, 24), 4 or 8 planes per cube, 1 or 2 rows per unit.
pub(crate) fn packed_candidates(client: &Client, v: usize, vecs: usize) -> Vec<Knobs> {
    let plane = client.properties().hardware.plane_size_min;
    let mut out = Vec::new();
    for lanes in 3..=plane {
        if lanes.is_power_of_two() || !vecs.is_multiple_of(lanes as usize) {
            continue;
        }
        let vpl = vecs / lanes as usize;
        if vpl > 4 {
            continue;
        }
        let per_plane = plane / lanes;
        for u in [1u32, 2] {
            for planes in [4u32, 8] {
                for occupancy in [0u32, 2048 / (planes * plane)] {
                    out.push(Knobs {
                        vector_size: v,
                        lanes_per_row: lanes,
                        rows_per_cube: planes * per_plane,
                        rows_per_unit: u,
                        vectors_per_lane: vpl,
                        lane_reduce: LaneReduce::Plane,
                        gamma: GammaIn::Registers,
                        max_cubes: (occupancy > 0).then_some(occupancy * sms(client)),
                        fast_math: false,
                        prefetch: false,
                        f32_cache: false,
                        word_cache: false,
                        groups_per_ticket: 0,
                    });
                }
            }
        }
    }
    out
}

/// Variations of the best candidate: PTX fast math, gamma placement, grid occupancy, cube size,
/// half-width vectors.
pub(crate) fn refinements(client: &Client, problem: RowsProblem, best: Knobs) -> Vec<Knobs> {
    let mut out = vec![
        Knobs {
            fast_math: true,
            ..best
        },
        Knobs {
            gamma: GammaIn::Shared,
            ..best
        },
        Knobs {
            gamma: GammaIn::Global,
            ..best
        },
    ];
    let units = best.units_per_cube();
    for occ in [1u32, 2, 4, 8, 16, 32] {
        if occ * units <= 2048 {
            out.push(Knobs {
                max_cubes: Some(occ * sms(client)),
                ..best
            });
        }
    }
    if units * 2 <= 1024 {
        out.push(Knobs {
            rows_per_cube: best.rows_per_cube * 2,
            max_cubes: best.max_cubes.map(|m| (m / 2).max(1)),
            ..best
        });
    }
    if best.vector_size > 1 && problem.channels.is_multiple_of(best.vector_size / 2) {
        let v = best.vector_size / 2;
        let vpl = (problem.channels / v).div_ceil(best.lanes_per_row as usize);
        if vpl * best.rows_per_unit as usize <= 16 {
            out.push(Knobs {
                vector_size: v,
                vectors_per_lane: vpl,
                ..best
            });
        }
    }
    out
}

/// The best so far with the next row group prefetched (staged through shared memory), on
/// persistent grids of 1 to 8 cubes per SM, with gamma where the best keeps it and in shared
/// memory (fewer registers beside the words in flight), and with one row in flight per unit (twice
/// the groups, for shapes with few). Only where a cube walks at least two groups.
pub(crate) fn prefetch_variants(client: &Client, problem: RowsProblem, best: Knobs) -> Vec<Knobs> {
    let mut out = Vec::new();
    if !best.caches_row(problem.channels) {
        return out;
    }
    // Prefetch also with one row per unit where the sweep preferred more, and with two where
    // it preferred one: on the H200, FP8 C = 64 at T = 399360 ran 1.26x the copy on the
    // tuner's `l4.c2` and 1.10x on `l8.c1` with two rows per unit and prefetch (2026-12-02).
    let mut bases = vec![best];
    if best.rows_per_unit > 1 {
        bases.push(Knobs {
            rows_per_unit: 1,
            ..best
        });
    } else if best.vectors_per_lane * 2 <= 16 {
        bases.push(Knobs {
            rows_per_unit: 2,
            ..best
        });
    }
    for base in bases {
        let groups = problem.rows.div_ceil(base.rows_per_step());
        for gamma in [base.gamma, GammaIn::Shared] {
            for occ in [1u32, 2, 3, 4, 6, 8] {
                let cubes = occ * sms(client);
                if occ * base.units_per_cube() <= 2048 && groups >= 2 * cubes as usize {
                    out.push(Knobs {
                        prefetch: true,
                        gamma,
                        max_cubes: Some(cubes),
                        ..base
                    });
                }
            }
            if base.gamma == GammaIn::Shared {
                break;
            }
        }
    }
    out
}

/// The best knobs for a shape and their time: sweep, then refine around the best.
pub(crate) fn tune_shape(timer: &Timer, b: &Buffers) -> (Knobs, f64) {
    let client = &timer.client;
    let mut best: Option<(Knobs, f64)> = None;
    let consider = |k: Knobs, best: &mut Option<(Knobs, f64)>| -> Option<f64> {
        if !b.valid(client, &k) {
            return None;
        }
        let t = time_knobs(timer, b, &k, 15);
        if best.is_none_or(|(_, bt)| t < bt) {
            *best = Some((k, t));
        }
        Some(t)
    };
    let mut swept = Vec::new();
    for k in candidates(client, b.problem) {
        if let Some(t) = consider(k, &mut best) {
            swept.push((k, t));
        }
    }
    let first = best.expect("at least one valid candidate").0;
    for k in refinements(client, b.problem, first) {
        consider(k, &mut best);
    }
    // Prefetch changes which shape is best (e.g. more lanes with fewer vectors each), so it is
    // tried on the refined best, on the sweep's next two distinct lane layouts, and on the best
    // packed layout (lanes not a power of two) if none of those is packed: on the H200, C = 96
    // at T = 24960 ranked 6 lanes x 2 vectors fourth without prefetch and first with it
    // (7.74 against 8.42 us, 2026-12-02).
    swept.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut bases = vec![best.unwrap().0];
    let layout = |k: &Knobs| (k.lanes_per_row, k.vectors_per_lane);
    for (k, _) in &swept {
        if bases.len() == 3 {
            break;
        }
        if !bases.iter().any(|b| layout(b) == layout(k)) {
            bases.push(*k);
        }
    }
    let packed = |k: &Knobs| !k.lanes_per_row.is_power_of_two();
    if !bases.iter().any(packed)
        && let Some((k, _)) = swept.iter().find(|(k, _)| packed(k))
    {
        bases.push(*k);
    }
    for base in bases {
        for k in prefetch_variants(client, b.problem, base) {
            consider(k, &mut best);
        }
    }
    // The f32 register cache on the final layout (prefetch only): fewer conversions, more
    // registers.
    let last = best.unwrap().0;
    if last.prefetch {
        consider(
            Knobs {
                f32_cache: true,
                ..last
            },
            &mut best,
        );
    }
    // The word cache on the final layout (x kept as loaded words, widened at each use): fewer
    // registers where several vectors per lane are cached (H200, 2026-12-03: 1-5% faster at
    // C = 192-640 T <= 99840 in bf16, up to 5% slower at C = 64 and C = 1024 T >= 99840).
    let last = best.unwrap().0;
    if last.caches_row(b.problem.channels) && last.vectors_per_lane > 1 {
        consider(
            Knobs {
                word_cache: true,
                f32_cache: false,
                ..last
            },
            &mut best,
        );
    }
    // Half-width vectors on the final layout where its lanes leave vector slots idle (C = 160
    // on 8 lanes: 20 vectors of 8 in 24 slots, 40 of 4 in exactly 40): the same units per row
    // without the idle slots, whose instructions a warp issues anyway. `refinements` tries
    // half-width vectors before prefetch only.
    let last = best.unwrap().0;
    if let Some(half) = half_width_exact(b.problem, last) {
        for f32_cache in [last.f32_cache, !last.f32_cache] {
            consider(Knobs { f32_cache, ..half }, &mut best);
        }
    }
    // The ticketed walk on the final layout (persistent grids only): its groups drawn in order,
    // one or four per ticket, and one per ticket with twice the rows per unit (tickets paid on
    // the H200 with groups of 8-16 KB, 2026-12-02).
    let last = best.unwrap().0;
    if last.max_cubes.is_some() {
        let doubled = Knobs {
            rows_per_unit: last.rows_per_unit * 2,
            ..last
        };
        let mut ticketed = vec![(last, 1), (last, 4)];
        if doubled.vectors_per_lane * doubled.rows_per_unit as usize <= 16 {
            ticketed.push((doubled, 1));
        }
        for (k, groups_per_ticket) in ticketed {
            consider(
                Knobs {
                    groups_per_ticket,
                    ..k
                },
                &mut best,
            );
        }
    }
    let (k, _) = best.unwrap();
    // Re-measure the winner with the full run count.
    (k, time_knobs(timer, b, &k, 50))
}

/// `k` with vectors of half the width where that fills its lanes' vector slots exactly and
/// `k`'s own vectors do not (same lanes, twice the vectors per lane at most 16 per row in
/// flight); `None` otherwise.
pub(crate) fn half_width_exact(problem: RowsProblem, k: Knobs) -> Option<Knobs> {
    let v = k.vector_size / 2;
    let lanes = k.lanes_per_row as usize;
    if v == 0 || !problem.channels.is_multiple_of(v) || !k.caches_row(problem.channels) {
        return None;
    }
    let vecs = problem.channels / v;
    let idle_now = !(problem.channels / k.vector_size).is_multiple_of(lanes);
    let vpl = vecs / lanes;
    (idle_now && vecs.is_multiple_of(lanes) && vpl * k.rows_per_unit as usize <= 16).then_some(
        Knobs {
            vector_size: v,
            vectors_per_lane: vpl,
            ..k
        },
    )
}

pub(crate) fn occupancy_of(k: &Knobs, client: &Client) -> u32 {
    k.max_cubes.map_or(0, |m| m / sms(client))
}

pub(crate) fn tune(timer: &mut Timer, args: &Args) {
    let client = timer.client.clone();
    let output = args.output.as_str();
    let sm = device_sm(&client).expect("tuning needs a CUDA device");
    let name = client.properties().identity.name.clone();
    let date = std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut lut = format!(
        "# {name} (sm_{sm}) knob table, measured {date}. Written by the tuner:\n\
         #   cargo bench --bench rmsnorm -- tune --output {output}   (bf16 in, {output} out)\n\
         # columns: C T out knobs occupancy(cubes per SM, 0 = one cube per row group) kernel_us copy_us\n"
    );
    let path = args.lut.clone().unwrap_or_else(|| match output {
        "fp8" => format!("kernels/lut/sm{sm}_fp8.txt"),
        _ => format!("kernels/lut/sm{sm}.txt"),
    });
    let tokens = bench_rows(if args.quick { &TOKENS[..2] } else { &TOKENS });
    for channels in bench_channels(&CHANNELS) {
        for &rows in &tokens {
            let mut b = Buffers::new(timer, rows, channels);
            b.fp8 = output == "fp8";
            let start = Instant::now();
            let (k, t) = tune_shape(timer, &b);
            let copy = time_copy(timer, &b, 50);
            let occ = occupancy_of(&k, &client);
            let table_knobs = Knobs {
                max_cubes: None,
                ..k
            };
            writeln!(
                lut,
                "{channels} {rows} {output} {table_knobs} {occ} {t:.2} {copy:.2}"
            )
            .unwrap();
            println!(
                "tune C={channels:5} T={rows:7}: {k} {t:8.2} us, copy {copy:8.2} us, x{:.3} ({:.1} s)",
                t / copy,
                start.elapsed().as_secs_f64()
            );
            // Written after every shape, so an interrupted run keeps what it measured.
            std::fs::write(&path, &lut).expect("write the LUT");
        }
    }
    println!("wrote {path}");
}

/// Heuristic vs tuner-best on shapes outside the table.
pub(crate) fn fallback(timer: &mut Timer, args: &Args) {
    let client = timer.client.clone();
    let mut csv = String::from(
        "c,t,heuristic_knobs,heuristic_us,table_derived_knobs,table_derived_us,best_knobs,best_us,heuristic_ratio,table_derived_ratio\n",
    );
    for channels in bench_channels(&FALLBACK_CHANNELS) {
        for rows in bench_rows(&FALLBACK_TOKENS) {
            let b = Buffers::new(timer, rows, channels);
            let h = heuristic_knobs(&client, b.problem, 2, 2, 256);
            let th = time_knobs(timer, &b, &h, 50);
            let d = table_derived_knobs(&client, b.problem, 2, 2, 256).unwrap_or(h);
            let td = time_knobs(timer, &b, &d, 50);
            let (best, tb) = tune_shape(timer, &b);
            let tb = tb.min(th).min(td);
            writeln!(
                csv,
                "{channels},{rows},{h},{th:.2},{d},{td:.2},{best},{tb:.2},{:.3},{:.3}",
                th / tb,
                td / tb
            )
            .unwrap();
            println!(
                "fallback C={channels:5} T={rows:8}: heuristic {h} x{:.3}, table-derived {d} x{:.3}, best {best} {tb:8.2} us",
                th / tb,
                td / tb
            );
        }
    }
    write_file(args, "fallback.csv", &csv);
}
