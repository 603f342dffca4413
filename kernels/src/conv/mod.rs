//! Stride-1 3D convolutions over channels-last activations on tensor cores: cubek's
//! implicit-GEMM kernels (`cubek-convolution`), with the configuration of each shape taken
//! from a table measured on the target GPU instead of a run-time autotune.
//!
//! - input `[B, T, H, W, C_in]`, weight `[C_out, kT, kH, kW, C_in]`, bias `[C_out]`, output
//!   `[B, T', H', W', C_out]`, all with the channel axis contiguous;
//! - padding is given at the start of each axis; the output's extent sets the end, so a
//!   causal temporal padding (all of it in front) is `padding[0] = kT - 1` with `T' = T`;
//!   padded positions read zero by predication (no padded copy);
//! - [`knobs`]: one launch configuration ([`ConvKnobs`]) and its text form;
//! - [`table`]: the per-architecture table of measured configurations and its lookup;
//! - [`direct`]: a direct convolution on CUDA cores for layers of at most four output
//!   channels, where a tensor-core tile would be mostly empty;
//! - [`fp8`]: an implicit GEMM of this crate's on E4M3 operands (`mma.sync` m16n8k32);
//! - [`wgmma`]: an implicit GEMM of this crate's on Hopper's `wgmma` (bf16 / f16, sm_90), with the
//!   norm optionally applied in its input load ([`prologue`]);
//! - `accumulate`: the implicit GEMM adding its result to what the output holds (a residual
//!   connection in the store, [`ConvOperands::accumulate`]).
//!
//! The GEMM view: `M = B T' H' W'` output positions, `N = C_out`, `K = C_in kT kH kW`.

mod accumulate;
pub mod direct;
pub mod fp8;
pub mod knobs;
pub mod prologue;
pub mod table;
pub mod wgmma;

use crate::problem::KernelError;
use cubecl::ir::{AddressType, ElemType};
use cubecl::prelude::*;
use cubecl::zspace::Shape;
use cubek::convolution::components::{
    ConvSetupError, ConvolutionOperation, ConvolutionProblem, Dimensionality,
};
use cubek::convolution::definition::{ConvBlueprint, ForwardBlueprint};
use cubek::convolution::{
    AcceleratedTileKind, ConvAlgorithm, ConvolutionArgs, ConvolutionInputs, Strategy, launch_ref,
};
use cubek::matmul::definition::{AccumulatorOperand, MatmulElems, MatmulGlobalElems};
use cubek::std::{InputBinding, MatrixLayout};

pub use direct::{DirectKnobs, launch_direct};
pub use knobs::ConvKnobs;
pub use table::{ConvEntry, lookup as lookup_conv};
pub use wgmma::{InputTail, NormPrologue, WgmmaKnobs, launch_wgmma};

/// The geometry of one convolution (what the table is keyed by).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvShape {
    pub batch: usize,
    /// Input `T, H, W`.
    pub input: [usize; 3],
    pub c_in: usize,
    pub c_out: usize,
    /// Kernel `kT, kH, kW`.
    pub kernel: [usize; 3],
    /// Zero padding before each axis.
    pub padding: [usize; 3],
    /// Output `T', H', W'`.
    pub output: [usize; 3],
}

impl ConvShape {
    /// The GEMM's M: output positions.
    pub fn rows(&self) -> usize {
        self.batch * self.output.iter().product::<usize>()
    }

    /// The GEMM's K: input channels times kernel taps.
    pub fn reduction(&self) -> usize {
        self.c_in * self.kernel.iter().product::<usize>()
    }

    /// Multiply-adds times two.
    pub fn flops(&self) -> f64 {
        2.0 * self.rows() as f64 * self.c_out as f64 * self.reduction() as f64
    }

    /// Checks that the padding and output extents describe a stride-1 convolution of the
    /// input: every output position's window starts inside `[-padding, input)`, and the
    /// implied end padding is at most the kernel extent minus one.
    pub fn validate(&self) -> Result<(), KernelError> {
        let bad = |why: String| Err(KernelError::InvalidProblem(why));
        if self.batch == 0 || self.c_in == 0 || self.c_out == 0 {
            return bad(format!("conv: empty batch or channels in {self:?}"));
        }
        for axis in 0..3 {
            let (i, k, p, o) = (
                self.input[axis],
                self.kernel[axis],
                self.padding[axis],
                self.output[axis],
            );
            if k == 0 || o == 0 || i == 0 {
                return bad(format!("conv: axis {axis} has a zero extent in {self:?}"));
            }
            if p >= k {
                return bad(format!(
                    "conv: axis {axis} padding {p} must be below the kernel extent {k}"
                ));
            }
            // The end padding the output implies: `o = i + p + end - k + 1`.
            let end = (o + k - 1) as isize - (i + p) as isize;
            if end < 0 || end >= k as isize {
                return bad(format!(
                    "conv: axis {axis}: output {o} does not fit input {i}, kernel {k}, padding {p}"
                ));
            }
        }
        Ok(())
    }
}

