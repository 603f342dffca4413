//! CubeCL backends: turn Burn's `CubeTensor`s into one launch of the fused row kernel.

use burn::backend::TensorMetadata;
use burn::tensor::DType;
use burn_cubecl::{
    CubeBackend, kernel::into_contiguous, ops::empty_qtensor,
    ops::numeric::empty_device_contiguous_dtype, tensor::CubeTensor,
};
use rmsnorm_silu_kernels::backward::{BackwardOperands, launch_backward};
use rmsnorm_silu_kernels::channels::{ChannelsProblem, launch_channels, launch_channels_backward};
use rmsnorm_silu_kernels::cubecl::ir::{ElemType, FloatKind};
use rmsnorm_silu_kernels::cubecl::server::{Handle, MemoryLayoutStrategy};
use rmsnorm_silu_kernels::forward::{DeviceScale, OutputTarget, launch_forward_to};
use rmsnorm_silu_kernels::nvfp4::{
    DeviceAmax, Fp4Recipe, Fp4Target, ScaleLayout, launch_forward_nvfp4, select_fp4_knobs,
};
use rmsnorm_silu_kernels::params::Output;
use rmsnorm_silu_kernels::quant::write_f32;
use rmsnorm_silu_kernels::select::{pick_vector_size, select_output_knobs_with_source};
use rmsnorm_silu_kernels::{Activation, NormParams, RowOperands, RowsProblem};

use crate::backend::RmsNormSiluBackend;

mod backward;
mod quantized;

pub use backward::backward;
pub use quantized::{
    Fp4Scale, KernelScale, forward_fp8, forward_fp8_amax, forward_nvfp4, forward_nvfp4_parts,
};

impl RmsNormSiluBackend for CubeBackend {
    fn rms_norm_silu(
        x: CubeTensor,
        gamma: CubeTensor,
        norm: NormParams,
        activation: Activation,
    ) -> CubeTensor {
        forward(x, gamma, norm, activation)
    }

    fn rms_norm_silu_dim(
        x: CubeTensor,
        gamma: CubeTensor,
        dim: usize,
        norm: NormParams,
        activation: Activation,
    ) -> CubeTensor {
        forward_dim(x, gamma, dim, norm, activation)
    }

    fn rms_norm_silu_into(
        x: CubeTensor,
        gamma: CubeTensor,
        norm: NormParams,
        activation: Activation,
        into: CubeTensor,
        offset: usize,
    ) -> CubeTensor {
        forward_into(x, gamma, norm, activation, into, offset)
    }

    fn rms_norm_silu_fp8(
        x: CubeTensor,
        gamma: CubeTensor,
        norm: NormParams,
        activation: Activation,
        scale: f32,
    ) -> CubeTensor {
        forward_fp8(x, gamma, norm, activation, KernelScale::Host(scale), None)
    }

    fn rms_norm_silu_fp8_amax(
        x: CubeTensor,
        gamma: CubeTensor,
        norm: NormParams,
        activation: Activation,
        scale: f32,
    ) -> (CubeTensor, CubeTensor) {
        forward_fp8_amax(x, gamma, norm, activation, KernelScale::Host(scale))
    }

    fn rms_norm_silu_fp8_device_scale(
        x: CubeTensor,
        gamma: CubeTensor,
        scale: CubeTensor,
        norm: NormParams,
        activation: Activation,
    ) -> (CubeTensor, CubeTensor) {
        let scale = KernelScale::Device(scale.handle.clone());
        forward_fp8_amax(x, gamma, norm, activation, scale)
    }

    fn rms_norm_silu_nvfp4(
        x: CubeTensor,
        gamma: CubeTensor,
        norm: NormParams,
        activation: Activation,
        recipe: Fp4Recipe,
        s_enc: f32,
    ) -> CubeTensor {
        forward_nvfp4(x, gamma, norm, activation, Fp4Scale::Host { recipe, s_enc })
    }

    fn rms_norm_silu_nvfp4_device_amax(
        x: CubeTensor,
        gamma: CubeTensor,
        amax: CubeTensor,
        norm: NormParams,
        activation: Activation,
    ) -> CubeTensor {
        let amax = Fp4Scale::DeviceAmax(amax.handle.clone());
        forward_nvfp4(x, gamma, norm, activation, amax)
    }

    fn rms_norm_silu_nvfp4_parts(
        x: CubeTensor,
        gamma: CubeTensor,
        norm: NormParams,
        activation: Activation,
        recipe: Fp4Recipe,
        s_enc: f32,
        layout: ScaleLayout,
    ) -> (CubeTensor, CubeTensor) {
        forward_nvfp4_parts(x, gamma, norm, activation, recipe, s_enc, layout)
    }

