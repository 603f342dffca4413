//! How the units that share a row add up their partial sums, in a fixed order so that every
//! lane of a row gets the same bits: a plane shuffle butterfly (lanes a power of two up to a
//! plane), a tree of shuffles inside each row's group of lanes (rows packed side by side in a
//! plane, [`RowConfig::packs_rows`]), a shared-memory tree (any lane count, and the CPU
//! runtime's plane of 1), or planes first and then shared memory (rows wider than a plane).
//! The row, NVFP4 and backward kernels share these; each also answers whether a row of the
//! cube needs the rescue of [`crate::rescue`], uniformly for the units that synchronise.

use cubecl::prelude::*;

use crate::knobs::{LaneReduce, RowConfig};
use crate::rescue::prescale;

/// Where a unit's rows of one cube step sit, for [`lane_sums`]: the unit's lane in its row
/// ([`unit_lane`]) and its row slot `y` ([`unit_row`]), the step's first row, the rows the cube
/// sees ([`rows_seen`]), and whether eps is small enough for a total to need the rescue.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct RowStep {
    pub lane: usize,
    pub y: usize,
    pub step_first_row: usize,
    pub rows: usize,
    pub small_eps: bool,
}

/// Sum of the lanes of a vector.
#[cube]
pub(crate) fn horizontal_sum<N: Size>(v: Vector<f32, N>) -> f32 {
    let mut sum = 0.0f32;
    #[unroll]
    for k in 0..N::value() {
        sum += v.extract(k);
    }
    sum
}

/// Sum of `v` over the `members` units of a cube that differ only along one cube axis
/// (`member`: this unit's index along it; `slot`: its slot in `shared`; `stride`: the distance
/// between the slots of neighbouring members), in a fixed tree (`members` a power of two);
/// every unit gets its total. All units of the cube must call it (uniformly): it uses cube
/// barriers, the last one after every unit has read its total.
#[cube]
pub(crate) fn tree_sum<N: Size>(
    v: Vector<f32, N>,
    shared: &mut Shared<[Vector<f32, N>]>,
    slot: usize,
    member: usize,
    stride: usize,
    #[comptime] members: usize,
) -> Vector<f32, N> {
    let mut total = v;
    if comptime![members > 1] {
        shared[slot] = v;
        sync_cube();
        let steps = comptime![(members as u32).trailing_zeros()];
        #[unroll]
        for k in 0..steps {
            let half = (members >> 1) >> k;
            if member < half {
                let other = shared[slot + half * stride];
                shared[slot] += other;
            }
            sync_cube();
        }
        total = shared[slot - member * stride];
        sync_cube();
    }
    total
}

/// Combines, for each of the unit's `rows_per_unit` rows, the partial sums of the
/// `lanes_per_row` units of that row; every lane gets the totals (in place). `lane` and `y` are
/// the unit's [`unit_lane`] and [`unit_row`]; `rows` the unit's [`rows_seen`].
///
/// Returns whether any row that shares the reduction with this unit needs the rescue of
/// [`crate::rescue`]: the answer is the same for every unit that takes part in the same plane
/// shuffles (plane reduction) or cube barriers (shared reduction), so a second call inside
/// `if rescue { .. }` stays uniform. Row `y + r * rows_per_cube` of a cube step starts at
/// `step_first_row`.
#[cube]
pub(crate) fn lane_sums(
    partials: &mut Array<f32>,
    shared: &mut Shared<[f32]>,
    at: RowStep,
    #[comptime] cfg: RowConfig,
) -> bool {
    let (y, step_first_row, rows, small_eps) = (at.y, at.step_first_row, at.rows, at.small_eps);
    let lanes = cfg.lanes_per_row;
    let steps = comptime![lanes.trailing_zeros()];
    let rows_per_unit = comptime![cfg.rows_per_unit as usize];
    let rows_per_cube = comptime![cfg.rows_per_cube as usize];
    let mut rescue = false;
    if comptime![cfg.packs_rows()] {
        rescue = packed_row_sums(partials, at, cfg);
    } else if comptime![lanes > 1] {
        match comptime![cfg.lane_reduce] {
            LaneReduce::Plane => {
                #[unroll]
                for k in 0..steps {
                    let mask = (lanes >> 1) >> k;
                    #[unroll]
                    for r in 0..rows_per_unit {
                        let other = plane_shuffle_xor(partials[r], mask);
                        partials[r] += other;
                    }
                }
                let mut mine = false;
                #[unroll]
                for r in 0..rows_per_unit {
                    let row = step_first_row + y + r * rows_per_cube;
                    mine = mine || prescale(partials[r], row < rows, small_eps) != 1.0f32;
                }
                rescue = plane_any(mine);
            }
            LaneReduce::Shared => {
                if comptime![cfg.plane_width > 1 && lanes > cfg.plane_width] {
                    rescue = plane_then_shared_sums(partials, shared, at, cfg);
                } else {
                    rescue = shared_tree_sums(partials, shared, at, cfg);
                }
            }
        }
    } else {
        #[unroll]
        for r in 0..rows_per_unit {
            let row = step_first_row + y + r * rows_per_cube;
            rescue = rescue || prescale(partials[r], row < rows, small_eps) != 1.0f32;
        }
    }
    rescue
}

