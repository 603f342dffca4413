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

/// End-to-end time of one `rms_norm_silu` call through the Burn API (host clock, warm L2,
/// including dispatch and the sync).
pub(crate) fn time_end_to_end(device: &Device, rows: usize, channels: usize) -> f64 {
    let x = Tensor::<2>::random([rows, channels], Distribution::Normal(5.0, 5.0), device)
        .cast(DType::BF16);
    let gamma =
        Tensor::<1>::random([channels], Distribution::Uniform(0.5, 2.0), device).cast(DType::BF16);
    let eps = 1e-6 / channels as f32;
    let mut times = Vec::new();
    for i in 0..60 {
        device.sync().expect("sync");
        let start = Instant::now();
        let y = rms_norm_silu(x.clone(), gamma.clone(), eps);
        device.sync().expect("sync");
        if i >= 10 {
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
        drop(y);
    }
    median(&times)
}

pub(crate) fn bench(timer: &mut Timer, device: &Device, args: &Args) {
    let client = timer.client.clone();
    let mut csv = String::from(
        "c,t,dtype,knobs,source,kernel_us,copy_us,ratio_to_copy,kernel_gbps,copy_gbps,burn_composed_us,speedup_vs_burn,end_to_end_us,copy_unrolled_us\n",
    );
    let mut shapes: Vec<(usize, usize)> = Vec::new();
    let tokens: &[usize] = if args.quick { &TOKENS[..2] } else { &TOKENS };
    for &c in &CHANNELS {
        for &t in tokens {
            shapes.push((c, t));
        }
    }
    println!(
        "{:>5} {:>7} {:>34} {:>10} {:>9} {:>9} {:>7} {:>8} {:>9} {:>8} {:>9}",
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
        "copy4_us"
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
        let e2e = if rows <= 6240 {
            time_end_to_end(device, rows, channels)
        } else {
            f64::NAN
        };
        let source = match source {
            KnobSource::Environment => "env",
            KnobSource::Lut(burn_rmsnorm_silu::kernels::lut::Match::Exact) => "lut",
            KnobSource::Lut(_) => "lut-near",
            KnobSource::TableDerived => "table-derived",
            KnobSource::Heuristic => "heuristic",
        };
        writeln!(
            csv,
            "{channels},{rows},bf16,{knobs},{source},{kernel:.2},{copy:.2},{:.3},{:.1},{:.1},{burn:.2},{:.2},{e2e:.2},{copy_unrolled:.2}",
            kernel / copy,
            bytes / kernel / 1e3,
            bytes / copy / 1e3,
            burn / kernel
        )
        .unwrap();
        println!(
            "{channels:5} {rows:7} {:>34} {source:>10} {kernel:9.2} {copy:9.2} {:7.3} {:8.1} {burn:9.2} {e2e:8.2} {copy_unrolled:9.2}",
            knobs.to_string(),
            kernel / copy,
            bytes / kernel / 1e3
        );
    }
    write_file(args, "bench.csv", &csv);
}
