//! The channels-first backward kernel over the channel axis of dense `[B, C, S]`: every launch
//! shape against the row backward on the same values laid out as rows, and its refusals.

use burn::tensor::DType;
use rmsnorm_silu_kernels::{Activation, NormParams};

use crate::common::*;

/// Every cached launch shape of the channels-first backward, with and without prefetch, gives
/// the row backward's dx and dgamma (on the same values laid out as rows), from NaN-poisoned
/// outputs, for C and S that do not divide the tile (split in two tests by problem, so that
/// a parallel suite runs them side by side); `fast_math` off CUDA is refused.
#[test]
fn every_channels_backward_config_matches_the_row_backward() {
    channels_backward_configs(&[(2, 3, 35), (1, 96, 64), (2, 130, 17)]);
}

/// [`every_channels_backward_config_matches_the_row_backward`] on more tiles than the CPU
/// runtime's 64 cubes and on a narrow shape above C = 128; prefetch with 2-byte vectors is refused.
#[test]
fn every_channels_backward_config_on_many_tiles_and_wide_rows() {
    // (3, 5, 200): more tiles than the CPU runtime's 64 cubes for the prefetch configurations,
    // so a cube walks several (the prefetch's steady state and its last tile). (1, 192, 40): on
    // a GPU the default takes vectors of 4 positions, 12 channels a unit, 4 position units, one
    // tile per cube (`p4.g16.k12.v4`).
    channels_backward_configs(&[(3, 5, 200), (1, 192, 40)]);
    prefetch_of_two_byte_vectors_is_refused();
}

/// The most channels a unit of a sampled launch shape keeps on a GPU (see
/// [`channels_backward_configs`]).
const GPU_CHANNELS_PER_UNIT: usize = 48;

/// The channels-first backward of `problems` (`[batches, C, S]`) on the device's default launch
/// shape and on a sample of launch shapes of every kind, against the row backward.
fn channels_backward_configs(problems: &[(usize, usize, usize)]) {
    use crate::backward::{GradientBuffers, RowGradients, fused_gradients_with};
    use crate::kernel_knobs::cube_device;
    use rmsnorm_silu_kernels::backward::BackwardKnobs;
    use rmsnorm_silu_kernels::channels::ChannelsConfig;
    let device = cube_device();
    let client = device.client();
    let mut rng = rng("channels_backward_configs");
    let norm = NormParams::rms(1e-5);
    let dtype = DType::F32;
    let max_units = client.properties().hardware.max_units_per_cube;
    // Launch shapes of every kind: (position units, channel groups), the last as the GPU
    // default above (2 position units of a 6-channel group, widest vectors).
    let shapes = [
        (1u32, 1u32),
        (2, 1),
        (1, 2),
        (4, 2),
        (2, 8),
        (8, 4),
        (2, 32),
    ];
    // Every case compiles its kernels: on a GPU a seeded sample covering every problem, launch
    // shape, vector cap, prefetch and tile mode, of the cases whose units keep at most
    // `GPU_CHANNELS_PER_UNIT` channels (a unit's channels are unrolled: NVRTC takes minutes over
    // one unit of 192; the wide units run on the CPU runtime and as each problem's default).
    let case_key = |p: usize, k: usize| {
        let (pu, cg) = shapes[k];
        format!(
            "P{p} p{pu}x{cg} v{} pf{} one{}",
            [0, 2, 1][k % 3],
            k % 2 == 1,
            k % 4 < 2
        )
    };
    let keep = sampled_keys(
        (0..problems.len())
            .flat_map(|p| (0..shapes.len()).map(move |k| (p, k)))
            .filter(|&(p, k)| {
                !on_gpu() || problems[p].1.div_ceil(shapes[k].1 as usize) <= GPU_CHANNELS_PER_UNIT
            })
            .map(|(p, k)| case_key(p, k))
            .collect(),
        8,
    );
    for (p, &(batches, channels, positions)) in problems.iter().enumerate() {
        let n = batches * channels * positions;
        let x = round_to(&uniform(&mut rng, n, -3.0, 3.0), dtype);
        let dy = round_to(&uniform(&mut rng, n, -1.0, 1.0), dtype);
        let gamma = round_to(&uniform(&mut rng, channels, 0.5, 1.5), dtype);
        // [B, C, S] -> rows [B S, C], and back.
        let to_rows = |v: &[f64]| {
            let mut r = vec![0.0; n];
            for b in 0..batches {
                for c in 0..channels {
                    for s in 0..positions {
                        r[(b * positions + s) * channels + c] =
                            v[(b * channels + c) * positions + s];
                    }
                }
            }
            r
        };
        let rows = batches * positions;
        let (want_dx, want_dgamma) = fused_gradients_with(
            RowGradients::new(&to_rows(&x), &gamma, &to_rows(&dy), [rows, channels], dtype),
            norm,
            Activation::Silu,
            BackwardKnobs::for_shape(&client, channels, rows),
        )
        .expect("row backward");
        // The device's default launch shape for this shape first (refused where C is too
        // wide for its register cache: the caller then takes composed ops).
        let shape = vec![batches, channels, positions];
        let b = GradientBuffers::upload(&x, &gamma, &dy, shape.clone(), dtype, &device);
        match backward_into(&b, dtype, [batches, channels, positions], norm, None) {
            Ok(()) => {
                let (dx, dgamma) = b.gradients();
                let label = format!("{shape:?} default");
                assert_close(&to_rows(&dx), &want_dx, 1e-5, 1e-4, &label);
                assert_close(&dgamma, &want_dgamma, 1e-5, 1e-4, &label);
            }
            Err(e) => assert!(e.to_string().contains("register cache"), "{shape:?}: {e}"),
        }
        // Then the launch shapes.
        for (k, (position_units, channel_groups)) in shapes
            .into_iter()
            .filter(|(p, g)| p * g <= max_units)
            .enumerate()
        {
            if !keep.contains(&case_key(p, k)) {
                continue;
            }
            let cfg = ChannelsConfig {
                position_units,
                channel_groups,
                channels_per_unit: channels.div_ceil(channel_groups as usize),
                max_vector: [0, 2, 1][k % 3],
                plane_groups: 1,
                prefetch: k % 2 == 1,
                bf16_input: false,
                single_tile: k % 4 < 2,
                activation: Activation::Silu,
                fast_math: false,
            };
            let b = GradientBuffers::upload(&x, &gamma, &dy, shape.clone(), dtype, &device);
            let launch = |cfg: ChannelsConfig| {
                backward_into(&b, dtype, [batches, channels, positions], norm, Some(cfg))
            };
            launch(cfg).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
            if !on_gpu() {
                let err = launch(ChannelsConfig {
                    fast_math: true,
                    ..cfg
                })
                .expect_err("fast_math off CUDA must be refused")
                .to_string();
                assert!(err.contains("needs a CUDA device"), "{err}");
            }
            let label = format!("{shape:?} {cfg:?}");
            let (dx, dgamma) = b.gradients();
            assert_close(&to_rows(&dx), &want_dx, 1e-5, 1e-4, &label);
            assert_close(&dgamma, &want_dgamma, 1e-5, 1e-4, &label);
        }
    }
}

