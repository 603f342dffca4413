//! NVFP4 output: the kernel's bytes against the host quantiser (`formats::nvfp4_block`) applied
//! to the f64 reference rounded to f32, both recipes, both scale layouts; Burn's own
//! `dequantize()` of the returned `QFloat` tensor against the host decoder; the errors.

use burn::tensor::{DType, Tensor};
use rmsnorm_silu_kernels::LaneReduce;
use rmsnorm_silu_kernels::formats::{
    Fp4Block, Nvfp4Recipe, e4m3_decode, nvfp4_block, nvfp4_dequantize, swizzled_scale_bytes,
    swizzled_scale_offset, te_global_scale,
};
use rmsnorm_silu_kernels::nvfp4::{
    Fp4Knobs, Fp4Recipe, Fp4Target, ScaleLayout, heuristic_fp4_knobs, launch_forward_nvfp4,
};
use rmsnorm_silu_kernels::{Activation, NormParams, RowsProblem};

use burn_rmsnorm_silu::{
    Nvfp4Scaling, RmsNormSiluOptions, rms_norm_silu_nvfp4, rms_norm_silu_nvfp4_parts,
};

use crate::common::*;
use crate::kernel_knobs::{cube_device, elem, upload};

/// Host blocks of `y` (row-major `rows x channels`, rounded to f32 first).
fn host_blocks(y: &[f64], recipe: Nvfp4Recipe) -> Vec<Fp4Block> {
    y.chunks_exact(16)
        .map(|chunk| {
            let mut b = [0f32; 16];
            for (o, &v) in b.iter_mut().zip(chunk) {
                *o = v as f32;
            }
            nvfp4_block(&b, recipe)
        })
        .collect()
}

/// The signed position of an E2M1 code on the number line (-7..=7), for "within one code".
fn ordinal(code: u8) -> i32 {
    let m = (code & 7) as i32;
    if code & 8 != 0 { -m } else { m }
}

/// Compares kernel bytes (`codes` row-major, `scales` row-major) with the host's; returns
/// (differing scales, differing nibbles). Every nibble of a block with the host's scale is
/// within one code of the host's; a block whose scale differs (fp32 rounding of `y` at an
/// E4M3 rounding boundary) is one scale code away.
fn compare_blocks(codes: &[u8], scales: &[u8], host: &[Fp4Block], what: &str) -> (usize, usize) {
    let (mut scale_diffs, mut nibble_diffs) = (0, 0);
    for (b, h) in host.iter().enumerate() {
        let got_scale = scales[b];
        let nan = e4m3_decode(got_scale).is_nan();
        if nan || e4m3_decode(h.scale).is_nan() {
            assert!(
                nan && e4m3_decode(h.scale).is_nan(),
                "{what}: block {b}: scale {got_scale:#04x} vs host {:#04x}",
                h.scale
            );
        } else if got_scale != h.scale {
            scale_diffs += 1;
            assert_eq!(
                (got_scale as i32 - h.scale as i32).abs(),
                1,
                "{what}: block {b}: scale {got_scale:#04x} vs host {:#04x}",
                h.scale
            );
            continue;
        }
        for i in 0..8 {
            let got = codes[b * 8 + i];
            let want = h.packed[i];
            for (g, w) in [(got & 15, want & 15), (got >> 4, want >> 4)] {
                if g != w {
                    nibble_diffs += 1;
                    assert!(
                        (ordinal(g) - ordinal(w)).abs() <= 1,
                        "{what}: block {b} byte {i}: nibble {g:#x} vs host {w:#x}"
                    );
                }
            }
        }
    }
    (scale_diffs, nibble_diffs)
}

/// Launches the kernel into poisoned buffers and returns (codes, scales) bytes.
#[allow(clippy::too_many_arguments)]
fn launch(
    x: &[f64],
    gamma: &[f64],
    rows: usize,
    channels: usize,
    dtype: DType,
    norm: NormParams,
    recipe: Fp4Recipe,
    layout: ScaleLayout,
    s_enc: f32,
) -> (Vec<u8>, Vec<u8>) {
    let device = cube_device();
    let knobs = heuristic_fp4_knobs(&device.client(), channels, dtype.size());
    launch_with(
        x, gamma, rows, channels, dtype, norm, recipe, layout, s_enc, knobs,
    )
}

