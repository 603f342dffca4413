//! The benchmark's `ab`: knob settings side by side in one run (`RMSNORM_AB`), with their outputs checked
//! against a host reference.

use super::*;

/// One case of `RMSNORM_AB`: `C T out knobs...`.
pub(crate) struct AbCase<'a> {
    channels: usize,
    rows: usize,
    /// `bf16`, `fp8` or `nvfp4`.
    out: &'a str,
    knobs: Vec<&'a str>,
}

/// The `;`-separated cases of an `RMSNORM_AB` spec; panics naming a malformed one.
pub(crate) fn ab_cases(spec: &str) -> Vec<AbCase<'_>> {
    spec.split(';')
        .filter(|c| !c.trim().is_empty())
        .map(|case| {
            let words: Vec<&str> = case.split_whitespace().collect();
            let [c, t, out, knobs @ ..] = words.as_slice() else {
                panic!("RMSNORM_AB case `{case}`: expected C T out knobs...");
            };
            let number = |s: &str| -> usize {
                s.parse()
                    .unwrap_or_else(|_| panic!("RMSNORM_AB case `{case}`: `{s}` is not a number"))
            };
            assert!(
                matches!(*out, "bf16" | "fp8" | "nvfp4"),
                "RMSNORM_AB case `{case}`: out must be bf16, fp8 or nvfp4, got `{out}`"
            );
            AbCase {
                channels: number(c),
                rows: number(t),
                out,
                knobs: knobs.to_vec(),
            }
        })
        .collect()
}

