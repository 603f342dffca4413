//! The CubeCL backends' convolutions: this crate's direct or `wgmma` kernel or cubek's implicit GEMM on
//! channels-last memory, Burn's direct convolution where neither runs.

use burn::backend::TensorMetadata;
use burn::tensor::{DType, Shape};
use burn_cubecl::{
    CubeBackend, kernel::into_contiguous, ops::numeric::empty_device_contiguous_dtype,
    tensor::CubeTensor,
};
use rmsnorm_silu_kernels::conv::prologue::launch_positions_inv_rms;
use rmsnorm_silu_kernels::conv::wgmma::{select_wgmma, supported};
use rmsnorm_silu_kernels::conv::{
    ConvChoice, ConvOperands, ConvShape, NormPrologue, fallback_knobs, launch_conv, launch_wgmma,
    select_conv_on,
};
use rmsnorm_silu_kernels::cubecl::ir::{ElemType, FloatKind};
use rmsnorm_silu_kernels::cubecl::prelude::TensorBinding;
use rmsnorm_silu_kernels::cubecl::zspace::striding::row_major_contiguous_strides as contiguous_strides;
use rmsnorm_silu_kernels::cubecl::zspace::{Shape as ZShape, Strides};
use rmsnorm_silu_kernels::device::device_sm;
use rmsnorm_silu_kernels::{Activation, NormParams};

use burn::tensor::ops::ConvOptions;
use burn_cubecl::kernel::conv::{ConvStrategy, conv_forward_nhwc};

use super::{
    ConvBackend, ConvPadding, Phases, conv_output_shape, phased_output_shape, phases_with,
};
use crate::backend::RmsNormSiluBackend;

/// Burn's direct convolution on the same channels-last memory, where the implicit GEMM does
/// not run (the CubeCL CPU runtime, or a configuration cubek refuses). Never Burn's
/// autotuned convolution: it compiles and times every candidate for each new shape.
fn direct(x: CubeTensor, weight: CubeTensor, bias: CubeTensor, padding: ConvPadding) -> CubeTensor {
    let options = ConvOptions::new_with_padding([1; 3], padding.pairs(), [1; 3], 1);
    conv_forward_nhwc::<3>(x, weight, Some(bias), options, ConvStrategy::Direct)
        .expect("Burn's direct convolution runs every stride-1 shape")
}

impl ConvBackend for CubeBackend {
    fn conv3d_channels_last(
        x: CubeTensor,
        weight: CubeTensor,
        bias: CubeTensor,
        padding: ConvPadding,
    ) -> CubeTensor {
        let out_dims = conv_output_shape(&x.shape(), &weight.shape(), &padding)
            .expect("checked by conv3d_channels_last");
        let phases = Phases::single(padding);
        match launch_phases(&x, &weight, &bias, &phases, out_dims, None) {
            Some(out) => out,
            None => direct(x, weight, bias, padding),
        }
    }

    fn conv3d_channels_last_add(
        x: CubeTensor,
        weight: CubeTensor,
        bias: CubeTensor,
        padding: ConvPadding,
        residual: CubeTensor,
    ) -> CubeTensor {
        let out_dims = conv_output_shape(&x.shape(), &weight.shape(), &padding)
            .expect("checked by conv3d_channels_last_add");
        // The convolution stores into the residual's memory, adding what it holds: only where
        // that memory is dense, of the output's shape and shared with no other tensor.
        if residual.can_mut()
            && residual.is_contiguous()
            && residual.dtype == x.dtype
            && residual.shape().to_vec() == out_dims
        {
            let phases = Phases::single(padding);
            let into = Some(residual.clone());
            if let Some(out) = launch_phases(&x, &weight, &bias, &phases, out_dims, into) {
                return out;
            }
        }
        let y = Self::conv3d_channels_last(x, weight, bias, padding);
        burn_cubecl::ops::numeric::add(y, residual)
    }

    fn conv3d_channels_last_normed(
        x: CubeTensor,
        gamma: CubeTensor,
        weight: CubeTensor,
        bias: CubeTensor,
        padding: ConvPadding,
        norm: NormParams,
    ) -> CubeTensor {
        if let Some(out) = launch_normed(&x, &gamma, &weight, &bias, padding, norm) {
            return out;
        }
        let y = <Self as RmsNormSiluBackend>::rms_norm_silu(x, gamma, norm, Activation::Silu);
        Self::conv3d_channels_last(y, weight, bias, padding)
    }