    fn rms_norm_silu_backward(
        x: CubeTensor,
        gamma: CubeTensor,
        dy: CubeTensor,
        dim: usize,
        norm: NormParams,
        activation: Activation,
    ) -> (CubeTensor, CubeTensor) {
        backward(x, gamma, dy, dim, norm, activation)
    }
}

/// Normalises over axis `dim` without moving data where the layout allows:
/// - the axis is contiguous and the other axes are rows of one pitch (channels-last memory
///   presented as `[B, C, ...]`, what burn-cubecl convolutions return): the row kernel, output
///   in the same channels-last order;
/// - channels-first memory, dense or with the last axis's rows at one pitch (CUDA's pitched
///   allocations pad them): the channels kernel in place, output dense channels-first
///   ([`forward_channels_first`]);
/// - any other layout: copied to dense channels-first first (documented copy).
pub fn forward_dim(
    x: CubeTensor,
    gamma: CubeTensor,
    dim: usize,
    norm: NormParams,
    activation: Activation,
) -> CubeTensor {
    let rank = x.meta.num_dims();
    if dim + 1 == rank {
        return forward(x, gamma, norm, activation);
    }
    let moved = DimLast::new(rank, dim);
    if let Some(rows) = moved.rows(&x) {
        return moved.restore(forward(rows, gamma, norm, activation));
    }
    forward_channels_first(x, gamma, dim, norm, activation)
}

/// Channels-first `x` (`dim` before the last axis) through the channels kernel, the output dense
/// channels-first. `x`'s rows of the last axis are read where they lie when they sit at one pitch
/// (dense, or padded as CUDA allocates `Tensor::from_data` of `[B, C, T, H, W]` when W's bytes
/// are not a power of two), else copied dense first ([`RowInputs`]). Dense rows are one launch
/// over `[outer axes, C, the axes after C]`; padded rows one launch per index of the axes before
/// `dim`, whose batches are the rows between `dim` and the last axis (at the pitch) and whose
/// positions are the last axis.
fn forward_channels_first(
    x: CubeTensor,
    gamma: CubeTensor,
    dim: usize,
    norm: NormParams,
    activation: Activation,
) -> CubeTensor {
    let shape = x.shape();
    let rank = shape.num_dims();
    let inputs = RowInputs::new(x, gamma);
    let (width, pitch) = (inputs.problem.channels, inputs.problem.x_row_stride);
    let channels = shape[dim];
    let outer: usize = (0..dim).map(|d| shape[d]).product();
    let rows: usize = (dim + 1..rank - 1).map(|d| shape[d]).product();
    let x = &inputs.x;
    let out =
        empty_device_contiguous_dtype(x.client.clone(), x.device.clone(), shape.clone(), x.dtype);
    let (launches, problem) = if pitch == width {
        (1, ChannelsProblem::dense(outer, channels, rows * width))
    } else {
        let problem = ChannelsProblem {
            batches: rows,
            channels,
            positions: width,
            x_batch_stride: pitch,
            x_channel_stride: rows * pitch,
            out_batch_stride: width,
            out_channel_stride: rows * width,
        };
        (outer, problem)
    };
    let bytes = |elements: usize| (elements * inputs.x_type.size()) as u64;
    for o in 0..launches {
        let mut operands = inputs.operands();
        let mut target = out.handle.clone();
        if o > 0 {
            operands.x = operands.x.offset_start(bytes(o * channels * rows * pitch));
            target = target.offset_start(bytes(o * channels * rows * width));
        }
        launch_channels(&x.client, operands, target, problem, norm, activation)
            .unwrap_or_else(|e| panic!("rms_norm_silu: {e} ({problem:?})"));
    }
    out
}

/// Axis `dim` moved last in the metadata only (no data moves), and moved back.
struct DimLast {
    axes: Vec<usize>,
    inverse: Vec<usize>,
}

impl DimLast {
    fn new(rank: usize, dim: usize) -> Self {
        let (axes, inverse) = crate::api::axis_last_permutation(rank, dim);
        Self { axes, inverse }
    }

    /// `t` with `dim` last, when that view is rows of one pitch (channels-last memory).
    fn rows(&self, t: &CubeTensor) -> Option<CubeTensor> {
        let mut moved = t.clone();
        (!t.meta.is_tiled()
            && moved.meta.permute(&self.axes).is_ok()
            && row_pitch(moved.meta.shape(), moved.meta.strides()).is_some())
        .then_some(moved)
    }

