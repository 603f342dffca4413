use super::*;

/// The public API: a `QFloat` NVFP4 tensor whose Burn `dequantize()` equals the host decoder
/// applied to the kernel's own bytes (from the parts API), on the CubeCL device.
#[test]
fn nvfp4_api_returns_a_quantized_tensor_burn_dequantizes() {
    for device in [device(), device().autodiff()] {
        nvfp4_api_on(&device);
    }
}

fn nvfp4_api_on(device: &burn::tensor::Device) {
    let device = device.clone();
    let mut rng = rng("nvfp4_api");
    let (rows, channels) = (6, 64);
    let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::BF16);
    let xt = tensor(&x, [2, 3, channels], DType::BF16, &device);
    let gt = tensor(&gamma, [channels], DType::BF16, &device);
    for scaling in [
        Nvfp4Scaling::TensorAmax(3.0),
        Nvfp4Scaling::GlobalScale(10.0),
        Nvfp4Scaling::Cudnn,
    ] {
        let q = rms_norm_silu_nvfp4(xt.clone(), gt.clone(), eps, scaling);
        assert!(
            matches!(q.dtype(), DType::QFloat(_)),
            "dtype {:?}",
            q.dtype()
        );
        assert_eq!(q.dims(), [2, 3, channels]);
        let deq = values(q.dequantize());
        let parts = rms_norm_silu_nvfp4_parts(
            xt.clone(),
            gt.clone(),
            RmsNormSiluOptions::rms(eps),
            scaling,
            ScaleLayout::RowMajor,
        );
        assert_eq!(parts.values.dims(), [rows, channels / 2]);
        assert_eq!(parts.scales.dims(), [rows * channels / 16]);
        let codes: Vec<u8> = bytes(parts.values);
        let scales: Vec<u8> = bytes(parts.scales);
        let global = parts.global_scale;
        for (b, want_block) in codes.chunks_exact(8).enumerate() {
            let block = Fp4Block {
                packed: want_block.try_into().unwrap(),
                scale: scales[b],
            };
            let want = nvfp4_dequantize(&block, Nvfp4Recipe::Cudnn);
            for (i, w) in want.iter().enumerate() {
                let w = (*w * global) as f64;
                let got = deq[b * 16 + i];
                assert!(
                    (got - w).abs() <= 1e-6 * w.abs(),
                    "{scaling:?} element {}: Burn {got} vs host {w}",
                    b * 16 + i
                );
            }
        }
    }
}

fn bytes<const D: usize>(t: Tensor<D, burn::tensor::Int>) -> Vec<u8> {
    t.into_data()
        .iter::<i64>()
        .map(|v| u8::try_from(v).expect("a byte"))
        .collect()
}

#[test]
#[should_panic(expected = "must be a multiple of 16")]
fn nvfp4_needs_c_a_multiple_of_16() {
    let device = device();
    let x = Tensor::<2>::ones([2, 40], &device);
    let g = Tensor::<1>::ones([40], &device);
    let _ = rms_norm_silu_nvfp4(x, g, 1e-6, Nvfp4Scaling::Cudnn);
}

#[test]
#[should_panic(expected = "GlobalScale must be finite and > 0")]
fn nvfp4_global_scale_must_be_positive() {
    let device = device();
    let x = Tensor::<2>::ones([2, 32], &device);
    let g = Tensor::<1>::ones([32], &device);
    let _ = rms_norm_silu_nvfp4(x, g, 1e-6, Nvfp4Scaling::GlobalScale(0.0));
}

#[test]
#[should_panic(expected = "TensorAmax must be finite and >= 0")]
fn nvfp4_tensor_amax_must_be_finite() {
    let device = device();
    let x = Tensor::<2>::ones([2, 32], &device);
    let g = Tensor::<1>::ones([32], &device);
    let _ = rms_norm_silu_nvfp4(x, g, 1e-6, Nvfp4Scaling::TensorAmax(f32::NAN));
}

#[test]
#[should_panic(expected = "NVFP4 output needs a CubeCL backend")]
fn nvfp4_on_a_backend_without_the_kernel_is_refused() {
    let device = burn::tensor::Device::flex();
    let x = Tensor::<2>::ones([2, 32], &device);
    let g = Tensor::<1>::ones([32], &device);
    let _ = rms_norm_silu_nvfp4(x, g, 1e-6, Nvfp4Scaling::Cudnn);
}
