//! The convolution tuner and benchmark (custom harness): the Wan2.1 decoder's convolution
//! shapes at 480p on cubek's implicit GEMM.
//!
//! ```text
//! cargo bench --bench conv -- tune [--out DIR] [--only 1,3] [--serial] [--exclude tma,spec_tma]
//!     # sweep knobs, append each shape's best to DIR/sm<NN>_conv.txt
//! cargo bench --bench conv -- bench [--out DIR]               # the table's choice vs cubek's own
//! ```
//! Each candidate is first run once on poisoned output and checked at 384 sampled output
//! positions (every channel) against an f64 host reference of the same bf16 inputs; then timed
//! with device timers (cubecl profile windows), 2 warm-up runs, the median of 10, the L2
//! flushed before each run. The first run's wall time (compilation included) is reported too.
//! `--only` takes shape indices of [`shapes`] (the printed `#` column).

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Instant;

use burn::backend::DispatchDevice;
use burn::tensor::Device;
use burn_rmsnorm_silu::kernels::conv::{
    ConvChoice, ConvKnobs, ConvOperands, ConvShape, fallback_knobs, launch_conv, select_conv,
};
use burn_rmsnorm_silu::kernels::cubecl;
use burn_rmsnorm_silu::kernels::cubecl::ir::{ElemType, FloatKind};
use burn_rmsnorm_silu::kernels::cubecl::prelude::*;
use burn_rmsnorm_silu::kernels::cubecl::server::Handle;
use burn_rmsnorm_silu::kernels::cubecl::zspace::Shape;
use burn_rmsnorm_silu::kernels::cubecl::zspace::striding::row_major_contiguous_strides;
use burn_rmsnorm_silu::kernels::device::device_sm;
use burn_rmsnorm_silu::kernels::timing::{Timer, median};
use half::bf16;

const BF16: ElemType = ElemType::Float(FloatKind::BF16);
const SAMPLES: usize = 384;

/// A named decoder convolution: `(what, C_in, C_out, kernel, input T H W, padding T H W)`.
struct Site {
    what: &'static str,
    shape: ConvShape,
    /// Launches of this shape per site (the phases of an upsampler or time convolution).
    launches: usize,
}

fn site(
    what: &'static str,
    c_in: usize,
    c_out: usize,
    kernel: [usize; 3],
    input: [usize; 3],
    padding: [usize; 3],
    launches: usize,
) -> Site {
    let output = [0, 1, 2].map(|a| {
        // Causal in T (no end padding); H and W keep their size.
        if a == 0 {
            input[0] + padding[0] + 1 - kernel[0]
        } else {
            input[a]
        }
    });
    Site {
        what,
        shape: ConvShape {
            batch: 1,
            input,
            c_in,
            c_out,
            kernel,
            padding,
            output,
        },
        launches,
    }
}

/// The Wan2.1 decoder's convolutions for a 480p latent (60 x 104) in the steady state of the
/// chunked decode: one latent frame per call, two cached frames in front of each 3-frame
/// kernel's input (`T_in = T + 2`), T = 1 / 2 / 4 frames in the 60x104 / 120x208 / 240x416 and
/// 480x832 stages. The upsamplers' 3x3 convolutions after nearest x2 upsampling run as four 2x2
/// phase convolutions of the low-resolution input, and the time convolutions (C -> 2C) as two
/// C -> C phases (`burn_rmsnorm_silu::Phases`): those sites list one phase, `launches` times.
/// The first chunk (T = 1, zero frames by padding) has the same classes with fewer rows.
fn shapes() -> Vec<Site> {
    let k3 = [3, 3, 3];
    let k1 = [1, 1, 1];
    let k22 = [1, 2, 2];
    let kt = [3, 1, 1];
    vec![
        site("up3 resnet 96", 96, 96, k3, [6, 480, 832], [0, 1, 1], 1),
        site("up2 resnet 192", 192, 192, k3, [6, 240, 416], [0, 1, 1], 1),
        site(
            "up2 upsample 192->96",
            192,
            96,
            k22,
            [4, 240, 416],
            [0, 1, 1],
            4,
        ),
        site(
            "up1 upsample 384->192",
            384,
            192,
            k22,
            [4, 120, 208],
            [0, 1, 1],
            4,
        ),
        site("up1 resnet 384", 384, 384, k3, [4, 120, 208], [0, 1, 1], 1),
        site(
            "up1 resnet 192->384",
            192,
            384,
            k3,
            [4, 120, 208],
            [0, 1, 1],
            1,
        ),
        site(
            "mid/up0 resnet 384",
            384,
            384,
            k3,
            [3, 60, 104],
            [0, 1, 1],
            1,
        ),
        site("conv_out 96->3", 96, 3, k3, [6, 480, 832], [0, 1, 1], 1),
        site(
            "up0 upsample 384->192",
            384,
            192,
            k22,
            [2, 60, 104],
            [0, 1, 1],
            4,
        ),
        site(
            "up1 time_conv 384->2x384",
            384,
            384,
            kt,
            [4, 120, 208],
            [0, 0, 0],
            2,
        ),
        site(
            "up0 time_conv 384->2x384",
            384,
            384,
            kt,
            [3, 60, 104],
            [0, 0, 0],
            2,
        ),
        site(
            "up1 shortcut 192->384",
            192,
            384,
            k1,
            [2, 120, 208],
            [0, 0, 0],
            1,
        ),
        site("conv_in 16->384", 16, 384, k3, [3, 60, 104], [0, 1, 1], 1),
        site(
            "attention qkv 384->1152",
            384,
            1152,
            k1,
            [1, 60, 104],
            [0, 0, 0],
            1,
        ),
        site(
            "attention proj 384->384",
            384,
            384,
            k1,
            [1, 60, 104],
            [0, 0, 0],
            1,
        ),
        site(
            "post_quant_conv 16->16",
            16,
            16,
            k1,
            [21, 60, 104],
            [0, 0, 0],
            1,
        ),
    ]
}