/// [`lane_sums`] for rows packed into planes ([`RowConfig::packs_rows`]): a tree of shuffles
/// down within each row's lanes (`lane + offset` inside the row: a fixed order, rows never
/// mix), its first lane's total then broadcast to the row. The rescue answer is the plane's.
#[cube]
fn packed_row_sums(partials: &mut Array<f32>, at: RowStep, #[comptime] cfg: RowConfig) -> bool {
    let (lane, y, step_first_row, rows, small_eps) =
        (at.lane, at.y, at.step_first_row, at.rows, at.small_eps);
    let lanes = comptime![cfg.lanes_per_row as usize];
    let steps = comptime![cfg.lanes_per_row.next_power_of_two().trailing_zeros()];
    let rows_per_unit = comptime![cfg.rows_per_unit as usize];
    let rows_per_cube = comptime![cfg.rows_per_cube as usize];
    let first_lane = UNIT_POS_X - lane as u32;
    let mut mine = false;
    #[unroll]
    for r in 0..rows_per_unit {
        let mut v = partials[r];
        #[unroll]
        for k in 0..steps {
            let offset = 1u32 << k;
            let other = plane_shuffle_down(v, offset);
            if lane + (offset as usize) < lanes {
                v += other;
            }
        }
        partials[r] = plane_shuffle(v, first_lane);
        let row = step_first_row + y + r * rows_per_cube;
        mine = mine || prescale(partials[r], row < rows, small_eps) != 1.0f32;
    }
    plane_any(mine)
}

/// The unit's lane in its row: its x position, or with rows packed into planes
/// ([`RowConfig::packs_rows`]) its place in its row's group of `lanes` units of the plane.
#[cube]
pub(crate) fn unit_lane(#[comptime] cfg: RowConfig) -> usize {
    if comptime![cfg.packs_rows()] {
        UNIT_POS_X as usize % comptime![cfg.lanes_per_row as usize]
    } else {
        UNIT_POS_X as usize
    }
}

/// The unit's row slot in the cube (`0..rows_per_cube`): its y position, or with rows packed
/// into planes `rows_per_plane` slots per plane (a plane's idle units get the slot after its
/// last row and see no rows, see [`rows_seen`]).
#[cube]
pub(crate) fn unit_row(#[comptime] cfg: RowConfig) -> usize {
    if comptime![cfg.packs_rows()] {
        UNIT_POS_Y as usize * comptime![cfg.rows_per_plane() as usize]
            + UNIT_POS_X as usize / comptime![cfg.lanes_per_row as usize]
    } else {
        UNIT_POS_Y as usize
    }
}

/// The row count as this unit sees it: `rows`, or 0 for the idle units at the end of a packed
/// plane (`plane % lanes` of them), which then load, reduce and write nothing of their own
/// while taking part in the plane's shuffles.
#[cube]
pub(crate) fn rows_seen(rows: usize, #[comptime] cfg: RowConfig) -> usize {
    if comptime![cfg.packs_rows()] {
        let busy = comptime![(cfg.rows_per_plane() * cfg.lanes_per_row) as usize];
        select((UNIT_POS_X as usize) < busy, rows, 0usize)
    } else {
        rows
    }
}

