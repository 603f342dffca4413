//! The NVFP4 kernel's launch (knob checks, grid, the swizzled layout's padding fill) and the
//! codec probe that tests the encoders alone.

use super::*;

/// Where and how the NVFP4 kernel writes.
#[derive(Clone, Debug)]
pub struct Fp4Target {
    /// `rows * C / 2` bytes of codes.
    pub codes: Handle,
    /// The scale bytes: `rows * C / 16` (row-major) or [`crate::formats::swizzled_scale_bytes`].
    pub scales: Handle,
    pub recipe: Fp4Recipe,
    pub layout: ScaleLayout,
    /// The global encode scale `s_enc` of [`Fp4Recipe::TransformerEngine`] (ignored by cuDNN's
    /// and when [`Self::device_amax`] is given).
    pub s_enc: f32,
    /// TransformerEngine's recipe with `s_enc` from a tensor amax on the device.
    pub device_amax: Option<DeviceAmax>,
}

/// A tensor amax on the device for TransformerEngine's recipe: the kernel reads `amax[0]`,
/// takes `s_enc = 448 * 6 / amax` (1 for an amax that is 0 or not finite) and writes `1 / s_enc`
/// into `decode` (a quantised tensor's per-tensor scale word), both f32.
#[derive(Clone, Debug)]
pub struct DeviceAmax {
    pub amax: Handle,
    pub decode: Handle,
}

/// `decode[0] = 1 / s_enc` for the tensor amax `amax[0]` (what the kernel writes; for zero rows,
/// where it does not run).
#[cube(launch_unchecked)]
fn rms_norm_nvfp4_decode_scale(amax: &[f32], decode: &mut [f32]) {
    if ABSOLUTE_POS == 0 {
        decode[0] = 1.0f32 / te_global_scale(amax[0]);
    }
}

