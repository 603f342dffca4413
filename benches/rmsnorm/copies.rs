//! The benchmark's `copies`: copy shapes of the same bytes (how the copy roof is chosen).

use super::*;

/// `copies`: the copy-roof experiment. Times the roof (`Timer::copy`) and [`CopyShape`] variants
/// (vectors per unit, cube size, persistent grid or one cube per tile, tickets) of the same
/// bytes as bf16 in and out of `[T, C]`, three rounds of 30 runs each, and writes `copies.csv`
/// (median over rounds, ratio to the roof).
/// C = 512, 1024 at T = 24960, 99840, 399360 unless `RMSNORM_BENCH_C` / `RMSNORM_BENCH_T` say.
pub(crate) fn copies(timer: &mut Timer, args: &Args) {
    let shape = |per_unit, cube_dim, cubes_per_sm, ticketed| CopyShape {
        per_unit,
        cube_dim,
        cubes_per_sm,
        ticketed,
    };
    // The roof itself first (`Timer::copy`, marked per_unit 0: one vector per unit, 256 units,
    // full grid), then strided tiles on full and persistent grids, then ticketed persistent
    // grids (u1 d256 g8 was the earlier roof).
    let mut shapes = vec![shape(0, 256, 0, false)];
    for per_unit in [1, 2, 4] {
        for cube_dim in [128, 256] {
            for cubes_per_sm in [0, 8] {
                shapes.push(shape(per_unit, cube_dim, cubes_per_sm, false));
            }
        }
    }
    for per_unit in [1, 2, 4, 8] {
        for cube_dim in [128, 256, 512] {
            for cubes_per_sm in [4, 8, 16] {
                if cube_dim * cubes_per_sm <= 2048 {
                    shapes.push(shape(per_unit, cube_dim, cubes_per_sm, true));
                }
            }
        }
    }
    // Each variant first copies an odd number of vectors (a partial last tile) exactly.
    let bytes: Vec<u8> = (0..4 * 100_003u32)
        .flat_map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes())
        .collect();
    let src = timer.client.create_from_slice(&bytes);
    for shape in shapes.iter().skip(1) {
        let dst = timer.client.create_from_slice(&vec![0xa5u8; bytes.len()]);
        timer.copy_shaped(&src, &dst, bytes.len(), *shape);
        let back = timer.client.read_one(dst).expect("read the copy");
        assert!(back[..] == bytes[..], "copy {shape:?} is wrong");
    }
    let mut csv =
        String::from("c,t,per_unit,cube_dim,cubes_per_sm,ticketed,us,gbps,ratio_to_copy\n");
    for c in bench_channels(&[512, 1024]) {
        for t in bench_rows(&[24960, 99840, 399360]) {
            let bytes = c * t * 2;
            let src = timer.random(BF16, c * t, -2.0, 4.0);
            let dst = timer.client.empty(bytes);
            let mut times = vec![Vec::new(); shapes.len()];
            for _ in 0..3 {
                for (shape, slot) in shapes.iter().zip(&mut times) {
                    let shape = *shape;
                    slot.push(median(&timer.time(2, 30, || {
                        if shape.per_unit == 0 {
                            timer.copy(&src, &dst, bytes)
                        } else {
                            timer.copy_shaped(&src, &dst, bytes, shape)
                        }
                    })));
                }
            }
            let medians: Vec<f64> = times.iter().map(|t| median(t)).collect();
            let copy = medians[0];
            let mut order: Vec<usize> = (0..shapes.len()).collect();
            order.sort_by(|a, b| medians[*a].total_cmp(&medians[*b]));
            println!("copies C={c} T={t}: the roof (Timer::copy, u0) {copy:.2} us");
            for &i in &order {
                let s = shapes[i];
                let us = medians[i];
                let gbps = 2.0 * bytes as f64 / us / 1e3;
                csv.push_str(&format!(
                    "{c},{t},{},{},{},{},{us:.2},{gbps:.1},{:.4}\n",
                    s.per_unit,
                    s.cube_dim,
                    s.cubes_per_sm,
                    s.ticketed,
                    us / copy
                ));
            }
            for &i in order.iter().take(12) {
                let s = shapes[i];
                println!(
                    "  u{} d{} g{}{}: {:.2} us, x{:.3}",
                    s.per_unit,
                    s.cube_dim,
                    s.cubes_per_sm,
                    if s.ticketed { " tickets" } else { "" },
                    medians[i],
                    medians[i] / copy
                );
            }
        }
    }
    std::fs::create_dir_all(&args.out).expect("create the output folder");
    std::fs::write(format!("{}/copies.csv", args.out), csv).expect("write copies.csv");
}
