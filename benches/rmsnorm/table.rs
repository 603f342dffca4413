//! The benchmark's `bench` (the default mode): the tuned shapes and the fallback shapes against a same-bytes
//! copy, Burn's composed ops and the end-to-end call.

use super::*;

/// Burn's own composed ops on the same shape, as Burn fuses them: device time of a profile
/// window around the ops and the sync that flushes Burn's fusion queue.
pub(crate) fn time_burn_composed(
    timer: &Timer,
    device: &Device,
    rows: usize,
    channels: usize,
) -> f64 {
    let x = Tensor::<2>::random([rows, channels], Distribution::Normal(5.0, 5.0), device)
        .cast(DType::BF16);
    let gamma =
        Tensor::<1>::random([channels], Distribution::Uniform(0.5, 2.0), device).cast(DType::BF16);
    let eps = 1e-6 / channels as f64;
    let composed = || {
        let x32 = x.clone().cast(DType::F32);
        let rms = (x32.clone().square().mean_dim(1) + eps).sqrt();
        let y = silu(x32 / rms * gamma.clone().cast(DType::F32).unsqueeze::<2>());
        let y = y.cast(DType::BF16);
        device.sync().expect("sync");
        y
    };
    median(&timer.time(3, 20, || drop(composed())))
}

/// One `rms_norm_silu` call through the Burn API, timed on the host clock (warm L2), and a plain
/// Burn op timed the same way for the per-call cost any op pays.
pub(crate) struct ApiTimes {
    /// One call between two syncs: dispatch, selection, launch and the sync's round trip.
    pub synced: f64,
    /// Per call of 20 calls between two syncs (with the servers' start-up amortised over 20).
    pub per_call: f64,
    /// What one more call costs when calls queue: (20 calls - 10 calls) / 10, each between two
    /// syncs. Burn's fusion and cubecl each run their work on a server thread that collects
    /// tasks before running them, so the first calls of a burst wait; the difference leaves
    /// that fixed start-up out (the larger of the kernel's time and the servers' per call).
    pub marginal: f64,
    /// Host time per call of the 20 before the sync: dispatch, argument checks, knob selection
    /// and handing the launch to the servers.
    pub host: f64,
    /// Burn's own `x * 2` (one elementwise kernel over the same bytes, no gamma), its
    /// [`Self::marginal`]: what a call costs through Burn and cubecl whatever the op.
    pub burn_op_marginal: f64,
}

/// `calls` calls between two syncs: (wall time, host time until the last call returned), in
/// µs. Each call's result is kept until after the sync (as a model keeps its activations;
/// Burn's fusion may skip work whose result is dropped unread).
fn burst<const D: usize>(
    device: &Device,
    calls: usize,
    call: &impl Fn() -> Tensor<D>,
) -> (f64, f64) {
    let mut kept = Vec::with_capacity(calls);
    device.sync().expect("sync");
    let start = Instant::now();
    for _ in 0..calls {
        kept.push(call());
    }
    let issued = start.elapsed().as_secs_f64();
    device.sync().expect("sync");
    (start.elapsed().as_secs_f64() * 1e6, issued * 1e6)
}

/// Per call of 20 calls between two syncs, the marginal call ((20 - 10 calls) / 10) and the
/// host's time per call (medians of 6 rounds after 2 warm-up rounds).
pub(crate) fn queued_per_call<const D: usize>(
    device: &Device,
    call: impl Fn() -> Tensor<D>,
) -> (f64, f64, f64) {
    let (mut per_call, mut marginal, mut host) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..8 {
        let (ten, _) = burst(device, 10, &call);
        let (twenty, issued) = burst(device, 20, &call);
        if i >= 2 {
            per_call.push(twenty / 20.0);
            marginal.push((twenty - ten) / 10.0);
            host.push(issued / 20.0);
        }
    }
    (median(&per_call), median(&marginal), median(&host))
}

