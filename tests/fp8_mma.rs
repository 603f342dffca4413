//! Whether cubecl's FP8 tensor-core instruction runs on this GPU: one plane computes a
//! 16 x 8 x 32 product of E4M3 matrices with f32 accumulation through cubecl's manual MMA API
//! (`mma.sync` m16n8k32, listed by cubecl for sm_89 and newer), checked exactly against the
//! host product. An FP8 convolution would be built on this instruction, so this is the smallest
//! reproducer of what it needs from cubecl. Small integers are exact in E4M3 and their sums of
//! 32 products exact in f32, so the comparison is exact.
//!
//! `#[ignore]`: a probe for GPUs (`--ignored fp8_mma`); on a device without the instruction it
//! asserts that the device does not list it.
//!
//! The second probe issues the instruction in the form PTX gives it for sm_89 and sm_90
//! (`mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32`, inline PTX): cubecl 0.11.3 writes
//! the `.kind::f8f6f4` form of sm_120, which ptxas refuses for sm_90a.

use rmsnorm_silu_kernels::conv::fp8::wgmma_probe;
use rmsnorm_silu_kernels::cubecl;
use rmsnorm_silu_kernels::cubecl::cmma::{MatrixIdent, MmaDefinition};
use rmsnorm_silu_kernels::cubecl::features::MmaConfig;
use rmsnorm_silu_kernels::cubecl::ir::{ElemType, FloatKind};
use rmsnorm_silu_kernels::cubecl::prelude::*;
use rmsnorm_silu_kernels::cubecl::{e4m3, server::Handle};

use crate::common::cube_client;

const M: usize = 16;
const N: usize = 8;
const K: usize = 32;

/// `out = a (M x K, row-major) * b (K x N, row-major)`, one plane; each unit loads the
/// fragment elements the instruction assigns to it.
#[cube(launch)]
fn mma_probe(a: &[e4m3], b: &[e4m3], out: &mut [f32]) {
    let def = MmaDefinition::<e4m3, e4m3, f32>::new(M, N, K);
    let lane = UNIT_POS_PLANE;

    let va = def.vector_size(MatrixIdent::A);
    let size!(NA) = va;
    let elems_a = def.elems_per_lane(MatrixIdent::A);
    let count_a = comptime!(elems_a / va);
    let mut frag_a = Array::<Vector<e4m3, NA>>::new(count_a);
    #[unroll]
    for i in 0..count_a {
        let mut v = Vector::empty();
        #[unroll]
        for j in 0..va {
            let (row, col) = def.position_of_nth(lane, (i * va + j) as u32, MatrixIdent::A);
            v.insert(j, a[(row * K as u32 + col) as usize]);
        }
        frag_a[i] = v;
    }

    let vb = def.vector_size(MatrixIdent::B);
    let size!(NB) = vb;
    let elems_b = def.elems_per_lane(MatrixIdent::B);
    let count_b = comptime!(elems_b / vb);
    let mut frag_b = Array::<Vector<e4m3, NB>>::new(count_b);
    #[unroll]
    for i in 0..count_b {
        let mut v = Vector::empty();
        #[unroll]
        for j in 0..vb {
            let (row, col) = def.position_of_nth(lane, (i * vb + j) as u32, MatrixIdent::B);
            v.insert(j, b[(row * N as u32 + col) as usize]);
        }
        frag_b[i] = v;
    }

    let vc = def.vector_size(MatrixIdent::Accumulator);
    let size!(NC) = vc;
    let elems_c = def.elems_per_lane(MatrixIdent::Accumulator);
    let count_c = comptime!(elems_c / vc);
    let mut frag_c = Array::<Vector<f32, NC>>::new(count_c);
    #[unroll]
    for i in 0..count_c {
        frag_c[i] = Vector::new(0.0);
    }

    let frag_d = def.execute(&frag_a, &frag_b, &frag_c);
    #[unroll]
    for i in 0..count_c {
        let v = frag_d[i];
        #[unroll]
        for j in 0..vc {
            let (row, col) =
                def.position_of_nth(lane, (i * vc + j) as u32, MatrixIdent::Accumulator);
            out[(row * N as u32 + col) as usize] = v.extract(j);
        }
    }
}

