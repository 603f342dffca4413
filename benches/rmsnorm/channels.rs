//! The benchmark's `channels`: the Wan VAE's channel-axis shapes in both physical layouts, against a
//! same-bytes copy.

use super::*;

/// The Wan VAE decoder's channel-axis shapes `[B, C, T, H, W]`, normalised over C in both
/// physical layouts: dense channels-first (the channels kernel) and channels-last memory (the
/// row kernel over B*T*H*W rows), each against a same-bytes copy in the same run.
pub(crate) fn channels(timer: &mut Timer, device: &Device, args: &Args) {
    use burn_rmsnorm_silu::kernels::channels::{
        ChannelsConfig, ChannelsProblem, channels_backward_config, channels_config,
        launch_channels_backward, launch_channels_with, tiled_channels_config,
    };
    let client = timer.client.clone();
    // RMSNORM_CHANNELS_SWEEP=0: no sweeps; =forward: the forward's only.
    let sweep_mode = std::env::var("RMSNORM_CHANNELS_SWEEP").unwrap_or_default();
    let sweep_channels = sweep_mode != "0";
    let sweep_backward = sweep_channels && sweep_mode != "forward";
    let shapes = [
        [1usize, 96, 4, 480, 832],
        [1, 192, 4, 240, 416],
        [1, 384, 1, 60, 104],
    ];
    let mut csv = String::from("shape,layout,kernel_us,copy_us,ratio_to_copy,gbps\n");
    let wanted = bench_channels(&shapes.map(|s| s[1]));
    for shape in shapes.into_iter().filter(|s| wanted.contains(&s[1])) {
        let [b, c, t, h, w] = shape;
        let positions = t * h * w;
        let n = b * c * positions;
        let x = timer.random(BF16, n, -5.0, 20.0);
        let gamma = timer.random(BF16, c, 0.5, 1.5);
        let out = client.empty(n * 2);
        let eps = 1e-6 / c as f32;
        let copy = median(&timer.time(2, 50, || timer.copy(&x, &out, n * 2)));
        let problem = ChannelsProblem::dense(b, c, positions);
        let norm = NormParams::rms(eps);
        // The launch shapes compared: the heuristic's, one unit per position vector (C walked
        // twice) and the tiled form (channels split over groups, cached), each with the PTX
        // SiLU off and on.
        let per_position = ChannelsConfig {
            position_units: 256,
            channel_groups: 1,
            channels_per_unit: 0,
            max_vector: 0,
            plane_groups: 1,
            prefetch: false,
            bf16_input: false,
            single_tile: true,
            activation: Activation::Silu,
            fast_math: false,
        };
        let tiled = tiled_channels_config(&client, c, b * positions / 8, Activation::Silu);
        let mut variants: Vec<(String, Option<ChannelsConfig>)> =
            vec![("channels-first heuristic".into(), None)];
        for (name, cfg) in [("per-position", per_position), ("tiled", tiled)] {
            for fast_math in [false, true] {
                let label = format!(
                    "channels-first {name}{}",
                    if fast_math { " fast" } else { "" }
                );
                variants.push((label, Some(ChannelsConfig { fast_math, ..cfg })));
            }
        }
        let launch_forward = |cfg: Option<ChannelsConfig>| {
            launch_channels_with(
                &client,
                RowOperands {
                    x: x.clone(),
                    gamma: gamma.clone(),
                    x_type: BF16,
                    gamma_type: BF16,
                },
                out.clone(),
                problem,
                norm,
                Activation::Silu,
                cfg,
            )
        };
        let mut results = Vec::new();
        for (label, cfg) in variants {
            let time = median(&timer.time(2, 50, || launch_forward(cfg).expect("channels launch")));
            results.push((label, time));
        }
        // The heuristic's shape with and without `single_tile` (a no-op where a cube has
        // several tiles), interleaved with the copy.
        let heuristic = channels_config(&client, c, b * positions, 8, Activation::Silu);
        let (one, loop_) = single_tile_ab(
            timer,
            &format!("{shape:?} ab forward"),
            heuristic,
            || timer.copy(&x, &out, n * 2),
            |cfg| launch_forward(Some(cfg)).expect("channels launch"),
        );
        results.push(("channels-first ab single tile".into(), one));
        results.push(("channels-first ab loop".into(), loop_));
        // A sweep of the launch shape with the PTX SiLU (`channels_sweep`), best reported;
        // `RMSNORM_CHANNELS_SWEEP=0` skips it (forward and backward).
        let sweep = if sweep_channels {
            channels_sweep(&client, c, false)
        } else {
            Vec::new()
        };
        let best = fastest(timer, sweep.iter().copied(), 20, |cfg| {
            launch_forward(Some(cfg))
        });
        if let Some((cfg, us)) = best {
            println!(
                "{shape:?} channels-first sweep best of {}: {} {us:9.2} us, x{:.3}",
                sweep.len(),
                channels_label(&cfg),
                us / copy
            );
            results.push((
                format!("channels-first sweep best {}", channels_label(&cfg)),
                us,
            ));
        }
        let rows = Buffers {
            x: x.clone(),
            gamma: gamma.clone(),
            out: out.clone(),
            problem: RowsProblem::dense(b * positions, c),
            fp8: false,
            activation: Activation::Silu,
        };
        let (knobs, _) = select_knobs_with_source(&client, rows.problem, 2, 2, 256);
        results.push(("channels-last".into(), time_knobs(timer, &rows, &knobs, 50)));
        let (first, last) = api_per_call(device, shape, eps);
        results.push(("API channels-first from_data".into(), first));
        results.push(("API channels-last".into(), last));
        let bytes = (n * 4 + c * 2) as f64;
        for (layout, k) in &results {
            let k = *k;
            writeln!(
                csv,
                "{shape:?},{layout},{k:.2},{copy:.2},{:.3},{:.1}",
                k / copy,
                bytes / k / 1e3
            )
            .unwrap();
            println!(
                "{shape:?} {layout:>28}: {k:9.2} us, copy {copy:9.2} us, x{:.3}, {:.0} GB/s",
                k / copy,
                bytes / k / 1e3
            );
        }
        // The channels-first backward (reads x, dy; writes dx: 6 bytes per element).
        let dy = timer.random(BF16, n, -1.0, 2.0);
        let dgamma = client.empty(c * 2);
        let (src, dst) = (client.empty(n * 3), client.empty(n * 3));
        let copy3 = median(&timer.time(2, 50, || timer.copy(&src, &dst, n * 3)));
        // The same buffers for the channels-first and the row backward.
        let operands = burn_rmsnorm_silu::kernels::backward::BackwardOperands {
            x: x.clone(),
            gamma: gamma.clone(),
            dy: dy.clone(),
            dx: out.clone(),
            dgamma: dgamma.clone(),
            x_type: BF16,
            gamma_type: BF16,
        };
        let launch_backward = |cfg: Option<ChannelsConfig>| {
            launch_channels_backward(
                &client,
                operands.clone(),
                ChannelsProblem::dense(b, c, positions),
                norm,
                Activation::Silu,
                cfg,
            )
        };
        let mut report_backward = |layout: &str, us: f64, note: String| {
            writeln!(
                csv,
                "{shape:?},{layout},{us:.2},{copy3:.2},{:.3},{:.1}",
                us / copy3,
                (n * 6) as f64 / us / 1e3
            )
            .unwrap();
            println!(
                "{shape:?} {layout:>28}: {us:9.2} us, copy {copy3:9.2} us, x{:.3}{note}",
                us / copy3
            );
        };
        let backward = median(&timer.time(2, 50, || {
            launch_backward(None).expect("channels backward launch")
        }));
        report_backward("channels-first backward", backward, String::new());
        if let Some(heuristic) =
            channels_backward_config(&client, c, b * positions, 8, Activation::Silu)
        {
            single_tile_ab(
                timer,
                &format!("{shape:?} ab backward"),
                heuristic,
                || timer.copy(&src, &dst, n * 3),
                |cfg| launch_backward(Some(cfg)).expect("channels backward launch"),
            );
        }
        // The channels-last backward: the row backward over B*T*H*W rows of C (the same bytes).
        let rows_backward = median(&timer.time(2, 50, || {
            burn_rmsnorm_silu::kernels::backward::launch_backward(
                &client,
                operands.clone(),
                b * positions,
                c,
                norm,
                Activation::Silu,
            )
            .expect("row backward launch")
        }));
        let knobs = burn_rmsnorm_silu::kernels::backward::BackwardKnobs::for_shape(
            &client,
            c,
            b * positions,
        );
        report_backward(
            "channels-last backward",
            rows_backward,
            format!(" ({knobs})"),
        );
        // The backward over its own sweep (every channel cached).
        let backward_sweep = if sweep_backward {
            channels_sweep(&client, c, true)
        } else {
            Vec::new()
        };
        let best = fastest(timer, backward_sweep, 20, |cfg| launch_backward(Some(cfg)));
        if let Some((cfg, us)) = best {
            writeln!(
                csv,
                "{shape:?},channels-first backward sweep best {},{us:.2},{copy3:.2},{:.3},{:.1}",
                channels_label(&cfg),
                us / copy3,
                (n * 6) as f64 / us / 1e3
            )
            .unwrap();
            println!(
                "{shape:?} channels-first backward sweep best: {} {us:9.2} us, x{:.3}",
                channels_label(&cfg),
                us / copy3
            );
        }
    }
    write_file(args, "channels.csv", &csv.replace(", ", "x"));
}

