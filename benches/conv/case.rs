//! One convolution case on the device: random bf16 inputs, poisoned output, the f64 host reference at sampled positions, and the knob and layout spaces the tuner sweeps.

use super::*;

/// Seeded uniform values in `[-scale, scale)`, rounded to bf16.
pub(crate) fn host_values(len: usize, seed: u64, scale: f32) -> Vec<bf16> {
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

pub(crate) fn upload(client: &Client, values: &[bf16]) -> Handle {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    client.create_from_slice(&bytes)
}

pub(crate) fn binding(handle: &Handle, shape: &[usize]) -> TensorBinding {
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
pub(crate) fn gather_rows(src: &[u16], rows: &[u32], dst: &mut [u16], #[comptime] c: usize) {
    let i = ABSOLUTE_POS;
    if i < dst.len() {
        let row = rows[i / c] as usize;
        dst[i] = src[row * c + i % c];
    }
}

/// One shape's buffers, host copies and sampled reference.
pub(crate) struct Case {
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
    pub(crate) fn new(timer: &mut Timer, shape: ConvShape, seed: u64) -> Self {
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

    pub(crate) fn launch(&self, client: &Client, choice: &ConvChoice) -> Result<(), String> {
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
            accumulate: false,
        };
        launch_conv(client, operands, BF16, s, choice).map_err(|e| e.to_string())
    }

    /// max |got - ref| / rms(ref) over the sampled outputs, after a run on poisoned output
    /// (into an output buffer of its own, so that checks can run on several threads).
    pub(crate) fn check(&self, timer: &Timer, choice: &ConvChoice) -> Result<f64, String> {
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
pub(crate) fn reference(
    shape: &ConvShape,
    x: &[bf16],
    w: &[bf16],
    b: &[bf16],
    rows: &[u32],
) -> Vec<f64> {
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
pub(crate) fn layouts(shape: &ConvShape) -> Vec<String> {
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
        // Deeper stages and other cube shapes around the k = 64 winner: k = 128 a stage,
        // 64 / 256 rows a cube, 128 / 192 columns a cube, 8 planes.
        ("mma16x8x16", format!("p2x{n8}x8"), "s4x1"),
        ("mma16x8x16", format!("p1x{n8}x4"), "s4x1"),
        ("mma16x8x16", format!("p2x{n8}x4"), "s8x1"),
        ("mma16x8x16", format!("p2x{n8}x4"), "s4x2"),
        ("mma16x8x16", format!("p2x{n8_half}x4"), "s4x2"),
        ("mma16x8x16", format!("p4x{n8_half}x4"), "s2x2"),
        (
            "mma16x8x16",
            format!("p2x{}x4", n.div_ceil(8).min(8)),
            "s4x2",
        ),
        (
            "mma16x8x16",
            format!("p4x{}x4", n.div_ceil(8).min(8)),
            "s2x1",
        ),
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

pub(crate) fn knobs(text: &str) -> ConvKnobs {
    ConvKnobs::parse(text).unwrap_or_else(|e| panic!("{e}"))
}