/// Prefetch loads 32-bit words: 2-byte vectors (bf16, one position) are refused.
fn prefetch_of_two_byte_vectors_is_refused() {
    use crate::backward::GradientBuffers;
    use rmsnorm_silu_kernels::channels::ChannelsConfig;
    let device = crate::kernel_knobs::cube_device();
    let norm = NormParams::rms(1e-5);
    let (channels, positions) = (4usize, 6usize);
    let ones = vec![1.0; channels * positions];
    let b = GradientBuffers::upload(
        &ones,
        &ones[..channels],
        &ones,
        vec![1, channels, positions],
        DType::BF16,
        &device,
    );
    let err = backward_into(
        &b,
        DType::BF16,
        [1, channels, positions],
        norm,
        Some(ChannelsConfig {
            position_units: 2,
            channel_groups: 1,
            channels_per_unit: channels,
            max_vector: 1,
            plane_groups: 1,
            prefetch: true,
            bf16_input: false,
            single_tile: true,
            activation: Activation::Silu,
            fast_math: false,
        }),
    )
    .expect_err("prefetch with 2-byte vectors must be refused")
    .to_string();
    assert!(err.contains("prefetch loads 32-bit words"), "{err}");
}

/// The channels-first backward (SiLU) over `b`'s `[batches, C, S]` buffers of `dtype`, with
/// `config` or (`None`) the device's default launch shape.
fn backward_into(
    b: &crate::backward::GradientBuffers,
    dtype: DType,
    [batches, channels, positions]: [usize; 3],
    norm: NormParams,
    config: Option<rmsnorm_silu_kernels::channels::ChannelsConfig>,
) -> Result<(), rmsnorm_silu_kernels::KernelError> {
    rmsnorm_silu_kernels::channels::launch_channels_backward(
        &b.x.client,
        b.operands(dtype),
        rmsnorm_silu_kernels::channels::ChannelsProblem::dense(batches, channels, positions),
        norm,
        Activation::Silu,
        config,
    )
}