/// The same product through inline PTX: `a` row-major and `b` column-major as 32-bit words of
/// four E4M3 codes (the lowest byte the lowest column or row). Fragments as the PTX ISA lays out
/// m16n8k32 for 8-bit types: lane `g * 4 + t` holds A's rows g and g + 8 at columns `4t..4t+4`
/// and `16+4t..`, B's column g at rows `4t..4t+4` and `16+4t..`, and D's rows g and g + 8 at
/// columns `2t, 2t + 1`. cubecl's inline PTX takes at most one result (four scalar results panic
/// in its IR rewriter), and writes an f32 vector as a PTX register list (`{%0, %1, ...}`) but a
/// vector of u32 as one 64-bit operand (ptxas: "Arguments mismatch for instruction 'mma'"): D and
/// C are f32 vectors, A's and B's words scalar inputs.
#[cube(launch)]
fn mma_ptx_probe(a: &[u32], b_columns: &[u32], out: &mut [f32]) {
    let lane = UNIT_POS_PLANE as usize;
    let (g, t) = (lane / 4, lane % 4);
    let words = K / 4;
    let size!(N4) = comptime![4usize];
    let a0 = a[g * words + t];
    let a1 = a[(g + 8) * words + t];
    let a2 = a[g * words + 4 + t];
    let a3 = a[(g + 8) * words + 4 + t];
    let b0 = b_columns[g * words + t];
    let b1 = b_columns[g * words + 4 + t];
    let frag_c = Vector::<f32, N4>::new(0.0);
    let frag_d: Vector<f32, N4>;
    gpu_asm!(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {d}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {c};",
        a0 = in(_) a0, a1 = in(_) a1, a2 = in(_) a2, a3 = in(_) a3,
        b0 = in(_) b0, b1 = in(_) b1, c = in(_) frag_c, d = out(_) frag_d,
        options(nomem),
    );
    out[g * N + 2 * t] = frag_d.extract(0usize);
    out[g * N + 2 * t + 1] = frag_d.extract(1usize);
    out[(g + 8) * N + 2 * t] = frag_d.extract(2usize);
    out[(g + 8) * N + 2 * t + 1] = frag_d.extract(3usize);
}

/// Integers in -3..=3 (exact in E4M3; each output a sum of 32 products of at most 9): `a`
/// (M x K) and `b` (K x N), row-major.
fn small_integer_operands() -> (Vec<f32>, Vec<f32>) {
    let a = (0..M * K).map(|i| ((i * 7 + 3) % 7) as f32 - 3.0).collect();
    let b = (0..K * N).map(|i| ((i * 5 + 1) % 7) as f32 - 3.0).collect();
    (a, b)
}

fn e4m3_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().map(|&x| e4m3::from_f32(x).to_bits()).collect()
}

/// Checks `got` (M x N, row-major) exactly against the host product of `a` and `b`.
fn assert_product(got: &[f32], a: &[f32], b: &[f32], what: &str) {
    for r in 0..M {
        for c in 0..N {
            let want: f32 = (0..K).map(|k| a[r * K + k] * b[k * N + c]).sum();
            assert_eq!(got[r * N + c], want, "{what}: output ({r}, {c})");
        }
    }
}

#[test]
#[ignore = "a probe for GPUs: run with --ignored fp8_mma"]
fn e4m3_mma_in_inline_ptx_matches_the_host_product() {
    let client = cube_client("the FP8 MMA probe");
    let name = client.properties().identity.name.clone();
    let sm = rmsnorm_silu_kernels::device::device_sm(&client);
    if !matches!(sm, Some(89..)) {
        eprintln!("{name}: not a CUDA device of sm_89 or newer; nothing to probe");
        return;
    }
    let (a, b) = small_integer_operands();
    let b_columns: Vec<f32> = (0..N * K).map(|i| b[(i % K) * N + i / K]).collect();
    let a_handle = client.create_from_slice(&e4m3_bytes(&a));
    let b_handle = client.create_from_slice(&e4m3_bytes(&b_columns));
    let poison = vec![f32::NAN; M * N];
    let out: Handle = client.create_from_slice(f32::as_bytes(&poison));
    unsafe {
        mma_ptx_probe::launch(
            &client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(32),
            BufferArg::from_raw_parts(a_handle, M * K / 4),
            BufferArg::from_raw_parts(b_handle, K * N / 4),
            BufferArg::from_raw_parts(out.clone(), M * N),
        )
    };
    let got = f32::from_bytes(&client.read_one_unchecked(out)).to_vec();
    assert_product(
        &got,
        &a,
        &b,
        &format!("{name}: E4M3 mma.sync m16n8k32 in inline PTX"),
    );
    eprintln!("{name}: E4M3 mma.sync m16n8k32 in inline PTX matches the host product");
}