/// Elements from a strided tensor's first row to the start of its last (`sum (d - 1) s` over
/// the outer axes): a launch's buffer length is this plus the row. 0 for an empty axis (a
/// source of no frames, never read).
pub(crate) fn span(dims: &[usize], strides: &[usize]) -> usize {
    dims.iter()
        .zip(strides)
        .map(|(d, s)| d.saturating_sub(1) * s)
        .sum()
}

/// How a convolution's kernel is configured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConvChoice {
    /// A configuration of this module's table (or given by hand).
    Knobs(ConvKnobs),
    /// cubek's own selection for its sync-loading wmma routine (what Burn's implicit GEMM
    /// runs without autotune): the fallback for shapes the table does not cover.
    Inferred,
    /// This crate's direct convolution on CUDA cores ([`direct`]), for at most
    /// [`direct::MAX_OUT`] output channels.
    Direct(DirectKnobs),
    /// This crate's implicit GEMM on Hopper's `wgmma` ([`wgmma`]): bf16 / f16 operands, `C_in`
    /// a multiple of its step (32 or 64), sm_90 (elsewhere the launch takes [`fallback_knobs`]).
    Wgmma(WgmmaKnobs),
}

impl std::fmt::Display for ConvChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConvChoice::Knobs(k) => write!(f, "{k}"),
            ConvChoice::Inferred => f.write_str("inferred"),
            ConvChoice::Direct(k) => write!(f, "{k}"),
            ConvChoice::Wgmma(k) => write!(f, "{k}"),
        }
    }
}

impl crate::table::TextKnobs for ConvChoice {
    const KERNEL: &'static str = "conv";
    /// `inferred`, a direct kernel's `direct.…`, a `wgmma.…` launch, else cubek's knobs.
    fn from_text(text: &str) -> Result<Self, String> {
        match text.split('.').next() {
            Some("inferred") if text == "inferred" => Ok(ConvChoice::Inferred),
            Some("direct") => DirectKnobs::parse(text).map(ConvChoice::Direct),
            Some("wgmma") => WgmmaKnobs::parse(text).map(ConvChoice::Wgmma),
            _ => ConvKnobs::parse(text).map(ConvChoice::Knobs),
        }
    }
}

/// [`ConvChoice::Direct`] for at most [`direct::MAX_OUT`] output channels; otherwise the
/// table's configuration for `shape` on a device of compute capability `sm` (x 10), else
/// [`fallback_knobs`]. (cubek's own selection, [`ConvChoice::Inferred`], asks for more shared
/// memory than an sm_90 multiprocessor has on the decoder's shapes (319,488 of 232,448 bytes
/// at 96 channels), so it is the launch's last resort, not the fallback.)
///
/// The table is tuned on steady-state shapes (no temporal padding). A shape with zero frames
/// padded in front (the first chunks of a causal decode) takes its entry's tiles on the plain
/// strided loader: the TMA loaders were never checked with front padding (their im2col tensor
/// maps take the padding as negative corners), and a failed TMA launch fails every later
/// launch that reads its output.
pub fn select_conv(sm: Option<u32>, shape: &ConvShape) -> ConvChoice {
    if shape.c_out <= direct::MAX_OUT {
        return ConvChoice::Direct(DirectKnobs::default());
    }
    match sm.and_then(|sm| lookup_conv(sm, shape)).map(|e| e.choice) {
        Some(ConvChoice::Knobs(mut knobs)) => {
            if knobs.tma() && shape.padding[0] > 0 {
                knobs.algorithm = cubek::convolution::ConvAlgorithm::SimpleSyncStrided;
            }
            ConvChoice::Knobs(knobs)
        }
        Some(other) => other,
        None => ConvChoice::Knobs(fallback_knobs(shape)),
    }
}

