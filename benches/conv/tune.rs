//! The tuner (each candidate checked, then timed; the best per shape appended to the table) and the benchmark (the table's choice against cubek's own).

use super::case::*;
use super::*;

/// The direct kernel's launch shapes the tuner tries on layers of at most four output
/// channels (tiles of 16 x 32 to 64 x 32 positions, 128 to 256 units, 8 to 32 channels a stage).
const DIRECT_VARIANTS: [&str; 8] = [
    "direct.u32x4.r8.c8",
    "direct.u32x4.r8.c16",
    "direct.u32x4.r8.c32",
    "direct.u32x4.r16.c8",
    "direct.u32x8.r4.c8",
    "direct.u32x8.r4.c16",
    "direct.u32x8.r8.c8",
    "direct.u64x2.r8.c8",
];

#[derive(Clone, Copy)]
pub(crate) struct Measured {
    choice: ConvChoice,
    us: f64,
    first_s: f64,
    error: f64,
}

/// Checks every choice (compiling its kernel) on up to 12 threads at once (NVRTC runs on the
/// calling thread, so compilation is what parallelises), then times the valid ones in turn.
pub(crate) fn measure_all(
    timer: &Timer,
    case: &Case,
    choices: &[ConvChoice],
    serial: bool,
) -> Vec<Result<Measured, String>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let checked = std::sync::Mutex::new(vec![None; choices.len()]);
    let workers = if serial {
        1
    } else {
        choices.len().clamp(1, 12)
    };
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(choice) = choices.get(i) else { break };
                    if serial {
                        println!("checking {choice}");
                        let _ = std::io::stdout().flush();
                    }
                    let start = Instant::now();
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        case.check(timer, choice)
                    }))
                    .unwrap_or_else(|_| Err("panicked".to_string()));
                    let first_s = start.elapsed().as_secs_f64();
                    checked.lock().unwrap()[i] = Some((result, first_s));
                }
            });
        }
    });
    let checked = checked.into_inner().unwrap();
    let client = timer.client.clone();
    choices
        .iter()
        .zip(checked)
        .map(|(choice, c)| {
            let (result, first_s) = c.expect("every choice checked");
            let error = result?;
            if error > 0.05 {
                return Err(format!("wrong: max error {error:.3e} of the output's rms"));
            }
            let times = timer.time(2, 10, || {
                case.launch(&client, choice).expect("launched before");
            });
            Ok(Measured {
                choice: *choice,
                us: median(&times),
                first_s,
                error,
            })
        })
        .collect()
}

pub(crate) fn report(
    csv: &mut String,
    index: usize,
    site: &Site,
    m: &Result<Measured, String>,
    label: &str,
) {
    let s = &site.shape;
    match m {
        Ok(m) => {
            let tflops = s.flops() / (m.us * 1e-6) / 1e12;
            println!(
                "#{index:<2} {:<26} {label:<8} {:<44} {:>9.1} us {:>6.1} TFLOP/s  err {:.1e}  first {:.2} s",
                site.what,
                m.choice.to_string(),
                m.us,
                tflops,
                m.error,
                m.first_s
            );
            let _ = writeln!(
                csv,
                "{index},{},{label},{},{:.2},{tflops:.2},{:.3e},{:.3}",
                site.what, m.choice, m.us, m.error, m.first_s
            );
        }
        Err(e) => {
            let short: String = e.chars().take(160).collect();
            println!("#{index:<2} {:<26} {label:<8} refused: {short}", site.what);
            let _ = writeln!(csv, "{index},{},{label},refused,,,,", site.what);
        }
    }
    let _ = std::io::stdout().flush();
}