struct Args {
    mode: String,
    out: String,
    only: Option<Vec<usize>>,
    /// Check candidates one at a time, naming each before its launch (a candidate that faults
    /// poisons the CUDA context: the last name printed is the culprit).
    serial: bool,
    /// Routines (the knobs' first field) left out of the sweep.
    exclude: Vec<String>,
}

fn args() -> Args {
    let raw: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let value = |name: &str| {
        raw.iter()
            .position(|a| a == name)
            .and_then(|i| raw.get(i + 1).cloned())
    };
    let mode = raw
        .first()
        .filter(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_else(|| "bench".into());
    assert!(
        mode == "tune" || mode == "bench",
        "unknown mode `{mode}`: expected tune or bench"
    );
    Args {
        mode,
        out: value("--out").unwrap_or_else(|| "target/bench".into()),
        only: value("--only").map(|list| {
            list.split(',')
                .map(|v| {
                    v.trim()
                        .parse()
                        .expect("--only takes shape indices like 0,3")
                })
                .collect()
        }),
        serial: raw.iter().any(|a| a == "--serial"),
        exclude: value("--exclude")
            .map(|list| list.split(',').map(|v| v.trim().to_string()).collect())
            .unwrap_or_default(),
    }
}

/// Seeded uniform values in `[-scale, scale)`, rounded to bf16.
fn host_values(len: usize, seed: u64, scale: f32) -> Vec<bf16> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 40) as f32 / (1u64 << 24) as f32;
            bf16::from_f32(scale * (2.0 * u - 1.0))
        })
        .collect()
}

fn upload(client: &Client, values: &[bf16]) -> Handle {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    client.create_from_slice(&bytes)
}

fn binding(handle: &Handle, shape: &[usize]) -> TensorBinding {
    unsafe {
        TensorBinding::from_raw_parts(
            handle.clone(),
            row_major_contiguous_strides(shape),
            Shape::from(shape.to_vec()),
        )
    }
}

/// Copies the output rows `rows[i]` (each `c` bf16 values, as their bits) into `dst`.
#[cube(launch_unchecked)]
fn gather_rows(src: &[u16], rows: &[u32], dst: &mut [u16], #[comptime] c: usize) {
    let i = ABSOLUTE_POS;
    if i < dst.len() {
        let row = rows[i / c] as usize;
        dst[i] = src[row * c + i % c];
    }
}

/// One shape's buffers, host copies and sampled reference.
struct Case {
    shape: ConvShape,
    input: Handle,
    weight: Handle,
    bias: Handle,
    out: Handle,
    /// NaN bits to poison `out` with before a checked run.
    poison: Handle,
    rows: Handle,
    reference: Vec<f64>,
    reference_rms: f64,
}

impl Case {
    fn new(timer: &mut Timer, shape: ConvShape, seed: u64) -> Self {
        let client = &timer.client.clone();
        let [t, h, w] = shape.input;
        let input_len = shape.batch * t * h * w * shape.c_in;
        let k = shape.reduction();
        let x = host_values(input_len, seed, 1.0);
        let wt = host_values(shape.c_out * k, seed + 1, (3.0 / k as f32).sqrt());
        let b = host_values(shape.c_out, seed + 2, 0.1);
        // Sampled output positions: spread over the whole output, borders included.
        let m = shape.rows();
        let mut rows: Vec<u32> = (0..SAMPLES)
            .map(|i| ((i as u64 * 2_654_435_761) % m as u64) as u32)
            .collect();
        rows[0] = 0;
        rows[1] = (m - 1) as u32;
        let reference = reference(&shape, &x, &wt, &b, &rows);
        let reference_rms =
            (reference.iter().map(|v| v * v).sum::<f64>() / reference.len() as f64).sqrt();
        let rows_bytes: Vec<u8> = rows.iter().flat_map(|r| r.to_le_bytes()).collect();
        Self {
            shape,
            input: upload(client, &x),
            weight: upload(client, &wt),
            bias: upload(client, &b),
            out: client.empty(m * shape.c_out * 2),
            poison: timer.random(BF16, m * shape.c_out, f32::NAN, 0.0),
            rows: client.create_from_slice(&rows_bytes),
            reference,
            reference_rms,
        }
    }

