//! Single-head attention (the Wan decoder's middle block): cubek's flash attention on CUDA (the H W x H W
//! score matrix is never stored), Burn's `attention` elsewhere.
//!
//! Burn runs its flash kernels only through its autotune; without Burn's autotune (the GPU
//! build) its default is the unfused fallback, so CubeCL backends call the flash routine
//! directly here. Its tiles are f16 (other inputs are converted to f16 first), with f32
//! accumulation. Where it refuses a shape, or the device has no planes (the CPU runtime), an
//! unfused attention with named matmul routines runs instead.

#![allow(deprecated)]

use burn::backend::{Backend, Dispatch, backend_extension, tensor::FloatTensor};
use burn::tensor::Tensor;
use burn::tensor::ops::AttentionModuleOptions;

/// Backends that run [`single_head_attention`]; the default body is Burn's own `attention`.
#[backend_extension(
    Cube: cfg(any(feature = "cuda", feature = "cpu")),
    Fusion,
    Flex,
    NdArray: cfg(feature = "ndarray")
)]
pub trait AttentionBackend: Backend {
    #[fusion(dtype = q, shape = q)]
    fn attention_one_head(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        Self::attention(q, k, v, None, None, AttentionModuleOptions::default())
    }
}

impl AttentionBackend for burn::backend::Flex {}

#[cfg(feature = "ndarray")]
impl AttentionBackend for burn::backend::NdArray {}

/// `softmax(q k^T / sqrt(D)) v` for `[B, 1, S, D]` tensors of the same shape.
pub fn single_head_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
    assert!(
        q.dims() == k.dims() && k.dims() == v.dims(),
        "single_head_attention: q, k and v must have the same shape, got {:?}, {:?}, {:?}",
        q.dims(),
        k.dims(),
        v.dims()
    );
    Tensor::from_dispatch(<Dispatch as AttentionBackend>::attention_one_head(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
    ))
}

#[cfg(any(feature = "cuda", feature = "cpu"))]
mod cube {
    use burn::backend::ops::FloatTensorOps;
    use burn::tensor::DType;
    use burn::tensor::ops::AttentionModuleOptions;
    use burn_cubecl::CubeBackend;
    use burn_cubecl::kernel::attention::flash_attention;
    use burn_cubecl::kernel::cast;
    use burn_cubecl::kernel::into_contiguous;
    use burn_cubecl::kernel::matmul::{MatmulStrategy, init_matmul_output, matmul};
    use burn_cubecl::tensor::CubeTensor;
    use rmsnorm_silu_kernels::cubek::attention::forward::launch::{BlueprintStrategy, Strategy};
    use rmsnorm_silu_kernels::cubek::attention::forward::routines::blackbox_accelerated::BlackboxAcceleratedStrategy;
    use rmsnorm_silu_kernels::cubek::matmul::definition::{MatmulElems, MatmulGlobalElems};
    use rmsnorm_silu_kernels::cubek::matmul::launch::launch_ref;
    use rmsnorm_silu_kernels::cubek::matmul::{multi_level, strategy::Strategy as MatmulRoutine};
    use rmsnorm_silu_kernels::cubek::std::InputBinding;

    use super::AttentionBackend;
    use crate::cube::elem_type;

    /// Planes per cube for the flash routine, tried in turn (for one head of 384 channels only
    /// some divide the tile; cubek refuses the others).
    const PLANES: [u8; 4] = [4, 2, 8, 1];