/// `cfg` as given and with `single_tile` off, in 5 interleaved rounds with `copy`; prints the
/// three times and returns the kernel's two (single tile, loop).
pub(crate) fn single_tile_ab(
    timer: &Timer,
    label: &str,
    cfg: burn_rmsnorm_silu::kernels::channels::ChannelsConfig,
    mut copy: impl FnMut(),
    launch: impl Fn(burn_rmsnorm_silu::kernels::channels::ChannelsConfig),
) -> (f64, f64) {
    let looped = burn_rmsnorm_silu::kernels::channels::ChannelsConfig {
        single_tile: false,
        ..cfg
    };
    let [copy_us, one, loop_] = interleaved_medians(
        timer,
        50,
        [&mut copy, &mut || launch(cfg), &mut || launch(looped)],
    );
    println!(
        "{label} {}: single tile {one:.2} us (x{:.3}), loop {loop_:.2} us (x{:.3}), copy \
         {copy_us:.2} us",
        channels_label(&cfg),
        one / copy_us,
        loop_ / copy_us
    );
    (one, loop_)
}

/// The fastest of `candidates` (median of `runs` launches each) and its time; the ones the
/// device refuses (`launch` returns an error) are skipped.
pub(crate) fn fastest<K: Copy, E>(
    timer: &Timer,
    candidates: impl IntoIterator<Item = K>,
    runs: usize,
    launch: impl Fn(K) -> Result<(), E>,
) -> Option<(K, f64)> {
    ranked(timer, candidates, runs, launch).into_iter().next()
}

