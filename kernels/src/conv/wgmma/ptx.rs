//! The inline PTX the wgmma convolution is built from: `cp.async` copies and their groups, the
//! shared-window address a matrix descriptor holds, and the text of one reduction step's
//! `wgmma` instructions. CUDA (sm_90a) only.

use super::WgmmaConfig;
use cubecl::prelude::*;

/// `cp.async` of 16 bytes from `src[offset]` to the shared address `dst`, reading `bytes` of
/// them (16, or 0 for zeros). CUDA only.
#[cube]
pub(super) fn copy_chunk<E: Float, V: Size>(
    src: &[Vector<E, V>],
    offset: usize,
    dst: u32,
    bytes: u32,
) {
    let ptr = unsafe { src[offset..offset + 1].as_ptr_unchecked() };
    gpu_asm!(
        "cp.async.cg.shared::cta.global [{}], [{}], 16, {};",
        mem_out(_) dst, mem_in(_) ptr, in(_) bytes, options(explicit_mem)
    );
}

#[cube]
pub(super) fn commit_copies() {
    gpu_asm!("cp.async.commit_group;");
}

/// Waits until at most `pending` committed groups of this unit's copies are in flight.
#[cube]
pub(super) fn wait_copies(#[comptime] pending: usize) {
    gpu_asm!("cp.async.wait_group {n};", n = const pending);
}

/// The vector of a unit's `n / 2` accumulators: the next power of two (cubecl aligns a vector
/// type to its size, and an assembly statement has one output), the registers past `n / 2`
/// unused.
pub(super) fn accumulator_len(n: usize) -> usize {
    (n / 2).next_power_of_two()
}

/// The PTX of one reduction step: the accumulators (`outs` registers, inputs `%outs..%2outs`)
/// copied to the outputs (`%0..%outs`), then four `k16` instructions on the first `n / 2` of
/// them whose descriptors advance by `a_step` / `b_step` (16-byte units) from the base words
/// (inputs `%2outs..%2outs+4`: A low, A high, B low, B high), committed and waited for.
pub(super) fn step_ptx(outs: usize, cfg: &WgmmaConfig) -> String {
    let (n, f16) = (cfg.n, cfg.f16);
    let (a_step, b_step) = (2 * cfg.rows(), 2 * cfg.n);
    let ty = if f16 { "f16" } else { "bf16" };
    let regs = (0..n / 2)
        .map(|i| format!("%{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let (al, ah, bl, bh) = (2 * outs, 2 * outs + 1, 2 * outs + 2, 2 * outs + 3);
    let mut s = String::from("{ .reg .b64 da, db; .reg .b32 ta, tb;\n");
    for i in 0..n / 2 {
        s += &format!("mov.f32 %{i}, %{};\n", outs + i);
    }
    s += "wgmma.fence.sync.aligned;\n";
    for k in 0..cfg.k / 16 {
        s += &format!(
            "add.u32 ta, %{al}, {}; add.u32 tb, %{bl}, {};\n\
             mov.b64 da, {{ta, %{ah}}}; mov.b64 db, {{tb, %{bh}}};\n\
             wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{regs}}}, da, db, 1, 1, 1, 0, 0;\n",
            k * a_step,
            k * b_step,
        );
    }
    s += "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0; }";
    s
}

/// The address of `tile`'s first element in the `.shared` window. CUDA only.
#[cube]
pub(super) fn shared_base<T: CubePrimitive>(tile: &Shared<[T]>) -> u32 {
    cubecl_cpp::cuda::ptx::generic_to_shared::<T>(unsafe { tile.as_ptr_unchecked() })
}