/// [`ApiTimes`] of `rms_norm_silu` on a `[rows, channels]` bf16 tensor.
pub(crate) fn time_api(device: &Device, rows: usize, channels: usize) -> ApiTimes {
    let x = Tensor::<2>::random([rows, channels], Distribution::Normal(5.0, 5.0), device)
        .cast(DType::BF16);
    let gamma =
        Tensor::<1>::random([channels], Distribution::Uniform(0.5, 2.0), device).cast(DType::BF16);
    let eps = 1e-6 / channels as f32;
    let mut synced = Vec::new();
    for i in 0..60 {
        device.sync().expect("sync");
        let start = Instant::now();
        let y = rms_norm_silu(x.clone(), gamma.clone(), eps);
        device.sync().expect("sync");
        if i >= 10 {
            synced.push(start.elapsed().as_secs_f64() * 1e6);
        }
        drop(y);
    }
    let (per_call, marginal, host) =
        queued_per_call(device, || rms_norm_silu(x.clone(), gamma.clone(), eps));
    let (_, burn_op_marginal, _) = queued_per_call(device, || x.clone() * 2.0);
    ApiTimes {
        synced: median(&synced),
        per_call,
        marginal,
        host,
        burn_op_marginal,
    }
}

pub(crate) fn bench(timer: &mut Timer, device: &Device, args: &Args) {
    let client = timer.client.clone();
    let mut csv = String::from(
        "c,t,dtype,knobs,source,kernel_us,copy_us,ratio_to_copy,kernel_gbps,copy_gbps,burn_composed_us,speedup_vs_burn,end_to_end_us,copy_unrolled_us,api_per_call_us,api_host_us,api_marginal_us,burn_op_marginal_us\n",
    );
    let mut shapes: Vec<(usize, usize)> = Vec::new();
    let tokens: &[usize] = if args.quick { &TOKENS[..2] } else { &TOKENS };
    for &c in &CHANNELS {
        for &t in tokens {
            shapes.push((c, t));
        }
    }
    println!(
        "{:>5} {:>7} {:>34} {:>10} {:>9} {:>9} {:>7} {:>8} {:>9} {:>8} {:>9} {:>8} {:>7} {:>8} {:>8}",
        "C",
        "T",
        "knobs",
        "source",
        "kernel_us",
        "copy_us",
        "x_copy",
        "GB/s",
        "burn_us",
        "e2e_us",
        "copy4_us",
        "api_us",
        "host_us",
        "next_us",
        "x2_us"
    );
    for (channels, rows) in shapes {
        let b = Buffers::new(timer, rows, channels);
        let (knobs, source) = select_knobs_with_source(&client, b.problem, 2, 2, 256);
        let copy_len = copy_bytes(&b);
        let [kernel, copy, copy_unrolled] = interleaved_medians(
            timer,
            60,
            [
                &mut || b.launch(&client, &knobs),
                &mut || timer.copy(&b.x, &b.out, copy_len),
                &mut || timer.copy_unrolled(&b.x, &b.out, copy_len),
            ],
        );
        let bytes = b.bytes();
        drop(b);
        let burn = time_burn_composed(timer, device, rows, channels);
        let api = time_api(device, rows, channels);
        let e2e = api.synced;
        let source = match source {
            KnobSource::Environment => "env",
            KnobSource::Lut(burn_rmsnorm_silu::kernels::lut::Match::Exact) => "lut",
            KnobSource::Lut(_) => "lut-near",
            KnobSource::TableDerived => "table-derived",
            KnobSource::Heuristic => "heuristic",
        };
        writeln!(
            csv,
            "{channels},{rows},bf16,{knobs},{source},{kernel:.2},{copy:.2},{:.3},{:.1},{:.1},{burn:.2},{:.2},{e2e:.2},{copy_unrolled:.2},{:.2},{:.2},{:.2},{:.2}",
            kernel / copy,
            bytes / kernel / 1e3,
            bytes / copy / 1e3,
            burn / kernel,
            api.per_call,
            api.host,
            api.marginal,
            api.burn_op_marginal
        )
        .unwrap();
        println!(
            "{channels:5} {rows:7} {:>34} {source:>10} {kernel:9.2} {copy:9.2} {:7.3} {:8.1} {burn:9.2} {e2e:8.2} {copy_unrolled:9.2} {:8.2} {:7.2} {:8.2} {:8.2}",
            knobs.to_string(),
            kernel / copy,
            bytes / kernel / 1e3,
            api.per_call,
            api.host,
            api.marginal,
            api.burn_op_marginal
        );
    }
    write_file(args, "bench.csv", &csv);
}
