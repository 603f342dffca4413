//! Device timing for benchmarks and the tuner: device-side timers (cubecl profile windows,
//! CUDA events on CUDA), an L2 flush before every timed run, fresh random inputs made on the
//! device, and the same-bytes copy kernel that serves as the bandwidth roof.

use cubecl::future::block_on;
use cubecl::ir::ElemType;
use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::tickets::{draw_ticket, finish_tickets, ticket_counters};

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

/// One vector read per unit on a full grid, and `write_num / write_den` of the units (spread
/// evenly: unit `i` writes vector `i * write_num / write_den` when that index is new) storing
/// theirs: the traffic of a kernel that reads more bytes than it writes (the FP8 output reads
/// 2 bytes and writes 1 per element, NVFP4 2 and 9/16), as one copy. `never` is 0: a
/// condition on the loaded value that the compiler cannot fold, so every unit loads.
#[cube(launch_unchecked, address_type = "dynamic")]
fn copy_read_heavy<N: Size>(
    input: &[Vector<u32, N>],
    output: &mut [Vector<u32, N>],
    len: usize,
    never: u32,
    #[comptime] write_num: usize,
    #[comptime] write_den: usize,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        let v = input[i];
        let j = i * write_num / write_den;
        let writes = (i + 1) * write_num / write_den > j;
        if writes || (v.extract(0usize) & never) != 0u32 {
            output[j] = v;
        }
    }
}