/// [`lane_sums`] through a shared-memory tree over the lanes of each row (`log2(lanes) + 2`
/// cube barriers); every unit reads every row total of the cube, so all agree on the rescue.
#[cube]
fn shared_tree_sums(
    partials: &mut Array<f32>,
    shared: &mut Shared<[f32]>,
    at: RowStep,
    #[comptime] cfg: RowConfig,
) -> bool {
    let (lane, y, step_first_row, rows, small_eps) =
        (at.lane, at.y, at.step_first_row, at.rows, at.small_eps);
    let lanes = cfg.lanes_per_row;
    // A lane count that is not a power of two (the NVFP4 kernel's) takes the tree of the next
    // power of two, each lane adding only partners inside the row.
    let span = comptime![lanes.next_power_of_two()];
    let steps = comptime![span.trailing_zeros()];
    let rows_per_unit = comptime![cfg.rows_per_unit as usize];
    let rows_per_cube = comptime![cfg.rows_per_cube as usize];
    let mut rescue = false;
    let lanes_usize = comptime![lanes as usize];
    #[unroll]
    for r in 0..rows_per_unit {
        shared[(r * rows_per_cube + y) * lanes_usize + lane] = partials[r];
    }
    sync_cube();
    #[unroll]
    for k in 0..steps {
        let stride = ((span >> 1) >> k) as usize;
        // (Always inside the row for a power of two: the check folds away.)
        if lane < stride && (comptime![span == lanes] || lane + stride < lanes_usize) {
            #[unroll]
            for r in 0..rows_per_unit {
                let first = (r * rows_per_cube + y) * lanes_usize;
                let other = shared[first + lane + stride];
                shared[first + lane] += other;
            }
        }
        sync_cube();
    }
    #[unroll]
    for r in 0..rows_per_unit {
        partials[r] = shared[(r * rows_per_cube + y) * lanes_usize];
    }
    // Every unit reads every row total of the cube, so all agree on the rescue
    // without another barrier.
    #[unroll]
    for r in 0..rows_per_unit {
        for other_y in 0..rows_per_cube {
            let row = step_first_row + other_y + r * rows_per_cube;
            let total = shared[(r * rows_per_cube + other_y) * lanes_usize];
            rescue = rescue || prescale(total, row < rows, small_eps) != 1.0f32;
        }
    }
    // Everyone has read its totals before the next rows overwrite them.
    sync_cube();
    rescue
}

/// [`lane_sums`] for rows wider than a plane (`lanes` a multiple of `cfg.plane_width`, so each
/// plane lies within one row): each plane adds its lanes by a shuffle butterfly (every lane gets
/// the same bits), its first lane writes the plane's sum to shared memory, and after one barrier
/// every unit adds the planes of every row of the cube in plane order (a fixed order: all lanes
/// of a row get the same total, and all units agree on the rescue). Two cube barriers.
#[cube]
#[allow(clippy::manual_is_multiple_of)] // `is_multiple_of` is not a cube operation
fn plane_then_shared_sums(
    partials: &mut Array<f32>,
    shared: &mut Shared<[f32]>,
    at: RowStep,
    #[comptime] cfg: RowConfig,
) -> bool {
    let (lane, y, step_first_row, rows, small_eps) =
        (at.lane, at.y, at.step_first_row, at.rows, at.small_eps);
    let width = cfg.plane_width;
    let steps = comptime![width.trailing_zeros()];
    let planes = comptime![(cfg.lanes_per_row / cfg.plane_width) as usize];
    let rows_per_unit = comptime![cfg.rows_per_unit as usize];
    let rows_per_cube = comptime![cfg.rows_per_cube as usize];
    let width_usize = comptime![width as usize];
    #[unroll]
    for k in 0..steps {
        let mask = (width >> 1) >> k;
        #[unroll]
        for r in 0..rows_per_unit {
            let other = plane_shuffle_xor(partials[r], mask);
            partials[r] += other;
        }
    }
    if lane % width_usize == 0 {
        #[unroll]
        for r in 0..rows_per_unit {
            shared[(r * rows_per_cube + y) * planes + lane / width_usize] = partials[r];
        }
    }
    sync_cube();
    let mut rescue = false;
    #[unroll]
    for r in 0..rows_per_unit {
        for other_y in 0..rows_per_cube {
            let first = (r * rows_per_cube + other_y) * planes;
            let mut total = 0.0f32;
            #[unroll]
            for q in 0..planes {
                total += shared[first + q];
            }
            if other_y == y {
                partials[r] = total;
            }
            let row = step_first_row + other_y + r * rows_per_cube;
            rescue = rescue || prescale(total, row < rows, small_eps) != 1.0f32;
        }
    }
    // Everyone has read the planes' sums before the next rows overwrite them.
    sync_cube();
    rescue
}
