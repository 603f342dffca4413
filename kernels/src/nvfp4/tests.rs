//! Unit tests of the NVFP4 kernel's host-side layout choices.

use super::*;

/// The heuristic's packed layouts: the measured winners' lane counts, none where no count
/// fits, and for every block count the invariants the kernel and its launch need.
#[test]
fn packed_lanes_fit_the_row_and_the_plane() {
    for (blocks, want) in [
        (3, Some(3)),
        (5, Some(5)),
        (6, Some(6)),
        (10, Some(10)),
        (12, Some(6)),
        (20, Some(10)),
        (1, None),
        (2, None),
        (4, None),
        (7, None),
        (8, None),
        (24, None),
        (40, None),
    ] {
        assert_eq!(packed_lanes(blocks, 32), want, "{blocks} blocks");
    }
    for blocks in 1..=8192 {
        if let Some(lanes) = packed_lanes(blocks, 32) {
            let per_lane = blocks / lanes as usize;
            assert_eq!(per_lane * lanes as usize, blocks, "{blocks} blocks");
            assert!((1..=2).contains(&per_lane), "{blocks} blocks");
            assert!(!lanes.is_power_of_two() && 32 / lanes >= 2 && 32 % lanes <= 2);
        }
    }
    assert_eq!(packed_lanes(6, 1), None, "no plane, no packing");
}
