//! What every row kernel's launcher shares: the problem it is given and why it may refuse.

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

/// Why a launch was refused. Every variant names the offending value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForwardError {
    /// The knobs cannot run this problem on this device.
    InvalidKnobs(String),
}

impl core::fmt::Display for ForwardError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ForwardError::InvalidKnobs(why) => write!(f, "invalid knobs: {why}"),
        }
    }
}

impl std::error::Error for ForwardError {}