/// Launches the NVFP4 kernel (and, for the swizzled layout, the padding fill). `problem.channels`
/// must be a multiple of 16 and `problem.out_row_stride` equal to it.
pub fn launch_forward_nvfp4(
    client: &Client,
    operands: RowOperands,
    target: Fp4Target,
    problem: RowsProblem,
    norm: NormParams,
    activation: Activation,
    knobs: &Fp4Knobs,
) -> Result<(), KernelError> {
    let RowOperands {
        x,
        gamma,
        x_type,
        gamma_type,
    } = operands;
    let bad = |why: String| Err(KernelError::InvalidKnobs(why));
    let RowsProblem {
        rows,
        channels,
        x_row_stride,
        ..
    } = problem;
    if !channels.is_multiple_of(BLOCK) || problem.out_row_stride != channels {
        return bad(format!(
            "NVFP4 needs C a multiple of 16 and dense output rows (C = {channels}, output row \
             stride {})",
            problem.out_row_stride
        ));
    }
    let codes_offset = target.codes.offset_start.unwrap_or(0);
    if !codes_offset.is_multiple_of(8) {
        return bad(format!(
            "NVFP4 codes must start on an 8-byte boundary (one 8-byte store per block); the \
             codes buffer starts at byte offset {codes_offset}"
        ));
    }
    let blocks = channels / BLOCK;
    let column_tiles = channels.div_ceil(64);
    let scale_type = ElemType::Float(cubecl::ir::FloatKind::E4M3);
    if target.layout == ScaleLayout::Swizzled128x4 {
        let padded = crate::formats::swizzled_scale_bytes(rows, channels);
        if padded > 0 && padded != rows * blocks {
            let threads = 256u32;
            unsafe {
                rms_norm_nvfp4_scale_padding::launch_unchecked(
                    client,
                    CubeCount::new_1d(padded.div_ceil(threads as usize) as u32),
                    CubeDim::new_1d(threads),
                    BufferArg::from_raw_parts(target.scales.clone(), padded),
                    rows,
                    blocks,
                    padded,
                    column_tiles,
                    scale_type,
                );
            }
        }
    }
    if rows == 0 {
        if let Some(device) = target.device_amax {
            unsafe {
                rms_norm_nvfp4_decode_scale::launch_unchecked(
                    client,
                    CubeCount::new_1d(1),
                    CubeDim::new_1d(1),
                    BufferArg::from_raw_parts(device.amax, 1),
                    BufferArg::from_raw_parts(device.decode, 1),
                );
            }
        }
        return Ok(());
    }
    let hw = &client.properties().hardware;
    let v = knobs.vector_size;
    if v == 0 || !BLOCK.is_multiple_of(v) || v > hw.max_vector_size {
        return bad(format!(
            "vector_size {v} must divide 16 and fit the device maximum {}",
            hw.max_vector_size
        ));
    }
    if !x_row_stride.is_multiple_of(v) {
        return bad(format!(
            "x row stride {x_row_stride} is not a multiple of vector_size {v}"
        ));
    }
    let lanes = knobs.lanes_per_row;
    if knobs.rows_per_unit == 0 {
        return bad("rows_per_unit must be at least 1".into());
    }
    let lane_reduce = if lanes == 1 {
        LaneReduce::Plane
    } else {
        knobs.lane_reduce
    };
    if knobs.fast_math && !has_ptx_math(client) {
        return bad("fast_math needs a CUDA device".into());
    }
    let cached = knobs.caches_row(channels);
    if knobs.gamma_shared && !cached {
        return bad(format!(
            "gamma in shared memory (`.gs`) needs the register cache: {lanes} lanes x {} blocks \
             per lane do not hold the {blocks} blocks of a row",
            knobs.blocks_per_lane
        ));
    }
    // Shared memory: the lane sums (shared-memory reduction) and gamma's f32 copy (`.gs`).
    let shared_bytes = match lane_reduce {
        LaneReduce::Shared => (lanes * knobs.rows_per_cube * knobs.rows_per_unit) as usize * 4,
        LaneReduce::Plane => 0,
    } + if knobs.gamma_shared {
        lanes as usize * knobs.blocks_per_lane * BLOCK * 4
    } else {
        0
    };
    if shared_bytes > hw.max_shared_memory_size {
        return bad(format!(
            "the knobs need {shared_bytes} bytes of shared memory per cube (gamma in shared \
             memory, `.gs`, takes 64 bytes per block of the register cache), the device has {}",
            hw.max_shared_memory_size
        ));
    }
    if knobs.raw_cache && !cached {
        return bad(format!(
            "the raw register cache (`.raw`) needs the register cache: {lanes} lanes x {} blocks \
             per lane do not hold the {blocks} blocks of a row",
            knobs.blocks_per_lane
        ));
    }
    let bf16 = ElemType::Float(cubecl::ir::FloatKind::BF16);
    // The word views need whole words per vector; offsets of vectors are then word-aligned.
    let words = v.is_multiple_of(2);
    let groups = rows.div_ceil((knobs.rows_per_cube * knobs.rows_per_unit) as usize);
    let cubes = groups
        .min(knobs.max_cubes.map_or(usize::MAX, |m| m as usize))
        .min(hw.max_cube_count.0 as usize);
    let one_group_per_cube = cubes >= groups;
    let fast_math = knobs.fast_math && activation == Activation::Silu;
    let cfg = Fp4Config {
        vector_size: v,
        lanes_per_row: lanes,
        rows_per_cube: knobs.rows_per_cube,
        rows_per_unit: knobs.rows_per_unit,
        blocks_per_lane: if cached { knobs.blocks_per_lane } else { 0 },
        lane_reduce,
        activation,
        fast_math,
        recipe: target.recipe,
        layout: target.layout,
        gamma_registers: knobs.gamma_in_registers(channels, one_group_per_cube),
        x_words: words && x_type == bf16,
        gamma_words: words && gamma_type == bf16,
        plane_width: reduction_plane_width(client),
        gamma_after_x: knobs.loads_gamma_after_x(channels, one_group_per_cube),
        raw_cache: knobs.raw_cache,
        moderate_global_scale: fast_math
            && target.recipe == Fp4Recipe::TransformerEngine
            && target.device_amax.is_none()
            && target.s_enc <= MODERATE_GLOBAL_SCALE
            && target.s_enc >= 1.0 / MODERATE_GLOBAL_SCALE,
        pair_encoder: fast_math && has_pair_encoder(client),
        gamma_shared: knobs.gamma_shared,
        gamma_shared_after_x: knobs.fills_gamma_shared_after_x(channels, one_group_per_cube),
    };
    // The lane layout's checks and cube shape are the row kernel's.
    if let Some(why) = lane_layout_error(client, &cfg.rows()) {
        return bad(why);
    }
    let cube_dim = cube_dim(&cfg.rows());
    let vecs_per_row = channels / v;
    let x_len = (rows - 1) * x_row_stride / v + vecs_per_row;
    let scales_len = match target.layout {
        ScaleLayout::RowMajor => rows * blocks,
        ScaleLayout::Swizzled128x4 => crate::formats::swizzled_scale_bytes(rows, channels),
    };
    let address_type = AddressType::from_len(x_len * v);
    // The word views (one vector of `v / 2` words per vector of bf16; a 1-element placeholder
    // of the same buffer where unused).
    let words_per_vector = if words { v / 2 } else { 1 };
    let x_words_len = if cfg.x_words { x_len } else { 1 };
    let gamma_words_len = if cfg.gamma_words { vecs_per_row } else { 1 };
    log::debug!(
        "rms_norm_nvfp4_rows: rows={rows} C={channels} {x_type:?}/{gamma_type:?} knobs={knobs} \
         {:?} {:?} cubes={cubes}",
        target.recipe,
        target.layout
    );
    unsafe {
        rms_norm_nvfp4_rows::launch_unchecked(
            client,
            CubeCount::new_1d(cubes as u32),
            cube_dim,
            address_type,
            v,
            words_per_vector,
            BufferArg::from_raw_parts(x.clone(), x_len),
            BufferArg::from_raw_parts(x, x_words_len),
            BufferArg::from_raw_parts(gamma.clone(), vecs_per_row),
            BufferArg::from_raw_parts(gamma, gamma_words_len),
            BufferArg::from_raw_parts(target.codes, rows * blocks),
            BufferArg::from_raw_parts(target.scales, scales_len),
            target
                .device_amax
                .as_ref()
                .map(|d| BufferArg::from_raw_parts(d.amax.clone(), 1))
                .into(),
            target
                .device_amax
                .as_ref()
                .map(|d| BufferArg::from_raw_parts(d.decode.clone(), 1))
                .into(),
            rows,
            blocks,
            x_row_stride / v,
            (1.0f64 / channels as f64) as f32,
            norm.eps,
            norm.floor,
            target.s_enc,
            column_tiles,
            cfg,
            [x_type, gamma_type, scale_type],
        );
    }
    Ok(())
}