pub(crate) fn tune(timer: &mut Timer, args: &Args, sites: &[(usize, Site)]) {
    let sm = device_sm(&timer.client).unwrap_or(0);
    // Both files grow by appending, so that one process per shape (a faulting candidate
    // poisons its process's CUDA context) builds one table.
    std::fs::create_dir_all(&args.out).expect("create --out");
    let table_path = format!("{}/sm{sm}_conv.txt", args.out);
    let csv_path = format!("{}/conv_tune.csv", args.out);
    let append = |path: &str, header: &str, text: &str| {
        let fresh = !std::path::Path::new(path).exists();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("open tuner output");
        if fresh {
            f.write_all(header.as_bytes()).expect("write tuner output");
        }
        f.write_all(text.as_bytes()).expect("write tuner output");
    };
    let header = format!(
        "# Implicit-GEMM convolution configurations for sm_{sm}: bf16 in and out, f32 accumulation,\n\
         # channels-last, stride 1. Written by `cargo bench --bench conv -- tune`.\n\
         # c_in c_out kt kh kw rows knobs us tflops\n"
    );
    let allowed = |c: &ConvChoice| match c {
        ConvChoice::Knobs(k) => {
            let text = k.to_string();
            let routine = text.split('.').next().unwrap_or_default();
            !args.exclude.iter().any(|e| e == routine)
        }
        ConvChoice::Inferred => !args.exclude.iter().any(|e| e == "inferred"),
        ConvChoice::Direct(_) => !args.exclude.iter().any(|e| e == "direct"),
        ConvChoice::Wgmma(_) => !args.exclude.iter().any(|e| e == "wgmma"),
    };
    for (index, site) in sites {
        let mut table = String::new();
        let mut csv = String::new();
        let case = Case::new(timer, site.shape, 7 + *index as u64);
        let mut best: Option<Measured> = None;
        let run_unfiltered = |choices: Vec<ConvChoice>,
                              label: &str,
                              csv: &mut String,
                              best: &mut Option<Measured>| {
            let results = measure_all(timer, &case, &choices, args.serial);
            let mut ok = Vec::new();
            for m in results {
                report(csv, *index, site, &m, label);
                if let Ok(m) = m {
                    if best.as_ref().is_none_or(|b| m.us < b.us) {
                        *best = Some(m);
                    }
                    ok.push((m.us, m.choice));
                }
            }
            ok
        };
        let run = |choices: Vec<ConvChoice>,
                   label: &str,
                   csv: &mut String,
                   best: &mut Option<Measured>| {
            let choices: Vec<ConvChoice> = choices.into_iter().filter(|c| allowed(c)).collect();
            run_unfiltered(choices, label, csv, best)
        };
        // Phase 0: what the table chooses now (whatever `--exclude` says), and this crate's
        // wgmma kernel in its launch shapes that fit an sm_90 multiprocessor.
        let mut phase0 = vec![select_conv(Some(sm), &site.shape)];
        if sm == 90 && site.shape.c_in.is_multiple_of(32) {
            phase0.extend(
                wgmma_candidates(&site.shape)
                    .into_iter()
                    .filter(|c| allowed(c)),
            );
        }
        run_unfiltered(phase0, "wgmma", &mut csv, &mut best);
        // Phase 1: cubek's own choice, and the layouts on the plain sync loader and on the
        // specialized TMA one (the best loader of every large 3x3x3 shape so far; a layout's
        // rank on one loader does not carry over to the other).
        let mut phase1 = vec![
            ConvChoice::Inferred,
            ConvChoice::Knobs(fallback_knobs(&site.shape)),
        ];
        if site.shape.c_out <= MAX_OUT {
            for text in DIRECT_VARIANTS {
                let k = DirectKnobs::parse(text).expect("a valid direct variant");
                phase1.push(ConvChoice::Direct(k));
            }
        }
        for layout in layouts(&site.shape) {
            for alg in ["sync_cyclic", "spec_tma"] {
                phase1.push(ConvChoice::Knobs(knobs(&format!("{alg}.{layout}.sw.db"))));
            }
        }
        let mut ranked = run(phase1, "layout", &mut csv, &mut best);
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Phase 2: the three best layouts on the other loaders.
        let mut layouts_done: Vec<String> = Vec::new();
        let mut phase2 = Vec::new();
        for (_, choice) in &ranked {
            let ConvChoice::Knobs(k) = choice else {
                continue;
            };
            let text = k.to_string();
            let layout = text
                .split('.')
                .skip(1)
                .take(3)
                .collect::<Vec<_>>()
                .join(".");
            if layouts_done.contains(&layout) || layouts_done.len() == 3 {
                continue;
            }
            for alg in ["async_cyclic", "tma", "spec_tma", "sync_strided"] {
                phase2.push(ConvChoice::Knobs(knobs(&format!("{alg}.{layout}.sw.db"))));
            }
            layouts_done.push(layout);
        }
        run(phase2, "loader", &mut csv, &mut best);
        // Phase 3: the best one's flags toggled.
        if let Some(ConvChoice::Knobs(b)) = best.as_ref().map(|b| b.choice) {
            let phase3 = vec![
                ConvChoice::Knobs(ConvKnobs {
                    swizzle: !b.swizzle,
                    ..b
                }),
                ConvChoice::Knobs(ConvKnobs {
                    double_buffer: !b.double_buffer,
                    ..b
                }),
            ];
            run(phase3, "flags", &mut csv, &mut best);
        }
        if let Some(b) = &best {
            let s = &site.shape;
            println!(
                "#{index:<2} {:<26} BEST     {} {:.1} us",
                site.what, b.choice, b.us
            );
            if let ConvChoice::Knobs(_) | ConvChoice::Wgmma(_) = b.choice {
                let k = b.choice;
                let tflops = s.flops() / (b.us * 1e-6) / 1e12;
                let _ = writeln!(
                    table,
                    "{} {} {} {} {} {} {k} {:.1} {tflops:.1}",
                    s.c_in,
                    s.c_out,
                    s.kernel[0],
                    s.kernel[1],
                    s.kernel[2],
                    s.rows(),
                    b.us
                );
            }
        }
        append(&table_path, &header, &table);
        append(
            &csv_path,
            "index,site,phase,knobs,us,tflops,error,first_s\n",
            &csv,
        );
    }
}