/// [`launch`] with explicit knobs.
#[allow(clippy::too_many_arguments)]
fn launch_with(
    x: &[f64],
    gamma: &[f64],
    rows: usize,
    channels: usize,
    dtype: DType,
    norm: NormParams,
    recipe: Fp4Recipe,
    layout: ScaleLayout,
    s_enc: f32,
    knobs: Fp4Knobs,
) -> (Vec<u8>, Vec<u8>) {
    let device = cube_device();
    let xt = upload(x, vec![rows, channels], dtype, &device);
    let gt = upload(gamma, vec![channels], dtype, &device);
    let client = xt.client.clone();
    let scale_len = match layout {
        ScaleLayout::RowMajor => rows * channels / 16,
        ScaleLayout::Swizzled128x4 => swizzled_scale_bytes(rows, channels),
    };
    // Poison: 0xFF everywhere (an E4M3 NaN scale, -6 codes).
    let codes = client.create_from_slice(&vec![0xFFu8; rows * channels / 2]);
    let scales = client.create_from_slice(&vec![0xFFu8; scale_len.max(1)]);
    let target = Fp4Target {
        codes: codes.clone(),
        scales: scales.clone(),
        recipe,
        layout,
        s_enc,
    };
    launch_forward_nvfp4(
        &client,
        xt.handle.clone(),
        gt.handle.clone(),
        target,
        elem(dtype),
        elem(dtype),
        RowsProblem::dense(rows, channels),
        norm,
        Activation::Silu,
        &knobs,
    )
    .unwrap_or_else(|e| panic!("{knobs}: {e}"));
    (
        client.read_one_unchecked(codes).to_vec(),
        client.read_one_unchecked(scales).to_vec(),
    )
}

#[test]
fn nvfp4_bytes_match_the_host_quantiser() {
    let mut rng = rng("nvfp4");
    for (rows, channels, dtype) in [
        (37, 96, DType::BF16),
        (5, 1024, DType::BF16),
        (3, 16, DType::F32),
        (1, 4096, DType::F16),
        (130, 48, DType::BF16),
    ] {
        let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, dtype);
        let norm = NormParams::rms(eps);
        let y = reference(&x, &gamma, norm, Activation::Silu);
        let amax = y.iter().fold(0f64, |m, v| m.max(v.abs())) as f32;
        for (recipe, s_enc, host_recipe) in [
            (
                Fp4Recipe::TransformerEngine,
                te_global_scale(amax),
                Nvfp4Recipe::Te {
                    s_enc: te_global_scale(amax),
                },
            ),
            (
                Fp4Recipe::TransformerEngine,
                3.0,
                Nvfp4Recipe::Te { s_enc: 3.0 },
            ),
            (Fp4Recipe::Cudnn, 1.0, Nvfp4Recipe::Cudnn),
        ] {
            let what = format!("T={rows} C={channels} {dtype:?} {recipe:?} s_enc={s_enc}");
            let (codes, scales) = launch(
                &x,
                &gamma,
                rows,
                channels,
                dtype,
                norm,
                recipe,
                ScaleLayout::RowMajor,
                s_enc,
            );
            let host = host_blocks(&y, host_recipe);
            let (s, n) = compare_blocks(&codes, &scales, &host, &what);
            eprintln!(
                "{what}: {s} of {} scales and {n} of {} codes differ (by one)",
                host.len(),
                rows * channels
            );
            assert!(
                s * 100 <= host.len().max(100) && n * 200 <= rows * channels,
                "{what}: too many differences"
            );
        }
    }
}

/// Whether the device has plane operations (shuffles): the plane lane reductions need them.
fn has_plane_ops(client: &rmsnorm_silu_kernels::cubecl::prelude::Client) -> bool {
    client
        .features()
        .plane
        .contains(rmsnorm_silu_kernels::cubecl::ir::features::Plane::Ops)
}