/// The channels-first launch shapes the `channels` mode sweeps for C channels (PTX SiLU on
/// where the device has it): vectors of 2, 4 or 8 positions x 2..256 position units x 1..64
/// channel groups (64 to 256 units a cube), each with the unit's channels cached in registers
/// where they fit a budget (forward: 256 bf16 values; backward, which keeps x and dy as f32 and
/// gamma and its gradient per channel: about 192 registers; with prefetch also the next tile's
/// x and dy as words) and, for the forward with 8-position vectors, walked twice.
pub(crate) fn channels_sweep(
    client: &Client,
    channels: usize,
    backward: bool,
) -> Vec<burn_rmsnorm_silu::kernels::channels::ChannelsConfig> {
    use burn_rmsnorm_silu::kernels::channels::ChannelsConfig;
    let fast_math = burn_rmsnorm_silu::kernels::device::has_ptx_math(client);
    let mut out = Vec::new();
    for max_vector in [2usize, 4, 8] {
        for px in [2u32, 4, 8, 16, 32, 64, 128, 256] {
            for groups in [1u32, 2, 4, 8, 16, 32, 64] {
                if !(64..=256).contains(&(px * groups)) {
                    continue;
                }
                let per_unit = channels.div_ceil(groups as usize);
                let fits = if backward {
                    per_unit * (2 * max_vector + 2) <= 192
                } else {
                    per_unit * max_vector <= 256
                };
                let walked = !backward && max_vector == 8;
                // The backward's prefetch holds the next tile's x and dy as words too.
                let prefetch_fits = backward && per_unit * (3 * max_vector + 2) <= 192;
                let options = [
                    (fits, per_unit, false),
                    (walked, 0, false),
                    (prefetch_fits, per_unit, true),
                ];
                for (_, channels_per_unit, prefetch) in options.into_iter().filter(|o| o.0) {
                    out.push(ChannelsConfig {
                        position_units: px,
                        channel_groups: groups,
                        channels_per_unit,
                        max_vector,
                        plane_groups: 1,
                        prefetch,
                        bf16_input: false,
                        single_tile: true,
                        activation: Activation::Silu,
                        fast_math,
                    });
                }
            }
        }
    }
    out
}

