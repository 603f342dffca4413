//! Property tests (proptest, shrinking) on the test device: random rank 1-5, C 1-4096, rows
//! 0-10^4 (bounded to keep CI fast), dtypes, layouts, eps and norms against the f64
//! reference. `PROPTEST_CASES` raises the case count (default 24).

use burn::tensor::{DType, Tensor};
use burn_rmsnorm_silu::{
    Activation, Norm, RmsNormSiluOptions, rms_norm_silu_dim, rms_norm_silu_with,
};
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::common::*;

#[derive(Clone, Copy, Debug)]
enum Layout {
    LastAxis,
    ChannelsFirst,
    ChannelsLast,
}

#[derive(Clone, Debug)]
struct Case {
    rank: usize,
    channels: usize,
    rows: usize,
    dtype: DType,
    layout: Layout,
    norm: Norm,
    activation: Activation,
    magnitude: f64,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1usize..=5,
        prop_oneof![1usize..=64, 65usize..=4096],
        0usize..=10_000,
        prop_oneof![Just(DType::F32), Just(DType::BF16), Just(DType::F16)],
        prop_oneof![
            Just(Layout::LastAxis),
            Just(Layout::ChannelsFirst),
            Just(Layout::ChannelsLast)
        ],
        prop_oneof![
            Just(Norm::Rms { eps: 1e-6 }),
            Just(Norm::Rms { eps: 1e-2 }),
            Just(Norm::Rms { eps: 0.0 }),
            Just(Norm::WAN)
        ],
        prop_oneof![Just(Activation::Silu), Just(Activation::Identity)],
        prop_oneof![Just(1e-3), Just(1.0), Just(100.0)],
        any::<u64>(),
    )
        .prop_map(
            |(rank, channels, rows, dtype, layout, norm, activation, magnitude, seed)| {
                // Bound the work: at most ~2e5 elements per case; one row for rank 1.
                let rows = if rank == 1 {
                    1
                } else {
                    rows.min(200_000 / channels)
                };
                let layout = if rank < 3 { Layout::LastAxis } else { layout };
                Case {
                    rank,
                    channels,
                    rows,
                    dtype,
                    layout,
                    norm,
                    activation,
                    magnitude,
                    seed,
                }
            },
        )
}

/// The logical shape: C at axis 1 for the channel layouts (rows split as [rows, C, 1, ...]),
/// else last.
fn shape(c: &Case) -> Vec<usize> {
    let mut s = vec![1; c.rank];
    match c.layout {
        Layout::LastAxis => {
            s[c.rank - 1] = c.channels;
            if c.rank > 1 {
                s[0] = c.rows;
            }
        }
        Layout::ChannelsFirst | Layout::ChannelsLast => {
            s[1] = c.channels;
            s[c.rank - 1] = c.rows;
        }
    }
    s
}

fn run<const D: usize>(c: &Case) {
    let device = device();
    let dims: [usize; D] = shape(c).try_into().unwrap();
    let n: usize = dims.iter().product();
    let mut rng = StdRng::seed_from_u64(c.seed);
    let x: Vec<f64> = randn(&mut rng, n).iter().map(|v| v * c.magnitude).collect();
    let x = round_to(&x, c.dtype);
    let gamma = round_to(&uniform(&mut rng, c.channels, 0.5, 2.0), DType::F32);
    let options = RmsNormSiluOptions {
        norm: c.norm,
        activation: c.activation,
        dim: None,
    };
    let gt = tensor(&gamma, [c.channels], DType::F32, &device);
    let (got, dim) = match c.layout {
        Layout::LastAxis => (
            values(rms_norm_silu_with(
                tensor(&x, dims, c.dtype, &device),
                gt,
                options,
            )),
            D - 1,
        ),
        Layout::ChannelsFirst => (
            values(rms_norm_silu_dim(
                tensor(&x, dims, c.dtype, &device),
                gt,
                1,
                options,
            )),
            1,
        ),
        Layout::ChannelsLast => {
            // Same logical tensor, channels-last memory: build [.., C] and move C to axis 1.
            let mut perm: Vec<usize> = (0..D).collect();
            perm.remove(1);
            perm.push(1);
            let last_dims: [usize; D] = perm
                .iter()
                .map(|&a| dims[a])
                .collect::<Vec<_>>()
                .try_into()
                .unwrap();
            let mut inverse = [0usize; D];
            for (i, &a) in perm.iter().enumerate() {
                inverse[a] = i;
            }
            let logical =
                Tensor::<D>::from_data(data(&x, dims.to_vec(), c.dtype), (&device, c.dtype));
            let moved = logical.permute(perm.clone().try_into().unwrap());
            let channels_last = Tensor::<D>::from_data(moved.into_data(), (&device, c.dtype));
            assert_eq!(channels_last.dims(), last_dims);
            let view = channels_last.permute(inverse);
            (values(rms_norm_silu_dim(view, gt, 1, options)), 1)
        }
    };
    // Reference over `dim` of the logical values.
    let outer: usize = dims[..dim].iter().product();
    let inner: usize = dims[dim + 1..].iter().product();
    let mut want = vec![0.0; n];
    for o in 0..outer {
        for i in 0..inner {
            let at = |ch: usize| (o * c.channels + ch) * inner + i;
            let row: Vec<f64> = (0..c.channels).map(|ch| x[at(ch)]).collect();
            let y = reference(&row, &gamma, c.norm.params(c.channels), c.activation);
            for ch in 0..c.channels {
                want[at(ch)] = y[ch];
            }
        }
    }
    let tol = match c.dtype {
        DType::F32 => 1e-5,
        DType::F16 => 2e-3,
        _ => 2e-2,
    };
    assert_close(&got, &want, tol * 0.1, tol, &format!("{c:?}"));
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn matches_the_reference(c in case()) {
        match c.rank {
            1 => run::<1>(&c),
            2 => run::<2>(&c),
            3 => run::<3>(&c),
            4 => run::<4>(&c),
            _ => run::<5>(&c),
        }
    }
}