    /// A result in the moved axis order, presented in the original one.
    fn restore(&self, mut t: CubeTensor) -> CubeTensor {
        t.meta
            .permute(&self.inverse)
            .expect("the inverse of a permutation is a permutation");
        t
    }
}

/// The cubecl element type of a float dtype the kernels accept; the panic names `what` (the
/// op and argument) otherwise.
pub(crate) fn elem_type(dtype: DType, what: &str) -> ElemType {
    match dtype {
        DType::F64 => ElemType::Float(FloatKind::F64),
        DType::F32 => ElemType::Float(FloatKind::F32),
        DType::F16 => ElemType::Float(FloatKind::F16),
        DType::BF16 => ElemType::Float(FloatKind::BF16),
        other => panic!("{what} must be f64, f32, f16 or bf16, got {other:?}"),
    }
}

/// Largest power of two (capped at 256) dividing every byte offset: the alignment that the
/// vector width must respect.
fn common_alignment(tensors: &[&CubeTensor]) -> u64 {
    tensors
        .iter()
        .map(|t| t.handle.offset_start.unwrap_or(0))
        .fold(256u64, |align, offset: u64| match offset {
            0 => align,
            o => align.min(1 << o.trailing_zeros()),
        })
}

/// The distance in elements between consecutive rows (all axes but the last) when `x`'s last
/// axis is contiguous and its rows are laid out row-major with one common pitch, as dense and
/// pitched (row-padded) tensors are; `None` for any other layout.
pub fn row_pitch(shape: &[usize], strides: &[usize]) -> Option<usize> {
    let (&channels, row_dims) = shape.split_last()?;
    if channels > 1 && strides[row_dims.len()] != 1 {
        return None;
    }
    let mut pitch = None;
    let mut expected = 0;
    for d in (0..row_dims.len()).rev() {
        if shape[d] == 1 {
            continue;
        }
        match pitch {
            None => {
                pitch = Some(strides[d]);
                expected = strides[d] * shape[d];
            }
            Some(_) if strides[d] == expected => expected *= shape[d],
            Some(_) => return None,
        }
    }
    match pitch {
        Some(p) if p < channels => None,
        Some(p) => Some(p),
        None => Some(channels),
    }
}

/// Runs the fused kernel. Inputs with contiguous (possibly pitched) rows are read in place;
/// any other layout is first copied to row-major order. The output is a new dense tensor with
/// the shape and dtype of `x`.
pub fn forward(
    x: CubeTensor,
    gamma: CubeTensor,
    norm: NormParams,
    activation: Activation,
) -> CubeTensor {
    let shape = x.shape();
    let rows = RowInputs::new(x, gamma);
    let out = empty_device_contiguous_dtype(
        rows.x.client.clone(),
        rows.x.device.clone(),
        shape,
        rows.x.dtype,
    );
    if rows.problem.rows == 0 {
        return out;
    }
    let target = OutputTarget {
        handle: out.handle.clone(),
        kind: Output::Input,
        elem: rows.x_type,
        scale: 1.0,
        device_scale: None,
        amax: None,
    };
    rows.launch(target, &out, norm, activation, "rms_norm_silu");
    out
}

/// [`forward`] written over elements `offset..offset + numel(x)` of `into` (counted row-major,
/// dense), in place when `into`'s rows lie one after another (dense, or pitched as CUDA
/// allocates them) and it is not shared, else into a dense copy of it; returns `into`.
pub fn forward_into(
    x: CubeTensor,
    gamma: CubeTensor,
    norm: NormParams,
    activation: Activation,
    into: CubeTensor,
    offset: usize,
) -> CubeTensor {
    assert_eq!(
        x.dtype, into.dtype,
        "rms_norm_silu_into: `into` must have the dtype of `x`"
    );
    let mut rows = RowInputs::new(x, gamma);
    let channels = rows.problem.channels;
    let needed = offset + rows.problem.rows * channels;
    assert!(
        needed <= into.shape().num_elements(),
        "rms_norm_silu_into: elements {offset}..{needed} are not all in `into` ({:?})",
        into.shape()
    );
    // Rows of `into` stored one after another at a fixed pitch are written in place: on CUDA
    // `Tensor::empty` pads rows to a power of two bytes (cubecl's pitched allocations: C = 96 in
    // bf16 takes 256-byte rows), and a copy to a dense buffer would cost more than the op.
    let pitch = match into.meta.is_tiled() {
        false => row_pitch(into.meta.shape(), into.meta.strides()),
        true => None,
    };
    // A copy (of a shared or scattered target) is dense: rows of `channels` elements.
    let (into, pitch) = match pitch {
        Some(pitch) if into.can_mut() => (into, pitch),
        _ if into.is_contiguous() => (into.copy(), channels),
        _ => (into_contiguous(into), channels),
    };
    if rows.problem.rows == 0 {
        return into;
    }
    rows.problem.out_row_stride = pitch;
    // `offset` counts dense elements and is a whole number of rows (`dim` is not the last axis).
    let start = offset / channels.max(1) * pitch;
    let mut view = into.clone();
    view.handle = view
        .handle
        .offset_start((start * rows.x_type.size()) as u64);
    let target = OutputTarget {
        handle: view.handle.clone(),
        kind: Output::Input,
        elem: rows.x_type,
        scale: 1.0,
        device_scale: None,
        amax: None,
    };
    rows.launch(target, &view, norm, activation, "rms_norm_silu_into");
    into
}