    fn conv3d_channels_last_phases(
        x: CubeTensor,
        weights: CubeTensor,
        bias: CubeTensor,
        phases: Phases,
    ) -> CubeTensor {
        let out_dims = phased_output_shape(&x.shape(), &weights.shape(), &bias.shape(), &phases)
            .expect("checked by conv3d_channels_last_phases");
        match launch_phases(&x, &weights, &bias, &phases, out_dims, None) {
            Some(out) => out,
            None => phases_with::<Self>(x, weights, bias, phases, direct),
        }
    }
}

/// A view of `t`'s buffer: `shape` with `strides`, starting `offset` elements in.
fn view(t: &CubeTensor, offset: usize, shape: &[usize], strides: &[usize]) -> TensorBinding {
    let bytes = (offset * t.dtype.size()) as u64;
    unsafe {
        TensorBinding::from_raw_parts(
            t.handle.clone().offset_start(bytes),
            Strides::new(strides),
            ZShape::from(shape.to_vec()),
        )
    }
}

/// The kernels' element type for a dtype they take (f32, f16, bf16).
fn float_elem(dtype: DType) -> Option<ElemType> {
    match dtype {
        DType::F32 => Some(ElemType::Float(FloatKind::F32)),
        DType::F16 => Some(ElemType::Float(FloatKind::F16)),
        DType::BF16 => Some(ElemType::Float(FloatKind::BF16)),
        _ => None,
    }
}

/// `x` with its channels contiguous: the kernels read channels-last memory that way; another
/// layout (a channels-first tensor permuted to channels-last) is copied once rather than
/// refused.
fn channels_contiguous(x: &CubeTensor) -> CubeTensor {
    match x.meta.strides().last() {
        Some(1) => x.clone(),
        _ => into_contiguous(x.clone()),
    }
}

/// The geometry of the convolution of `x` (`[B, T, H, W, C_in]`) by `kernel` (`[C_out, kT, kH,
/// kW, C_in]`) with `padding` in front, into `out` (`[B, T', H', W', C_out]`).
fn conv_shape(x: &[usize], kernel: &[usize], padding: ConvPadding, out: &[usize]) -> ConvShape {
    ConvShape {
        batch: x[0],
        input: [x[1], x[2], x[3]],
        c_in: x[4],
        c_out: kernel[0],
        kernel: [kernel[1], kernel[2], kernel[3]],
        padding: [padding.t.0, padding.h.0, padding.w.0],
        output: [out[1], out[2], out[3]],
    }
}

/// One launch per phase, each writing its positions of one dense `out_dims` result: the
/// direct kernel for at most four output channels (any CubeCL runtime), else cubek's
/// implicit GEMM (the table's configuration, else cubek's own); or None where neither runs:
/// no tensor cores (the CubeCL CPU runtime's planes of one), a dtype other than f32 / f16
/// / bf16, or a refused configuration (logged). With `accumulate_into` (a dense tensor of
/// `out_dims`), the result is added to what that tensor holds, in its memory: cubek's implicit
/// GEMM with the table's configuration only, None (nothing written) where the shape has none.
fn launch_phases(
    x: &CubeTensor,
    weights: &CubeTensor,
    bias: &CubeTensor,
    phases: &Phases,
    out_dims: [usize; 5],
    accumulate_into: Option<CubeTensor>,
) -> Option<CubeTensor> {
    let client = &x.client;
    let tensor_cores = client.properties().hardware.plane_size_max >= 32;
    let elem = float_elem(x.dtype)?;
    let x = &channels_contiguous(x);
    // Weights and bias are read as dense blocks, one per phase.
    let weights = into_contiguous(weights.clone());
    let bias = into_contiguous(bias.clone());
    let dims = x.shape().to_vec();
    let wdims = weights.shape().to_vec();
    // [C_out, kT, kH, kW, C_in], after the phase axis when there is one.
    let kernel_dims: Vec<usize> = wdims[wdims.len() - 5..].to_vec();
    let per_phase = kernel_dims.iter().product::<usize>();
    let c_out = kernel_dims[0];
    let accumulate = accumulate_into.is_some();
    let out = accumulate_into.unwrap_or_else(|| {
        empty_device_contiguous_dtype(
            client.clone(),
            x.device.clone(),
            Shape::new(out_dims),
            x.dtype,
        )
    });
    let out_strides = contiguous_strides(out_dims);
    let [ft, fh, fw] = phases.factor;
    let phase_dims = [
        out_dims[0],
        out_dims[1] / ft,
        out_dims[2] / fh,
        out_dims[3] / fw,
        out_dims[4],
    ];
    let phase_strides = [
        out_strides[0],
        out_strides[1] * ft,
        out_strides[2] * fh,
        out_strides[3] * fw,
        1,
    ];
    for p in 0..phases.count() {
        let padding = phases.padding[p];
        let shape = conv_shape(&dims, &kernel_dims, padding, &phase_dims);
        let [at, ah, aw] = phases.offsets(p);
        let out_offset = at * out_strides[1] + ah * out_strides[2] + aw * out_strides[3];
        let choice = select_conv_on(client, &shape);
        let mut tried = vec![choice];
        if let ConvChoice::Wgmma(_) = choice {
            tried.push(ConvChoice::Knobs(fallback_knobs(&shape)));
        }
        if choice != ConvChoice::Inferred {
            tried.push(ConvChoice::Inferred);
        }
        // cubek's kernels need tensor cores (not the CPU runtime's planes of one); the implicit
        // GEMMs with a configuration accumulate.
        tried.retain(|c| tensor_cores || matches!(c, ConvChoice::Direct(_) | ConvChoice::Wgmma(_)));
        tried.retain(|c| !accumulate || matches!(c, ConvChoice::Knobs(_) | ConvChoice::Wgmma(_)));
        let launched = tried.into_iter().any(|choice| {
            let operands = ConvOperands {
                input: x.clone().binding(),
                weight: view(
                    &weights,
                    p * per_phase,
                    &kernel_dims,
                    &contiguous_strides(&kernel_dims),
                ),
                bias: Some(view(&bias, p * c_out, &[c_out], &[1])),
                out: view(&out, out_offset, &phase_dims, &phase_strides),
                accumulate,
            };
            match launch_conv(client, operands, elem, &shape, &choice) {
                Ok(()) => true,
                Err(e) if e.is_knobs() => {
                    log::warn!("conv3d_channels_last: {choice} refused for {shape:?}: {e}");
                    false
                }
                // The arguments were checked above: a malformed problem is this module's bug.
                Err(e) => panic!("conv3d_channels_last: {e}"),
            }
        });
        if !launched {
            return None;
        }
    }
    Some(out)
}