/// Refuses `RMSNORM_AB` cases with row-kernel knobs their shape cannot run, naming every bad
/// one, before anything is timed (a launch would panic on the first, minutes into a device
/// call, and the cases after it would not run).
pub(crate) fn check_ab_knobs(timer: &Timer, cases: &[AbCase]) {
    let mut bad = Vec::new();
    for case in cases {
        let fp8 = match case.out {
            "bf16" => false,
            "fp8" => true,
            _ => continue,
        };
        let problem = RowsProblem::dense(case.rows, case.channels);
        for k in case.knobs.iter().filter(|k| **k != "selected") {
            let result = Knobs::parse(k)
                .and_then(|knobs| check_row_knobs(&timer.client, &knobs, problem, fp8));
            if let Err(e) = result {
                let (c, t, out) = (case.channels, case.rows, case.out);
                bad.push(format!("C={c} T={t} {out} {k}: {e}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "RMSNORM_AB: knobs this shape cannot run:\n{}",
        bad.join("\n")
    );
}

/// Same-run comparison of row-kernel knobs: `RMSNORM_AB="C T out knobs knobs ...; ..."` (out
/// `bf16` or `fp8`, or `nvfp4` with NVFP4 knobs, see [`ab_nvfp4`]; a knobs word `selected`
/// stands for the crate's own selection). Five
/// rounds, each timing every knobs string and the same-bytes copy (50 runs each, medians), so
/// drift between them hits all alike; prints each one's median over the rounds and its ratio
/// to the copy.
pub(crate) fn ab(timer: &mut Timer) {
    let spec = std::env::var("RMSNORM_AB").expect("RMSNORM_AB=\"C T out knobs knobs ...; ...\"");
    let cases = ab_cases(&spec);
    check_ab_knobs(timer, &cases);
    for case in &cases {
        let (c, t, out) = (case.channels, case.rows, case.out);
        let mut b = Buffers::new(timer, t, c);
        b.fp8 = match out {
            "bf16" => false,
            "fp8" => true,
            _ => {
                ab_nvfp4(timer, &b, &case.knobs);
                continue;
            }
        };
        // `selected`: what the crate picks for this shape and output (the table entry with its
        // grid, `m` = occupancy x SMs), so that a comparison with the table needs no knobs
        // copied by hand from the table files.
        let knobs: Vec<Knobs> = case
            .knobs
            .iter()
            .map(|k| match *k {
                "selected" => {
                    burn_rmsnorm_silu::kernels::select::select_output_knobs_with_source(
                        &timer.client,
                        b.problem,
                        2,
                        2,
                        out,
                        256,
                    )
                    .0
                }
                k => Knobs::parse(k).unwrap_or_else(|e| panic!("{e}")),
            })
            .collect();
        let mut times = vec![Vec::new(); knobs.len()];
        let mut copies = Vec::new();
        // FP8 out: also the read-heavy copy (2 bytes read, 1 written per element).
        let mut read_heavy = Vec::new();
        let n = b.problem.rows * b.problem.channels;
        for _ in 0..5 {
            for (k, slot) in knobs.iter().zip(&mut times) {
                slot.push(time_knobs(timer, &b, k, 50));
            }
            copies.push(time_copy(timer, &b, 50));
            if b.fp8 {
                read_heavy.push(time_read_heavy(timer, &b.x, &b.out, n, 1, 2));
            }
        }
        let copy = median(&copies);
        let rw_copy = median(&read_heavy);
        if std::env::var("RMSNORM_AB_ALTERNATE").is_ok_and(|v| v == "1") {
            alternate(timer, &b, &knobs, out);
        }
        if std::env::var("RMSNORM_AB_CODE_WARM").is_ok_and(|v| v == "1") {
            code_warm(timer, &b, &knobs, out);
        }
        let outputs = written_outputs(timer, &b, &knobs);
        let reference = host_reference(timer, &b);
        for ((k, slot), written) in knobs.iter().zip(&times).zip(&outputs) {
            let t_k = median(slot);
            let differing = written
                .iter()
                .zip(&outputs[0])
                .filter(|(a, b)| a != b)
                .count();
            let rw = if b.fp8 {
                format!(" (read-heavy copy {rw_copy:.2} us, x{:.3})", t_k / rw_copy)
            } else {
                String::new()
            };
            println!(
                "ab C={c} T={t} {out}: {k} {t_k:.2} us, copy {copy:.2} us, x{:.3}{rw}, \
                 {differing} output bytes differ from the first knobs'; {}",
                t_k / copy,
                accuracy(written, &reference, b.fp8)
            );
        }
    }
}

/// [`ab`] for NVFP4 out (TransformerEngine recipe, `s_enc` 100, row-major scales): NVFP4 knobs
/// strings (`selected`: the crate's own choice), five rounds of 50 runs each and of the
/// half-and-half copy of the 2 + 1/2 + 1/16 bytes per element; the codes and scales each
/// knobs write are compared with the first knobs' bytes.
pub(crate) fn ab_nvfp4(timer: &mut Timer, b: &Buffers, knobs: &[&str]) {
    use burn_rmsnorm_silu::kernels::nvfp4::{Fp4Knobs, select_fp4_knobs};
    let client = timer.client.clone();
    let RowsProblem { rows, channels, .. } = b.problem;
    let (c, t) = (channels, rows);
    let n = rows * channels;
    let knobs: Vec<Fp4Knobs> = knobs
        .iter()
        .map(|k| match *k {
            "selected" => select_fp4_knobs(&client, channels, rows, 2),
            k => Fp4Knobs::parse(k).unwrap_or_else(|e| panic!("{e}")),
        })
        .collect();
    let scales = client.empty(n / 16);
    let scratch = client.empty(n * 2);
    // One row of its own for `RMSNORM_AB_CODE_WARM=1` (see `code_warm`).
    let tiny = std::env::var("RMSNORM_AB_CODE_WARM")
        .is_ok_and(|v| v == "1")
        .then(|| {
            (
                Buffers::new(timer, 1, channels),
                client.empty(channels.div_ceil(16) * 4),
            )
        });
    let try_launch = |k: &Fp4Knobs| b.launch_nvfp4(&client, &scales, k);
    // Knobs this device refuses are reported and left out (the other cases still run).
    let knobs: Vec<Fp4Knobs> = knobs
        .into_iter()
        .filter(|k| match try_launch(k) {
            Ok(()) => true,
            Err(e) => {
                println!("ab C={c} T={t} nvfp4: {k} refused: {e}");
                false
            }
        })
        .collect();
    let launch = |k: &Fp4Knobs| try_launch(k).expect("launched before");
    let bytes = half_and_half(nvfp4_bytes(n));
    let mut times = vec![Vec::new(); knobs.len()];
    let mut copies = Vec::new();
    for _ in 0..5 {
        for (k, slot) in knobs.iter().zip(&mut times) {
            slot.push(median(&timer.time(2, 50, || launch(k))));
        }
        copies.push(median(
            &timer.time(2, 50, || timer.copy(&b.x, &scratch, bytes)),
        ));
    }
    let copy = median(&copies);
    if let Some((tiny, tiny_scales)) = &tiny {
        // As `code_warm`: each knobs again with the same kernel on one row of its own between
        // the flush and the timed launch.
        for k in &knobs {
            let cold = median(&timer.time(2, 100, || launch(k)));
            let warm = median(&timer.time_after(
                2,
                100,
                || {
                    tiny.launch_nvfp4(&client, tiny_scales, k)
                        .expect("tiny launch")
                },
                || launch(k),
            ));
            println!("codewarm C={c} T={t} nvfp4: {k} {cold:.2} -> {warm:.2} us");
        }
    }
    let mut first: Option<Vec<u8>> = None;
    for (k, slot) in knobs.iter().zip(&times) {
        launch(k);
        let mut written = client.read_one(b.out.clone()).expect("codes").to_vec();
        written.truncate(n / 2);
        written.extend(client.read_one(scales.clone()).expect("scales").to_vec());
        let differing = first.as_ref().map_or(0, |f| {
            f.iter().zip(&written).filter(|(a, b)| a != b).count()
        });
        first.get_or_insert(written);
        let t_k = median(slot);
        println!(
            "ab C={c} T={t} nvfp4: {k} {t_k:.2} us, copy {copy:.2} us, x{:.3}, {differing} code \
             and scale bytes differ from the first knobs'",
            t_k / copy
        );
    }
}

/// `RMSNORM_AB_ALTERNATE=1`: the knobs and the copy timed once each in turn (every launch after
/// its own L2 flush), 100 turns, so that each sees the same stretch of device time; prints
/// the medians next to `ab`'s batched ones. A check on the batched harnesses (`bench` times in
/// rounds of 12 runs, `ab` in rounds of 50): on the H200 their ratios agreed with these within
/// ~3% at T = 24960, while the absolute times of kernel and copy moved together by up to 10%.
pub(crate) fn alternate(timer: &Timer, b: &Buffers, knobs: &[Knobs], out: &str) {
    let (c, t) = (b.problem.channels, b.problem.rows);
    let bytes = copy_bytes(b);
    let mut times = vec![Vec::new(); knobs.len()];
    let mut copies = Vec::new();
    for k in knobs {
        b.launch(&timer.client, k);
    }
    timer.copy(&b.x, &b.out, bytes);
    for _ in 0..100 {
        for (k, slot) in knobs.iter().zip(&mut times) {
            slot.extend(timer.time(0, 1, || b.launch(&timer.client, k)));
        }
        copies.extend(timer.time(0, 1, || timer.copy(&b.x, &b.out, bytes)));
    }
    let copy = median(&copies);
    for (k, slot) in knobs.iter().zip(&times) {
        let t_k = median(slot);
        println!(
            "alternate C={c} T={t} {out}: {k} {t_k:.2} us, copy {copy:.2} us, x{:.3}",
            t_k / copy
        );
    }
}

/// `RMSNORM_AB_CODE_WARM=1`: each knobs and the copy timed as in [`ab`], and again with the
/// same kernel launched on one row of its own (a 16-byte copy for the copy) between the L2 flush
/// and the timed call. The flush evicts the kernels' code with their data; the second timing
/// finds the code in the L2 (and in one SM) with the data still cold, so the difference is what
/// fetching a kernel's instructions from DRAM costs it.
pub(crate) fn code_warm(timer: &mut Timer, b: &Buffers, knobs: &[Knobs], out: &str) {
    let (c, t) = (b.problem.channels, b.problem.rows);
    let mut tiny = Buffers::new(timer, 1, b.problem.channels);
    tiny.fp8 = b.fp8;
    let bytes = copy_bytes(b);
    let client = timer.client.clone();
    let mut cold = vec![Vec::new(); knobs.len() + 1];
    let mut warm = vec![Vec::new(); knobs.len() + 1];
    for _ in 0..5 {
        for (i, k) in knobs.iter().enumerate() {
            cold[i].extend(timer.time(2, 20, || b.launch(&client, k)));
            warm[i].extend(timer.time_after(
                2,
                20,
                || tiny.launch(&client, k),
                || b.launch(&client, k),
            ));
        }
        let last = knobs.len();
        cold[last].extend(timer.time(2, 20, || timer.copy(&b.x, &b.out, bytes)));
        warm[last].extend(timer.time_after(
            2,
            20,
            || timer.copy(&tiny.x, &tiny.out, 16),
            || timer.copy(&b.x, &b.out, bytes),
        ));
    }
    let (copy_cold, copy_warm) = (median(&cold[knobs.len()]), median(&warm[knobs.len()]));
    println!("codewarm C={c} T={t} {out}: copy {copy_cold:.2} -> {copy_warm:.2} us");
    for (i, k) in knobs.iter().enumerate() {
        let (tc, tw) = (median(&cold[i]), median(&warm[i]));
        println!(
            "codewarm C={c} T={t} {out}: {k} {tc:.2} -> {tw:.2} us, x{:.3} -> x{:.3}",
            tc / copy_cold,
            tw / copy_warm
        );
    }
}

/// `y` of the bench's inputs in f64 on the host (eps as [`Buffers::norm`], `b`'s activation),
/// for [`accuracy`].
pub(crate) fn host_reference(timer: &mut Timer, b: &Buffers) -> Vec<f64> {
    let RowsProblem { rows, channels, .. } = b.problem;
    let bf16s = |h: &Handle, n: usize| -> Vec<f64> {
        let bytes = timer
            .client
            .read_one(h.clone())
            .expect("read back")
            .to_vec();
        bytes[..n * 2]
            .chunks_exact(2)
            .map(|w| half::bf16::from_le_bytes([w[0], w[1]]).to_f64())
            .collect()
    };
    burn_rmsnorm_silu::kernels::reference::rms_norm_silu_f64(
        &bf16s(&b.x, rows * channels),
        &bf16s(&b.gamma, channels),
        channels,
        b.norm(),
        b.activation,
    )
}

/// How far `written` (bf16, or FP8 codes of scale 1) is from the f64 `reference`: the largest
/// absolute error, the largest error in units of the output's last place, and how many
/// outputs are not the correctly rounded value.
pub(crate) fn accuracy(written: &[u8], reference: &[f64], fp8: bool) -> String {
    use burn_rmsnorm_silu::kernels::formats::{e4m3_decode, e4m3_encode};
    let (mut max_abs, mut max_ulps, mut not_rounded) = (0.0f64, 0.0f64, 0usize);
    for (i, &want) in reference.iter().enumerate() {
        let (got, exact, ulp) = if fp8 {
            let code = e4m3_encode(want as f32);
            let next = e4m3_decode(code ^ 1) as f64;
            let here = e4m3_decode(code) as f64;
            (e4m3_decode(written[i]) as f64, here, (next - here).abs())
        } else {
            let got = half::bf16::from_le_bytes([written[i * 2], written[i * 2 + 1]]);
            let exact = half::bf16::from_f64(want);
            let next = half::bf16::from_bits(exact.to_bits() ^ 1);
            let ulp = (next.to_f64() - exact.to_f64()).abs();
            (got.to_f64(), exact.to_f64(), ulp)
        };
        max_abs = max_abs.max((got - want).abs());
        if ulp > 0.0 && ulp.is_finite() {
            max_ulps = max_ulps.max((got - exact).abs() / ulp);
        }
        not_rounded += usize::from(got != exact);
    }
    format!(
        "vs f64: max abs error {max_abs:.3e}, max {max_ulps:.0} ulp, {not_rounded} of {} not the rounded value",
        reference.len()
    )
}

/// The output bytes each of `knobs` writes, each launched once (after its timed runs) into an
/// output filled with fresh random bytes: a config that skips rows, or whose counters a timed
/// launch left wrong, differs from the first config where knobs of the same math agree bit for
/// bit.
pub(crate) fn written_outputs(timer: &mut Timer, b: &Buffers, knobs: &[Knobs]) -> Vec<Vec<u8>> {
    let RowsProblem { rows, channels, .. } = b.problem;
    let bytes = rows * channels * if b.fp8 { 1 } else { 2 };
    knobs
        .iter()
        .map(|k| {
            let poison = timer.random(BF16, bytes.div_ceil(4) * 2, -1e4, 2e4);
            timer.copy(&poison, &b.out, bytes.div_ceil(4) * 4);
            b.launch(&timer.client, k);
            let mut written = timer
                .client
                .read_one(b.out.clone())
                .expect("read the output")
                .to_vec();
            written.truncate(bytes);
            written
        })
        .collect()
}