/// Rows for the knob-path tests: cuDNN-style inputs with row 2's fp32 sum of squares
/// overflowing (~1e30) and row 5's underflowing (eps 0), so the rescue pass runs; with the
/// host's blocks of their f64 reference (cuDNN recipe).
struct RescueRows {
    x: Vec<f64>,
    gamma: Vec<f64>,
    rows: usize,
    channels: usize,
    host: Vec<Fp4Block>,
}

impl RescueRows {
    fn new(rng: &mut rand::rngs::StdRng, rows: usize, channels: usize) -> Self {
        let (mut x, gamma, _) = cudnn_inputs(rng, rows, channels, DType::F32);
        for c in 0..channels {
            x[2 * channels + c] *= 1e30; // overflows the fp32 sum of squares
            x[5 * channels + c] *= 1e-30; // underflows it (eps = 0)
        }
        let y = reference(&x, &gamma, NormParams::rms(0.0), Activation::Silu);
        let host = host_blocks(&y, Nvfp4Recipe::Cudnn);
        RescueRows {
            x,
            gamma,
            rows,
            channels,
            host,
        }
    }

    /// The kernel with `knobs` against the host: at most two bytes one step away.
    fn check(&self, knobs: Fp4Knobs) {
        let (codes, scales) = launch_with(
            &self.x,
            &self.gamma,
            self.rows,
            self.channels,
            DType::F32,
            NormParams::rms(0.0),
            Fp4Recipe::Cudnn,
            ScaleLayout::RowMajor,
            1.0,
            knobs,
        );
        let (s, n) = compare_blocks(&codes, &scales, &self.host, &knobs.to_string());
        assert!(s + n <= 2, "{knobs}: {s} scales and {n} codes differ");
    }
}