/// `p128.g4.k24.v2.fast.pf`: position units, channel groups, channels cached per unit (0:
/// walked), positions per vector at most, PTX SiLU, backward prefetch; `.loop` where
/// `single_tile` is off.
pub(crate) fn channels_label(cfg: &burn_rmsnorm_silu::kernels::channels::ChannelsConfig) -> String {
    format!(
        "p{}.g{}.k{}.v{}{}{}{}",
        cfg.position_units,
        cfg.channel_groups,
        cfg.channels_per_unit,
        cfg.max_vector,
        if cfg.fast_math { ".fast" } else { "" },
        if cfg.prefetch { ".pf" } else { "" },
        if cfg.single_tile { "" } else { ".loop" }
    )
}

/// What one more call through the public API costs (`rms_norm_silu_dim` over the channel axis:
/// 20 calls between two syncs less 10, per call; see `table::queued_per_call`): the values of a
/// `[B, C, T, H, W]` bf16 tensor made with `Tensor::from_data` (channels-first; on CUDA its W
/// rows padded to a power of two bytes), and the same values channels-last (`[B, T, H, W, C]`
/// memory viewed as `[B, C, T, H, W]`).
fn api_per_call(device: &Device, [b, c, t, h, w]: [usize; 5], eps: f32) -> (f64, f64) {
    use burn_rmsnorm_silu::{RmsNormSiluOptions, rms_norm_silu_dim};
    let gamma = Tensor::<1>::random([c], Distribution::Uniform(0.5, 1.5), device).cast(DType::BF16);
    let first = Tensor::<5>::random([b, c, t, h, w], Distribution::Normal(0.0, 1.0), device)
        .cast(DType::BF16)
        .into_data();
    // (`from_data` without a dtype would make the device's default float, f32: twice the bytes.)
    let first = Tensor::<5>::from_data(first, (device, DType::BF16));
    let last = first.clone().permute([0, 2, 3, 4, 1]).into_data();
    let last = Tensor::<5>::from_data(last, (device, DType::BF16)).permute([0, 4, 1, 2, 3]);
    assert_eq!((first.dtype(), last.dtype()), (DType::BF16, DType::BF16));
    let time = |x: &Tensor<5>| {
        let call = || rms_norm_silu_dim(x.clone(), gamma.clone(), 1, RmsNormSiluOptions::rms(eps));
        crate::table::queued_per_call(device, call).1
    };
    (time(&first), time(&last))
}
