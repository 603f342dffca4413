//! Single-head attention (the Wan decoder's middle block): cubek's flash attention on CUDA (the H W x H W
//! score matrix is never stored), or query rows in chunks ([`AttentionRoutine::QueryChunks`]),
//! Burn's `attention` elsewhere.
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
        routine: AttentionRoutine,
    ) -> FloatTensor<Self> {
        let _ = routine;
        Self::attention(q, k, v, None, None, AttentionModuleOptions::default())
    }
}

/// How [`single_head_attention_with`] computes on CubeCL backends (elsewhere Burn's own
/// `attention` runs whatever the routine).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttentionRoutine {
    /// cubek's flash attention on tensor cores (f16 tiles, f32 accumulation); on a device
    /// without planes, or where flash refuses the shape, the scores of all rows at once.
    #[default]
    Flash,
    /// The query rows in chunks whose f32 scores take at most `max_score_bytes` each: per
    /// chunk two matrix products on cubek's default routine (tensor cores where the device has
    /// them; the inputs' dtype, f32 accumulation) around an exact softmax in f32. Only one
    /// chunk's scores exist at a time.
    QueryChunks { max_score_bytes: usize },
}

/// Query rows per chunk for `routine` on `[B, H, S, D]` inputs, `None` for all rows at once.
///
/// # Panics
/// When `max_score_bytes` cannot hold one query row's f32 scores (`B H S 4` bytes).
pub(crate) fn query_rows_per_chunk(routine: AttentionRoutine, dims: [usize; 4]) -> Option<usize> {
    let AttentionRoutine::QueryChunks { max_score_bytes } = routine else {
        return None;
    };
    let [b, h, s, _] = dims;
    let row = b * h * s * 4;
    assert!(
        max_score_bytes >= row,
        "single_head_attention_with: `max_score_bytes` ({max_score_bytes}) must hold one query \
         row's f32 scores ({row} bytes for B = {b}, H = {h}, S = {s})"
    );
    Some(max_score_bytes / row.max(1))
}

impl AttentionBackend for burn::backend::Flex {}

#[cfg(feature = "ndarray")]
impl AttentionBackend for burn::backend::NdArray {}

/// `softmax(q k^T / sqrt(D)) v` for `[B, 1, S, D]` tensors of the same shape.
pub fn single_head_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
    single_head_attention_with(q, k, v, AttentionRoutine::Flash)
}

/// [`single_head_attention`] with a choice of [`AttentionRoutine`].
///
/// # Panics
/// When q, k and v differ in shape, or the chunk budget cannot hold one query row's f32
/// scores (`B H S 4` bytes).
pub fn single_head_attention_with(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    routine: AttentionRoutine,
) -> Tensor<4> {
    assert!(
        q.dims() == k.dims() && k.dims() == v.dims(),
        "single_head_attention: q, k and v must have the same shape, got {:?}, {:?}, {:?}",
        q.dims(),
        k.dims(),
        v.dims()
    );
    query_rows_per_chunk(routine, q.dims());
    Tensor::from_dispatch(<Dispatch as AttentionBackend>::attention_one_head(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        routine,
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

    use super::{AttentionBackend, AttentionRoutine, query_rows_per_chunk};
    use crate::cube::elem_type;

    /// Planes per cube for the flash routine, tried in turn (for one head of 384 channels only
    /// some divide the tile; cubek refuses the others).
    const PLANES: [u8; 4] = [4, 2, 8, 1];

    impl AttentionBackend for CubeBackend {
        fn attention_one_head(
            q: CubeTensor,
            k: CubeTensor,
            v: CubeTensor,
            routine: AttentionRoutine,
        ) -> CubeTensor {
            let dims: [usize; 4] = q.meta.shape().dims();
            if let Some(rows) = query_rows_per_chunk(routine, dims) {
                return chunked_attention(q, k, v, rows);
            }
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
        let kt = CubeBackend::float_swap_dims(k, 2, 3);
        attention_of_rows(q, kt, v)
    }

    /// [`unfused_attention`] over `rows` query rows at a time, the chunks' outputs joined along
    /// the sequence axis.
    fn chunked_attention(q: CubeTensor, k: CubeTensor, v: CubeTensor, rows: usize) -> CubeTensor {
        let s = q.meta.shape()[2];
        if rows >= s {
            return unfused_attention(q, k, v);
        }
        let kt = CubeBackend::float_swap_dims(k, 2, 3);
        let full = burn::tensor::Slice::full();
        let chunks = (0..s)
            .step_by(rows)
            .map(|start| {
                let end = (start + rows).min(s);
                let slices = [full, full, burn::tensor::Slice::from(start..end), full];
                let q_rows = CubeBackend::float_slice(q.clone(), &slices);
                attention_of_rows(q_rows, kt.clone(), v.clone())
            })
            .collect();
        CubeBackend::float_cat(chunks, 2)
    }

    /// `softmax(q k^T / sqrt(D)) v` for the query rows `q` against all keys (`kt` = k
    /// transposed), the scores in f32.
    fn attention_of_rows(q: CubeTensor, kt: CubeTensor, v: CubeTensor) -> CubeTensor {
        let dtype = q.dtype;
        let head_dim = q.meta.shape()[3];
        let scores = product(q, kt, DType::F32);
        let scores = CubeBackend::float_mul_scalar(scores, (1.0 / (head_dim as f64).sqrt()).into());
        let max = CubeBackend::float_max_dim(scores.clone(), 3);
        let weights = CubeBackend::float_exp(CubeBackend::float_sub(scores, max));
        let sum = CubeBackend::float_sum_dim(weights.clone(), 3);
        // The normalisation after the second product: `D` values a row instead of `S`.
        let unnormalised = product(cast(weights, dtype), v, DType::F32);
        cast(CubeBackend::float_div(unnormalised, sum), dtype)
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