/// The kernel's E2M1 encoder and the E4M3 scale cast applied to `values` (for tests of the
/// codecs themselves, independent of the norm): `codes[i]` = [`e2m1_code`](fn@e2m1_code)`(values[i])`,
/// `codes[len + i]` = [`e2m1_unsaturated_code`](fn@e2m1_unsaturated_code) (the packed encoder's steps),
/// `codes[2 len + i]` = the kernel's packed word of `values[i..i + 8]` (indices modulo `len`;
/// the pair encoder where `pairs`, else the fp32 one), `scales[i]` = the E4M3 byte of
/// `values[i]` clamped to ±448.
#[cube(launch_unchecked)]
pub fn rms_norm_nvfp4_codec_probe<S: Float>(
    values: &[f32],
    codes: &mut [u32],
    scales: &mut [S],
    len: usize,
    #[define(S)] _scale: ElemType,
    #[comptime] pairs: bool,
) {
    let i = ABSOLUTE_POS;
    if i < len {
        codes[i] = e2m1_code(values[i]);
        codes[len + i] = e2m1_unsaturated_code(values[i]);
        scales[i] = S::cast_from(clamp_e4m3(values[i]));
        let mut w = Array::<f32>::new(8usize);
        #[unroll]
        for j in 0..8usize {
            w[j] = values[(i + j) % len] * 2.0f32;
        }
        codes[2 * len + i] = packed_word(&w, 0usize, pairs, false);
    }
}

/// Runs [`rms_norm_nvfp4_codec_probe`](fn@rms_norm_nvfp4_codec_probe) on `len` f32 `values`; `codes` gets `3 len` u32 (the
/// exact encoder's, the unsaturated encoder's and the packed words', meaningful for
/// `|v| < 7`) and `scales` `len` bytes. The packed words come from the encoder the NVFP4
/// kernel uses on this device with the PTX math (the pair encoder on sm_90+).
pub fn launch_codec_probe(
    client: &Client,
    values: Handle,
    codes: Handle,
    scales: Handle,
    len: usize,
) {
    if len == 0 {
        return;
    }
    unsafe {
        rms_norm_nvfp4_codec_probe::launch_unchecked(
            client,
            CubeCount::new_1d(len.div_ceil(64) as u32),
            CubeDim::new_1d(64),
            BufferArg::from_raw_parts(values, len),
            BufferArg::from_raw_parts(codes, 3 * len),
            BufferArg::from_raw_parts(scales, len),
            len,
            ElemType::Float(cubecl::ir::FloatKind::E4M3),
            has_pair_encoder(client),
        );
    }
}
