//! The benchmarks' copy roof (`Timer::copy`, every ratio's denominator) and the copy shapes of
//! the `copies` experiment copy every byte exactly, partial last tiles and ticket counters
//! included.

use rand::Rng;
use rmsnorm_silu_kernels::cubecl::server::Handle;
use rmsnorm_silu_kernels::timing::{CopyShape, Timer};

use crate::common::rng;
use crate::kernel_knobs::cube_device;

/// `timer` copies `bytes` random bytes into a poisoned buffer with `copy`; returns what landed.
fn copied(timer: &Timer, bytes: &[u8], copy: impl Fn(&Timer, &Handle, &Handle)) -> Vec<u8> {
    let src = timer.client.create_from_slice(bytes);
    let dst = timer.client.create_from_slice(&vec![0xa5u8; bytes.len()]);
    copy(timer, &src, &dst);
    timer.client.read_one(dst).expect("read the copy").to_vec()
}

#[test]
fn the_copy_roof_and_the_copy_shapes_copy_exactly() {
    let client = cube_device().client();
    let timer = Timer::new(client.clone());
    let mut rng = rng("copies");
    // Word counts that take vectors of 4, 2 and 1 words, and a single word.
    for words in [4 * 1003, 2 * 501, 333, 1] {
        let bytes: Vec<u8> = (0..4 * words).map(|_| rng.random()).collect();
        let got = copied(&timer, &bytes, |t, s, d| t.copy(s, d, bytes.len()));
        assert!(got == bytes, "Timer::copy of {words} words");
    }
    let cube_dim = client.properties().hardware.max_units_per_cube.min(32);
    // 1003 vectors: no cube size or tile divides them (a partial last tile).
    let bytes: Vec<u8> = (0..16 * 1003).map(|_| rng.random()).collect();
    for per_unit in [1, 3] {
        for (cubes_per_sm, ticketed) in [(0, false), (2, false), (1, true), (2, true)] {
            let shape = CopyShape {
                per_unit,
                cube_dim,
                cubes_per_sm,
                ticketed,
            };
            // Twice: the ticketed copy must leave its counters at zero for the next launch.
            for run in 0..2 {
                let got = copied(&timer, &bytes, |t, s, d| {
                    t.copy_shaped(s, d, bytes.len(), shape)
                });
                assert!(got == bytes, "copy {shape:?}, run {run}");
            }
        }
    }
}

/// The read-heavy copy (the FP8 and NVFP4 roofs: 2 bytes read per element, 1 or 9/16 written)
/// writes exactly `read / 16 * num / den` vectors, vector `j` from the unit that first reaches
/// it (input vector `ceil((j + 1) den / num) - 1`), and nothing past them.
#[test]
fn the_read_heavy_copy_writes_its_share_of_the_vectors() {
    let client = cube_device().client();
    let timer = Timer::new(client.clone());
    let mut rng = rng("read_heavy_copy");
    for vectors in [1usize, 7, 1003, 2 * 256 + 5] {
        let bytes: Vec<u8> = (0..16 * vectors).map(|_| rng.random()).collect();
        for (num, den) in [(1, 2), (9, 32), (1, 1), (0, 1)] {
            let got = copied(&timer, &bytes, |t, s, d| {
                t.copy_read_heavy(s, d, bytes.len(), num, den)
            });
            let written = vectors * num / den;
            for (j, out) in got.chunks(16).enumerate() {
                let want: &[u8] = if j < written {
                    let i = ((j + 1) * den).div_ceil(num) - 1;
                    &bytes[16 * i..16 * i + 16]
                } else {
                    &[0xa5; 16]
                };
                assert_eq!(out, want, "{vectors} vectors, {num}/{den}: vector {j}");
            }
        }
    }
}

/// The two-to-one copy writes, per 16-byte vector `i` of the first half, the XOR of input
/// vectors `i` and `i + half`, and nothing past the half.
#[test]
fn the_two_to_one_copy_writes_the_xor_of_the_halves() {
    let client = cube_device().client();
    let timer = Timer::new(client.clone());
    let mut rng = rng("two_to_one_copy");
    for half in [1usize, 5, 2 * 256 + 3] {
        let bytes: Vec<u8> = (0..32 * half).map(|_| rng.random()).collect();
        let got = copied(&timer, &bytes, |t, s, d| {
            t.copy_two_to_one(s, d, bytes.len())
        });
        let (low, high) = bytes.split_at(16 * half);
        let want: Vec<u8> = low.iter().zip(high).map(|(a, b)| a ^ b).collect();
        assert!(
            got[..16 * half] == want[..],
            "{half} vectors: the XOR differs"
        );
        assert!(
            got[16 * half..].iter().all(|&b| b == 0xa5),
            "{half}: wrote past the half"
        );
    }
}