/// The FP8 output's traffic with every unit busy: unit `i` reads vectors `i` and `i + half`
/// and writes their XOR to `output[i]` (`half` vectors written, `2 half` read): a second shape
/// of [`copy_read_heavy`]'s 2:1 traffic, 48 bytes per unit instead of 24.
#[cube(launch_unchecked, address_type = "dynamic")]
fn copy_two_to_one<N: Size>(input: &[Vector<u32, N>], output: &mut [Vector<u32, N>], half: usize) {
    let i = ABSOLUTE_POS;
    if i < half {
        output[i] = input[i] ^ input[i + half];
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

/// Copies the tile of `per_unit * CUBE_DIM` vectors at `base` (of `len`): a full tile with
/// all of a unit's `per_unit` loads before its stores (unit-interleaved), a partial last tile
/// one vector at a time. Every unit of the cube calls it.
#[cube]
fn copy_tile<N: Size>(
    input: &[Vector<u32, N>],
    output: &mut [Vector<u32, N>],
    base: usize,
    len: usize,
    #[comptime] per_unit: usize,
) {
    let dim = CUBE_DIM as usize;
    let unit = UNIT_POS as usize;
    let mut held = Array::<Vector<u32, N>>::new(per_unit);
    if base + dim * per_unit <= len {
        #[unroll]
        for k in 0..per_unit {
            held[k] = input[base + k * dim + unit];
        }
        #[unroll]
        for k in 0..per_unit {
            output[base + k * dim + unit] = held[k];
        }
    } else {
        let mut i = base + unit;
        while i < len {
            output[i] = input[i];
            i += dim;
        }
    }
}

/// Copy in tiles of `per_unit * CUBE_DIM` vectors ([`copy_tile`]), `CUBE_COUNT` tiles apart.
/// With `per_unit = 1` it is [`copy_vectors`]; on a full grid each cube copies one tile and
/// exits, as torch's and Triton's elementwise kernels do. For the copy-roof experiment
/// ([`Timer::copy_shaped`]).
#[cube(launch_unchecked, address_type = "dynamic")]
fn copy_tiles<N: Size>(
    input: &[Vector<u32, N>],
    output: &mut [Vector<u32, N>],
    len: usize,
    #[comptime] per_unit: usize,
) {
    let tile = CUBE_DIM as usize * per_unit;
    let mut base = CUBE_POS * tile;
    while base < len {
        copy_tile::<N>(input, output, base, len, per_unit);
        base += CUBE_COUNT * tile;
    }
}

/// [`copy_tiles`] on a persistent grid whose cubes draw the tiles in order from a ticket
/// counter (`counters[0]`) instead of a fixed stride: the tiles in flight stay a compact,
/// moving window of memory and a cube on a slower SM simply copies fewer tiles. Each cube draws
/// its next ticket while it copies the current tile. The last cube to finish (`counters[1]`)
/// sets both counters back to zero for the next launch.
#[cube(launch_unchecked, address_type = "dynamic")]
fn copy_ticketed<N: Size>(
    input: &[Vector<u32, N>],
    output: &mut [Vector<u32, N>],
    counters: &mut [Atomic<u32>],
    len: usize,
    #[comptime] per_unit: usize,
) {
    let tiles = len.div_ceil(CUBE_DIM as usize * per_unit);
    let mut drawn = Shared::<[u32]>::new_slice(2usize);
    let first = draw_ticket(counters);
    if UNIT_POS == 0 {
        drawn[0] = first;
    }
    sync_cube();
    let mut t = drawn[0] as usize;
    let mut parity = 1usize;
    while t < tiles {
        let next = draw_ticket(counters);
        copy_tile::<N>(
            input,
            output,
            t * CUBE_DIM as usize * per_unit,
            len,
            per_unit,
        );
        if UNIT_POS == 0 {
            drawn[parity] = next;
        }
        sync_cube();
        t = drawn[parity] as usize;
        parity = 1 - parity;
    }
    finish_tickets(counters);
}

/// How [`Timer::copy_shaped`] copies: `per_unit` vectors per unit and tile, `cube_dim` units a
/// cube, `cubes_per_sm` cubes per SM on a persistent grid (0: one cube per tile), the tiles
/// drawn from a ticket counter (`ticketed`, `copy_ticketed`) or walked with a grid stride.
#[derive(Clone, Copy, Debug)]
pub struct CopyShape {
    pub per_unit: usize,
    pub cube_dim: u32,
    pub cubes_per_sm: u32,
    pub ticketed: bool,
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

    /// The device's SMs (8 where it does not say, e.g. the CPU runtime).
    fn sms(&self) -> usize {
        self.client
            .properties()
            .hardware
            .num_streaming_multiprocessors
            .unwrap_or(8) as usize
    }

    fn grid(&self, units: usize, cube: u32) -> CubeCount {
        CubeCount::new_1d(units.div_ceil(cube as usize).clamp(1, self.sms() * 8) as u32)
    }

    /// One cube of 256 units per 256 of `units` (the full grid of the copy roofs).
    fn full_grid(&self, units: usize) -> CubeCount {
        let max = self.client.properties().hardware.max_cube_count.0 as usize;
        CubeCount::new_1d(units.div_ceil(256).clamp(1, max) as u32)
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
    /// possible, one per unit on a full grid: the roof the benchmarks divide by.
    pub fn copy(&self, src: &Handle, dst: &Handle, bytes: usize) {
        self.launch_copy(src, dst, bytes, false);
    }

    /// [`Timer::copy`] with four vectors per unit and step (`copy_vectors_x4`).
    pub fn copy_unrolled(&self, src: &Handle, dst: &Handle, bytes: usize) {
        self.launch_copy(src, dst, bytes, true);
    }

    /// Reads `read_bytes` (a multiple of 16) from `src` and writes `write_num / write_den` of
    /// that many bytes to `dst` (`copy_read_heavy`, one 16-byte vector per unit on a full
    /// grid): the roof of an output that is smaller than its input, read and written bytes
    /// each as the kernel moves them. Writes `read_bytes / 16 * write_num / write_den` vectors.
    pub fn copy_read_heavy(
        &self,
        src: &Handle,
        dst: &Handle,
        read_bytes: usize,
        write_num: usize,
        write_den: usize,
    ) {
        assert!(
            read_bytes.is_multiple_of(16) && write_num <= write_den && write_den > 0,
            "copy_read_heavy: read_bytes a multiple of 16, write_num <= write_den"
        );
        let len = read_bytes / 16;
        let written = len * write_num / write_den;
        let cubes = self.full_grid(len);
        let address = cubecl::ir::AddressType::from_len(read_bytes / 4 * write_num.max(1));
        // SAFETY: `src` holds `len` vectors of 4 words, `dst` at least `written`; unit `i`
        // writes index `i * write_num / write_den < written` only.
        unsafe {
            copy_read_heavy::launch_unchecked(
                &self.client,
                cubes,
                CubeDim::new_1d(256),
                address,
                4,
                BufferArg::from_raw_parts(src.clone(), len),
                BufferArg::from_raw_parts(dst.clone(), written.max(1)),
                len,
                0,
                write_num,
                write_den,
            );
        }
    }

    /// Reads `read_bytes` (a multiple of 32) from `src` and writes the XOR of its two halves
    /// (`read_bytes / 2` bytes) to `dst` (`copy_two_to_one`: two 16-byte loads and one store
    /// per unit on a full grid).
    pub fn copy_two_to_one(&self, src: &Handle, dst: &Handle, read_bytes: usize) {
        assert!(
            read_bytes.is_multiple_of(32),
            "copy_two_to_one: read_bytes a multiple of 32"
        );
        let half = read_bytes / 32;
        let cubes = self.full_grid(half);
        let address = cubecl::ir::AddressType::from_len(read_bytes / 4);
        // SAFETY: `src` holds `2 half` vectors of 4 words, `dst` at least `half`.
        unsafe {
            copy_two_to_one::launch_unchecked(
                &self.client,
                cubes,
                CubeDim::new_1d(256),
                address,
                4,
                BufferArg::from_raw_parts(src.clone(), 2 * half),
                BufferArg::from_raw_parts(dst.clone(), half.max(1)),
                half,
            );
        }
    }

    /// Copies `bytes` bytes (a multiple of 16) as `shape` says (`copy_tiles`).
    pub fn copy_shaped(&self, src: &Handle, dst: &Handle, bytes: usize, shape: CopyShape) {
        let len = bytes / 16;
        let tiles = len
            .div_ceil(shape.per_unit * shape.cube_dim as usize)
            .max(1);
        // A ticketed grid is always persistent (at least one cube per SM).
        let cubes = match (shape.cubes_per_sm, shape.ticketed) {
            (0, false) => tiles,
            (n, _) => tiles.min(self.sms() * n.max(1) as usize),
        };
        let cubes = CubeCount::new_1d(cubes as u32);
        let address = cubecl::ir::AddressType::from_len(bytes / 4);
        // SAFETY: `src` and `dst` hold at least `bytes` bytes, `len` vectors of 4 words;
        // the ticket counters two zeroed u32.
        unsafe {
            if shape.ticketed {
                copy_ticketed::launch_unchecked(
                    &self.client,
                    cubes,
                    CubeDim::new_1d(shape.cube_dim),
                    address,
                    4,
                    BufferArg::from_raw_parts(src.clone(), len),
                    BufferArg::from_raw_parts(dst.clone(), len),
                    BufferArg::from_raw_parts(ticket_counters(&self.client), 2),
                    len,
                    shape.per_unit,
                );
                return;
            }
            copy_tiles::launch_unchecked(
                &self.client,
                cubes,
                CubeDim::new_1d(shape.cube_dim),
                address,
                4,
                BufferArg::from_raw_parts(src.clone(), len),
                BufferArg::from_raw_parts(dst.clone(), len),
                len,
                shape.per_unit,
            );
        }
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
                // One vector per unit on a full grid (one cube per 256 vectors): the fastest of
                // the `copies` experiment's shapes on every measured size, 6-7% faster than the
                // persistent grid-stride copy at 200-800 MB and as fast as torch's `copy_`
                // (H200, 2026-12-02).
                let cubes = self.full_grid(len);
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
    pub fn time(&self, warmup: usize, runs: usize, launch: impl FnMut()) -> Vec<f64> {
        self.time_after(warmup, runs, || {}, launch)
    }

    /// [`Timer::time`] with `before` launched between each flush and its timed call (outside
    /// the timed window): e.g. the same kernel on a tiny input, so that the timed call finds
    /// its code in the L2 and in one SM's instruction cache while its data stays cold.
    pub fn time_after(
        &self,
        warmup: usize,
        runs: usize,
        mut before: impl FnMut(),
        mut launch: impl FnMut(),
    ) -> Vec<f64> {
        for _ in 0..warmup {
            launch();
        }
        let mut windows = Vec::with_capacity(runs);
        for _ in 0..runs {
            self.flush_l2();
            before();
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
