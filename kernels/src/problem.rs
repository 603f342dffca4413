//! What every row kernel's launcher shares: the problem it is given, its inputs and why it may
//! refuse.

use cubecl::ir::ElemType;
use cubecl::server::Handle;

/// The inputs of the row kernels (forward, FP8, NVFP4): `x`, `rows` rows of
/// [`RowsProblem::x_row_stride`] elements of `x_type`, and `gamma`, `channels` elements of
/// `gamma_type`.
#[derive(Clone, Debug)]
pub struct RowOperands {
    pub x: Handle,
    pub gamma: Handle,
    pub x_type: ElemType,
    pub gamma_type: ElemType,
}

/// The logical problem: `rows` rows of `channels` contiguous elements. Row `r` of `x` starts at
/// element `r * x_row_stride`, row `r` of the output at `r * out_row_stride` (both `>= channels`;
/// equal to `channels` for dense tensors, larger for pitched ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowsProblem {
    pub rows: usize,
    pub channels: usize,
    pub x_row_stride: usize,
    pub out_row_stride: usize,
}

impl RowsProblem {
    /// Dense rows: both row strides equal `channels`.
    pub fn dense(rows: usize, channels: usize) -> Self {
        Self {
            rows,
            channels,
            x_row_stride: channels,
            out_row_stride: channels,
        }
    }
}

/// Why a kernel refused a launch: one type for every kernel of the crate (row, NVFP4, channels,
/// backward, convolution). Every variant names the offending value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelError {
    /// The knobs (a table entry, a heuristic's or a caller's choice) cannot run this problem on
    /// this device; another configuration may.
    InvalidKnobs(String),
    /// The problem itself is malformed (a zero extent, a window that does not fit its input):
    /// no configuration runs it.
    InvalidProblem(String),
}

impl KernelError {
    /// Whether another configuration may run the problem (a caller's cue to fall back).
    pub fn is_knobs(&self) -> bool {
        matches!(self, KernelError::InvalidKnobs(_))
    }
}

impl core::fmt::Display for KernelError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            KernelError::InvalidKnobs(why) => write!(f, "invalid knobs: {why}"),
            KernelError::InvalidProblem(why) => write!(f, "invalid problem: {why}"),
        }
    }
}

impl std::error::Error for KernelError {}