/// [`select_conv`] for `client`'s device: its compute capability, and the direct kernel's cube
/// shrunk to the device's limits ([`DirectKnobs::fitted`]; the CubeCL CPU runtime's cubes have
/// as many units as the machine has cores).
pub fn select_conv_on(client: &Client, shape: &ConvShape) -> ConvChoice {
    match select_conv(crate::device::device_sm(client), shape) {
        ConvChoice::Direct(k) => {
            let hw = &client.properties().hardware;
            ConvChoice::Direct(k.fitted(
                shape,
                hw.max_units_per_cube,
                [hw.max_cube_dim.0, hw.max_cube_dim.1],
                hw.max_shared_memory_size,
            ))
        }
        other => other,
    }
}

/// A configuration for shapes the table does not cover: the layout that won most tuned
/// shapes (2 x 12 `mma.sync` tiles of 16 x 8 per plane, 4 planes along the positions; 128
/// positions by 96 channels per cube), narrowed to the output channels, on the plain strided
/// loader, with a reduction step of 64 (16 when `C_in` is narrower than 64), widened until the
/// weight stage splits evenly over the cube's 128 loading units (cubek refuses a stage whose
/// vectors of 8 do not divide by the unit count: `k_tiles * n_tiles` must be a multiple of 8).
pub fn fallback_knobs(shape: &ConvShape) -> ConvKnobs {
    let n_tiles = shape.c_out.div_ceil(8).clamp(1, 12) as u32;
    let mut k_tiles = if shape.c_in >= 64 { 4 } else { 1 };
    while !(k_tiles * n_tiles).is_multiple_of(8) {
        k_tiles += 1;
    }
    ConvKnobs {
        algorithm: cubek::convolution::ConvAlgorithm::SimpleSyncStrided,
        tile_kind: cubek::convolution::AcceleratedTileKind::Mma,
        tile: [16, 8, 16],
        partition: [2, n_tiles, k_tiles],
        stage: [4, 1],
        swizzle: true,
        double_buffer: false,
    }
}

fn problem(
    input: &TensorBinding,
    weight: &TensorBinding,
    out: &TensorBinding,
    shape: &ConvShape,
    elem: ElemType,
) -> ConvolutionProblem {
    let address_type = AddressType::from_len(
        (input.handle.size() as usize)
            .max(weight.handle.size() as usize)
            .max(out.handle.size() as usize)
            / elem.size(),
    );
    ConvolutionProblem {
        m: shape.rows(),
        n: shape.c_out,
        k: shape.reduction(),
        lhs_strides: input.strides.clone(),
        rhs_strides: weight.strides.clone(),
        lhs_layout: MatrixLayout::RowMajor,
        rhs_layout: MatrixLayout::ColMajor,
        kernel_size: shape.kernel.iter().map(|&k| k as u32).collect(),
        stride: vec![1; 3],
        padding: shape.padding.iter().map(|&p| p as i32).collect(),
        dilation: vec![1; 3],
        batches: shape.batch,
        in_shape: Shape::new(shape.input),
        out_shape: Shape::new(shape.output),
        channels: shape.c_in,
        out_channels: shape.c_out,
        padded_channels: shape.c_in,
        operation: ConvolutionOperation::Forward,
        dimensionality: Dimensionality::Dim3,
        global_dtypes: MatmulGlobalElems {
            lhs: elem,
            rhs: elem,
            out: elem,
        },
        address_type,
    }
}

/// The tensors of one convolution launch, laid out as the module docs say (any strides with
/// the channel axis contiguous; the output may be a strided view into a larger tensor).
pub struct ConvOperands {
    pub input: TensorBinding,
    pub weight: TensorBinding,
    pub bias: Option<TensorBinding>,
    pub out: TensorBinding,
    /// `out` holds a residual on entry and the convolution adds to it (`out += conv + bias`);
    /// cubek's implicit GEMM with a table configuration only (the direct kernel and cubek's
    /// own selection refuse it).
    pub accumulate: bool,
}

/// The widest load (in elements, at most 16 bytes) that divides `channels`.
fn vector_for(channels: usize, elem: ElemType) -> usize {
    let mut v = (16 / elem.size()).max(1);
    while v > 1 && !channels.is_multiple_of(v) {
        v /= 2;
    }
    v
}