pub(crate) fn bench(timer: &mut Timer, args: &Args, sites: &[(usize, Site)]) {
    let sm = device_sm(&timer.client);
    let mut csv = String::from("index,site,phase,knobs,us,tflops,error,first_s\n");
    let mut total = [0.0f64; 2];
    for (index, site) in sites {
        let case = Case::new(timer, site.shape, 7 + *index as u64);
        let chosen = select_conv(sm, &site.shape);
        let mut choices = vec![chosen, ConvChoice::Inferred];
        // Beside the direct kernel, the implicit GEMM the table or the fallback would run.
        if let ConvChoice::Direct(_) = chosen {
            let gemm = sm.and_then(|sm| lookup_conv(sm, &site.shape)).map_or_else(
                || ConvChoice::Knobs(fallback_knobs(&site.shape)),
                |e| e.choice,
            );
            choices.push(gemm);
        }
        let mut results = measure_all(timer, &case, &choices, args.serial);
        if results.len() == 3 {
            let gemm = results.pop().expect("three results");
            report(&mut csv, *index, site, &gemm, "gemm");
        }
        let inferred = results.pop().expect("two results");
        let table = results.pop().expect("two results");
        report(&mut csv, *index, site, &table, "table");
        report(&mut csv, *index, site, &inferred, "inferred");
        e4m3(timer, &mut csv, *index, site);
        super::normed::normed(timer, &mut csv, *index, site);
        if let (Ok(t), Ok(i)) = (&table, &inferred) {
            let n = site.launches as f64;
            total[0] += t.us * n;
            total[1] += i.us * n;
            if site.launches > 1 {
                println!(
                    "#{index:<2} {:<26} site: {} launches, table {:.1} us, inferred {:.1} us",
                    site.what,
                    site.launches,
                    t.us * n,
                    i.us * n
                );
            }
        }
    }
    println!(
        "sum over the sites (phases counted): table {:.1} us, cubek's own {:.1} us",
        total[0], total[1]
    );
    std::fs::create_dir_all(&args.out).expect("create --out");
    std::fs::write(format!("{}/conv_bench.csv", args.out), &csv).expect("write csv");
}

