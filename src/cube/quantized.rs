//! FP8 and NVFP4 outputs on CubeCL backends: the quantised tensor or its parts from one launch.

use super::*;

/// Where the FP8 quantisation scale `s` of `q = sat(y * s)` lives.
pub enum KernelScale {
    /// A host value, passed to the kernel as a parameter.
    Host(f32),
    /// The first f32 of a device buffer, read by the kernel (delayed scaling).
    Device(Handle),
}

/// The row kernel writing FP8 E4M3 codes straight into a new quantised tensor's value buffer;
/// the tensor's per-tensor scale word is set to `1 / scale` on the device (by a one-word write
/// for a host scale, by the kernel itself for a device scale).
pub fn forward_fp8(
    x: CubeTensor,
    gamma: CubeTensor,
    norm: NormParams,
    activation: Activation,
    scale: KernelScale,
    amax: Option<Handle>,
) -> CubeTensor {
    let shape = x.shape();
    let rows = RowInputs::new(x, gamma);
    let (q, values, scales) = empty_quantized(shape, crate::formats::fp8_scheme(), &rows);
    let client = rows.x.client.clone();
    let target = match scale {
        KernelScale::Host(scale) => {
            write_f32(&client, scales.handle.clone(), 1.0 / scale);
            OutputTarget::fp8(values.handle.clone(), scale, amax)
        }
        KernelScale::Device(scale) => {
            let scale = DeviceScale {
                scale,
                decode: scales.handle.clone(),
            };
            OutputTarget::fp8_device_scale(values.handle.clone(), scale, amax)
        }
    };
    if rows.problem.rows == 0 {
        target.write_empty(&client);
        return q;
    }
    rows.launch(target, &values, norm, activation, "rms_norm_silu_fp8");
    q
}

/// [`forward_fp8`] that also returns `max |y|` as a new one-element f32 tensor.
pub fn forward_fp8_amax(
    x: CubeTensor,
    gamma: CubeTensor,
    norm: NormParams,
    activation: Activation,
    scale: KernelScale,
) -> (CubeTensor, CubeTensor) {
    let amax = empty_device_contiguous_dtype(
        x.client.clone(),
        x.device.clone(),
        burn::tensor::Shape::new([1]),
        DType::F32,
    );
    let q = forward_fp8(x, gamma, norm, activation, scale, Some(amax.handle.clone()));
    (q, amax)
}

/// A new dense quantised tensor of `shape` on `rows`' device, with its values and block (or
/// per-tensor) scales as raw tensors for a kernel to write.
pub(crate) fn empty_quantized(
    shape: burn::tensor::Shape,
    scheme: burn::tensor::quantization::QuantScheme,
    rows: &RowInputs,
) -> (CubeTensor, CubeTensor, CubeTensor) {
    let q = empty_qtensor(
        shape,
        scheme,
        &rows.x.device,
        MemoryLayoutStrategy::Contiguous,
    );
    let (values, scales) = q
        .quantized_handles()
        .expect("a quantised tensor has handles");
    (q, values, scales)
}

/// How the NVFP4 kernel gets TransformerEngine's global encode scale, or that it has none.
pub enum Fp4Scale {
    /// `recipe` with a host `s_enc` (ignored by cuDNN's recipe).
    Host { recipe: Fp4Recipe, s_enc: f32 },
    /// TransformerEngine's recipe with `s_enc = 448 * 6 / amax` from the tensor amax in the
    /// first f32 of this device buffer.
    DeviceAmax(Handle),
}

/// The NVFP4 kernel writing into a new quantised tensor's values and block scales; its
/// per-tensor scale word is the decode scale (`1 / s_enc`, or 1 for cuDNN's recipe: written
/// from the host, or by the kernel for a device amax).
pub fn forward_nvfp4(
    x: CubeTensor,
    gamma: CubeTensor,
    norm: NormParams,
    activation: Activation,
    scale: Fp4Scale,
) -> CubeTensor {
    let shape = x.shape();
    let rows = RowInputs::new(x, gamma);
    let (q, values, scales) = empty_quantized(shape, crate::formats::nvfp4_scheme(), &rows);
    let global = q.global().expect("NVFP4 has a per-tensor scale");
    let (recipe, s_enc, device_amax) = match scale {
        Fp4Scale::Host { recipe, s_enc } => {
            let decode = match recipe {
                Fp4Recipe::Cudnn => 1.0,
                Fp4Recipe::TransformerEngine => 1.0 / s_enc,
            };
            write_f32(&rows.x.client, global.handle.clone(), decode);
            (recipe, s_enc, None)
        }
        Fp4Scale::DeviceAmax(amax) => {
            let decode = global.handle.clone();
            let device = DeviceAmax { amax, decode };
            (Fp4Recipe::TransformerEngine, 1.0, Some(device))
        }
    };
    let target = Fp4Target {
        codes: values.handle.clone(),
        scales: scales.handle.clone(),
        recipe,
        layout: ScaleLayout::RowMajor,
        s_enc,
        device_amax,
    };
    rows.launch_nvfp4(target, norm, activation);
    q
}

/// The NVFP4 kernel writing raw parts: values `[rows, C / 2]` u8 and scales in `layout` (u8).
pub fn forward_nvfp4_parts(
    x: CubeTensor,
    gamma: CubeTensor,
    norm: NormParams,
    activation: Activation,
    recipe: Fp4Recipe,
    s_enc: f32,
    layout: ScaleLayout,
) -> (CubeTensor, CubeTensor) {
    let shape = x.shape();
    let (values_shape, scales_shape) = crate::formats::nvfp4_parts_shapes(shape.as_slice(), layout);
    let rows = RowInputs::new(x, gamma);
    let (client, device) = (rows.x.client.clone(), rows.x.device.clone());
    let values = empty_device_contiguous_dtype(
        client.clone(),
        device.clone(),
        burn::tensor::Shape::new(values_shape),
        DType::U8,
    );
    let scales = empty_device_contiguous_dtype(
        client,
        device,
        burn::tensor::Shape::new(scales_shape),
        DType::U8,
    );
    let target = Fp4Target {
        codes: values.handle.clone(),
        scales: scales.handle.clone(),
        recipe,
        layout,
        s_enc,
        device_amax: None,
    };
    rows.launch_nvfp4(target, norm, activation);
    (values, scales)
}