/// Every knob path (one or several lanes per row, plane or shared-memory reduction, blocks
/// cached in registers or streamed, several rows per cube, a capped grid) gives the host's
/// bytes (one or two rows per unit, a capped grid, and the PTX math where the device has it),
/// including rows
/// whose fp32 sum of squares overflows (~1e30) or underflows (eps 0):
/// the rescue pass.
#[test]
fn every_nvfp4_knob_path_matches_the_host() {
    let device = cube_device();
    let client = device.client();
    let hw = client.properties().hardware.clone();
    let plane_ops = has_plane_ops(&client);
    let ptx = rmsnorm_silu_kernels::device::has_ptx_math(&client);
    let mut rng = rng("nvfp4_knobs");
    let inputs = RescueRows::new(&mut rng, 13, 160);
    let mut cases = Vec::new();
    for lanes in [1u32, 2, 4, 8, 16] {
        for reduce in [LaneReduce::Shared, LaneReduce::Plane] {
            for rows_per_cube in [1u32, 2, 4] {
                for blocks_per_lane in [0, 10usize.div_ceil(lanes as usize)] {
                    for (max_cubes, rows_per_unit) in
                        [(None, 1), (Some(2), 1), (None, 2), (Some(2), 2)]
                    {
                        let knobs = Fp4Knobs {
                            vector_size: 4,
                            lanes_per_row: lanes,
                            rows_per_cube,
                            rows_per_unit,
                            blocks_per_lane,
                            lane_reduce: reduce,
                            // The PTX paths (SiLU, NaN-propagating amax) where the device has
                            // them, on every other configuration.
                            fast_math: ptx && max_cubes.is_some(),
                            max_cubes,
                            raw_cache: false,
                            gamma_shared: false,
                        };
                        let plane_ok = reduce == LaneReduce::Shared
                            || lanes == 1
                            || (plane_ops && lanes <= hw.plane_size_min);
                        if lanes * rows_per_cube > hw.max_units_per_cube || !plane_ok {
                            continue;
                        }
                        cases.push(knobs);
                        // The raw register cache (f32 inputs here: widened by the plain cast),
                        // and gamma in shared memory, alone and with the raw cache.
                        if blocks_per_lane > 0 && rows_per_cube == 2 {
                            for (raw_cache, gamma_shared) in
                                [(true, false), (false, true), (true, true)]
                            {
                                cases.push(Fp4Knobs {
                                    raw_cache,
                                    gamma_shared,
                                    ..knobs
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    let failures = run_cases(&cases, |_, k| format!("{k}: "), |&k| inputs.check(k));
    assert_no_failures(&failures);
}

/// Lane counts that are not powers of two (C = 160: 10 blocks on 10, 5 or 3 lanes; C = 96: 6
/// blocks on 6): the shared-memory tree over every row's lanes (CPU and GPU) and, with plane
/// operations, rows packed side by side into planes with shuffles down inside each row; with
/// and without the register cache, two rows per unit, a persistent grid, and rows
/// that need the rescue. Against the host bytes.
#[test]
fn nvfp4_lane_counts_that_are_not_powers_of_two() {
    let device = cube_device();
    let client = device.client();
    let hw = client.properties().hardware.clone();
    let plane_ops = has_plane_ops(&client);
    let ptx = rmsnorm_silu_kernels::device::has_ptx_math(&client);
    let mut rng = rng("nvfp4_odd_lanes");
    for (channels, lane_counts) in [(160usize, &[10u32, 5, 3][..]), (96, &[6][..])] {
        let inputs = RescueRows::new(&mut rng, 37, channels);
        let blocks = channels / 16;
        for &lanes in lane_counts {
            for reduce in [LaneReduce::Shared, LaneReduce::Plane] {
                if reduce == LaneReduce::Plane && !(plane_ops && lanes <= hw.plane_size_min) {
                    continue;
                }
                // Packed planes take whole planes of rows.
                let rows_per_cube = match reduce {
                    LaneReduce::Plane => hw.plane_size_min / lanes,
                    LaneReduce::Shared => 3,
                };
                // (The CPU runtime's cubes hold fewer units than a row has lanes here.)
                if lanes * rows_per_cube > hw.max_units_per_cube {
                    continue;
                }
                for blocks_per_lane in [0, blocks.div_ceil(lanes as usize)] {
                    for (max_cubes, rows_per_unit) in [(None, 1), (Some(2), 1), (None, 2)] {
                        let knobs = Fp4Knobs {
                            vector_size: 4,
                            lanes_per_row: lanes,
                            rows_per_cube,
                            rows_per_unit,
                            blocks_per_lane,
                            lane_reduce: reduce,
                            fast_math: ptx && max_cubes.is_some(),
                            max_cubes,
                            raw_cache: false,
                            gamma_shared: false,
                        };
                        inputs.check(knobs);
                    }
                }
            }
        }
    }
}

/// Packed planes need whole planes of rows per cube: anything else is refused by name (on a
/// device with plane operations and cubes of 40 units; elsewhere the cube or the plane
/// reduction itself is refused).
#[test]
fn nvfp4_packed_rows_need_whole_planes() {
    let device = cube_device();
    let client = device.client();
    let mut rng = rng("nvfp4_packed_refused");
    let (x, gamma, _) = cudnn_inputs(&mut rng, 8, 160, DType::F32);
    let xt = upload(&x, vec![8, 160], DType::F32, &device);
    let gt = upload(&gamma, vec![160], DType::F32, &device);
    let knobs = Fp4Knobs {
        vector_size: 4,
        lanes_per_row: 10,
        rows_per_cube: 4,
        rows_per_unit: 1,
        blocks_per_lane: 1,
        lane_reduce: LaneReduce::Plane,
        fast_math: false,
        max_cubes: None,
        raw_cache: false,
        gamma_shared: false,
    };
    let err = launch_forward_nvfp4(
        &client,
        xt.handle.clone(),
        gt.handle.clone(),
        Fp4Target {
            codes: client.create_from_slice(&[0u8; 8 * 80]),
            scales: client.create_from_slice(&[0u8; 8 * 10]),
            recipe: Fp4Recipe::Cudnn,
            layout: ScaleLayout::RowMajor,
            s_enc: 1.0,
        },
        elem(DType::F32),
        elem(DType::F32),
        RowsProblem::dense(8, 160),
        NormParams::rms(1e-6),
        Activation::Silu,
        &knobs,
    )
    .expect_err("10 lanes x 4 rows is not whole planes")
    .to_string();
    let hw = client.properties().hardware.clone();
    let plane_ops = has_plane_ops(&client);
    if plane_ops && hw.plane_size_min == 32 && hw.max_units_per_cube >= 40 {
        assert!(
            err.contains("rows_per_cube 4 must be a multiple of 3"),
            "{err}"
        );
    } else {
        assert!(
            err.contains("does not fit") || err.contains("needs plane ops"),
            "{err}"
        );
    }
}

/// The swizzled scale layout holds the row-major scales at the formula's offsets, for T not a
/// multiple of 128 and C / 16 not a multiple of 4, and zeros in every padding byte.
#[test]
fn swizzled_scales_follow_the_formula_with_zero_padding() {
    let mut rng = rng("nvfp4_swizzle");
    for (rows, channels) in [(130, 48), (1, 16), (257, 80), (128, 64)] {
        let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::BF16);
        let norm = NormParams::rms(eps);
        let args = |layout| {
            launch(
                &x,
                &gamma,
                rows,
                channels,
                DType::BF16,
                norm,
                Fp4Recipe::TransformerEngine,
                layout,
                2.0,
            )
        };
        let (codes_rm, scales_rm) = args(ScaleLayout::RowMajor);
        let (codes_sw, scales_sw) = args(ScaleLayout::Swizzled128x4);
        assert_eq!(codes_rm, codes_sw, "T={rows} C={channels}: codes");
        let blocks = channels / 16;
        let mut valid = vec![false; scales_sw.len()];
        for m in 0..rows {
            for k in 0..blocks {
                let at = swizzled_scale_offset(m, k, channels);
                assert_eq!(scales_sw[at], scales_rm[m * blocks + k], "({m}, {k})");
                valid[at] = true;
            }
        }
        for (i, (&byte, &v)) in scales_sw.iter().zip(&valid).enumerate() {
            assert!(
                v || byte == 0,
                "T={rows} C={channels}: padding byte {i} = {byte:#04x}"
            );
        }
    }
}

/// A NaN in one row makes its block's scale NaN and leaves every other block alone.
#[test]
fn nan_stays_in_its_block() {
    let mut rng = rng("nvfp4_nan");
    let (rows, channels) = (4, 64);
    let (mut x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::F32);
    x[channels + 20] = f64::NAN;
    let norm = NormParams::rms(eps);
    let y = reference(&x, &gamma, norm, Activation::Silu);
    let (codes, scales) = launch(
        &x,
        &gamma,
        rows,
        channels,
        DType::F32,
        norm,
        Fp4Recipe::Cudnn,
        ScaleLayout::RowMajor,
        1.0,
    );
    // Row 1 is all NaN (its rms is NaN): its four scales are NaN; the other rows match.
    for (b, &s) in scales.iter().enumerate() {
        assert_eq!(
            e4m3_decode(s).is_nan(),
            b / 4 == 1,
            "block {b}: scale {s:#04x}"
        );
    }
    let host = host_blocks(&y, Nvfp4Recipe::Cudnn);
    compare_blocks(&codes, &scales, &host, "NaN row");
}

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

/// The compiled-in H200 NVFP4 table parses, its knobs round-trip through `Display`, and every
/// entry that can run on this device gives the host's bytes.
#[test]
fn nvfp4_table_entries_are_valid_and_correct() {
    use rmsnorm_silu_kernels::nvfp4::sm90_table;
    let device = cube_device();
    let client = device.client();
    let hw = client.properties().hardware.clone();
    let plane_ops = has_plane_ops(&client);
    let mut rng = rng("nvfp4_table");
    let table = sm90_table();
    assert!(!table.is_empty());
    for &(c, t, knobs) in table {
        assert_eq!(Fp4Knobs::parse(&knobs.to_string()), Ok(knobs));
        let runs_here = knobs.lanes_per_row * knobs.rows_per_cube <= hw.max_units_per_cube
            && (knobs.lane_reduce == LaneReduce::Shared
                || knobs.lanes_per_row == 1
                || (plane_ops && knobs.lanes_per_row <= hw.plane_size_min))
            && (!knobs.fast_math || crate::common::on_gpu());
        if !runs_here {
            continue;
        }
        let rows = 37;
        let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, c, DType::BF16);
        let norm = NormParams::rms(eps);
        let y = reference(&x, &gamma, norm, Activation::Silu);
        let (codes, scales) = launch_with(
            &x,
            &gamma,
            rows,
            c,
            DType::BF16,
            norm,
            Fp4Recipe::Cudnn,
            ScaleLayout::RowMajor,
            1.0,
            knobs,
        );
        let host = host_blocks(&y, Nvfp4Recipe::Cudnn);
        let (s, n) = compare_blocks(&codes, &scales, &host, &format!("C={c} T={t} {knobs}"));
        assert!(s * 100 <= host.len().max(100) && n * 200 <= rows * c);
    }
}

/// The kernel's own codecs, exhaustively: every E2M1 value and every midpoint between two
/// neighbours (ties to even), just above and below each, both signs, ±0, saturation, ±inf and
/// NaN; every E4M3 code's value, the midpoints between neighbouring codes, saturation at 448.
/// Both against the host codecs of `kernels::formats`.
#[test]
fn kernel_codecs_match_the_host_at_every_code_and_midpoint() {
    use rmsnorm_silu_kernels::formats::{E2M1_VALUES, e2m1_encode, e4m3_encode};
    use rmsnorm_silu_kernels::nvfp4::{E2M1_UNSATURATED_BELOW, launch_codec_probe};
    let device = cube_device();
    let client = device.client();
    let mut values: Vec<f32> = Vec::new();
    let push_around = |v: f32, values: &mut Vec<f32>| {
        for w in [
            v,
            f32::from_bits(v.to_bits().saturating_add(1)),
            f32::from_bits(v.to_bits().saturating_sub(1)),
        ] {
            values.push(w);
            values.push(-w);
        }
    };
    for (i, &v) in E2M1_VALUES.iter().enumerate() {
        push_around(v, &mut values);
        if let Some(&next) = E2M1_VALUES.get(i + 1) {
            push_around((v + next) / 2.0, &mut values);
        }
    }
    // The unsaturated encoder's bound: just below it rounds to 6.
    push_around(E2M1_UNSATURATED_BELOW, &mut values);
    // E4M3: every finite code's magnitude and the midpoint to the next one.
    let e4m3: Vec<f32> = (0u8..=0x7E).map(e4m3_decode).collect();
    for (i, &v) in e4m3.iter().enumerate() {
        push_around(v, &mut values);
        if let Some(&next) = e4m3.get(i + 1) {
            push_around((v + next) / 2.0, &mut values);
        }
    }
    values.extend([
        7.0,
        100.0,
        449.0,
        464.0,
        1e30,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        1e-40,
        -0.0,
        f32::MAX,
        f32::MIN_POSITIVE,
    ]);
    // Fresh values: the E2M1 range with a random sign (the encoder works on the float's bits,
    // so every exponent and mantissa pattern there matters), and random bit patterns (every
    // exponent, NaN payloads, subnormals).
    let mut rng = rng("codec probe");
    for v in uniform(&mut rng, 4096, -8.0, 8.0) {
        values.push(v as f32);
    }
    for _ in 0..4096 {
        values.push(f32::from_bits(rand::Rng::random::<u32>(&mut rng)));
    }
    let n = values.len();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let vals = client.create_from_slice(&bytes);
    let codes = client.create_from_slice(&vec![0xFFu8; n * 12]);
    let scales = client.create_from_slice(&vec![0xEEu8; n]);
    launch_codec_probe(&client, vals, codes.clone(), scales.clone(), n);
    let codes = client.read_one_unchecked(codes).to_vec();
    let scales = client.read_one_unchecked(scales).to_vec();
    for (i, &v) in values.iter().enumerate() {
        let word = |k: usize| u32::from_le_bytes(codes[4 * k..4 * k + 4].try_into().unwrap());
        assert_eq!(
            word(i),
            e2m1_encode(v) as u32,
            "E2M1 of {v:e} ({:#010x})",
            v.to_bits()
        );
        // The shorter encoder of blocks whose values round to at most 6: every |v| below 7.
        if v.abs() < E2M1_UNSATURATED_BELOW {
            assert_eq!(
                word(n + i),
                e2m1_encode(v) as u32,
                "unsaturated E2M1 of {v:e} ({:#010x})",
                v.to_bits()
            );
        }
        // The kernel's packed word of values i..i + 8 (the pair encoder on sm_90 with the PTX
        // math): every nibble whose value is below 7 in magnitude.
        for j in 0..8 {
            let u = values[(i + j) % n];
            if u.abs() < E2M1_UNSATURATED_BELOW {
                assert_eq!(
                    (word(2 * n + i) >> (4 * j)) & 15,
                    e2m1_encode(u) as u32,
                    "packed E2M1 of {u:e} ({:#010x}), nibble {j}",
                    u.to_bits()
                );
            }
        }
        let want = e4m3_encode(v);
        let got = scales[i];
        if v.is_nan() {
            assert!(e4m3_decode(got).is_nan(), "E4M3 of NaN: {got:#04x}");
        } else {
            assert_eq!(got, want, "E4M3 of {v:e} ({:#010x})", v.to_bits());
        }
    }
}

/// The raw register cache (x kept as loaded, widened at each use) writes the same bytes as the
/// f32 cache with the same knobs, for bf16 (widened through its words) and f16 inputs (f32 in
/// `every_nvfp4_knob_path_matches_the_host`),
/// with two rows per unit and a persistent grid; and the host's bytes.
#[test]
fn nvfp4_raw_cache_writes_the_f32_caches_bytes() {
    let device = cube_device();
    let client = device.client();
    let hw = client.properties().hardware.clone();
    let plane_ops = has_plane_ops(&client);
    let ptx = rmsnorm_silu_kernels::device::has_ptx_math(&client);
    let mut rng = rng("nvfp4_raw_cache");
    for (rows, channels, dtype) in [
        (21, 160, DType::BF16),
        (9, 1024, DType::BF16),
        (11, 96, DType::F16),
    ] {
        let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, dtype);
        let norm = NormParams::rms(eps);
        let y = reference(&x, &gamma, norm, Activation::Silu);
        let host = host_blocks(&y, Nvfp4Recipe::Cudnn);
        let blocks = channels / 16;
        let mut layouts = vec![(2u32, LaneReduce::Shared)];
        if plane_ops && hw.plane_size_min >= 8 {
            layouts.push((8, LaneReduce::Plane));
        }
        for (lanes, lane_reduce) in layouts {
            for (max_cubes, rows_per_unit) in [(None, 1), (Some(2), 1), (Some(3), 2)] {
                let knobs = Fp4Knobs {
                    vector_size: 4,
                    lanes_per_row: lanes,
                    rows_per_cube: 2,
                    rows_per_unit,
                    blocks_per_lane: blocks.div_ceil(lanes as usize),
                    lane_reduce,
                    fast_math: ptx,
                    max_cubes,
                    raw_cache: false,
                    gamma_shared: false,
                };
                if lanes * 2 > hw.max_units_per_cube {
                    continue;
                }
                let raw = Fp4Knobs {
                    raw_cache: true,
                    ..knobs
                };
                let run = |k: Fp4Knobs| {
                    launch_with(
                        &x,
                        &gamma,
                        rows,
                        channels,
                        dtype,
                        norm,
                        Fp4Recipe::Cudnn,
                        ScaleLayout::RowMajor,
                        1.0,
                        k,
                    )
                };
                let (codes, scales) = run(knobs);
                // The raw cache, and it with gamma in shared memory (gamma widened through
                // its words there too): the same bytes.
                let shared = Fp4Knobs {
                    gamma_shared: true,
                    ..raw
                };
                for other in [raw, shared] {
                    let (raw_codes, raw_scales) = run(other);
                    let what = format!("C={channels} {dtype:?} {other}");
                    assert_eq!(
                        raw_codes, codes,
                        "{what}: codes differ from the f32 cache's"
                    );
                    assert_eq!(
                        raw_scales, scales,
                        "{what}: scales differ from the f32 cache's"
                    );
                    let (s, n) = compare_blocks(&raw_codes, &raw_scales, &host, &what);
                    assert!(
                        s * 100 <= host.len().max(100) && n * 200 <= rows * channels,
                        "{what}: {s} scales and {n} codes differ from the host's"
                    );
                }
            }
        }
    }
}

/// Knobs that stream the row (no register cache) on a small problem, with the raw cache and
/// gamma in shared memory as given: the options that need the register cache are refused by
/// name.
fn launch_streamed_row(raw_cache: bool, gamma_shared: bool) {
    let mut rng = rng("nvfp4_streamed_refused");
    let (x, gamma, eps) = cudnn_inputs(&mut rng, 4, 64, DType::BF16);
    let knobs = Fp4Knobs {
        vector_size: 4,
        lanes_per_row: 1,
        rows_per_cube: 1,
        rows_per_unit: 1,
        blocks_per_lane: 0,
        lane_reduce: LaneReduce::Shared,
        fast_math: false,
        max_cubes: Some(1),
        raw_cache,
        gamma_shared,
    };
    launch_with(
        &x,
        &gamma,
        4,
        64,
        DType::BF16,
        NormParams::rms(eps),
        Fp4Recipe::Cudnn,
        ScaleLayout::RowMajor,
        1.0,
        knobs,
    );
}

/// The raw register cache is a form of the register cache.
#[test]
#[should_panic(expected = "the raw register cache (`.raw`) needs the register cache")]
fn nvfp4_raw_cache_without_the_register_cache_is_refused() {
    launch_streamed_row(true, false);
}

/// Gamma in shared memory takes the register cache's layout.
#[test]
#[should_panic(expected = "gamma in shared memory (`.gs`) needs the register cache")]
fn nvfp4_gamma_shared_without_the_register_cache_is_refused() {
    launch_streamed_row(false, true);
}

/// Gamma in shared memory that does not fit the device's shared memory is refused by name (a
/// row of 65536 channels: 256 KiB of f32 gamma per cube).
#[test]
#[should_panic(expected = "bytes of shared memory per cube")]
fn nvfp4_gamma_shared_beyond_the_shared_memory_is_refused() {
    let (rows, channels) = (1, 65536);
    let x = vec![1.0; rows * channels];
    let gamma = vec![1.0; channels];
    let knobs = Fp4Knobs {
        vector_size: 4,
        lanes_per_row: 16,
        rows_per_cube: 1,
        rows_per_unit: 1,
        blocks_per_lane: 256,
        lane_reduce: LaneReduce::Shared,
        fast_math: false,
        max_cubes: None,
        raw_cache: false,
        gamma_shared: true,
    };
    launch_with(
        &x,
        &gamma,
        rows,
        channels,
        DType::BF16,
        NormParams::rms(1e-6),
        Fp4Recipe::Cudnn,
        ScaleLayout::RowMajor,
        1.0,
        knobs,
    );
}

/// The knob text round-trips, the PTX math included; the prefetch knob (`.pf`, removed: it won
/// one of 33 shapes by under 1%) no longer parses.
#[test]
fn nvfp4_knobs_parse_what_they_print() {
    for text in [
        "v8.l4.r32.b1.plane.m-",
        "v8.l4.r32.b1.plane.m-.fast",
        "v8.l64.r2.b1.shared.m528.fast",
        "v4.l1.r2.b3.shared.m2",
        "v8.l16.r4.b1.plane.m-.u2.fast",
        "v8.l16.r4.b1.plane.m264.u2.fast",
        "v8.l8.r32.b5.plane.m-.fast.raw.gs",
        "v8.l16.r8.b3.plane.m-.fast.gs",
        "v4.l2.r2.b5.shared.m2.gs",
    ] {
        assert_eq!(Fp4Knobs::parse(text).unwrap().to_string(), text);
    }
    assert!(Fp4Knobs::parse("v8.l64.r2.b1.shared.m528.fast.pf").is_err());
    assert!(Fp4Knobs::parse("v8.l4.r32.b1.plane.m-.gs.raw").is_err());
}
