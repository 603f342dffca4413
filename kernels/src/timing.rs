//! Device timing for benchmarks and the tuner: device-side timers (cubecl profile windows,
//! CUDA events on CUDA), an L2 flush before every timed run, fresh random inputs made on the
//! device, and the same-bytes copy kernel that serves as the bandwidth roof.

use cubecl::future::block_on;
use cubecl::ir::ElemType;
use cubecl::prelude::*;
use cubecl::server::Handle;

/// Bytes written between timed runs to evict the inputs from L2 (the H200 has 60 MB).
pub const FLUSH_BYTES: usize = 256 << 20;

/// Fills `out` with pseudo-random values in `[lo, lo + span)` from a per-index hash and a seed.
#[cube(launch_unchecked, address_type = "dynamic")]
fn fill_random<E: Float>(
    out: &mut [E],
    len: usize,
    seed: u32,
    lo: f32,
    span: f32,
    #[define(E)] _e: ElemType,
) {
    let mut i = ABSOLUTE_POS;
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    while i < len {
        let mut h = (i as u32) ^ seed;
        h = (h ^ (h >> 16)) * 0x45d9f3bu32;
        h = (h ^ (h >> 16)) * 0x45d9f3bu32;
        h ^= h >> 16;
        let u = f32::cast_from(h >> 8) * (1.0f32 / 16777216.0f32);
        out[i] = E::cast_from(lo + span * u);
        i += stride;
    }
}

/// Grid-stride copy of `len` vectors.
#[cube(launch_unchecked, address_type = "dynamic")]
fn copy_vectors<N: Size>(input: &[Vector<u32, N>], output: &mut [Vector<u32, N>], len: usize) {
    let mut i = ABSOLUTE_POS;
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    while i < len {
        output[i] = input[i];
        i += stride;
    }
}

/// Grid-stride copy of `len` vectors, four per unit and step (all four loads before the
/// stores): more bytes in flight per unit than [`copy_vectors`], as torch's vectorised copy
/// does. A second roof for the benchmarks (`Timer::copy_unrolled`).
#[cube(launch_unchecked, address_type = "dynamic")]
fn copy_vectors_x4<N: Size>(input: &[Vector<u32, N>], output: &mut [Vector<u32, N>], len: usize) {
    let stride = CUBE_COUNT * CUBE_DIM as usize;
    let mut i = ABSOLUTE_POS;
    while i + 3 * stride < len {
        let a = input[i];
        let b = input[i + stride];
        let c = input[i + 2 * stride];
        let d = input[i + 3 * stride];
        output[i] = a;
        output[i + stride] = b;
        output[i + 2 * stride] = c;
        output[i + 3 * stride] = d;
        i += 4 * stride;
    }
    while i < len {
        output[i] = input[i];
        i += stride;
    }
}

/// Device buffers and helpers for timing on one client.
pub struct Timer {
    pub client: Client,
    flush: Handle,
    seed: u32,
}

impl Timer {
    pub fn new(client: Client) -> Self {
        let flush = client.empty(FLUSH_BYTES);
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0x1234_5678);
        Self {
            client,
            flush,
            seed,
        }
    }

    fn grid(&self, units: usize, cube: u32) -> CubeCount {
        let sms = self
            .client
            .properties()
            .hardware
            .num_streaming_multiprocessors
            .unwrap_or(8) as usize;
        CubeCount::new_1d(units.div_ceil(cube as usize).clamp(1, sms * 8) as u32)
    }

    /// A new buffer of `len` random elements of `elem` in `[lo, lo + span)`.
    pub fn random(&mut self, elem: ElemType, len: usize, lo: f32, span: f32) -> Handle {
        let handle = self.client.empty(len.max(1) * elem.size());
        self.seed = self.seed.wrapping_mul(747796405).wrapping_add(2891336453);
        unsafe {
            fill_random::launch_unchecked(
                &self.client,
                self.grid(len, 256),
                CubeDim::new_1d(256),
                cubecl::ir::AddressType::from_len(len),
                BufferArg::from_raw_parts(handle.clone(), len),
                len,
                self.seed,
                lo,
                span,
                elem,
            );
        }
        handle
    }

    /// Writes the flush buffer (evicts L2).
    pub fn flush_l2(&self) {
        self.copy(&self.flush.clone(), &self.flush.clone(), FLUSH_BYTES / 2);
    }

    /// Copies `bytes` bytes (a multiple of 4) from `src` to `dst` with 16-byte vectors where
    /// possible.
    pub fn copy(&self, src: &Handle, dst: &Handle, bytes: usize) {
        self.launch_copy(src, dst, bytes, false);
    }

    /// [`Timer::copy`] with four vectors per unit and step ([`copy_vectors_x4`]).
    pub fn copy_unrolled(&self, src: &Handle, dst: &Handle, bytes: usize) {
        self.launch_copy(src, dst, bytes, true);
    }

    fn launch_copy(&self, src: &Handle, dst: &Handle, bytes: usize, unrolled: bool) {
        let words = bytes / 4;
        let vector = [4usize, 2, 1]
            .into_iter()
            .find(|v| words.is_multiple_of(*v))
            .unwrap();
        let len = words / vector;
        let dim = CubeDim::new_1d(256);
        let address = cubecl::ir::AddressType::from_len(words);
        // SAFETY: `src` and `dst` hold at least `bytes` bytes, `len` vectors of `vector` words.
        unsafe {
            let input = BufferArg::from_raw_parts(src.clone(), len);
            let output = BufferArg::from_raw_parts(dst.clone(), len);
            if unrolled {
                let cubes = self.grid(len.div_ceil(4), 256);
                copy_vectors_x4::launch_unchecked(
                    &self.client,
                    cubes,
                    dim,
                    address,
                    vector,
                    input,
                    output,
                    len,
                );
            } else {
                let cubes = self.grid(len, 256);
                copy_vectors::launch_unchecked(
                    &self.client,
                    cubes,
                    dim,
                    address,
                    vector,
                    input,
                    output,
                    len,
                );
            }
        }
    }

    /// Device time in microseconds of each of `runs` calls of `launch`, after `warmup` untimed
    /// calls; the L2 is flushed before every call.
    pub fn time(&self, warmup: usize, runs: usize, mut launch: impl FnMut()) -> Vec<f64> {
        for _ in 0..warmup {
            launch();
        }
        let mut windows = Vec::with_capacity(runs);
        for _ in 0..runs {
            self.flush_l2();
            let window = self.client.profile_start().expect("profile start");
            launch();
            windows.push(self.client.profile_end(window).expect("profile end"));
        }
        windows
            .into_iter()
            .map(|w| {
                block_on(w.resolve())
                    .map(|ticks| ticks.duration().as_secs_f64() * 1e6)
                    .unwrap_or(f64::NAN)
            })
            .collect()
    }
}

/// Median of `values` (NaN-free input expected).
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}