/// The norm in the `wgmma` convolution's load: the positions' inverse RMS, then one launch
/// with the table's wgmma configuration for the shape (two warpgroups of 128 channels
/// otherwise); None where it does not run (a device other than sm_90 or the CPU runtime, a
/// dtype other than bf16 / f16, `C_in` not a multiple of 32, a refused launch: logged).
fn launch_normed(
    x: &CubeTensor,
    gamma: &CubeTensor,
    weight: &CubeTensor,
    bias: &CubeTensor,
    padding: ConvPadding,
    norm: NormParams,
) -> Option<CubeTensor> {
    let client = &x.client;
    // Whether the kernel takes the problem (f32 among what it refuses), before any copy.
    let elem = float_elem(x.dtype)?;
    let dims = x.shape().to_vec();
    let wdims = weight.shape().to_vec();
    let out_dims = conv_output_shape(&dims, &wdims, &padding).ok()?;
    let shape = conv_shape(&dims, &wdims, padding, &out_dims);
    let knobs = select_wgmma(device_sm(client), &shape);
    supported(client, &shape, elem, &knobs).ok()?;
    let x = &channels_contiguous(x);
    let (weight, bias, gamma) = (
        into_contiguous(weight.clone()),
        into_contiguous(bias.clone()),
        into_contiguous(gamma.clone()),
    );
    let positions: usize = dims[..4].iter().product();
    let inv_rms = empty_device_contiguous_dtype(
        client.clone(),
        x.device.clone(),
        Shape::new([positions]),
        DType::F32,
    );
    let out = empty_device_contiguous_dtype(
        client.clone(),
        x.device.clone(),
        Shape::new(out_dims),
        x.dtype,
    );
    let launched = launch_positions_inv_rms(
        client,
        x.clone().binding(),
        inv_rms.clone().binding(),
        elem,
        norm,
    )
    .and_then(|()| {
        let operands = ConvOperands {
            input: x.clone().binding(),
            weight: weight.binding(),
            bias: Some(bias.binding()),
            out: out.clone().binding(),
            accumulate: false,
        };
        let prologue = NormPrologue {
            inv_rms: inv_rms.binding(),
            gamma: gamma.binding(),
        };
        launch_wgmma(client, operands, Some(prologue), None, elem, &shape, &knobs)
    });
    match launched {
        Ok(()) => Some(out),
        Err(e) => {
            log::warn!("conv3d_channels_last_normed: {knobs} refused for {shape:?}: {e}");
            None
        }
    }
}
