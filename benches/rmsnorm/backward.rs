//! The benchmark's `backward`: the fused backward against its copy roof.

use super::*;

/// `base` on every grid of `cubes_per_sm` crossed with every `(vectors per lane, units per
/// cube)` of `shapes`, in vectors of at most `max_vector` elements (0: the widest).
pub(crate) fn grid_sweep(
    base: burn_rmsnorm_silu::kernels::backward::BackwardKnobs,
    cubes_per_sm: &[u32],
    shapes: &[(usize, usize)],
    max_vector: usize,
) -> Vec<burn_rmsnorm_silu::kernels::backward::BackwardKnobs> {
    cubes_per_sm
        .iter()
        .flat_map(|&n| {
            shapes.iter().map(move |&(cap, units)| {
                burn_rmsnorm_silu::kernels::backward::BackwardKnobs {
                    cubes_per_sm: Some(n),
                    max_vectors_per_lane: cap,
                    units_per_cube: units,
                    max_vector,
                    ..base
                }
            })
        })
        .collect()
}

/// The fused backward (dx and dgamma) on bf16 rows, against a copy of the same bytes: it reads
/// x and dy and writes dx (6 bytes per element; gamma and dgamma are negligible), so the roof is
/// a copy of 3 bytes per element. Times the default knobs for the shape, the same with the IEEE
/// SiLU', and a sweep of the register cap (1, 2, 4, 8 vectors per lane) x units per cube (128,
/// 256) x prefetch (off, on) with the device's SiLU', then of the grid size (cubes per SM) for
/// caps 1 and 2, and of vectors of 4 elements on several grids, and reports the best (and the
/// sweep's five fastest in the log).
pub(crate) fn backward(timer: &mut Timer, args: &Args) {
    use burn_rmsnorm_silu::kernels::backward::{
        BackwardKnobs, BackwardOperands, launch_backward_with,
    };
    let client = timer.client.clone();
    let mut csv = String::from(
        "c,t,kernel_us,copy_us,ratio_to_copy,gbps,ieee_us,ieee_ratio,best_knobs,best_us,best_ratio\n",
    );
    for c in bench_channels(&[96usize, 192, 384, 1024]) {
        // (T = 6240 at C = 384 is the Wan decoder's [1, 384, 1, 60, 104] in channels-last
        // memory; T = 6240 is only timed where RMSNORM_BENCH_T asks for it.)
        let default_rows = [24_960usize, 99_840, 399_360];
        let rows = if std::env::var("RMSNORM_BENCH_T").is_ok() {
            bench_rows(&[6_240, 24_960, 99_840, 399_360])
        } else {
            default_rows.to_vec()
        };
        for t in rows {
            let default = BackwardKnobs::for_shape(&client, c, t);
            let n = t * c;
            let x = timer.random(BF16, n, -5.0, 20.0);
            let dy = timer.random(BF16, n, -1.0, 2.0);
            let gamma = timer.random(BF16, c, 0.5, 1.5);
            let dx = client.empty(n * 2);
            let dgamma = client.empty(c * 2);
            let (src, dst) = (client.empty(n * 3), client.empty(n * 3));
            let copy = median(&timer.time(2, 50, || timer.copy(&src, &dst, n * 3)));
            let launch = |knobs: BackwardKnobs| {
                launch_backward_with(
                    &client,
                    BackwardOperands {
                        x: x.clone(),
                        gamma: gamma.clone(),
                        dy: dy.clone(),
                        dx: dx.clone(),
                        dgamma: dgamma.clone(),
                        x_type: BF16,
                        gamma_type: BF16,
                    },
                    t,
                    c,
                    NormParams::rms(1e-6 / c as f32),
                    Activation::Silu,
                    knobs,
                )
            };
            let time = |knobs: BackwardKnobs| {
                median(&timer.time(2, 50, || launch(knobs).expect("backward launch")))
            };
            let kernel = time(default);
            // The dgamma kernel (the backward's second) on the partial rows of the default's
            // grid (4 cubes per SM where the default leaves the grid to the shape).
            let cubes =
                (sms(&client) * default.cubes_per_sm.filter(|&n| n > 0).unwrap_or(4)) as usize;
            let parts = client.empty(cubes * c * 4);
            let reduce_dgamma = || {
                burn_rmsnorm_silu::kernels::backward::launch_reduce_dgamma(
                    &client,
                    parts.clone(),
                    dgamma.clone(),
                    BF16,
                    cubes,
                    c / 8,
                    8,
                )
            };
            // The second kernel alone, where the default fixes the cubes per SM.
            let reduce = default
                .cubes_per_sm
                .filter(|&n| n > 0)
                .map(|_| median(&timer.time(2, 50, reduce_dgamma)));
            // What any backward of two dependent kernels costs at least here: the copy of the
            // same bytes followed by a second launch, the smallest kernel (a 16-byte copy) or
            // the dgamma kernel.
            let (tiny_src, tiny_dst) = (client.empty(16), client.empty(16));
            let copy_then_tiny = median(&timer.time(2, 50, || {
                timer.copy(&src, &dst, n * 3);
                timer.copy(&tiny_src, &tiny_dst, 16);
            }));
            let copy_then_dgamma = median(&timer.time(2, 50, || {
                timer.copy(&src, &dst, n * 3);
                reduce_dgamma();
            }));
            println!(
                "backward C={c:5} T={t:7}: two-launch floors: copy {copy:.2} us, copy + 16-byte \
                 copy {copy_then_tiny:.2} us (x{:.3}), copy + dgamma kernel ({cubes} parts) \
                 {copy_then_dgamma:.2} us (x{:.3})",
                copy_then_tiny / copy,
                copy_then_dgamma / copy
            );
            let ieee = time(BackwardKnobs {
                fast_math: false,
                ..default
            });
            // RMSNORM_BACKWARD_SWEEP=0: the default knobs and the floors only.
            let sweep_on = std::env::var("RMSNORM_BACKWARD_SWEEP").map_or(true, |v| v != "0");
            let sweep = [1usize, 2, 4, 8]
                .into_iter()
                .flat_map(|cap| {
                    [(128usize, false), (256, false), (128, true), (256, true)].map(
                        |(units, prefetch)| BackwardKnobs {
                            max_vectors_per_lane: cap,
                            units_per_cube: units,
                            prefetch,
                            max_vector: 0,
                            ..default
                        },
                    )
                })
                // The persistent grid's size (one cube per row group, 1 to 8 per SM) for 1 and 2
                // vectors per lane and both cube sizes (the widest vectors, as above).
                .chain(grid_sweep(
                    default,
                    &[0, 1, 2, 3, 4, 6, 8],
                    &[(1, 128), (1, 256), (2, 128), (2, 256)],
                    0,
                ))
                // Vectors of 4 elements (no idle lane where C / 8 is not a power of two, as
                // C = 96, 192, 384 in bf16), 2 to 4 vectors per lane, on grids of 2 to 6 cubes
                // per SM.
                .chain(grid_sweep(
                    default,
                    &[2, 3, 4, 5, 6],
                    &[(2, 128), (2, 256), (4, 128), (4, 256)],
                    4,
                ));
            let times = if sweep_on {
                ranked(timer, sweep, 20, launch)
            } else {
                Vec::new()
            };
            let top: Vec<String> = times
                .iter()
                .take(5)
                .map(|(k, us)| format!("{k} {us:.2}"))
                .collect();
            println!(
                "backward C={c:5} T={t:7}: sweep's fastest: {}",
                top.join(", ")
            );
            if let Some(us) = reduce {
                println!(
                    "backward C={c:5} T={t:7}: the dgamma kernel alone {us:.2} us (copy {copy:.2})"
                );
            }
            let best = times
                .first()
                .copied()
                .filter(|&(_, us)| us < kernel)
                .unwrap_or((default, kernel));
            let gbps = (n * 6 + c * 4) as f64 / kernel / 1e3;
            writeln!(
                csv,
                "{c},{t},{kernel:.2},{copy:.2},{:.3},{gbps:.1},{ieee:.2},{:.3},{},{:.2},{:.3}",
                kernel / copy,
                ieee / copy,
                best.0,
                best.1,
                best.1 / copy
            )
            .unwrap();
            println!(
                "backward C={c:5} T={t:7}: default {default} {kernel:9.2} us, copy {copy:9.2} us, \
                 x{:.3}, {gbps:.0} GB/s; IEEE {ieee:9.2} us, x{:.3}; best {} {:9.2} us, x{:.3}",
                kernel / copy,
                ieee / copy,
                best.0,
                best.1,
                best.1 / copy
            );
        }
    }
    write_file(args, "backward.csv", &csv);
}