/// Launches the convolution `shape` on `client`: `input`, `weight`, `bias` and `out` as the
/// module docs lay them out, all of element type `elem` (f32 accumulation inside).
///
/// # Errors
/// The refusal of the configuration, in words: cubek's (a tiling that does not fit the device
/// or the shape, or a device without tensor cores such as the CubeCL CPU runtime) or the direct
/// kernel's.
pub fn launch_conv(
    client: &Client,
    operands: ConvOperands,
    elem: ElemType,
    shape: &ConvShape,
    choice: &ConvChoice,
) -> Result<(), KernelError> {
    let knobs = match choice {
        ConvChoice::Direct(_) | ConvChoice::Inferred if operands.accumulate => {
            return Err(KernelError::InvalidKnobs(format!(
                "{choice} does not add to its output: an accumulating convolution needs a \
                 table configuration of an implicit GEMM"
            )));
        }
        ConvChoice::Direct(knobs) => return launch_direct(client, operands, elem, shape, knobs),
        // A table's wgmma entry on a device or element type it cannot run (an f32 decode, the
        // CPU runtime) takes the fallback configuration of cubek's implicit GEMM.
        ConvChoice::Wgmma(knobs) => match wgmma::supported(client, shape, elem, knobs) {
            Ok(()) => return launch_wgmma(client, operands, None, None, elem, shape, knobs),
            Err(_) => Some(fallback_knobs(shape)),
        },
        ConvChoice::Knobs(knobs) => Some(*knobs),
        ConvChoice::Inferred => None,
    };
    shape.validate()?;
    launch_cubek(client, operands, elem, shape, knobs.as_ref())
        .map_err(|e| KernelError::InvalidKnobs(format!("cubek refused the configuration: {e:?}")))
}

