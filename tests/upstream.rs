//! Burn's own matmul, alone, for compute-sanitizer: whether initcheck's reports in cubek's
//! `matmul_entry_*` kernels (seen in the attention and convolution tests) come from cubek
//! itself. Inputs are uploaded whole (`Tensor::from_data`), so every byte the op may read was
//! written; the result is checked against a host product.
//!
//! `#[ignore]`: a probe for GPUs (`--ignored upstream`).

use burn::tensor::{DType, Tensor};

use crate::common::{assert_close, device, rng, round_to, tensor, uniform, values};

#[test]
#[ignore = "probe: run on a GPU under compute-sanitizer --tool initcheck"]
fn burn_matmul_of_uploaded_tensors() {
    let device = device();
    let mut rng = rng("burn_matmul_of_uploaded_tensors");
    for dtype in [DType::F32, DType::BF16] {
        for (m, k, n) in [(33, 40, 24), (128, 96, 64), (7, 5, 3)] {
            let a = round_to(&uniform(&mut rng, m * k, -1.0, 1.0), dtype);
            let b = round_to(&uniform(&mut rng, k * n, -1.0, 1.0), dtype);
            let mut want = vec![0.0; m * n];
            for i in 0..m {
                for j in 0..n {
                    want[i * n + j] = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
                }
            }
            let c: Tensor<2> =
                tensor(&a, [m, k], dtype, &device).matmul(tensor(&b, [k, n], dtype, &device));
            // Burn's f32 matmul runs on tensor cores in TF32 on CUDA (10-bit mantissa inputs).
            let tol = if dtype == DType::F32 { 1e-2 } else { 5e-2 };
            assert_close(
                &values(c),
                &want,
                tol,
                tol,
                &format!("{dtype:?} {m}x{k}x{n}"),
            );
        }
    }
}
