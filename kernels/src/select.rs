//! Knob selection: a heuristic that gives a valid, reasonable configuration for every device,
//! C and row count. (A measured per-architecture table takes precedence once it exists.)

use cubecl::prelude::*;

use crate::forward::RowsProblem;
use crate::knobs::{GammaIn, Knobs, LaneReduce};

/// Largest register cache per lane, in vectors. Beyond it the streaming variant is used.
pub const MAX_VECTORS_PER_LANE: usize = 8;

/// Units per cube the heuristic aims for on a GPU.
const TARGET_UNITS_PER_CUBE: u32 = 128;

/// Chooses knobs for `problem` with elements of `elem_size` bytes on `client`'s device.
/// `alignment_bytes` is the largest power of two that divides every buffer's byte offset.
pub fn select_knobs(
    client: &Client,
    problem: RowsProblem,
    elem_size: usize,
    gamma_elem_size: usize,
    alignment_bytes: u64,
) -> Knobs {
    let hw = &client.properties().hardware;
    let vector_size =
        pick_vector_size(client, problem, elem_size, gamma_elem_size, alignment_bytes);
    let vecs = problem.channels / vector_size;
    let has_plane_ops = client
        .features()
        .plane
        .contains(cubecl::ir::features::Plane::Ops);
    let plane = if has_plane_ops { hw.plane_size_min } else { 1 };
    let max_units = hw.max_units_per_cube.max(1);

    // Lanes per row: enough that each lane holds at most MAX_VECTORS_PER_LANE vectors, aiming
    // at ~4 vectors per lane so several loads are in flight per unit.
    let wanted = vecs.div_ceil(4).next_power_of_two() as u32;
    let largest_pow2_units = if max_units.is_power_of_two() {
        max_units
    } else {
        max_units.next_power_of_two() >> 1
    };
    let (lanes_per_row, lane_reduce) = if wanted <= plane {
        (wanted, LaneReduce::Plane)
    } else if plane >= 32 {
        // Rows wider than a plane's register budget: several planes per row, shared memory.
        let lanes = wanted.min(largest_pow2_units).min(1024);
        if lanes <= plane {
            (lanes, LaneReduce::Plane)
        } else {
            (lanes, LaneReduce::Shared)
        }
    } else {
        // No plane ops (CPU runtime): one unit per row, rows split over the cube's units.
        (1, LaneReduce::Plane)
    };
    let rows_per_cube = if plane >= 32 {
        (TARGET_UNITS_PER_CUBE / lanes_per_row).max(1)
    } else {
        (max_units / lanes_per_row).max(1)
    };
    let per_lane = vecs.div_ceil(lanes_per_row as usize);
    let vectors_per_lane = if per_lane <= MAX_VECTORS_PER_LANE {
        per_lane
    } else {
        0
    };
    // Persistent grid: a few cubes per multiprocessor on a GPU, none on a CPU.
    let max_cubes = hw
        .num_streaming_multiprocessors
        .map(|sms| sms * (2048 / (lanes_per_row * rows_per_cube)).clamp(1, 16));
    Knobs {
        vector_size,
        lanes_per_row,
        rows_per_cube,
        rows_per_unit: 1,
        vectors_per_lane,
        lane_reduce,
        gamma: GammaIn::Registers,
        max_cubes,
    }
}

/// Widest vector (at most 16 bytes) that divides C and both row strides, keeps every buffer
/// offset aligned, and that the device supports.
pub fn pick_vector_size(
    client: &Client,
    problem: RowsProblem,
    elem_size: usize,
    gamma_elem_size: usize,
    alignment_bytes: u64,
) -> usize {
    let hw_max = client.properties().hardware.max_vector_size;
    let mut v = (16 / elem_size.max(1)).max(1);
    while v > 1 {
        let aligned = alignment_bytes.is_multiple_of((v * elem_size) as u64)
            && alignment_bytes.is_multiple_of((v * gamma_elem_size) as u64);
        let divides = problem.channels.is_multiple_of(v)
            && problem.x_row_stride.is_multiple_of(v)
            && problem.out_row_stride.is_multiple_of(v);
        if divides && v <= hw_max && aligned {
            break;
        }
        v /= 2;
    }
    v
}