    impl AttentionBackend for CubeBackend {
        fn attention_one_head(q: CubeTensor, k: CubeTensor, v: CubeTensor) -> CubeTensor {
            let options = AttentionModuleOptions::default();
            if q.client.properties().hardware.plane_size_max >= 32 {
                // The routine's tiles are f16 and it has no stage that converts the inputs
                // (bf16 in is refused), so the inputs are converted here and the output back
                // (`cast` returns a tensor already of the dtype as it is).
                let dtype = q.dtype;
                let [q16, k16, v16] = [&q, &k, &v].map(|t| cast(t.clone(), DType::F16));
                let mut refusals = Vec::new();
                for num_planes in PLANES {
                    let strategy = Strategy::BlackboxAccelerated(BlueprintStrategy::Inferred(
                        BlackboxAcceleratedStrategy {
                            num_planes,
                            seq_q: 1,
                            seq_kv: 1,
                        },
                    ));
                    let flash = flash_attention(
                        q16.clone(),
                        k16.clone(),
                        v16.clone(),
                        None,
                        None,
                        options,
                        strategy,
                    );
                    match flash {
                        Ok(out) => return cast(out, dtype),
                        Err(e) => refusals.push(format!("{num_planes} planes: {e:?}")),
                    }
                }
                log::warn!(
                    "flash attention refused for q {:?} ({}); unfused attention",
                    q.meta.shape(),
                    refusals.join("; ")
                );
            }
            unfused_attention(q, k, v)
        }
    }

    /// `softmax(q k^T / sqrt(D)) v` in separate kernels, the scores in f32. The two products
    /// name cubek's default matmul routine (plane tensor cores where the device has them, unit
    /// products elsewhere) instead of going through `float_matmul`, whose autotune tries TMA
    /// candidates whose tensor maps a 384-wide head dimension breaks (a launch error that
    /// poisons every later launch on the stream).
    fn unfused_attention(q: CubeTensor, k: CubeTensor, v: CubeTensor) -> CubeTensor {
        let dtype = q.dtype;
        let head_dim = q.meta.shape()[3];
        let kt = CubeBackend::float_swap_dims(k, 2, 3);
        let scores = product(q, kt, DType::F32);
        let scores = CubeBackend::float_mul_scalar(scores, (1.0 / (head_dim as f64).sqrt()).into());
        let max = CubeBackend::float_max_dim(scores.clone(), 3);
        let weights = CubeBackend::float_exp(CubeBackend::float_sub(scores, max));
        let sum = CubeBackend::float_sum_dim(weights.clone(), 3);
        let probabilities = cast(CubeBackend::float_div(weights, sum), dtype);
        product(probabilities, v, dtype)
    }

    /// `lhs @ rhs` on cubek's default routine, or its naive one where the default refuses the
    /// device: the default's routine without tensor cores asks for a fixed 45,056 bytes of
    /// shared memory, which the CubeCL CPU runtime (shared memory = the host's L1d, 32 KiB on
    /// some CPUs) does not have.
    fn product(lhs: CubeTensor, rhs: CubeTensor, dtype: DType) -> CubeTensor {
        let refusal = match matmul(lhs.clone(), rhs.clone(), None, MatmulStrategy::Cube, dtype) {
            Ok(out) => return out,
            Err(e) => format!("{e:?}"),
        };
        let [lhs, rhs] = [lhs, rhs].map(into_contiguous);
        let out = init_matmul_output(&lhs, &rhs, dtype);
        let elem = |dtype| elem_type(dtype, "attention: the operands");
        let (lhs_type, rhs_type) = (elem(lhs.dtype), elem(rhs.dtype));
        let mut dtypes = MatmulElems::from_globals(&MatmulGlobalElems {
            lhs: lhs_type,
            rhs: rhs_type,
            out: elem(dtype),
        });
        let client = out.client.clone();
        launch_ref(
            &MatmulRoutine::MultiLevel(multi_level::Strategy::Naive),
            &client,
            InputBinding::new(lhs.binding(), lhs_type),
            InputBinding::new(rhs.binding(), rhs_type),
            out.clone().binding(),
            &mut dtypes,
        )
        .unwrap_or_else(|e| {
            panic!(
                "attention: cubek's default matmul ({refusal}) and its naive one ({e:?}) refused"
            )
        });
        out
    }
}