/// The row kernel's inputs, prepared once for every output kind: `x` with contiguous (possibly
/// pitched) rows, read in place, or else copied to row-major order; `gamma` contiguous; the
/// problem with a dense output.
struct RowInputs {
    x: CubeTensor,
    gamma: CubeTensor,
    x_type: ElemType,
    gamma_type: ElemType,
    problem: RowsProblem,
}

impl RowInputs {
    fn new(x: CubeTensor, gamma: CubeTensor) -> Self {
        let shape = x.shape();
        let channels = shape[shape.num_dims() - 1];
        let rows = shape.num_elements().checked_div(channels).unwrap_or(0);
        let x_type = elem_type(x.dtype, "rms_norm_silu: `x`");
        let gamma_type = elem_type(gamma.dtype, "rms_norm_silu: `gamma`");
        let x = if x.meta.is_tiled() || row_pitch(x.meta.shape(), x.meta.strides()).is_none() {
            into_contiguous(x)
        } else {
            x
        };
        let x_row_stride = row_pitch(x.meta.shape(), x.meta.strides()).unwrap_or(channels);
        Self {
            x,
            gamma: into_contiguous(gamma),
            x_type,
            gamma_type,
            problem: RowsProblem {
                rows,
                channels,
                x_row_stride,
                out_row_stride: channels,
            },
        }
    }

    /// The kernels' view of `x` and `gamma`.
    fn operands(&self) -> RowOperands {
        RowOperands {
            x: self.x.handle.clone(),
            gamma: self.gamma.handle.clone(),
            x_type: self.x_type,
            gamma_type: self.gamma_type,
        }
    }

    /// Launches the NVFP4 kernel with the selected knobs (the vector width narrowed to the
    /// alignment of `x` and `gamma`).
    fn launch_nvfp4(&self, target: Fp4Target, norm: NormParams, activation: Activation) {
        let problem = self.problem;
        let mut knobs = select_fp4_knobs(
            &self.x.client,
            problem.channels,
            problem.rows,
            self.x_type.size(),
        );
        knobs.vector_size = knobs.vector_size.min(pick_vector_size(
            &self.x.client,
            problem,
            self.x_type.size(),
            self.gamma_type.size(),
            common_alignment(&[&self.x, &self.gamma]),
        ));
        launch_forward_nvfp4(
            &self.x.client,
            self.operands(),
            target,
            problem,
            norm,
            activation,
            &knobs,
        )
        .unwrap_or_else(|e| {
            panic!(
                "rms_norm_silu_nvfp4: {e} (rows {}, C {})",
                problem.rows, problem.channels
            )
        });
    }

    /// Selects the knobs for writing into `out` (its alignment counts) and launches.
    fn launch(
        &self,
        target: OutputTarget,
        out: &CubeTensor,
        norm: NormParams,
        activation: Activation,
        op: &str,
    ) {
        let problem = self.problem;
        let out_kind = if target.kind.is_fp8() {
            "fp8"
        } else {
            rmsnorm_silu_kernels::select::out_kind(self.x_type.size())
        };
        let (knobs, _) = select_output_knobs_with_source(
            &self.x.client,
            problem,
            self.x_type.size(),
            self.gamma_type.size(),
            out_kind,
            common_alignment(&[&self.x, &self.gamma, out]),
        );
        launch_forward_to(
            &self.x.client,
            self.operands(),
            target,
            problem,
            norm,
            activation,
            &knobs,
        )
        .unwrap_or_else(|e| panic!("{op}: {e} (rows {}, C {})", problem.rows, problem.channels));
    }
}