#[test]
#[ignore = "a probe for GPUs: run with --ignored fp8_mma"]
fn e4m3_mma_matches_the_host_product() {
    let client = cube_client("the FP8 MMA probe");
    let e4m3_type = ElemType::Float(FloatKind::E4M3);
    let config = MmaConfig {
        a_type: e4m3_type,
        b_type: e4m3_type,
        cd_type: ElemType::Float(FloatKind::F32),
        m: M as u32,
        n: N as u32,
        k: K as u32,
    };
    let listed = client.features().matmul.mma.contains(&config);
    let name = client.properties().identity.name.clone();
    if !listed {
        eprintln!("{name}: no E4M3 mma.sync m16n8k32 listed; nothing to probe");
        assert!(
            !crate::common::on_gpu() || !name.contains("H100") && !name.contains("H200"),
            "cubecl lists no E4M3 MMA on {name} (sm_90 has the instruction)"
        );
        return;
    }
    let (a, b) = small_integer_operands();
    let a_handle = client.create_from_slice(&e4m3_bytes(&a));
    let b_handle = client.create_from_slice(&e4m3_bytes(&b));
    let poison = vec![f32::NAN; M * N];
    let out: Handle = client.create_from_slice(f32::as_bytes(&poison));
    unsafe {
        mma_probe::launch(
            &client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(32),
            BufferArg::from_raw_parts(a_handle, M * K),
            BufferArg::from_raw_parts(b_handle, K * N),
            BufferArg::from_raw_parts(out.clone(), M * N),
        )
    };
    let got = f32::from_bytes(&client.read_one_unchecked(out)).to_vec();
    assert_product(&got, &a, &b, &format!("{name}: E4M3 mma.sync m16n8k32"));
    eprintln!("{name}: E4M3 mma.sync m16n8k32 matches the host product ({M}x{N}x{K})");
}

/// `rows x 32` E4M3 codes (row-major) in the no-swizzle K-major core-matrix order.
fn core_matrix_order(codes: &[u8], rows: usize) -> Vec<u8> {
    let mut out = vec![0u8; rows * 32];
    for r in 0..rows {
        for k in 0..32 {
            out[((r / 8) * 2 + k / 16) * 128 + (r % 8) * 16 + k % 16] = codes[r * 32 + k];
        }
    }
    out
}

#[test]
#[ignore = "a probe for GPUs: run with --ignored fp8_mma"]
fn e4m3_wgmma_matches_the_host_product() {
    let client = cube_client("the FP8 wgmma probe");
    let name = client.properties().identity.name.clone();
    if rmsnorm_silu_kernels::device::device_sm(&client) != Some(90) {
        eprintln!("{name}: not sm_90; nothing to probe");
        return;
    }
    // A (64 x 32) and B as 64 columns of 32: small integers, exact in E4M3 and in f32 sums.
    let a: Vec<f32> = (0..64 * 32)
        .map(|i| ((i * 3 + i / 11) % 7) as f32 - 3.0)
        .collect();
    let b_columns: Vec<f32> = (0..64 * 32)
        .map(|i| ((i * 5 + i / 13 + 1) % 7) as f32 - 3.0)
        .collect();
    // Both readings of the descriptor's two offsets: the first is the one the kernels use.
    let mut mismatches = [0usize; 2];
    for (reading, swapped) in [false, true].into_iter().enumerate() {
        let a_handle = client.create_from_slice(&core_matrix_order(&e4m3_bytes(&a), 64));
        let b_handle = client.create_from_slice(&core_matrix_order(&e4m3_bytes(&b_columns), 64));
        let out: Handle = client.create_from_slice(f32::as_bytes(&vec![f32::NAN; 128 * 32]));
        unsafe {
            wgmma_probe::launch(
                &client,
                CubeCount::Static(1, 1, 1),
                CubeDim::new_1d(128),
                BufferArg::from_raw_parts(a_handle, 512),
                BufferArg::from_raw_parts(b_handle, 512),
                BufferArg::from_raw_parts(out.clone(), 128 * 32),
                swapped,
            )
        };
        let got = f32::from_bytes(&client.read_one_unchecked(out)).to_vec();
        for u in 0..128 {
            let (w, l) = (u / 32, u % 32);
            for i in 0..32 {
                let row = 16 * w + l / 4 + 8 * ((i >> 1) & 1);
                let col = 8 * (i >> 2) + 2 * (l % 4) + (i & 1);
                let want: f32 = (0..32)
                    .map(|k| a[row * 32 + k] * b_columns[col * 32 + k])
                    .sum();
                mismatches[reading] += usize::from(got[u * 32 + i] != want);
            }
        }
    }
    eprintln!(
        "{name}: wgmma descriptor readings: leading = K-adjacent {} of 4096 wrong, swapped {} of 4096 wrong",
        mismatches[0], mismatches[1]
    );
    assert_eq!(
        mismatches[0], 0,
        "{name}: wgmma E4M3 m64n64k32 with the kernels' descriptors"
    );
    eprintln!("{name}: E4M3 wgmma m64n64k32 matches the host product");
}