/// cubek's implicit GEMM with `knobs`, or with cubek's own selection for `None`.
fn launch_cubek(
    client: &Client,
    operands: ConvOperands,
    elem: ElemType,
    shape: &ConvShape,
    knobs: Option<&ConvKnobs>,
) -> Result<(), ConvSetupError> {
    let ConvOperands {
        input,
        weight,
        bias,
        out,
        accumulate,
    } = operands;
    let dtypes = MatmulElems::from_globals(&MatmulGlobalElems {
        lhs: elem,
        rhs: elem,
        out: elem,
    });
    // The table's configuration as cubek's blueprint for this problem.
    let forced = knobs.map(|knobs| {
        let problem = problem(&input, &weight, &out, shape, elem);
        let hardware = &client.properties().hardware;
        // cubek's stage element is bf16/f16 for 2-byte inputs (f32 becomes tf32, 4 bytes).
        let matmul = knobs.blueprint(
            &problem.as_matmul_problem(if bias.is_some() {
                AccumulatorOperand::Present
            } else {
                AccumulatorOperand::Absent
            }),
            hardware.plane_size_max,
            hardware.num_streaming_multiprocessors,
            elem.size(),
            vector_for(shape.c_in, elem),
        );
        (knobs.algorithm, problem, matmul)
    });
    if accumulate {
        let Some((algorithm, problem, blueprint)) = forced else {
            unreachable!("launch_conv refuses an accumulating launch without knobs");
        };
        return accumulate::launch_accumulating(
            algorithm,
            client,
            accumulate::AccumulateLaunch {
                input: InputBinding::new(input, elem),
                weight: InputBinding::new(weight, elem),
                bias: bias.map(|b| InputBinding::new(b, elem)),
                out,
                problem,
                blueprint,
                dtypes,
            },
        );
    }
    let strategy = match forced {
        None => Strategy::Inferred {
            algorithm: ConvAlgorithm::SimpleSyncCyclic,
            tile_kind: AcceleratedTileKind::Cmma,
        },
        Some((algorithm, _, matmul)) => Strategy::Forced {
            algorithm,
            blueprint: ConvBlueprint::Forward(ForwardBlueprint {
                matmul,
                dimensionality: Dimensionality::Dim3,
                has_bias: bias.is_some(),
            }),
        },
    };
    launch_ref::<3>(
        &strategy,
        client,
        ConvolutionInputs::Forward {
            input: InputBinding::new(input, elem),
            weight: InputBinding::new(weight, elem),
            bias: bias.map(|b| InputBinding::new(b, elem)),
            out,
        },
        ConvolutionArgs {
            stride: [1; 3],
            padding: shape.padding,
            dilation: [1; 3],
        },
        dtypes,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(
        input: [usize; 3],
        kernel: [usize; 3],
        padding: [usize; 3],
        output: [usize; 3],
    ) -> ConvShape {
        ConvShape {
            batch: 1,
            input,
            c_in: 96,
            c_out: 96,
            kernel,
            padding,
            output,
        }
    }

    #[test]
    fn causal_and_same_padding_validate() {
        // First chunk: one frame, two frames of zeros in front.
        assert!(
            shape([1, 60, 104], [3, 3, 3], [2, 1, 1], [1, 60, 104])
                .validate()
                .is_ok()
        );
        // Later chunk: two cached frames and the new one, no temporal padding.
        assert!(
            shape([3, 60, 104], [3, 3, 3], [0, 1, 1], [1, 60, 104])
                .validate()
                .is_ok()
        );
        assert!(
            shape([1, 8, 8], [1, 1, 1], [0, 0, 0], [1, 8, 8])
                .validate()
                .is_ok()
        );
        let s = shape([1, 8, 8], [3, 3, 3], [2, 1, 1], [1, 8, 8]);
        assert_eq!((s.rows(), s.reduction()), (64, 96 * 27));
    }

    #[test]
    fn fallback_fits_the_channels() {
        let mut s = shape([6, 480, 832], [3, 3, 3], [0, 1, 1], [4, 480, 832]);
        assert_eq!(
            fallback_knobs(&s).to_string(),
            "sync_strided.mma16x8x16.p2x12x4.s4x1.sw"
        );
        s.c_out = 3;
        assert_eq!(fallback_knobs(&s).cube_cols(), 8);
        // One tile of 8 channels: the reduction step widens to 8 x 16 so that the weight
        // stage (128 x 8 values, 128 vectors of 8) splits over 128 loading units.
        assert_eq!(fallback_knobs(&s).stage_k(), 128);
        s.c_in = 16;
        assert_eq!(fallback_knobs(&s).stage_k(), 128);
        // The decoder's narrow shapes: conv_in (16 -> 384), post_quant_conv (16 -> 16).
        for (c_in, c_out) in [(16, 384), (16, 16), (96, 3), (384, 384), (192, 96)] {
            let s = ConvShape { c_in, c_out, ..s };
            let k = fallback_knobs(&s);
            let weight_vectors = k.stage_k() * k.cube_cols() / 8;
            assert_eq!(weight_vectors % 128, 0, "{c_in} -> {c_out}: {k}");
        }
        // At most four output channels take the direct kernel, on every device.
        assert_eq!(
            select_conv(Some(90), &s),
            ConvChoice::Direct(DirectKnobs::default())
        );
        assert_eq!(
            select_conv(None, &s),
            ConvChoice::Direct(DirectKnobs::default())
        );
        // A shape class the table lacks gets the fallback, not cubek's own selection.
        let s = ConvShape { c_out: 5, ..s };
        assert_eq!(
            select_conv(Some(90), &s),
            ConvChoice::Knobs(fallback_knobs(&s))
        );
        assert_eq!(select_conv(None, &s), ConvChoice::Knobs(fallback_knobs(&s)));
    }

    #[test]
    fn temporal_padding_leaves_the_tma_loaders() {
        // The sm_90 table's 384-channel entry is on a TMA loader; the first chunk's shape (zero
        // frames in front) takes the same tiles on the strided loader.
        let steady = ConvShape {
            c_in: 384,
            c_out: 384,
            ..shape([3, 60, 104], [3, 3, 3], [0, 1, 1], [1, 60, 104])
        };
        let first = ConvShape {
            input: [1, 60, 104],
            padding: [2, 1, 1],
            ..steady
        };
        let (ConvChoice::Knobs(a), ConvChoice::Knobs(b)) = (
            select_conv(Some(90), &steady),
            select_conv(Some(90), &first),
        ) else {
            panic!("the table answers with knobs");
        };
        assert!(a.tma(), "{a}");
        assert!(!b.tma(), "{b}");
        assert_eq!((a.partition, a.stage), (b.partition, b.stage));
    }

    #[test]
    fn impossible_geometry_is_refused() {
        assert!(
            shape([1, 8, 8], [3, 3, 3], [3, 1, 1], [1, 8, 8])
                .validate()
                .is_err()
        );
        assert!(
            shape([1, 8, 8], [3, 3, 3], [2, 1, 1], [4, 8, 8])
                .validate()
                .is_err()
        );
        assert!(
            shape([1, 8, 8], [3, 3, 3], [2, 1, 1], [1, 11, 8])
                .validate()
                .is_err()
        );
        assert!(
            shape([1, 0, 8], [3, 3, 3], [2, 1, 1], [1, 1, 8])
                .validate()
                .is_err()
        );
    }
}