    fn launch(&self, client: &Client, choice: &ConvChoice) -> Result<(), String> {
        self.launch_into(client, choice, &self.out)
    }

    fn launch_into(
        &self,
        client: &Client,
        choice: &ConvChoice,
        out: &Handle,
    ) -> Result<(), String> {
        let s = &self.shape;
        let [t, h, w] = s.input;
        let [kt, kh, kw] = s.kernel;
        let [ot, oh, ow] = s.output;
        let operands = ConvOperands {
            input: binding(&self.input, &[s.batch, t, h, w, s.c_in]),
            weight: binding(&self.weight, &[s.c_out, kt, kh, kw, s.c_in]),
            bias: Some(binding(&self.bias, &[s.c_out])),
            out: binding(out, &[s.batch, ot, oh, ow, s.c_out]),
        };
        launch_conv(client, operands, BF16, s, choice).map_err(|e| format!("{e:?}"))
    }

    /// max |got - ref| / rms(ref) over the sampled outputs, after a run on poisoned output
    /// (into an output buffer of its own, so that checks can run on several threads).
    fn check(&self, timer: &Timer, choice: &ConvChoice) -> Result<f64, String> {
        let client = timer.client.clone();
        let len = self.shape.rows() * self.shape.c_out;
        let out = client.empty(len * 2);
        timer.copy(&self.poison, &out, len * 2);
        self.launch_into(&client, choice, &out)?;
        let n = SAMPLES * self.shape.c_out;
        let gathered = client.empty(n * 2);
        unsafe {
            gather_rows::launch_unchecked(
                &client,
                CubeCount::new_1d(n.div_ceil(256) as u32),
                CubeDim::new_1d(256),
                BufferArg::from_raw_parts(out.clone(), len),
                BufferArg::from_raw_parts(self.rows.clone(), SAMPLES),
                BufferArg::from_raw_parts(gathered.clone(), n),
                self.shape.c_out,
            );
        }
        let bytes = client
            .read_one(gathered)
            .map_err(|e| format!("read back: {e:?}"))?;
        let got: Vec<f32> = bytes
            .chunks_exact(2)
            .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect();
        let mut worst = 0.0f64;
        for (g, r) in got.iter().zip(&self.reference) {
            let e = (*g as f64 - r).abs();
            if !e.is_finite() {
                return Ok(f64::INFINITY);
            }
            worst = worst.max(e);
        }
        Ok(worst / self.reference_rms)
    }
}

/// The convolution at the sampled output rows, in f64 from the bf16 values.
fn reference(shape: &ConvShape, x: &[bf16], w: &[bf16], b: &[bf16], rows: &[u32]) -> Vec<f64> {
    let [t, h, wd] = shape.input;
    let [kt, kh, kw] = shape.kernel;
    let [_, oh, ow] = shape.output;
    let [pt, ph, pw] = shape.padding;
    let (ci, co) = (shape.c_in, shape.c_out);
    let mut out = Vec::with_capacity(rows.len() * co);
    for &row in rows {
        let row = row as usize;
        let (ot, rest) = (row / (oh * ow), row % (oh * ow));
        let (y, xx) = (rest / ow, rest % ow);
        for (o, bias) in b.iter().enumerate().take(co) {
            let mut acc = bias.to_f64();
            for dt in 0..kt {
                let it = (ot + dt) as isize - pt as isize;
                if it < 0 || it >= t as isize {
                    continue;
                }
                for dy in 0..kh {
                    let iy = (y + dy) as isize - ph as isize;
                    if iy < 0 || iy >= h as isize {
                        continue;
                    }
                    for dx in 0..kw {
                        let ix = (xx + dx) as isize - pw as isize;
                        if ix < 0 || ix >= wd as isize {
                            continue;
                        }
                        let xi = ((it as usize * h + iy as usize) * wd + ix as usize) * ci;
                        let wi = (((o * kt + dt) * kh + dy) * kw + dx) * ci;
                        for c in 0..ci {
                            acc += x[xi + c].to_f64() * w[wi + c].to_f64();
                        }
                    }
                }
            }
            out.push(acc);
        }
    }
    out
}