/// The same shape on this crate's E4M3 implicit GEMM (`kernels::conv::fp8`, default knobs; bf16
/// out): its time beside the bf16 table's, for shapes whose `C_in` is a multiple of 32. The
/// operands are the codes of 1.0 (the instruction's time does not depend on the values; the
/// kernel's numbers are tested in `tests/conv_fp8.rs`).
fn e4m3(timer: &Timer, csv: &mut String, index: usize, site: &Site) {
    let s = &site.shape;
    if !s.c_in.is_multiple_of(32) {
        return;
    }
    let client = timer.client.clone();
    let [t, h, w] = s.input;
    let [ot, oh, ow] = s.output;
    let [kt, kh, kw] = s.kernel;
    let codes = |n: usize| client.create_from_slice(&vec![0x38u8; n]);
    let x = codes(s.batch * t * h * w * s.c_in);
    let wt = codes(s.c_out * s.reduction());
    let x_scale = client.create_from_slice(f32::as_bytes(&[1.0f32]));
    let w_scale = client.create_from_slice(f32::as_bytes(&vec![1.0f32; s.c_out]));
    let bias = client.create_from_slice(bf16::as_bytes(&vec![bf16::ZERO; s.c_out]));
    let out = client.empty(s.rows() * s.c_out * 2);
    let knobs = Fp8ConvKnobs::default();
    let launch = || {
        let operands = Fp8ConvOperands {
            input: binding(&x, &[s.batch, t, h, w, s.c_in]),
            weight: binding(&wt, &[s.c_out, kt, kh, kw, s.c_in]),
            input_scale: binding(&x_scale, &[1]),
            weight_scale: binding(&w_scale, &[s.c_out]),
            bias: binding(&bias, &[s.c_out]),
            out: binding(&out, &[s.batch, ot, oh, ow, s.c_out]),
        };
        launch_conv_e4m3(&client, operands, BF16, s, &knobs)
    };
    if let Err(e) = launch() {
        println!("#{index:<2} {:<26} e4m3     refused: {e}", site.what);
        let _ = writeln!(csv, "{index},{},e4m3,refused,,,,", site.what);
        return;
    }
    let us = median(&timer.time(2, 10, || {
        launch().expect("launched before");
    }));
    let tflops = s.flops() / (us * 1e-6) / 1e12;
    println!(
        "#{index:<2} {:<26} e4m3     {knobs:<44} {us:>9.1} us {tflops:>6.1} TFLOP/s",
        site.what
    );
    let _ = writeln!(
        csv,
        "{index},{},e4m3,{knobs},{us:.2},{tflops:.2},,",
        site.what
    );
    let _ = std::io::stdout().flush();
}

/// The wgmma kernel's launch shapes for a shape: one or two warpgroups, 64 to 256 channels a
/// cube (not past the layer's width rounded up to 64), steps of 64 channels (32 where `C_in`
/// is not a multiple of 64) 2 to 4 in flight, 3 to 6 of 32, within an sm_90
/// multiprocessor's 227 KiB of shared memory.
pub(crate) fn wgmma_candidates(shape: &ConvShape) -> Vec<ConvChoice> {
    let widest = shape.c_out.next_multiple_of(64).min(256) as u32;
    let (k, stages) = if shape.c_in.is_multiple_of(64) {
        (64, [2, 3, 4])
    } else {
        (32, [3, 4, 6])
    };
    let mut out = Vec::new();
    for groups in [1, 2] {
        for n in [64, 96, 128, 192, 256] {
            for stages in stages {
                let knobs = WgmmaKnobs {
                    groups,
                    n,
                    k,
                    stages,
                };
                if n <= widest && knobs.shared_bytes() <= 232_448 {
                    out.push(ConvChoice::Wgmma(knobs));
                }
            }
        }
    }
    out
}
