//! Launch parameters ("knobs") of the row kernel.
//!
//! Each distinct [`RowConfig`] is a comptime value: the kernel is JIT-compiled once per config
//! (and element types and vector width) and cached by cubecl. Shape values (rows, C) are
//! run-time arguments, so a new shape does not cost a compilation.

use crate::params::Activation;

/// How the partial sums of squares of the lanes that share a row are combined.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum LaneReduce {
    /// Butterfly of plane (warp) shuffles; needs plane ops and `lanes_per_row <= plane size`.
    Plane,
    /// Tree in shared memory with cube barriers; works everywhere, including plane size 1.
    Shared,
}

/// Host-side knobs for one launch of the row kernel.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Knobs {
    /// Elements per vector load/store (bytes per load = `vector_size * elem size`).
    pub vector_size: usize,
    /// Units that cooperate on one row (a power of two). Fewer than a plane puts several rows in
    /// one plane, which keeps enough bytes in flight for small C.
    pub lanes_per_row: u32,
    /// Rows handled at once by one cube (the cube is `lanes_per_row x rows_per_cube` units).
    pub rows_per_cube: u32,
    /// Vectors each lane keeps in registers. The row is read from memory once when
    /// `lanes_per_row * vectors_per_lane * vector_size >= C`; 0 selects the streaming variant
    /// that reads the row twice (for rows too long for registers).
    pub vectors_per_lane: usize,
    /// How lanes of one row combine their partial sums.
    pub lane_reduce: LaneReduce,
    /// Upper bound on the number of cubes; each cube loops over row groups with a grid stride
    /// (a persistent grid). `None`: one cube per row group.
    pub max_cubes: Option<u32>,
}

/// The comptime part of [`Knobs`] plus the activation: what the kernel is specialised on.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct RowConfig {
    pub lanes_per_row: u32,
    pub rows_per_cube: u32,
    pub vectors_per_lane: usize,
    pub lane_reduce: LaneReduce,
    pub activation: Activation,
}

impl Knobs {
    /// Whether the row stays in registers (read once) for rows of `channels` elements.
    pub fn caches_row(&self, channels: usize) -> bool {
        self.vectors_per_lane > 0
            && self.lanes_per_row as usize * self.vectors_per_lane * self.vector_size >= channels
    }

    /// Units per cube.
    pub fn units_per_cube(&self) -> u32 {
        self.lanes_per_row * self.rows_per_cube
    }

    pub(crate) fn row_config(&self, channels: usize, activation: Activation) -> RowConfig {
        RowConfig {
            lanes_per_row: self.lanes_per_row,
            rows_per_cube: self.rows_per_cube,
            vectors_per_lane: if self.caches_row(channels) {
                self.vectors_per_lane
            } else {
                0
            },
            lane_reduce: if self.lanes_per_row == 1 {
                // Nothing to combine; keep one config for both settings.
                LaneReduce::Plane
            } else {
                self.lane_reduce
            },
            activation,
        }
    }
}