/// Candidate layouts for a shape: (instruction, partition, stage) in the text form's pieces.
fn layouts(shape: &ConvShape) -> Vec<String> {
    let n = shape.c_out;
    let mut out = Vec::new();
    // mma m16n8k16: planes along m, a plane's n tiles covering up to 96 channels.
    let n8 = (n.div_ceil(8)).min(12);
    let n8_half = (n.div_ceil(8)).min(6);
    for (tile, part, stage) in [
        ("mma16x8x16", format!("p2x{n8}x2"), "s4x1"),
        ("mma16x8x16", format!("p4x{n8_half}x2"), "s4x1"),
        ("mma16x8x16", format!("p2x{n8_half}x2"), "s4x2"),
        ("mma16x8x16", format!("p2x{n8}x4"), "s4x1"),
        ("mma16x8x16", format!("p1x{n8}x2"), "s8x1"),
        ("mma16x8x16", "p4x8x2".to_string(), "s2x2"),
        (
            "cmma16x16x16",
            format!("p2x{}x2", n.div_ceil(16).min(6)),
            "s4x1",
        ),
        (
            "cmma16x16x16",
            format!("p4x{}x2", n.div_ceil(16).min(4)),
            "s2x2",
        ),
    ] {
        let s = format!("{tile}.{part}.{stage}");
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

fn knobs(text: &str) -> ConvKnobs {
    ConvKnobs::parse(text).unwrap_or_else(|e| panic!("{e}"))
}

#[derive(Clone, Copy)]
struct Measured {
    choice: ConvChoice,
    us: f64,
    first_s: f64,
    error: f64,
}

/// Checks every choice (compiling its kernel) on up to 12 threads at once (NVRTC runs on the
/// calling thread, so compilation is what parallelises), then times the valid ones in turn.
fn measure_all(
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

fn report(csv: &mut String, index: usize, site: &Site, m: &Result<Measured, String>, label: &str) {
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

fn tune(timer: &mut Timer, args: &Args, sites: &[(usize, Site)]) {
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
    };
    for (index, site) in sites {
        let mut table = String::new();
        let mut csv = String::new();
        let case = Case::new(timer, site.shape, 7 + *index as u64);
        let mut best: Option<Measured> = None;
        let run = |choices: Vec<ConvChoice>,
                   label: &str,
                   csv: &mut String,
                   best: &mut Option<Measured>| {
            let choices: Vec<ConvChoice> = choices.into_iter().filter(|c| allowed(c)).collect();
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
        // Phase 1: cubek's own choice, and the layouts on the plain sync loader and on the
        // specialized cp.async one.
        let mut phase1 = vec![
            ConvChoice::Inferred,
            ConvChoice::Knobs(fallback_knobs(&site.shape)),
        ];
        for layout in layouts(&site.shape) {
            for alg in ["sync_cyclic", "spec_cyclic"] {
                phase1.push(ConvChoice::Knobs(knobs(&format!("{alg}.{layout}.sw.db"))));
            }
        }
        let mut ranked = run(phase1, "layout", &mut csv, &mut best);
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Phase 2: the two best layouts on the other loaders.
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
            if layouts_done.contains(&layout) || layouts_done.len() == 2 {
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
            if let ConvChoice::Knobs(k) = b.choice {
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

fn bench(timer: &mut Timer, args: &Args, sites: &[(usize, Site)]) {
    let sm = device_sm(&timer.client);
    let mut csv = String::from("index,site,phase,knobs,us,tflops,error,first_s\n");
    let mut total = [0.0f64; 2];
    for (index, site) in sites {
        let case = Case::new(timer, site.shape, 7 + *index as u64);
        let mut results = measure_all(
            timer,
            &case,
            &[select_conv(sm, &site.shape), ConvChoice::Inferred],
            args.serial,
        );
        let inferred = results.pop().expect("two results");
        let table = results.pop().expect("two results");
        report(&mut csv, *index, site, &table, "table");
        report(&mut csv, *index, site, &inferred, "inferred");
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

fn main() {
    let args = args();
    let device = Device::cuda(0);
    let DispatchDevice::Cube(cube) = device.as_dispatch() else {
        panic!("the convolution bench needs a CubeCL CUDA device");
    };
    let mut timer = Timer::new(cube.client());
    let props = timer.client.properties();
    println!(
        "device: {} ({}), {} SMs",
        props.identity.name,
        props.identity.fingerprint,
        props.hardware.num_streaming_multiprocessors.unwrap_or(0)
    );
    let sites: Vec<(usize, Site)> = shapes()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| args.only.as_ref().is_none_or(|o| o.contains(i)))
        .collect();
    match args.mode.as_str() {
        "tune" => tune(&mut timer, &args, &sites),
        _ => bench(&mut timer, &args, &sites),
    }
}
