//! `single_head_attention` against an f64 host attention: one position, odd lengths, the Wan
//! middle block's 384-wide head, a batch of frames, and q, k, v as channel slices of one
//! tensor (as the decoder takes them from its qkv convolution). On CUDA this runs cubek's flash
//! attention on f16 tiles (or the unfused fallback where flash refuses the shape), on the CPU
//! runtime the unfused attention. The query-chunked routine runs its tensor-core products on
//! CUDA and the same products on cubek's unit routine elsewhere.

use burn::tensor::{DType, s};
use burn_rmsnorm_silu::{AttentionRoutine, single_head_attention, single_head_attention_with};

use crate::common::*;

/// `softmax(q k^T / sqrt(D)) v` per batch entry, for `[B, S, D]` values.
fn reference(q: &[f64], k: &[f64], v: &[f64], [b, s, d]: [usize; 3]) -> Vec<f64> {
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0; b * s * d];
    for n in 0..b {
        let at = |t: &[f64], i: usize, c: usize| t[(n * s + i) * d + c];
        for i in 0..s {
            let scores: Vec<f64> = (0..s)
                .map(|j| (0..d).map(|c| at(q, i, c) * at(k, j, c)).sum::<f64>() * scale)
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
            let sum: f64 = weights.iter().sum();
            for c in 0..d {
                let acc: f64 = (0..s).map(|j| weights[j] * at(v, j, c)).sum();
                out[(n * s + i) * d + c] = acc / sum;
            }
        }
    }
    out
}

/// The relative error allowed: the CUDA path computes on f16 tiles whatever the input dtype.
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 if !on_gpu() => 1e-4,
        DType::F32 | DType::F16 => 4e-3,
        _ => 2e-2,
    }
}

#[test]
fn matches_the_host_attention() {
    let device = device();
    let mut rng = rng("attention::matches_the_host_attention");
    let mut failures = Vec::new();
    // (batch, positions, head width, dtype)
    let cases = [
        (1, 1, 8, DType::F32),
        (1, 37, 24, DType::F32),
        (2, 45, 40, DType::F32),
        (1, 96, 384, DType::BF16),
        (1, 130, 64, DType::F16),
    ];
    for (b, s, d, dtype) in cases {
        let n = b * s * d;
        // Scores of a few units, as after the decoder's norm: softmax is neither flat nor one-hot.
        let [q, k, v] = [(); 3].map(|_| round_to(&randn(&mut rng, n), dtype));
        let want = reference(&q, &k, &v, [b, s, d]);
        let label = format!("b {b} s {s} d {d} {dtype:?}");
        record_failure(&mut failures, &label, || {
            let [qt, kt, vt] = [&q, &k, &v].map(|t| tensor(t, [b, 1, s, d], dtype, &device));
            let got = single_head_attention(qt, kt, vt);
            assert_eq!(got.dims(), [b, 1, s, d], "{label}: output shape");
            assert_eq!(got.dtype(), dtype, "{label}: output dtype");
            assert_close_to_scale(&values(got), &want, tolerance(dtype), &label);
        });
    }
    assert_no_failures(&failures);
}

#[test]
fn reads_q_k_v_as_channel_slices() {
    let device = device();
    let mut rng = rng("attention::reads_q_k_v_as_channel_slices");
    let (s, d, dtype) = (53, 48, DType::F32);
    let qkv = round_to(&randn(&mut rng, s * 3 * d), dtype);
    let part = |p: usize| -> Vec<f64> {
        (0..s)
            .flat_map(|i| qkv[i * 3 * d + p * d..i * 3 * d + (p + 1) * d].to_vec())
            .collect()
    };
    let want = reference(&part(0), &part(1), &part(2), [1, s, d]);
    let packed = tensor(&qkv, [1, 1, s, 3 * d], dtype, &device);
    let got = single_head_attention(
        packed.clone().slice(s![.., .., .., 0..d]),
        packed.clone().slice(s![.., .., .., d..2 * d]),
        packed.slice(s![.., .., .., 2 * d..3 * d]),
    );
    assert_close_to_scale(&values(got), &want, tolerance(dtype), "channel slices");
}

#[test]
fn mismatched_shapes_are_refused_by_name() {
    let device = device();
    let a = tensor(&[0.0; 12], [1, 1, 3, 4], DType::F32, &device);
    let b = tensor(&[0.0; 8], [1, 1, 2, 4], DType::F32, &device);
    let message = panic_message(|| {
        single_head_attention(a.clone(), b, a.clone());
    });
    assert!(
        message.contains("q, k and v must have the same shape"),
        "unexpected message: {message}"
    );
}

/// The query rows in chunks (`AttentionRoutine::QueryChunks`): chunks that divide the rows and
/// chunks that do not, one row a chunk, a budget over all rows, the 384-wide bf16 head.
#[test]
fn query_chunks_match_the_host_attention() {
    let device = device();
    let mut rng = rng("attention::query_chunks_match_the_host_attention");
    let mut failures = Vec::new();
    // (batch, positions, head width, dtype, rows per chunk)
    let cases = [
        (1, 37, 24, DType::F32, 10),
        (2, 45, 40, DType::F32, 9),
        (1, 5, 8, DType::F32, 1),
        (1, 20, 16, DType::F32, 64),
        (1, 96, 384, DType::BF16, 40),
    ];
    for (b, s, d, dtype, rows) in cases {
        let n = b * s * d;
        let [q, k, v] = [(); 3].map(|_| round_to(&randn(&mut rng, n), dtype));
        let want = reference(&q, &k, &v, [b, s, d]);
        let label = format!("b {b} s {s} d {d} {dtype:?}, {rows} rows a chunk");
        // Every row is compared: a chunk joined out of place shows as another row's values.
        record_failure(&mut failures, &label, || {
            let [qt, kt, vt] = [&q, &k, &v].map(|t| tensor(t, [b, 1, s, d], dtype, &device));
            let routine = AttentionRoutine::QueryChunks {
                max_score_bytes: rows * b * s * 4,
            };
            let got = single_head_attention_with(qt, kt, vt, routine);
            assert_eq!(got.dims(), [b, 1, s, d], "{label}: output shape");
            assert_eq!(got.dtype(), dtype, "{label}: output dtype");
            assert_close_to_scale(&values(got), &want, tolerance(dtype), &label);
        });
    }
    assert_no_failures(&failures);
}

#[test]
fn a_chunk_budget_below_one_row_is_refused_by_name() {
    let device = device();
    let a = tensor(&[0.0; 24], [1, 1, 6, 4], DType::F32, &device);
    let message = panic_message(|| {
        let routine = AttentionRoutine::QueryChunks {
            max_score_bytes: 23,
        };
        single_head_attention_with(a.clone(), a.clone(), a.clone(), routine);
    });
    assert!(
        message.contains("`max_score_bytes` (23)") && message.contains("24 bytes"),
        "unexpected message: {message}"
    );
}
